"""A bytecode prefix (``PYTHONPYCACHEPREFIX``, ``-X pycache_prefix=``) is treated as ``__pycache__``.

Python >= 3.8 with a prefix set reads and writes bytecode only in a mirror of the source tree
under the prefix. An image that compiled its bytecode there with ``--invalidation-mode
unchecked-hash`` runs that bytecode, whatever the source says: install and restore must drop it,
and status (and verify, through the installation report) must call it drift.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import pytest
from fake_site import STOP_PATH, STOPPING, UTILS_PATH, make_patches, make_site

from ascend_env.patching import bytecode

MODES = ["environment", "option"]  # PYTHONPYCACHEPREFIX, or -X pycache_prefix=


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return make_site(tmp_path)


@pytest.fixture
def patches(tmp_path: Path) -> Path:
    return make_patches(tmp_path)


@pytest.fixture
def prefix(tmp_path: Path) -> Path:
    return tmp_path / "bytecode"


def _python(prefix: Optional[Path], mode: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """This Python with ``prefix`` in force the way ``mode`` sets it."""
    environ = {k: v for k, v in os.environ.items() if k != bytecode.PREFIX_ENV}
    environ.update(env)
    flags: List[str] = []
    if prefix is not None and mode == "environment":
        environ[bytecode.PREFIX_ENV] = str(prefix)
    elif prefix is not None:
        flags = ["-X", f"pycache_prefix={prefix}"]
    return subprocess.run(
        [sys.executable, *flags, *args], capture_output=True, text=True, timeout=120, env=environ
    )


def cli(
    prefix: Optional[Path], mode: str, site: Path, patches: Path, *args: str
) -> subprocess.CompletedProcess:
    extra = ["--patches-dir", str(patches)] if args[0] in ("install", "status") else []
    extra += ["--patches", "always"] if args[0] == "install" else []
    return _python(prefix, mode, "-m", "ascend_env", *args, "--target", str(site), *extra)


def compile_unchecked(prefix: Path, mode: str, site: Path) -> None:
    """What an image build does: compileall with unchecked-hash bytecode, under the prefix."""
    for relative in (STOP_PATH, UTILS_PATH):
        for level in ([], ["-O"]):
            done = _python(
                prefix,
                mode,
                *level,
                "-m",
                "compileall",
                "-q",
                "--invalidation-mode",
                "unchecked-hash",
                str(site / relative),
            )
            assert done.returncode == 0, done.stderr


def runs_isin(site: Path, prefix: Optional[Path]) -> bool:
    """Whether a fresh interpreter (the prefix in force) runs the original text of the target."""
    code = (
        f"import sys; sys.path.insert(0, {str(site)!r})\n"
        "from transformers.generation import stopping_criteria as m\n"
        "print('isin' in m.eos.__code__.co_names)\n"
    )
    flags = ["-X", f"pycache_prefix={prefix}"] if prefix is not None else []
    command = [sys.executable, "-I", *flags, "-c", code]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip() == "True"


def in_prefix(prefix: Path) -> List[Path]:
    """The targets' bytecode under the prefix (the commands run write their own there too)."""
    names = {Path(STOP_PATH).stem, Path(UTILS_PATH).stem}
    return sorted(pyc for pyc in prefix.rglob("*.pyc") if pyc.name.split(".")[0] in names)


