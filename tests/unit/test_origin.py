"""ascend_env.origin: the wheel or clone the running ascend-env came from, for fix lines."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ascend_env import origin

REPO = Path(__file__).resolve().parents[2]


def test_a_checkout_names_itself():
    assert origin.source(REPO / "ascend_env") == str(REPO)
    assert origin.install_command("/opt/venv/bin/python", REPO / "ascend_env") == (
        f"/opt/venv/bin/python -m pip install {REPO}"
    )


def _installed(site: Path, direct_url: dict) -> Path:
    """An ascend-env installed into ``site`` the way pip leaves it, with ``direct_url.json``."""
    package = site / "ascend_env"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    info = site / "ascend_env-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ascend-env\nVersion: 0.1.0\n")
    (info / "RECORD").write_text("ascend_env/__init__.py,,\n")
    if direct_url:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
    return package


def test_an_install_from_a_wheel_or_a_directory_names_it(tmp_path, monkeypatch):
    wheel = tmp_path / "dist dir" / "ascend_env-0.1.0-py3-none-any.whl"
    package = _installed(tmp_path / "site", {"url": wheel.as_uri(), "archive_info": {}})
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site"), *sys.path])
    assert origin.source(package) == str(wheel)
    assert origin.install_command("python", package) == f"python -m pip install '{wheel}'"


def test_an_install_from_an_index_says_so_in_words(tmp_path, monkeypatch):
    package = _installed(tmp_path / "site", {})
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site"), *sys.path])
    assert origin.source(package) is None
    assert origin.install_command("python", package) == f"python -m pip install {origin.PLACEHOLDER}"


def test_another_copy_s_record_is_not_this_one_s(tmp_path, monkeypatch):
    _installed(tmp_path / "site", {"url": (tmp_path / "x.whl").as_uri(), "archive_info": {}})
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site"), *sys.path])
    elsewhere = tmp_path / "elsewhere" / "ascend_env"
    elsewhere.mkdir(parents=True)
    assert origin.source(elsewhere) is None
