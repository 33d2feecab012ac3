"""A lost ``.ascend-env`` and the manual recovery the tool advises: nothing of the user's is deleted.

The tool's own fix for a damaged state is: reinstall transformers, delete ``.ascend-env``; the
startup hook's files, their bytecode and the rows install added to ascend-env's RECORD stay. The
next install adopts them, and no command deletes a file that existed before it ran unless it
wrote it: above all never ascend-env's own RECORD, without which pip cannot uninstall it.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Dict

import pytest
from fake_site import (
    STOP_PATH,
    STOPPING_PATCHED,
    UTILS_PATCHED,
    UTILS_PATH,
    make_patches,
    make_site,
    make_venv,
    remove_ascend_env,
    run_cli,
    run_pip,
    site_with_ascend_env,
    snapshot,
)

from ascend_env.exceptions import EnvironmentProblem
from ascend_env.hook import files
from ascend_env.patching import engine, faults, store
from ascend_env.patching.records import find_distribution
from ascend_env.patching.state import drift, read_state
from ascend_env.patching.store import state_dir

OWN = "ascend_env-0.1.0.dist-info/RECORD"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return site_with_ascend_env(tmp_path)


@pytest.fixture
def patches(tmp_path: Path) -> Path:
    return make_patches(tmp_path)


def cli(site: Path, patches: Path, *args: str) -> subprocess.CompletedProcess:
    extra = ["--patches-dir", str(patches)] if args[0] in ("install", "status") else []
    return run_cli(*args, "--target", str(site), *extra)


def reinstall_transformers(site: Path) -> None:
    """What ``pip install --force-reinstall --no-deps transformers==<version>`` does: its files
    and dist-info as the wheel has them."""
    fresh = make_site(site.parent / "fresh")
    for name in ("transformers", "transformers-4.46.3.dist-info"):
        shutil.rmtree(site / name)
        shutil.copytree(fresh / name, site / name)


def lose_state(site: Path) -> None:
    """The second half of the tool's own fix for a damaged state."""
    shutil.rmtree(state_dir(site))


def without_hook(tree: Dict[str, bytes]) -> Dict[str, bytes]:
    return {path: data for path, data in tree.items() if path not in {*files.files(), *files.bytecode()}}


@pytest.mark.parametrize("mode", ["--patches=always", "--hook-only"])
def test_the_advised_recovery_then_install_status_restore_leaves_the_tree_as_pip_left_it(site, patches, mode):
    pristine = snapshot(site)
    assert cli(site, patches, "install", mode).returncode == 0
    reinstall_transformers(site)
    lose_state(site)
    installed = cli(site, patches, "install", mode, "--json")
    assert installed.returncode == 0, installed.stderr
    report = json.loads(installed.stdout)
    assert set(report["adopted"]) == {*files.files(), *files.bytecode(), OWN}
    status = cli(site, patches, "status", "--json")
    assert status.returncode == 0, status.stdout
    assert not json.loads(status.stdout).get("drift")
    restored = cli(site, patches, "restore")
    assert restored.returncode == 0, restored.stderr
    assert snapshot(site) == pristine  # ascend-env's RECORD as pip wrote it, the hook gone
    assert find_distribution(site, "ascend-env") is not None
    again = cli(site, patches, "install", mode)
    assert again.returncode == 0, again.stderr


