"""The startup hook joins install and restore, and pip uninstall removes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_site import (
    make_patches,
    make_site,
    make_venv,
    remove_ascend_env,
    run_cli,
    run_pip,
    site_with_ascend_env,
    snapshot,
    write_dist,
)
from typed_reports import unknown_keys

from ascend_env.commands.status import HookPart
from ascend_env.hook import files
from ascend_env.patching.records import find_distribution


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return site_with_ascend_env(tmp_path)


@pytest.fixture
def patches(tmp_path: Path) -> Path:
    return make_patches(tmp_path)


def test_install_writes_the_hook_and_lists_it_in_ascend_envs_record(site, patches):
    result = run_cli("install", "--target", str(site), "--patches-dir", str(patches), "--patches", "never")
    assert result.returncode == 0, result.stderr
    assert files.is_current(site)
    own = find_distribution(site, "ascend-env")
    assert own is not None
    for name, data in files.files().items():
        assert own.record[name].matches(data)


def test_hook_only_installs_no_patch(site, patches):
    before = snapshot(site, include_state=False)
    result = run_cli("install", "--hook-only", "--target", str(site), "--patches-dir", str(patches))
    assert result.returncode == 0, result.stderr
    after = snapshot(site, include_state=False)
    changed = {path for path in after if before.get(path) != after[path]}
    assert changed == {*files.files(), *files.bytecode(), "ascend_env-0.1.0.dist-info/RECORD"}


def test_restore_removes_the_hook_and_its_record_rows(site, patches):
    before = snapshot(site)
    assert (
        run_cli(
            "install", "--target", str(site), "--patches-dir", str(patches), "--patches", "always"
        ).returncode
        == 0
    )
    assert files.installed(site)
    result = run_cli("restore", "--target", str(site))
    assert result.returncode == 0, result.stderr
    assert files.installed(site) == []
    assert snapshot(site) == before


def test_second_install_keeps_one_record_row_per_hook_file(site, patches):
    for _ in range(2):
        assert (
            run_cli("install", "--hook-only", "--target", str(site), "--patches-dir", str(patches)).returncode
            == 0
        )
    record = (site / "ascend_env-0.1.0.dist-info" / "RECORD").read_text()
    for name in files.files():
        assert sum(line.startswith(name + ",") for line in record.splitlines()) == 1


def test_pip_uninstall_removes_the_hook_files(tmp_path: Path, patches):
    # A real environment, since pip only uninstalls what lies inside sys.prefix.
    python, site = make_venv(tmp_path)
    make_site_in(site)
    write_dist(site, "ascend_env", "0.1.0", {"ascend_env/__init__.py": b"__version__ = '0.1.0'\n"})
    result = run_cli("install", "--hook-only", "--target", str(site), "--patches-dir", str(patches))
    assert result.returncode == 0, result.stderr
    assert files.installed(site)
    done = run_pip(python, "uninstall", "--yes", "--quiet", "ascend-env")
    assert done.returncode == 0, done.stderr
    assert files.installed(site) == []
    assert not (site / "ascend_env").exists()


def make_site_in(site: Path) -> None:
    """Fill an existing site-packages with the fake transformers of :func:`make_site`."""
    scratch = make_site(site.parent / "scratch")
    for path in sorted(scratch.rglob("*")):
        target = site / path.relative_to(scratch)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.write_bytes(path.read_bytes())


def test_hook_only_with_a_patches_mode_is_a_usage_error(site, patches):
    result = run_cli("install", "--hook-only", "--patches", "always", "--target", str(site))
    assert result.returncode == 2
    assert "--hook-only" in result.stderr
    assert files.installed(site) == []


def hooked_venv(tmp_path: Path, patches: Path) -> Path:
    """A venv with the fake transformers and the hook installed; ascend_env importable. Its python."""
    python, site = make_venv(tmp_path)
    make_site_in(site)
    paths = [p for p in sys.path if p and Path(p).is_dir()]
    (site / "_paths.pth").write_text("\n".join(paths) + "\n")
    result = run_cli("install", "--hook-only", "--target", str(site), "--patches-dir", str(patches))
    assert result.returncode == 0, result.stderr
    return python


def status_in(python: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    site = next(python.parent.parent.glob("lib/python*/site-packages"))
    environ = {k: v for k, v in os.environ.items() if k != "ASCEND_ENV_DISABLE"}
    environ.update(env)
    return subprocess.run(
        [str(python), "-m", "ascend_env", "status", "--target", str(site), *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )


def test_status_shows_the_hook_ran_in_a_fresh_process(tmp_path: Path, patches):
    python = hooked_venv(tmp_path, patches)
    result = status_in(python, "--json", "--patches-dir", str(patches))
    report = json.loads(result.stdout)
    assert report["hook"]["installed"] == sorted(files.files())
    assert report["hook"]["current"] is True
    assert report["hook"]["probe"]["ran"] is True
    assert report["hook"]["probe"]["backend"] is None  # no torch_npu here: the hook waits for it
    text = status_in(python, "--patches-dir", str(patches)).stdout
    assert "startup hook: ran in a fresh process; waits for torch_npu" in text


def test_status_says_when_the_kill_switch_is_set(tmp_path: Path, patches):
    python = hooked_venv(tmp_path, patches)
    text = status_in(python, "--patches-dir", str(patches), ASCEND_ENV_DISABLE="1").stdout
    assert "turned off by ASCEND_ENV_DISABLE" in text


def test_status_fails_when_the_hook_cannot_register(tmp_path: Path, patches):
    """torch_npu comes up but the hook's kernels cannot load (here the kernel module cannot be
    imported at all): status reports the hook's error and fails, instead of a silent fallback."""
    python = hooked_venv(tmp_path, patches)
    site = next(python.parent.parent.glob("lib/python*/site-packages"))
    (site / "torch_npu").mkdir()
    (site / "torch_npu" / "__init__.py").write_text("__version__ = '2.1.0.post6'\n")
    (site / "_break_kernels.pth").write_text("import sys; sys.modules['ascend_env.kernels.isin'] = None\n")
    result = status_in(python, "--json", "--patches-dir", str(patches))
    report = json.loads(result.stdout)
    assert result.returncode == 1 and report["ok"] is False
    assert report["hook"]["probe"]["backend"] == "torch_npu" and report["hook"]["probe"]["errors"]
    text = status_in(python, "--patches-dir", str(patches)).stdout
    assert "startup hook error: " in text


