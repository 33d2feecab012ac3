"""The engine's reports keep the ``--json`` keys, in their order, that scripts read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_site import make_patches, make_site, run_cli

from ascend_env.patching import engine
from ascend_env.patching.faults import CRASH_ENV

INSTALL_KEYS = ["site_packages", "transformers", "patches", "reason", "files", "result", "changed"]


@pytest.fixture
def tree(tmp_path: Path) -> tuple:
    return make_site(tmp_path), make_patches(tmp_path)


def test_install_report_keys_in_order(tree):
    site, patches = tree
    dry = engine.install(site, patches="always", directory=patches, dry_run=True)
    assert list(dry.to_dict()) == INSTALL_KEYS + ["dry_run"]
    assert dry.result == "would apply" and dry.dry_run is True
    report = engine.install(site, patches="always", directory=patches).to_dict()
    assert list(report) == INSTALL_KEYS
    assert [list(item) for item in report["files"]] == [["path", "patch", "status"]] * len(report["files"])
    assert {item["status"] for item in report["files"]} == {"clean"}


def test_install_reason_names_a_release_without_patches(tmp_path):
    site = make_site(tmp_path, version="4.30.0")
    report = engine.install(site, patches="always", directory=make_patches(tmp_path))
    assert report.result == "nothing to do"
    assert report.reason.startswith("transformers 4.30.0 needs no patch: ")


def test_restore_report_keys_in_order(tree):
    site, patches = tree
    nothing = engine.restore(site).to_dict()
    assert nothing == {"site_packages": str(site), "files": [], "result": "nothing to restore"}
    engine.install(site, patches="always", directory=patches)
    dry = engine.restore(site, dry_run=True)
    assert list(dry.to_dict()) == ["site_packages", "files", "result", "dry_run"]
    report = engine.restore(site).to_dict()
    assert list(report) == ["site_packages", "files", "result"]
    actions = {item["kind"]: item["action"] for item in report["files"]}
    assert actions == {"patch": "restore", "record": "restore"}
    assert list(report["files"][-1]) == ["path", "kind", "action"]
    assert report["files"][-1]["kind"] == "record"  # RECORD last: it takes the files' restored hashes


def test_status_report_keys_in_order(tree):
    site, patches = tree
    report = engine.status(site, directory=patches)
    assert (list(report.to_dict()), report.code) == (["site_packages", "transformers", "files", "status"], 0)
    engine.install(site, patches="always", directory=patches)
    report = engine.status(site, directory=patches)
    keys = ["site_packages", "transformers", "files", "applied_at", "tool_version", "status"]
    assert (list(report.to_dict()), report.verdict.status, report.code) == (keys, "applied", 0)


def test_interrupted_status_names_the_run_before_the_detail(tree):
    site, patches = tree
    killed = run_cli(
        "install",
        "--target",
        str(site),
        "--patches-dir",
        str(patches),
        "--patches",
        "always",
        env={CRASH_ENV: "journal"},
    )
    assert killed.returncode == 137, killed.stderr
    report = engine.status(site, directory=patches)
    assert report.code == 1
    assert list(report.to_dict())[-3:] == ["status", "run", "detail"]
    assert report.verdict.detail == "an ascend-env install was interrupted"
    shown = run_cli("status", "--target", str(site), "--patches-dir", str(patches), "--json")
    assert list(json.loads(shown.stdout))[:2] == ["ok", "site_packages"]


def test_status_without_transformers(tmp_path):
    site = tmp_path / "empty-site"
    site.mkdir()
    report = engine.status(site)
    assert report.code == 0
    assert report.to_dict() == {
        "site_packages": str(site),
        "transformers": None,
        "files": [],
        "status": "nothing to do",
        "detail": "transformers is not installed here",
    }