def test_a_lost_state_without_the_reinstall_adopts_the_patched_files_and_their_record_rows(site, patches):
    """Only .ascend-env deleted: the patched files, with the RECORD rows install rewrote, are
    adopted (their originals from the reverse patch), and restore gives the release back."""
    pristine = snapshot(site)
    assert cli(site, patches, "install", "--patches=always").returncode == 0
    lose_state(site)
    installed = cli(site, patches, "install", "--patches=always", "--json")
    assert installed.returncode == 0, installed.stderr
    report = json.loads(installed.stdout)
    assert report["changed"] == [] and {STOP_PATH, UTILS_PATH, "transformers-4.46.3.dist-info/RECORD"} <= set(
        report["adopted"]
    )
    status = cli(site, patches, "status", "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["status"] == "applied"
    assert cli(site, patches, "restore").returncode == 0
    assert snapshot(site) == pristine


def test_patched_files_whose_record_rows_were_not_rewritten_are_not_adopted(site, patches):
    """Patched by hand (or by a tool that left RECORD alone): not ascend-env's to undo."""
    (site / STOP_PATH).write_text(STOPPING_PATCHED)
    (site / UTILS_PATH).write_text(UTILS_PATCHED)
    installed = cli(site, patches, "install", "--patches=always", "--json")
    assert installed.returncode == 0, installed.stderr
    report = json.loads(installed.stdout)
    assert not {STOP_PATH, UTILS_PATH} & set(report.get("adopted", []))
    assert cli(site, patches, "restore").returncode == 0
    assert (site / STOP_PATH).read_text() == STOPPING_PATCHED


def test_a_hook_only_install_after_a_lost_state_records_what_it_adopts(site, patches):
    """Nothing to write (every hook file is there): the state is written all the same, so that
    restore knows the hook and the RECORD rows are ascend-env's."""
    assert cli(site, patches, "install", "--hook-only").returncode == 0
    lose_state(site)
    installed = cli(site, patches, "install", "--hook-only", "--json")
    report = json.loads(installed.stdout)
    assert report["result"] == "hook already installed" and report["changed"] == [] and report["adopted"]
    state = read_state(site)
    assert state is not None
    recorded = {entry.path: entry for entry in state.entries}
    assert recorded[files.MODULE_FILE].before is None  # ascend-env's: restore removes it
    assert recorded[OWN].before is not None  # pip's: restore puts back the RECORD without the rows
    assert cli(site, patches, "install", "--hook-only", "--json").stdout.count('"adopted"') == 0


@pytest.mark.parametrize("state_lost", [False, True])
def test_hook_files_removed_by_hand_with_their_bytecode_left_are_not_drift(site, patches, state_lost):
    assert cli(site, patches, "install", "--hook-only").returncode == 0
    for name in files.files():
        (site / name).unlink()
    (pyc,) = files.bytecode()
    assert (site / pyc).is_file()
    if state_lost:
        lose_state(site)
    installed = cli(site, patches, "install", "--hook-only")
    assert installed.returncode == 0, installed.stderr
    assert (site / pyc).read_bytes() == files.bytecode()[pyc]
    assert drift(site) == []
    status = cli(site, patches, "status")
    assert status.returncode == 0 and "drift" not in status.stdout, status.stdout


def test_restore_mends_a_state_that_recorded_no_original_for_the_record(site, patches):
    """An older release adopted ascend-env's RECORD as a file it created (no original): restore
    must take the hook's rows out of it, never delete it."""
    pristine = snapshot(site)
    assert cli(site, patches, "install", "--hook-only").returncode == 0
    path = state_dir(site) / "state.json"
    data = json.loads(path.read_text())
    for entry in data["entries"]:
        if entry["path"] == OWN:
            entry["before"] = None
    path.write_text(json.dumps(data))
    restored = cli(site, patches, "restore", "--json")
    assert restored.returncode == 0, restored.stderr
    actions = {item["path"]: item["action"] for item in json.loads(restored.stdout)["files"]}
    assert actions[OWN] == "rewritten"
    assert snapshot(site) == pristine


def test_install_mends_such_a_state_too(site, patches):
    pristine = snapshot(site)
    assert cli(site, patches, "install", "--hook-only").returncode == 0
    path = state_dir(site) / "state.json"
    data = json.loads(path.read_text())
    for entry in data["entries"]:
        if entry["path"] == OWN:
            entry["before"] = None
    path.write_text(json.dumps(data))
    assert cli(site, patches, "install", "--hook-only").returncode == 0
    state = read_state(site)
    assert state is not None and all(e.before is not None for e in state.entries if e.path == OWN)
    assert cli(site, patches, "restore").returncode == 0
    assert snapshot(site) == pristine


def test_restore_after_pip_removed_ascend_envs_record_does_not_call_it_replaced(site, patches):
    assert cli(site, patches, "install", "--patches=always").returncode == 0
    remove_ascend_env(site)  # pip uninstall ascend-env
    restored = cli(site, patches, "restore", "--json")
    assert restored.returncode == 0, restored.stderr
    actions = {item["path"]: item["action"] for item in json.loads(restored.stdout)["files"]}
    assert actions[OWN] == "left alone: removed by another installer since install"
    text = cli(site, patches, "restore").stdout  # nothing left to restore by now
    assert "replaced" not in text


def test_restore_keeps_files_in_the_state_directory_that_it_never_wrote(site, patches):
    assert cli(site, patches, "install", "--patches=always").returncode == 0
    directory = state_dir(site)
    mine = {directory / "notes.txt": b"why I patched", directory / "originals" / "README": b"keep"}
    for path, data in mine.items():
        path.write_bytes(data)
    assert cli(site, patches, "restore").returncode == 0
    assert {path: path.read_bytes() for path in mine} == mine
    left = sorted(str(path.relative_to(directory)) for path in directory.rglob("*") if path.is_file())
    assert left == ["notes.txt", "originals/README"]
    assert cli(site, patches, "install", "--patches=always").returncode == 0  # and it works again
    assert cli(site, patches, "restore").returncode == 0
    assert {path: path.read_bytes() for path in mine} == mine


def test_no_inode_for_the_lock_file_leaves_no_state_directory(site, patches, monkeypatch):
    real_open = os.open

    def open_(path, *args, **kwargs):
        if Path(path).name == store.LOCK_FILE:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(store.os, "open", open_)
    with pytest.raises(EnvironmentProblem, match="no free space or inodes"):
        engine.install(site, patches="always", directory=patches)
    assert not state_dir(site).exists()
    monkeypatch.undo()
    state_dir(site).mkdir()  # as an older release left it
    monkeypatch.setattr(store.os, "open", open_)
    assert engine.restore(site).result == "nothing to restore"
    assert not state_dir(site).exists()


def _mount_tmpfs(path: Path, inodes: int) -> bool:
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size=16m,nr_inodes={inodes}", "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def _free_inodes(path: Path) -> int:
    return os.statvfs(path).f_favail


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("mount"), reason="needs root to mount a tmpfs")
def test_exactly_one_free_inode_refuses_install_cleanly_and_restore_works(tmp_path, patches):
    """The hostile review's case on a real file system: a tmpfs with one inode left."""
    mount = tmp_path / "fs"
    if not _mount_tmpfs(mount, 400):
        pytest.skip("cannot mount a tmpfs here")
    try:
        site = make_site(mount)
        filler = mount / "filler"
        filler.mkdir()
        n = 0
        while _free_inodes(mount) > 1:
            (filler / str(n)).touch()
            n += 1
        before = snapshot(site)
        installed = cli(site, patches, "install", "--patches=always")
        assert installed.returncode == 2 and "inodes" in installed.stderr, installed.stderr
        assert not state_dir(site).exists() and snapshot(site) == before
        restored = cli(site, patches, "restore")
        assert restored.returncode == 0, restored.stderr
        assert "nothing to restore" in restored.stdout
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def tiny_wheel(directory: Path, name: str, version: str) -> Path:
    """A wheel of one module, as a build backend writes it."""
    import zipfile

    from ascend_env.patching.records import record_hash

    stem = name.replace("-", "_")
    info = f"{stem}-{version}.dist-info"
    contents = {
        f"{stem}/__init__.py": b"",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{n},{record_hash(d)},{len(d)}\n" for n, d in contents.items()) + f"{info}/RECORD,,\n"
    path = directory / f"{stem}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in {**contents, f"{info}/RECORD": record.encode()}.items():
            archive.writestr(member, data)
    return path


@pytest.mark.parametrize("name", ["tinyx", "ascend-env"])
def test_the_fix_for_a_missing_record_works_with_pip(tmp_path, name):
    """The fix the refusal gives is run with pip itself (the wheel's path for the placeholder of
    ascend-env, which no index serves): afterwards the RECORD is back and pip can uninstall."""
    python, site = make_venv(tmp_path)
    wheel = tiny_wheel(tmp_path, name, "0.1.0")
    done = run_pip(python, "install", "--no-index", "--no-deps", str(wheel))
    assert done.returncode == 0, done.stderr
    dist_info = next(site.glob("*.dist-info"))
    (dist_info / "RECORD").unlink()
    with pytest.raises(EnvironmentProblem, match="has no RECORD file") as refused:
        find_distribution(site, name)
    fix = refused.value.fix
    assert fix is not None
    command = fix[fix.index("pip install") :].rstrip(".")
    own = "<the ascend-env 0.1.0 wheel or clone it came from>"
    placeholder = own if name == "ascend-env" else f"{name}==0.1.0"
    assert command.endswith(placeholder), fix
    args = command[: -len(placeholder)].split()[1:]
    done = run_pip(python, *args, "--no-index", "--find-links", str(tmp_path), str(wheel))
    assert done.returncode == 0, done.stderr
    assert find_distribution(site, name) is not None
    done = run_pip(python, "uninstall", "--yes", name)
    assert done.returncode == 0, done.stderr
    assert not list(site.glob("*.dist-info"))


# The writes of an adoption that changes no file: its stored original, the journal, the state.
ADOPTION_POINTS = ["blob", "blobs", "journal-temp", "journal", "state", "commit", "cleanup"]


@pytest.mark.parametrize("then", ["install", "restore"])
@pytest.mark.parametrize("point", ADOPTION_POINTS)
def test_an_adoption_killed_at_any_write_is_finished_by_the_next_run(site, patches, point, then):
    pristine = snapshot(site)
    assert cli(site, patches, "install", "--hook-only").returncode == 0
    lose_state(site)
    lost = snapshot(site)
    argv = ["install", "--hook-only", "--target", str(site), "--patches-dir", str(patches)]
    killed = run_cli(*argv, env={faults.CRASH_ENV: point})
    assert killed.returncode == 137, killed.stderr
    assert snapshot(site, include_state=False) == lost  # an adoption writes no file outside the state
    if then == "install":
        assert cli(site, patches, "install", "--hook-only").returncode == 0
        state = read_state(site)
        assert state is not None and drift(site) == []
        assert {e.path: e.before for e in state.entries}[OWN] is not None
    restored = cli(site, patches, "restore")
    assert restored.returncode == 0, restored.stderr
    # Killed before its journal, the adoption never happened: restore has no state to go by, and
    # removes the hook files it recognises (and their RECORD rows); else it restores from the
    # state. Either way, the tree pip left.
    assert snapshot(site) == pristine
    assert find_distribution(site, "ascend-env") is not None


# restore right after the recovery it advises: it removes the hook files it recognises (issue 42, 5).
@pytest.mark.parametrize("mode", ["--patches=always", "--hook-only"])
@pytest.mark.parametrize("reinstalled", [True, False], ids=["transformers reinstalled", "state lost only"])
def test_restore_after_the_advised_recovery_removes_the_hook(site, patches, mode, reinstalled):
    pristine = snapshot(site)
    assert cli(site, patches, "install", mode).returncode == 0
    if reinstalled:
        reinstall_transformers(site)
    lose_state(site)
    restored = cli(site, patches, "restore", "--json")
    assert restored.returncode == 0, restored.stderr
    report = json.loads(restored.stdout)
    assert report["result"] == "restored"
    assert {f["path"] for f in report["files"]} >= {*files.files(), *files.bytecode()}
    after = snapshot(site)
    assert not any(name in after for name in files.files())  # the hook is gone
    assert after[OWN] == pristine[OWN]  # ascend-env's RECORD as pip wrote it, never removed
    if reinstalled or mode == "--hook-only":
        assert after == pristine
    status = cli(site, patches, "status", "--json")
    assert json.loads(status.stdout)["status"] not in ("hook only", "drifted"), status.stdout
    assert cli(site, patches, "restore").stdout.startswith("nothing to restore")


def test_restore_without_a_state_leaves_files_that_are_not_the_hooks(site, patches):
    pristine = snapshot(site)
    (site / files.MODULE_FILE).write_text("# someone else's module of that name\n")
    (site / files.PTH_FILE).write_text("import os\n")
    restored = cli(site, patches, "restore")
    assert restored.returncode == 0 and restored.stdout.startswith("nothing to restore"), restored.stdout
    after = snapshot(site)
    assert after[files.MODULE_FILE] == b"# someone else's module of that name\n" and files.PTH_FILE in after
    assert {k: v for k, v in after.items() if k not in (files.MODULE_FILE, files.PTH_FILE)} == pristine


def test_restore_after_a_hook_only_install_without_transformers_and_a_lost_state(tmp_path, patches):
    site = site_with_ascend_env(tmp_path)
    for name in ("transformers", "transformers-4.46.3.dist-info"):
        shutil.rmtree(site / name)
    pristine = snapshot(site)
    before = json.loads(cli(site, patches, "status", "--json").stdout)["status"]
    assert cli(site, patches, "install", "--hook-only").returncode == 0
    lose_state(site)
    assert json.loads(cli(site, patches, "status", "--json").stdout)["status"] == "hook only"
    restored = cli(site, patches, "restore")
    assert restored.returncode == 0 and restored.stdout.startswith("restored"), restored.stdout
    assert snapshot(site) == pristine
    assert json.loads(cli(site, patches, "status", "--json").stdout)["status"] == before != "hook only"