@pytest.mark.parametrize("name", [files.PTH_FILE, files.MODULE_FILE])
def test_restore_after_an_edited_hook_file_was_reinstalled_removes_it(site, patches, name):
    """install wrote the hook's files, someone edited one, install put it back: restore removes
    the files install created, not writes the edited bytes back (a broken .pth would then run at
    every start)."""
    before = snapshot(site)
    install = ["install", "--hook-only", "--target", str(site), "--patches-dir", str(patches)]
    assert run_cli(*install).returncode == 0
    (site / name).write_text("import no_such_module_anywhere\n")
    assert run_cli(*install).returncode == 0
    assert (site / name).read_bytes() == files.files()[name]
    result = run_cli("restore", "--target", str(site))
    assert result.returncode == 0, result.stderr
    assert not (site / name).exists()
    assert snapshot(site) == before


def test_status_says_the_hook_was_not_checked_where_torch_npu_does_not_import(tmp_path: Path, patches):
    """torch_npu installed but not importable (no CANN in a Docker build): the hook cannot be
    checked there, and status says so, not 'registered nothing (torch_npu has them all)'."""
    python = hooked_venv(tmp_path, patches)
    site = next(python.parent.parent.glob("lib/python*/site-packages"))
    (site / "torch_npu").mkdir()
    (site / "torch_npu" / "__init__.py").write_text(
        "raise ImportError('libhccl.so: cannot open shared object file: No such file or directory')\n"
    )
    result = status_in(python, "--patches-dir", str(patches))
    assert result.returncode == 0, result.stdout
    assert "not checked there: torch_npu does not import (ImportError: libhccl.so" in result.stdout
    assert "registered nothing" not in result.stdout and "startup hook error" not in result.stdout