@pytest.mark.parametrize("mode", MODES)
def test_install_drops_unchecked_bytecode_under_the_prefix(site, patches, prefix, mode):
    compile_unchecked(prefix, mode, site)
    assert len(in_prefix(prefix)) == 4 and not list(site.rglob("__pycache__/*.pyc"))
    assert runs_isin(site, prefix)
    result = cli(prefix, mode, site, patches, "install")
    assert result.returncode == 0, result.stderr
    assert in_prefix(prefix) == []
    assert not runs_isin(site, prefix)  # the patched text runs
    status = cli(prefix, mode, site, patches, "status", "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["status"] == "applied", status.stdout


@pytest.mark.parametrize("mode", MODES)
def test_status_reports_stale_bytecode_under_the_prefix_and_install_drops_it(site, patches, prefix, mode):
    """Bytecode compiled unchecked from the original text after install: status says drifted
    and names the file under the prefix; install (what status advises) drops it."""
    assert cli(None, mode, site, patches, "install").returncode == 0
    target = site / STOP_PATH
    patched = target.read_bytes()
    target.write_text(STOPPING)
    compile_unchecked(prefix, mode, site)
    target.write_bytes(patched)
    assert runs_isin(site, prefix)
    status = cli(prefix, mode, site, patches, "status", "--json")
    report = json.loads(status.stdout)
    assert status.returncode == 1 and report["status"] == "drifted", status.stdout
    assert len(report["drift"]) == 2 and all(str(prefix) in line for line in report["drift"])
    again = cli(prefix, mode, site, patches, "install", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["bytecode_dropped"] == [STOP_PATH]
    assert not runs_isin(site, prefix)
    assert json.loads(cli(prefix, mode, site, patches, "status", "--json").stdout)["status"] == "applied"


@pytest.mark.parametrize("mode", MODES)
def test_restore_drops_unchecked_bytecode_of_the_patched_text(site, patches, prefix, mode):
    assert cli(prefix, mode, site, patches, "install").returncode == 0
    compile_unchecked(prefix, mode, site)  # the image rebuilt its bytecode from the patched sources
    assert not runs_isin(site, prefix)
    result = cli(prefix, mode, site, patches, "restore")
    assert result.returncode == 0, result.stderr
    assert in_prefix(prefix) == [] and runs_isin(site, prefix)


def test_verify_reports_stale_bytecode_under_the_prefix(site, patches, prefix):
    """verify's installation report (read in the user's own interpreter, the prefix in force
    there) carries the drift, so verify cannot pass on it."""
    assert cli(None, "option", site, patches, "install").returncode == 0
    target = site / STOP_PATH
    patched = target.read_bytes()
    target.write_text(STOPPING)
    compile_unchecked(prefix, "option", site)
    target.write_bytes(patched)
    code = (
        f"import sys, json; sys.path.insert(0, {str(site)!r})\n"
        "from ascend_env.checks.smoke import installation\n"
        "print(json.dumps(installation()))\n"
    )
    done = _python(prefix, "environment", "-c", code)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["site_packages"] == str(site.resolve())
    patches_found = found["patches"]
    assert patches_found["status"] == "drifted" and patches_found["code"] == 1, patches_found
    assert any(str(prefix) in line and "never checked" in line for line in patches_found["drift"])


def test_a_site_packages_reached_through_a_symlink_is_found_by_that_name(tmp_path, site, patches, prefix):
    """Python places bytecode under the prefix by the path it found the module through (a
    symlinked lib64, say), not the resolved one."""
    link = tmp_path / "lib64"
    link.symlink_to(site)
    compile_unchecked(prefix, "environment", link)
    assert all(str(link).lstrip("/") in str(pyc) for pyc in in_prefix(prefix))
    assert runs_isin(link, prefix)
    result = _python(
        prefix,
        "environment",
        "-m",
        "ascend_env",
        "install",
        "--target",
        str(site),
        "--patches-dir",
        str(patches),
        "--patches",
        "always",
        PYTHONPATH=str(link),
    )
    assert result.returncode == 0, result.stderr
    assert in_prefix(prefix) == [] and not runs_isin(link, prefix)


def test_prefixes_are_absolute_and_counted_once(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "pycache_prefix", "cache", raising=False)
    assert bytecode.prefixes({bytecode.PREFIX_ENV: str(tmp_path / "cache")}) == [tmp_path / "cache"]
    assert bytecode.prefixes({bytecode.PREFIX_ENV: ""}) == [tmp_path / "cache"]
    monkeypatch.setattr(sys, "pycache_prefix", None, raising=False)
    assert bytecode.prefixes({}) == []
