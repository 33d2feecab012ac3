"""Hostile and broken input: each is refused with exit 2 and a message naming problem and fix,
and nothing in site-packages changes (byte for byte, ascend-env's own directory included)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

import pytest
from fake_site import STOP_PATH, UTILS_PATH, make_patches, make_site, patch_text, sha, snapshot
from reliability_support import summary

from ascend_env.cli import main
from ascend_env.detect.cann import find_toolkit
from ascend_env.detect.driver import find_driver
from ascend_env.patching import journal
from ascend_env.patching.store import state_dir


@pytest.fixture(scope="module")
def counts(request):
    return summary(request.config, "hostile input")


@pytest.fixture
def site(tmp_path) -> Path:
    return make_site(tmp_path)


@pytest.fixture
def patches(tmp_path) -> Path:
    return make_patches(tmp_path)


def install_args(site: Path, patches: Path) -> list:
    return ["install", "--target", str(site), "--patches", "always", "--patches-dir", str(patches)]


def refused(capsys, counts, site: Path, argv: list, *words: str) -> str:
    """Run ``argv`` in-process; assert exit 2, a problem and a fix, and an unchanged tree."""
    before = snapshot(site)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "fix: " in err, err
    for word in words:
        assert word in err, err
    assert snapshot(site) == before
    counts.bad_inputs += 1
    counts.runs += 1
    return err


def rewrite_patch(patches: Path, patch_id: str, text: str) -> None:
    (patches / "transformers" / f"{patch_id}.patch").write_text(text)


# -- patches ---------------------------------------------------------------------------------------


CORRUPT = {
    "garbage": "\x7fELF\x02\x01\x01 binary garbage\n",
    "truncated": None,  # the real patch cut in the middle of a hunk
    "no header": "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n",
    "two files": None,
    "hunk count lies": None,
}


@pytest.mark.parametrize("kind", sorted(CORRUPT))
def test_corrupt_patch(capsys, counts, site, patches, kind):
    path = patches / "transformers" / "stopping-criteria-eos-v1.patch"
    text = path.read_text()
    if kind == "truncated":
        text = text[: len(text) * 2 // 3]
    elif kind == "two files":
        text += text[text.index("--- a/") :].replace(STOP_PATH, UTILS_PATH)
    elif kind == "hunk count lies":
        text = text.replace("@@ -", "@@ -9", 1)
    else:
        text = CORRUPT[kind]
    path.write_text(text)
    refused(capsys, counts, site, install_args(site, patches), "stopping-criteria-eos-v1")


@pytest.mark.parametrize("name", ["stopping-criteria-eos-v1.patch", "manifest.json"])
def test_a_huge_patch_or_manifest_is_refused_without_reading_it_whole(capsys, counts, site, patches, name):
    """A 64 MiB patch or manifest: refused by its size limit, having read no more than that."""
    import tracemalloc

    path = patches / (name if name == "manifest.json" else f"transformers/{name}")
    with open(path, "ab") as handle:
        handle.write(b"# filler\n" * (8 << 20))
    tracemalloc.start()
    try:
        err = refused(capsys, counts, site, install_args(site, patches), "larger than")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert name.split(".")[0] in err
    assert peak < 24 << 20, peak  # about the limit's worth of text (4M characters at most), not 64 MiB


@pytest.mark.parametrize(
    "target", ["../outside.py", "transformers/../../outside.py", "/etc/passwd", "//etc/passwd"]
)
def test_patch_leaving_site_packages(capsys, counts, site, patches, tmp_path, target):
    (tmp_path / "outside.py").write_text("x = 1\n")
    text = patch_text("stopping-criteria-eos-v1", target, "x = 1\n", "x = 2\n")
    rewrite_patch(patches, "stopping-criteria-eos-v1", text)
    refused(capsys, counts, site, install_args(site, patches), "not a plain relative path")
    assert (tmp_path / "outside.py").read_text() == "x = 1\n"


def test_manifest_target_leaving_site_packages(capsys, counts, site, patches):
    manifest = json.loads((patches / "manifest.json").read_text())
    manifest["patches"]["stopping-criteria-eos-v1"]["target"] = "../outside.py"
    (patches / "manifest.json").write_text(json.dumps(manifest))
    refused(capsys, counts, site, install_args(site, patches), "manifest")


def test_patch_aimed_at_a_file_outside_record(capsys, counts, site, patches):
    stray = "transformers/not_in_record.py"
    (site / stray).write_text("x = 1\n")
    text = patch_text("stopping-criteria-eos-v1", stray, "x = 1\n", "x = 2\n")
    rewrite_patch(patches, "stopping-criteria-eos-v1", text)
    manifest = json.loads((patches / "manifest.json").read_text())
    manifest["patches"]["stopping-criteria-eos-v1"]["target"] = stray
    release = manifest["releases"]["4.46.3"]
    release[stray] = release.pop(STOP_PATH)
    release[stray].update(before=sha(b"x = 1\n"), after=sha(b"x = 2\n"))
    (patches / "manifest.json").write_text(json.dumps(manifest))
    refused(capsys, counts, site, install_args(site, patches), "not a file of transformers")


# -- the site --------------------------------------------------------------------------------------


def link_target_outside(site: Path, tmp_path: Path) -> Path:
    outside = tmp_path / "outside_stopping_criteria.py"
    shutil.copy(site / STOP_PATH, outside)
    (site / STOP_PATH).unlink()
    os.symlink(outside, site / STOP_PATH)
    return outside


def link_package_outside(site: Path, tmp_path: Path) -> Path:
    shutil.move(str(site / "transformers"), str(tmp_path / "transformers_elsewhere"))
    os.symlink(tmp_path / "transformers_elsewhere", site / "transformers")
    return tmp_path / "transformers_elsewhere" / "generation" / "stopping_criteria.py"


def link_hook_outside(site: Path, tmp_path: Path) -> Path:
    outside = tmp_path / "outside.pth"
    outside.write_text("import this\n")
    os.symlink(outside, site / "ascend_env_hook.pth")
    return outside


def link_state_outside(site: Path, tmp_path: Path) -> Path:
    outside = tmp_path / "outside_state"
    outside.mkdir()
    os.symlink(outside, state_dir(site))
    return outside


@pytest.mark.parametrize(
    "make_link", [link_target_outside, link_package_outside, link_hook_outside, link_state_outside]
)
def test_symlink_pointing_outside(capsys, counts, site, patches, tmp_path, make_link: Callable):
    outside = make_link(site, tmp_path)
    before = outside.read_bytes() if outside.is_file() else sorted(os.listdir(outside))
    refused(capsys, counts, site, install_args(site, patches))
    after = outside.read_bytes() if outside.is_file() else sorted(os.listdir(outside))
    assert after == before


def test_target_modified_by_someone_else(capsys, counts, site, patches):
    with open(site / STOP_PATH, "a") as handle:
        handle.write("# a local edit\n")
    refused(capsys, counts, site, install_args(site, patches), "conflict", "force-reinstall")


def test_patched_target_modified_before_restore(capsys, counts, site, patches):
    assert main(install_args(site, patches)) == 0
    with open(site / STOP_PATH, "a") as handle:
        handle.write("# a local edit\n")
    capsys.readouterr()
    refused(capsys, counts, site, ["restore", "--target", str(site)], "changed since install")


@pytest.mark.parametrize("version", ["4.46.99", "4.47.0.dev0", "not-a-version"])
def test_unknown_transformers_release(capsys, counts, tmp_path, patches, version):
    site = make_site(tmp_path, version=version)
    refused(capsys, counts, site, install_args(site, patches), "not a release")


# -- writes that fail -------------------------------------------------------------------------------


def error_line(result: subprocess.CompletedProcess) -> str:
    """What a failed Python says went wrong: its traceback's last line (the exception), whole."""
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"exit code {result.returncode}, nothing on stderr"