def test_a_hanging_probe_is_stopped_and_said(tmp_path: Path, patches):
    python = hooked_venv(tmp_path, patches)
    site = next(python.parent.parent.glob("lib/python*/site-packages"))
    (site / "torch_npu").mkdir()
    (site / "torch_npu" / "__init__.py").write_text("import time\ntime.sleep(60)\n")
    found = files.probe(str(python), timeout=2)
    assert found["ran"] is False and "did not finish within 2 s (importing torch_npu)" in found["error"]


# What the probed process (``python -c``: status's own process prints nothing) may print to stdout
# at exit, as torch_npu's atexit handlers do: a line, a line of JSON, a torrent.
AT_EXIT = {
    "a line": "'torch_npu: shutting down'",
    "json": "'{\"ran\": false}'",
    "a torrent": "'x' * (1 << 21)",
}


@pytest.mark.parametrize("printed", sorted(AT_EXIT))
def test_status_keeps_its_answer_when_the_probed_process_prints_at_exit(tmp_path: Path, patches, printed):
    python = hooked_venv(tmp_path, patches)
    site = next(python.parent.parent.glob("lib/python*/site-packages"))
    (site / "zz_printer.pth").write_text(
        f"import atexit, sys; atexit.register(lambda: sys.argv[0] == '-c' and print({AT_EXIT[printed]}))\n"
    )
    result = status_in(python, "--json", "--patches-dir", str(patches))
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    assert report["hook"]["probe"]["ran"] is True and report["hook"]["probe"]["backend"] is None
    assert unknown_keys(report["hook"], HookPart) == []  # the probe's answer, as status reads it
    text = status_in(python, "--patches-dir", str(patches))
    assert text.returncode == 0 and "startup hook: ran in a fresh process; waits" in text.stdout


def test_status_keeps_its_answer_when_every_process_prints_at_start(tmp_path: Path, patches):
    """A sitecustomize or .pth that prints in every process (status's own output gets it too)."""
    python = hooked_venv(tmp_path, patches)
    site = next(python.parent.parent.glob("lib/python*/site-packages"))
    (site / "zz_printer.pth").write_text("import sys; sys.stdout.write('{\"hello\": 1}\\n')\n")
    text = status_in(python, "--patches-dir", str(patches))
    assert text.returncode == 0 and "Traceback" not in text.stderr, text.stderr
    assert "startup hook: ran in a fresh process; waits" in text.stdout


# What something in the probed process may write over the answer file at exit (Python expressions).
OVERWRITES = {
    "truncated": "'{'",
    "deep": "'[' * 100000",
    "a list": "'[1, 2]'",
    "not utf-8": "b'\\xff'",
    "too big": "b' ' * (2 << 20) + b'{}'",
}


@pytest.mark.parametrize("overwrite", sorted(OVERWRITES))
def test_a_probe_answer_that_is_not_the_probes_is_said_not_parsed(tmp_path: Path, patches, overwrite):
    """Something in the probed process overwrites the answer file at exit: a clear error."""
    python = hooked_venv(tmp_path, patches)
    site = next(python.parent.parent.glob("lib/python*/site-packages"))
    data = OVERWRITES[overwrite]
    write = f"open(sys.argv[1], 'wb').write({data} if isinstance({data}, bytes) else ({data}).encode())"
    (site / "zz_overwrite.pth").write_text(
        f"import atexit, sys; atexit.register(lambda: sys.argv[0] == '-c' and {write})\n"
    )
    found = files.probe(str(python))
    assert found["ran"] is False and "wrote an answer that is not the probe's" in str(found["error"])


