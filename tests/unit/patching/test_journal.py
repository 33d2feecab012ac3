"""Killed at every write point, the next run finishes; concurrent runs serialise."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fake_site import STOP_PATH, STOPPING_PATCHED, make_patches, make_site, run_cli, snapshot

from ascend_env.exceptions import EnvironmentProblem
from ascend_env.patching.faults import CRASH_ENV
from ascend_env.patching.journal import SCHEMA, Journal
from ascend_env.patching.state import drift, read_state
from ascend_env.patching.store import state_dir

# change-0/1/2: the two patched files and RECORD, in the journal's order.
INSTALL_POINTS = [
    "blob",
    "blobs",
    "journal-temp",
    "journal",
    "change-0-temp",
    "change-0",
    "change-1-temp",
    "change-1",
    "change-2-temp",
    "change-2",
    "state",
    "commit",
    "cleanup",
]


def cli(site: Path, patches: Path, *args: str, crash: str = "") -> subprocess.CompletedProcess:
    env = {CRASH_ENV: crash} if crash else {}
    extra = ["--patches-dir", str(patches)] if args[0] in ("install", "status") else []
    if args[0] == "install":
        extra += ["--patches", "always"]
    return run_cli(*args, "--target", str(site), *extra, env=env)


def without_state_times(files: dict) -> dict:
    return {path: data for path, data in files.items() if not path.startswith(".ascend-env")}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple:
    """The tree before install and after an uninterrupted install."""
    root = tmp_path_factory.mktemp("reference")
    site, patches = make_site(root), make_patches(root)
    before = snapshot(site)
    assert cli(site, patches, "install").returncode == 0
    return before, snapshot(site, include_state=False)


@pytest.mark.parametrize("point", INSTALL_POINTS)
def test_install_killed_then_rerun_finishes(tmp_path, reference, point):
    before, applied = reference
    site, patches = make_site(tmp_path), make_patches(tmp_path)
    killed = cli(site, patches, "install", crash=point)
    assert killed.returncode == 137, killed.stderr
    # Whatever the moment, the tree outside .ascend-env is the old or the new bytes, per file.
    for path, data in snapshot(site, include_state=False).items():
        assert data in (before.get(path), applied.get(path)), path
    status = cli(site, patches, "status")
    assert status.returncode in (0, 1), status.stderr
    rerun = cli(site, patches, "install")
    assert rerun.returncode == 0, rerun.stderr
    assert snapshot(site, include_state=False) == applied
    assert read_state(site) is not None and drift(site) == []
    assert sorted(p.name for p in state_dir(site).iterdir()) == ["lock", "originals", "state.json"]


@pytest.mark.parametrize("point", INSTALL_POINTS[::3])
def test_install_killed_then_restore_gives_the_original_tree(tmp_path, reference, point):
    before, _ = reference
    site, patches = make_site(tmp_path), make_patches(tmp_path)
    assert cli(site, patches, "install", crash=point).returncode == 137
    result = cli(site, patches, "restore")
    assert result.returncode == 0, result.stderr
    assert snapshot(site) == before


@pytest.mark.parametrize(
    "point",
    ["journal-temp", "journal", "change-0-temp", "change-1", "change-2", "state", "commit", "cleanup"],
)
def test_restore_killed_then_rerun_finishes(tmp_path, reference, point):
    before, applied = reference
    site, patches = make_site(tmp_path), make_patches(tmp_path)
    assert cli(site, patches, "install").returncode == 0
    killed = cli(site, patches, "restore", crash=point)
    assert killed.returncode == 137
    for path, data in snapshot(site, include_state=False).items():
        assert data in (before.get(path), applied.get(path)), path
    result = cli(site, patches, "restore")
    assert result.returncode == 0, result.stderr
    assert snapshot(site) == before


def test_concurrent_installs_serialise(tmp_path, reference):
    _, applied = reference
    site, patches = make_site(tmp_path), make_patches(tmp_path)
    command = [
        sys.executable,
        "-m",
        "ascend_env",
        "install",
        "--json",
        "--patches",
        "always",
        "--target",
        str(site),
        "--patches-dir",
        str(patches),
    ]
    procs = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)
    ]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0], [err for _, err in outputs]
    results = sorted('"result": "applied"' in out for out, _ in outputs)
    assert results == [False, False, True]
    assert snapshot(site, include_state=False) == applied
    assert (site / STOP_PATH).read_text() == STOPPING_PATCHED


def test_install_and_restore_racing_leave_one_consistent_tree(tmp_path, reference):
    before, applied = reference
    site, patches = make_site(tmp_path), make_patches(tmp_path)
    install_cmd = [
        sys.executable,
        "-m",
        "ascend_env",
        "install",
        "--patches",
        "always",
        "--target",
        str(site),
        "--patches-dir",
        str(patches),
    ]
    restore_cmd = [sys.executable, "-m", "ascend_env", "restore", "--target", str(site)]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for cmd in (install_cmd, restore_cmd, install_cmd, restore_cmd)
    ]
    for proc in procs:
        proc.communicate(timeout=120)
        assert proc.returncode == 0
    tree = snapshot(site, include_state=False)
    assert tree in (before, applied)
    assert (read_state(site) is not None) == (tree == applied)


def interrupted(tmp_path: Path) -> tuple:
    """A site whose install was killed once its journal was written: (site, patches, the journal)."""
    site, patches = make_site(tmp_path), make_patches(tmp_path)
    assert cli(site, patches, "install", crash="journal").returncode == 137
    return site, patches, state_dir(site) / "journal.json"


def test_the_journal_records_its_schema_and_reads_back(tmp_path):
    _, _, path = interrupted(tmp_path)
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    assert data["schema"] == SCHEMA == 1
    journal = Journal.from_json(data, str(path))
    assert journal.action == "install" and journal.to_json().decode("utf-8") == text


@pytest.mark.parametrize("schema", [2, "1", None])
@pytest.mark.parametrize("command", ["install", "restore", "status"])
def test_a_journal_of_another_schema_is_refused_and_nothing_changes(tmp_path, schema, command):
    """A journal another ascend-env wrote (a newer schema, or none) is not finished by guesswork."""
    site, patches, path = interrupted(tmp_path)
    data = json.loads(path.read_text(encoding="utf-8"))
    if schema is None:
        del data["schema"]
    else:
        data["schema"] = schema
    path.write_text(json.dumps(data), encoding="utf-8")
    before = snapshot(site)
    result = cli(site, patches, command)
    assert result.returncode == 2, result.stderr
    assert f"is not a valid ascend-env journal (schema {schema!r})" in result.stderr
    assert "reinstall transformers" in result.stderr and str(state_dir(site)) in result.stderr
    assert snapshot(site) == before
    with pytest.raises(EnvironmentProblem, match="schema"):
        Journal.from_json(data, str(path))