def test_a_skip_reason_names_the_error_not_a_cut_traceback():
    stderr = (
        "Traceback (most recent call last):\n"
        + '  File "<frozen importlib._bootstrap>", line 1, in _find_and_load\n' * 5
        + "PermissionError: [Errno 13] Permission denied: '/root/venv/lib/python3.11/site-packages'\n"
    )
    failed = subprocess.CompletedProcess([], 1, "", stderr)
    assert (
        error_line(failed)
        == "PermissionError: [Errno 13] Permission denied: '/root/venv/lib/python3.11/site-packages'"
    )
    assert error_line(subprocess.CompletedProcess([], -9, "", "")) == "exit code -9, nothing on stderr"


def as_nobody(argv: list) -> subprocess.CompletedProcess:
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to run as an unprivileged user")
    prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable]
    env = {**os.environ, "HOME": "/"}
    # What the commands below import (--version alone loads no command, nor packaging).
    probe = subprocess.run(
        [*prefix, "-c", "import ascend_env.commands.install, ascend_env.commands.status"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    if probe.returncode != 0:  # e.g. a libpython, a venv or a dependency under a home only root reads
        pytest.skip(f"this interpreter cannot run ascend_env as nobody: {error_line(probe)}")
    return subprocess.run(
        [*prefix, "-m", "ascend_env", *argv], capture_output=True, text=True, timeout=120, env=env
    )


def test_read_only_site_packages_as_an_unprivileged_user(counts):
    """Run as ``nobody`` (root ignores permissions), on a site it may read but not write."""
    root = Path(tempfile.mkdtemp(prefix="ascend-env-read-only-"))
    try:
        root.chmod(0o755)
        site, patches = make_site(root), make_patches(root)
        before = snapshot(site)
        result = as_nobody(install_args(site, patches))
        assert result.returncode == 2, result.stderr
        assert "read-only for this user" in result.stderr and "fix: " in result.stderr, result.stderr
        assert snapshot(site) == before
        hidden = root / "hidden"
        hidden.mkdir(mode=0o700)
        result = as_nobody(["status", "--target", str(hidden / "site-packages")])
        assert result.returncode == 2 and "cannot be read" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    finally:
        shutil.rmtree(root)
    counts.bad_inputs += 2
    counts.runs += 2


def fail_nth_write(monkeypatch, n: int, error: int) -> list:
    """Make the ``n``-th :func:`journal.write_atomic` call fail with ``error`` (before writing)."""
    calls = []
    real = journal.write_atomic

    def write_atomic(path, data, tmp_dir, label=None):
        calls.append(path)
        if len(calls) == n:
            raise OSError(error, os.strerror(error))
        return real(path, data, tmp_dir, label)

    monkeypatch.setattr(journal, "write_atomic", write_atomic)
    return calls


def test_permission_error_on_the_write_path(capsys, counts, monkeypatch, site, patches):
    fail_nth_write(monkeypatch, 1, errno.EACCES)
    refused(capsys, counts, site, install_args(site, patches), "Permission denied", "writable")


def test_read_only_mount_on_the_write_path_says_so(capsys, counts, monkeypatch, site, patches):
    """EROFS is the mount, not the user's permissions: the fix says to remount or build there."""
    fail_nth_write(monkeypatch, 1, errno.EROFS)
    err = refused(capsys, counts, site, install_args(site, patches), "Read-only file system", "remount")
    assert "for this user" not in err


def fail_state_directory(monkeypatch, site: Path, step: str, error: int) -> None:
    """Make creating ``.ascend-env`` (``step`` "mkdir") or its lock file ("lock") fail with ``error``."""
    from ascend_env.patching import locking

    directory = state_dir(site)
    if step == "mkdir":
        real_mkdir = Path.mkdir

        def mkdir(self, *args, **kwargs):
            if self == directory:
                raise OSError(error, os.strerror(error))
            return real_mkdir(self, *args, **kwargs)

        monkeypatch.setattr(Path, "mkdir", mkdir)
    else:
        real_open = os.open

        def open_(path, *args, **kwargs):
            if Path(path) == directory / locking.LOCK_FILE:
                raise OSError(error, os.strerror(error))
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr(locking.os, "open", open_)


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize("step", ["mkdir", "lock"])
@pytest.mark.parametrize(
    "error, words",
    [
        (errno.ENOSPC, "no free space or inodes"),
        (errno.EDQUOT, "quota"),
        (errno.EROFS, "mounted read-only"),
        (errno.EMLINK, "or its lock file"),
    ],
)
def test_creating_the_state_directory_fails(
    capsys, counts, monkeypatch, site, patches, as_json, step, error, words
):
    """No space, inodes or quota, a read-only mount: the problem and its fix, exit 2, nothing
    changed; with --json, one JSON document (it was a traceback in place of JSON)."""
    fail_state_directory(monkeypatch, site, step, error)
    argv = install_args(site, patches)
    before = snapshot(site)
    code = main([*argv, "--json"] if as_json else argv)
    captured = capsys.readouterr()
    assert code == 2 and snapshot(site) == before
    assert not state_dir(site).exists()  # not even an empty one (the next restore needs no inode)
    if as_json:
        report = json.loads(captured.out)
        assert report["ok"] is False and words in report["problem"] and report["fix"]
    else:
        assert words in captured.err and "fix: " in captured.err
    counts.bad_inputs += 1
    counts.runs += 1


def test_full_disk_at_every_write(capsys, counts, monkeypatch, tmp_path):
    """ENOSPC at the n-th write: refused (exit 2); before the journal nothing changed at all,
    after it each file is old or new and the next run, with space again, finishes."""
    reference = make_site(tmp_path / "reference")
    patches = make_patches(tmp_path)
    assert main(install_args(reference, patches)) == 0
    applied = snapshot(reference, include_state=False)
    capsys.readouterr()
    n = 1
    while True:
        site = make_site(tmp_path / f"n{n}")
        before = snapshot(site)
        with monkeypatch.context() as patch:
            calls = fail_nth_write(patch, n, errno.ENOSPC)
            code = main(install_args(site, patches))
        err = capsys.readouterr().err
        if len(calls) < n:
            assert code == 0  # n is past the last write
            break
        assert code == 2 and "No space left on device" in err and "free space" in err, err
        counts.bad_inputs += 1
        counts.runs += 2
        if (state_dir(site) / "journal.json").exists():
            for path, data in snapshot(site, include_state=False).items():
                assert data in (before.get(path), applied.get(path)), path
        else:
            assert snapshot(site) == before, f"write {n} failed, and the tree changed"
        assert main(install_args(site, patches)) == 0
        assert snapshot(site, include_state=False) == applied
        capsys.readouterr()
        n += 1
    assert n > 5


# -- broken metadata and state -------------------------------------------------------------------


def truncate_record(site: Path) -> None:
    record = site / "transformers-4.46.3.dist-info" / "RECORD"
    text = record.read_text()
    record.write_text(text[: text.index(STOP_PATH) + 10])


def drop_metadata(site: Path) -> None:
    (site / "transformers-4.46.3.dist-info" / "METADATA").unlink()


def truncate_metadata(site: Path) -> None:
    (site / "transformers-4.46.3.dist-info" / "METADATA").write_text("Metadata-Vers")


def drop_record(site: Path) -> None:
    (site / "transformers-4.46.3.dist-info" / "RECORD").unlink()


def garbage_record(site: Path) -> None:
    (site / "transformers-4.46.3.dist-info" / "RECORD").write_bytes(b"\xff\xfe\x00garbage\x80")


@pytest.mark.parametrize(
    "damage", [truncate_record, drop_metadata, truncate_metadata, drop_record, garbage_record]
)
def test_truncated_dist_info(capsys, counts, site, patches, damage):
    damage(site)
    refused(capsys, counts, site, install_args(site, patches))


STATES = {
    "not json": b'{"schema": 1, "entr',
    "binary": b"\x00\xff\xfe garbage",
    "newer tool": json.dumps({"schema": 2, "entries": [], "tool_version": "9.0.0"}).encode(),
    "unsafe path": json.dumps(
        {
            "schema": 1,
            "tool_version": "0.1.0",
            "applied_at": "x",
            "distribution": "transformers",
            "version": "4.46.3",
            "entries": [{"path": "../../etc/passwd", "kind": "extra", "before": None, "after": "0" * 64}],
        }
    ).encode(),
    "a list": b"[1, 2, 3]",
    # Deeper than the parser's recursion limit: a RecursionError traceback before jsontext.
    "nested too deeply": b"[" * 100_000 + b"]" * 100_000,
}


def command_argv(command: str, site: Path, patches: Path) -> list:
    """install, restore or status on ``site``."""
    return {
        "install": install_args(site, patches),
        "restore": ["restore", "--target", str(site)],
        "status": ["status", "--target", str(site), "--patches-dir", str(patches)],
    }[command]


@pytest.mark.parametrize("kind", sorted(STATES))
@pytest.mark.parametrize("command", ["install", "restore", "status"])
def test_corrupt_or_newer_state_file(capsys, counts, site, patches, kind, command):
    state_dir(site).mkdir()
    (state_dir(site) / "state.json").write_bytes(STATES[kind])
    refused(capsys, counts, site, command_argv(command, site, patches), "state.json")


JOURNALS = {
    "cut": b'{"changes": [{"path": "/etc/passwd"',
    "nested too deeply": b'{"changes": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
}


@pytest.mark.parametrize("kind", sorted(JOURNALS))
@pytest.mark.parametrize("command", ["install", "restore", "status"])
def test_corrupt_journal(capsys, counts, site, patches, kind, command):
    state_dir(site).mkdir()
    (state_dir(site) / "journal.json").write_bytes(JOURNALS[kind])
    refused(capsys, counts, site, command_argv(command, site, patches), "journal")


@pytest.mark.parametrize("data", [b"[" * 100_000 + b"]" * 100_000, b'{"patches": ' + b"[" * 50_000])
@pytest.mark.parametrize("command", ["install", "status"])
def test_manifest_nested_too_deeply(capsys, counts, site, patches, data, command):
    (patches / "manifest.json").write_bytes(data)
    refused(capsys, counts, site, command_argv(command, site, patches), "manifest.json")


# -- CANN and driver files ----------------------------------------------------------------------


GARBAGE = [
    b"",
    b"\x00" * 64,
    bytes(range(256)),
    b"version=\xff\xfe\x00",
    b"version=" + b"9" * 5000,
    b"\x7fELF\x02\x01\x01\x00" + os.urandom(512),
    b"version=8.0.RC3\x00garbage",
    b"=\n=\n===",
]


@pytest.mark.parametrize("data", GARBAGE, ids=range(len(GARBAGE)))
def test_garbage_cann_and_driver_files(counts, tmp_path, data):
    root = tmp_path / "Ascend"
    info = root / "ascend-toolkit" / "latest" / "x86_64-linux" / "ascend_toolkit_install.info"
    info.parent.mkdir(parents=True)
    info.write_bytes(data)
    (root / "ascend-toolkit" / "latest" / "version.cfg").write_bytes(data)
    toolkit = find_toolkit({}, prefixes=[root], arch="x86_64")
    assert toolkit.found and toolkit.version is None
    assert toolkit.problems and all(p.isprintable() for p in toolkit.problems)
    (root / "driver").mkdir()
    (root / "driver" / "version.info").write_bytes(data)
    install_info = tmp_path / "ascend_install.info"
    install_info.write_bytes(data)
    driver = find_driver(install_info, root)
    assert driver.version is None and driver.problems
    assert all(p.isprintable() for p in driver.problems)
    counts.bad_inputs += 2


def test_detect_with_garbage_cann_files_reports_them(counts, tmp_path):
    root = tmp_path / "cann"
    (root / "x86_64-linux").mkdir(parents=True)
    (root / "x86_64-linux" / "ascend_toolkit_install.info").write_bytes(b"\x00\xffversion=\x80\x81")
    env = {**os.environ, "ASCEND_HOME_PATH": str(root), "ASCEND_TOOLKIT_HOME": ""}
    result = subprocess.run(
        [sys.executable, "-m", "ascend_env", "detect", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode in (0, 1, 2), result.stderr
    assert "Traceback" not in result.stderr
    report = json.loads(result.stdout)
    assert any("not a CANN version" in p or "no 'version='" in p for p in report["cann"]["problems"]), report
    counts.bad_inputs += 1
    counts.runs += 1


# -- paths that are not UTF-8 ---------------------------------------------------------------------


@pytest.mark.parametrize("as_json", [False, True])
def test_a_site_packages_path_that_is_not_utf8(tmp_path, patches, as_json):
    """A directory name with a byte that is not UTF-8, under a UTF-8 locale: install, status and
    restore work and report, the undecodable byte shown as an escape (it was a UnicodeEncodeError
    traceback after the change was made)."""
    site = make_site(Path(os.fsdecode(os.fsencode(tmp_path) + b"/bad\xe9dir")))
    before = snapshot(site)
    env = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8", "PYTHONIOENCODING": ""}
    flags = ["--json"] if as_json else []
    status = ["status", "--target", str(site), "--patches-dir", str(patches)]
    for argv in (install_args(site, patches), status, ["restore", "--target", str(site)]):
        result = subprocess.run(
            [sys.executable, "-m", "ascend_env", *argv, *flags], capture_output=True, timeout=120, env=env
        )
        assert result.returncode == 0, result.stderr.decode(errors="replace")
        assert b"Traceback" not in result.stderr
        out = result.stdout.decode("utf-8")  # valid UTF-8 whatever the path holds
        if as_json:
            report = json.loads(out)  # the undecodable byte as its surrogate, "\\udce9"
            assert str(site) in (report.get("site_packages"), report.get("target"))
        else:
            assert "bad\\xe9dir" in out
    assert snapshot(site) == before


# -- root on another user's environment -----------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another user needs root")
def test_root_leaves_no_root_owned_file_in_another_users_environment(capsys, counts, site, patches):
    """sudo install, then sudo restore, on a site-packages that uid 65534 owns: everything
    ascend-env creates or replaces there (patched files, RECORD, state, blobs, lock) stays theirs."""
    owner = (65534, 65534)
    for path in [site, *site.rglob("*")]:
        os.chown(path, *owner)

    def root_owned() -> list:
        found = [p for p in site.rglob("*") if (p.lstat().st_uid, p.lstat().st_gid) != owner]
        return sorted(str(p.relative_to(site)) for p in found)

    assert main(install_args(site, patches)) == 0
    assert (site / ".ascend-env").is_dir() and root_owned() == []
    assert main(["restore", "--target", str(site)]) == 0
    assert root_owned() == []
    counts.runs += 2