def test_status_fails_when_a_hook_file_was_edited(tmp_path: Path, patches):
    python = hooked_venv(tmp_path, patches)
    site = next(python.parent.parent.glob("lib/python*/site-packages"))
    (site / files.START_FILE).write_text("# edited\n")
    result = status_in(python, "--patches-dir", str(patches))
    assert result.returncode == 1
    assert "differ" in result.stdout


def test_status_after_hook_only_says_hook_only(site, patches):
    installed = run_cli("install", "--hook-only", "--target", str(site), "--patches-dir", str(patches))
    assert installed.returncode == 0 and installed.stdout.startswith("hook installed:")
    result = run_cli("status", "--json", "--target", str(site), "--patches-dir", str(patches))
    report = json.loads(result.stdout)
    assert (result.returncode, report["ok"], report["status"]) == (0, True, "hook only")
    assert "run" not in report
    assert {item["status"] for item in report["files"]} == {"clean"}


def pip_reinstall_ascend_env(site: Path, version: str) -> None:
    """What pip does for ``pip install`` of another ascend-env build: remove every file the
    installed RECORD lists (the hook's files among them), then install the new build's files."""
    remove_ascend_env(site)
    source = f"__version__ = {version!r}\n".encode()
    write_dist(site, "ascend_env", version, {"ascend_env/__init__.py": source})


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0"])  # a reinstall, an upgrade
def test_pip_reinstall_of_ascend_env_then_restore(site, patches, version):
    """restore right after pip replaced ascend-env: transformers comes back, the hook files pip
    removed stay removed, and pip's new RECORD is left as pip wrote it."""
    pristine = snapshot(site)
    assert (
        run_cli(
            "install", "--target", str(site), "--patches", "always", "--patches-dir", str(patches)
        ).returncode
        == 0
    )
    pip_reinstall_ascend_env(site, version)
    after_pip = snapshot(site, include_state=False)
    status = run_cli("status", "--json", "--target", str(site), "--patches-dir", str(patches))
    assert status.returncode == 1 and json.loads(status.stdout)["status"] == "drifted"
    result = run_cli("restore", "--target", str(site))
    assert result.returncode == 0, result.stderr
    restored = snapshot(site)
    own = [p for p in after_pip if p.startswith("ascend_env")]
    assert {p: restored[p] for p in own} == {p: after_pip[p] for p in own}  # pip's, untouched
    assert {p: d for p, d in restored.items() if not p.startswith("ascend_env")} == {
        p: d for p, d in pristine.items() if not p.startswith("ascend_env")
    }


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0"])
def test_pip_reinstall_of_ascend_env_then_install_status_restore(site, patches, version):
    """install after pip replaced ascend-env puts the hook back into the new RECORD; status is
    clean, and restore leaves pip's RECORD as pip wrote it."""
    install = ["install", "--target", str(site), "--patches", "always", "--patches-dir", str(patches)]
    pristine = snapshot(site)
    assert run_cli(*install).returncode == 0
    pip_reinstall_ascend_env(site, version)
    after_pip = snapshot(site, include_state=False)
    result = run_cli(*install)
    assert result.returncode == 0, result.stderr
    assert all((site / name).is_file() for name in files.files())
    own = find_distribution(site, "ascend-env")
    assert own is not None and set(files.files()) <= set(own.record)
    status = run_cli("status", "--json", "--target", str(site), "--patches-dir", str(patches))
    report = json.loads(status.stdout)
    assert report["status"] == "applied" and not report.get("drift"), report
    result = run_cli("restore", "--target", str(site))
    assert result.returncode == 0, result.stderr
    restored = snapshot(site)
    assert {p: d for p, d in restored.items() if not p.startswith("ascend_env")} == {
        p: d for p, d in pristine.items() if not p.startswith("ascend_env")
    }
    assert not any((site / name).exists() for name in files.files())
    own = find_distribution(site, "ascend-env")
    assert (site / own.record_path).read_bytes() == after_pip[own.record_path]


def pip_uninstall_transformers(site: Path) -> None:
    """What ``pip uninstall transformers`` does: remove every file its RECORD lists."""
    import shutil

    for path in list(site.iterdir()):
        if path.name.startswith("transformers"):
            shutil.rmtree(path)


def test_after_pip_uninstall_transformers_status_and_restore_work(site, patches):
    """transformers uninstalled after install: status says so and advises restore (exit 1), and
    restore cleans up; then install --hook-only needs no transformers, and status says hook only."""
    before = {p: d for p, d in snapshot(site).items() if not p.startswith("transformers")}
    assert (
        run_cli(
            "install", "--target", str(site), "--patches", "always", "--patches-dir", str(patches)
        ).returncode
        == 0
    )
    pip_uninstall_transformers(site)
    status = run_cli("status", "--json", "--target", str(site), "--patches-dir", str(patches))
    report = json.loads(status.stdout)
    assert status.returncode == 1 and report["status"] == "transformers removed"
    assert report["run"].startswith("python -m ascend_env restore")
    restored = run_cli("restore", "--target", str(site))
    assert restored.returncode == 0, restored.stderr
    assert snapshot(site) == before
    hook_only = run_cli("install", "--hook-only", "--target", str(site), "--patches-dir", str(patches))
    assert hook_only.returncode == 0, hook_only.stderr
    assert "(not installed)" in hook_only.stdout
    assert all((site / name).is_file() for name in files.files())
    status = run_cli("status", "--target", str(site), "--patches-dir", str(patches))
    assert status.returncode == 0 and status.stdout.startswith("hook only: transformers (not installed)")
    assert run_cli("restore", "--target", str(site)).returncode == 0
    assert snapshot(site) == before


def test_without_target_a_hook_only_install_finds_this_environment(tmp_path: Path):
    """No transformers anywhere: install --hook-only goes to this Python's own site-packages, and
    status and restore find it there through the state it leaves."""
    python, site = make_venv(tmp_path)
    paths = [p for p in sys.path if p and Path(p).is_dir()]
    (site / "_paths.pth").write_text("\n".join(paths) + "\n")

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(python), "-m", "ascend_env", *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=str(tmp_path),
        )

    probe = "import importlib.metadata as m, sys; m.distribution('transformers'); sys.exit(3)"
    if subprocess.run([str(python), "-c", probe], capture_output=True).returncode == 3:
        pytest.skip("transformers is installed on this environment's paths (the unit envs have none)")
    assert cli("install", "--hook-only").returncode == 0
    assert all((site / name).is_file() for name in files.files())
    status = cli("status")
    assert status.returncode == 0 and f"in {site.resolve()}" in status.stdout, status.stdout + status.stderr
    assert cli("restore").returncode == 0
    assert not any((site / name).exists() for name in files.files())


def test_a_shared_site_packages_is_changed_only_when_named(tmp_path: Path, patches):
    """A venv that sees another environment's transformers (--system-site-packages, or a user
    site): install without --target refuses, names the shared directory and leaves it alone;
    with --target naming it, it installs there."""
    shared = make_site(tmp_path / "system")
    python, own_site = make_venv(tmp_path)
    paths = [p for p in sys.path if p and Path(p).is_dir()]
    (own_site / "_paths.pth").write_text("\n".join([str(shared), *paths]) + "\n")
    before = snapshot(shared)

    def install(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                str(python),
                "-m",
                "ascend_env",
                "install",
                "--patches",
                "always",
                "--patches-dir",
                str(patches),
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=str(tmp_path),
        )

    probe = "import importlib.metadata as m; print(m.distribution('transformers').locate_file(''))"
    located = subprocess.run([str(python), "-c", probe], capture_output=True, text=True).stdout.strip()
    if Path(located).resolve() != shared.resolve():
        pytest.skip(f"another transformers comes first on this environment's paths ({located})")
    refused = install()
    assert refused.returncode == 2 and f"transformers is in {shared.resolve()}, outside" in refused.stderr
    assert f"--target {shared.resolve()}" in refused.stderr and snapshot(shared) == before
    assert install("--target", str(shared)).returncode == 0
    assert snapshot(shared) != before


def test_install_writes_bytecode_that_start_up_uses_without_writing_any(site, patches):
    """Where no bytecode can be written (PYTHONDONTWRITEBYTECODE=1, as images set), every Python
    start would compile the hook module: install writes its checked-hash .pyc (the same bytes in
    any process), the import uses it, and restore removes it."""
    install = ["install", "--hook-only", "--target", str(site), "--patches-dir", str(patches)]
    assert run_cli(*install).returncode == 0
    ((name, data),) = files.bytecode().items()
    assert (site / name).read_bytes() == data
    code = f"import sys; sys.path.insert(0, {str(site)!r}); import ascend_env_hook"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    result = subprocess.run(
        [sys.executable, "-v", "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0 and f"{site / name} matches {site / files.MODULE_FILE}" in result.stderr
    again = run_cli(*install)
    assert again.returncode == 0 and again.stdout.startswith("hook already installed:")
    assert run_cli("restore", "--target", str(site)).returncode == 0
    assert not (site / name).exists()


def test_a_damaged_hook_module_is_reported_and_install_mends_it(tmp_path: Path, patches):
    """What docs promise for a damaged ``ascend_env_hook.py``: Python still starts (site.py prints
    the error for that line and goes on), status says the hook's files differ, install rewrites it
    and the next start is silent."""
    python = hooked_venv(tmp_path, patches)
    site = next(python.parent.parent.glob("lib/python*/site-packages"))
    (site / files.MODULE_FILE).write_text("def broken(:\n")
    started = subprocess.run([str(python), "-c", "print('ran')"], capture_output=True, text=True, timeout=60)
    assert started.returncode == 0 and started.stdout == "ran\n"
    assert "ascend_env_hook" in started.stderr
    result = status_in(python, "--patches-dir", str(patches))
    assert result.returncode == 1 and "differ" in result.stdout
    again = run_cli("install", "--hook-only", "--target", str(site), "--patches-dir", str(patches))
    assert again.returncode == 0, again.stderr
    assert files.is_current(site)
    quiet = subprocess.run([str(python), "-c", "print('ran')"], capture_output=True, text=True, timeout=60)
    assert quiet.stdout == "ran\n" and quiet.stderr == ""


def test_install_switches_the_compile_guard_off_and_on_and_restore_undoes_both(site, patches):
    before = snapshot(site)
    args = ("--hook-only", "--target", str(site), "--patches-dir", str(patches))
    off = run_cli("install", "--no-compile-guard", *args)
    assert off.returncode == 0, off.stderr
    assert "compile-mode guard off" in off.stdout and files.compile_guard_setting(site) is False
    assert files.is_current(site)
    on = run_cli("install", "--json", *args)
    assert json.loads(on.stdout)["compile_guard"] is True and files.compile_guard_setting(site) is True
    env_off = run_cli("install", *args, env={"ASCEND_ENV_COMPILE_GUARD": "0"})
    assert env_off.returncode == 0 and files.compile_guard_setting(site) is False
    status = json.loads(run_cli("status", "--json", *args[1:]).stdout)
    assert status["hook"]["compile_guard"] is False
    assert run_cli("restore", "--target", str(site)).returncode == 0
    assert snapshot(site) == before


# A FIFO where status reads the probe's answer or its stderr hung status forever (issue 42, item 6).
# What the probed process does at exit (``a``: the answer's path).
FIFOS = {
    "answer": "os.unlink(a); os.mkfifo(a)",
    "answer, exit 3": "os.unlink(a); os.mkfifo(a); os._exit(3)",
    "stderr, no answer": "os.unlink(a); e = os.path.join(os.path.dirname(a), 'stderr'); os.unlink(e); "
    "os.mkfifo(e); os._exit(3)",
    "answer links to a FIFO": "os.mkfifo(a + '.fifo'); os.unlink(a); os.symlink(a + '.fifo', a)",
}


@pytest.mark.parametrize("fifo", sorted(FIFOS))
def test_a_fifo_left_by_the_probed_process_is_refused_not_waited_on(
    tmp_path: Path, patches, fifo, monkeypatch
):
    import tempfile
    import threading

    python = hooked_venv(tmp_path, patches)
    site = next(python.parent.parent.glob("lib/python*/site-packages"))
    (site / "zz_fifo.py").write_text(
        f"import os, sys\ndef at_exit():\n    if sys.argv[0] == '-c' and len(sys.argv) > 1:\n"
        f"        a = sys.argv[1]; {FIFOS[fifo]}\n"
    )
    (site / "zz_fifo.pth").write_text("import atexit, zz_fifo; atexit.register(zz_fifo.at_exit)\n")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    found: dict = {}
    worker = threading.Thread(target=lambda: found.update(files.probe(str(python), timeout=60)), daemon=True)
    worker.start()
    worker.join(90)
    assert not worker.is_alive(), "status waits on a FIFO"
    assert found["ran"] is False, found
    assert list(scratch.iterdir()) == []  # its temporary directory is gone


# What an environment may print on stdout at exit, in every process (a .pth's atexit handler), and
# what --json's stdout must still be: the document alone (issue 42, item 11).
EXIT_NOISE = {
    "print": "atexit.register(print, 'noise at exit')",
    "no newline": "atexit.register(lambda: sys.stdout.write('{\"noise\": 1}'))",
    "fd 1": "atexit.register(lambda: os.write(1, b'raw noise\\n'))",
    "__stdout__": "atexit.register(lambda: print('x' * 100000, file=sys.__stdout__))",
}


@pytest.mark.parametrize("noise", sorted(EXIT_NOISE))
def test_json_stdout_holds_the_document_alone_whatever_prints_at_exit(tmp_path: Path, patches, noise):
    python = hooked_venv(tmp_path, patches)
    site = next(python.parent.parent.glob("lib/python*/site-packages"))
    (site / "zz_noise.pth").write_text(f"import atexit, os, sys; {EXIT_NOISE[noise]}\n")
    for args in (["status", "--target", str(site)], ["status", "--target", str(tmp_path / "nowhere")]):
        result = subprocess.run(
            [str(python), "-m", "ascend_env", *args, "--json", "--patches-dir", str(patches)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "noise" not in result.stdout and "xxxx" not in result.stdout, result.stdout[-300:]
        document = json.loads(result.stdout)  # one JSON document, nothing after it
        assert isinstance(document, dict) and "ok" in document
    # without --json, stdout is the program's: the noise stays where the environment put it
    text = subprocess.run(
        [str(python), "-m", "ascend_env", "status", "--target", str(site), "--patches-dir", str(patches)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "noise" in text.stdout or "xxxx" in text.stdout


def test_a_drifted_status_says_why_not_drifted_twice(site, patches):
    # "status: drifted: drifted" (issue 42, item 12): the verdict's cause is words, not the status.
    assert (
        run_cli(
            "install", "--target", str(site), "--patches", "always", "--patches-dir", str(patches)
        ).returncode
        == 0
    )
    pip_reinstall_ascend_env(site, "0.2.0")
    status = run_cli("status", "--target", str(site), "--patches-dir", str(patches))
    last = status.stdout.splitlines()[-1]
    assert status.returncode == 1 and last.startswith("status: drifted: "), status.stdout
    assert last != "status: drifted: drifted" and "changed since" in last
    for line in status.stdout.splitlines():
        _, _, cause = line.partition(": ")
        verdict, _, why = cause.partition(": ")
        assert not (line.startswith("status: ") and why == verdict), line
