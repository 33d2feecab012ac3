"""Finding the Ascend driver and reading its version from fixture trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascend_env.detect import driver

INSTALL_INFO = (
    "UserName=HwHiAiUser\nUserGroup=HwHiAiUser\nFirmware_Install_Type=full\n"
    "Firmware_Install_Path_Param={prefix}\nDriver_Install_Type=full\n"
    "Driver_Install_Path_Param={prefix}\nDriver_Install_For_All=no\n"
)
VERSION_INFO = "Version=24.1.rc3\nascendhal_version=7.35.23\naicpu_version=1.0\ntdt_version=1.0\n"


def write(path: Path, content) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def test_default_path(tmp_path):
    write(tmp_path / "Ascend" / "driver" / "version.info", VERSION_INFO)
    found = driver.find_driver(tmp_path / "etc" / "ascend_install.info", tmp_path / "Ascend")
    assert found.found and found.version == "24.1.rc3" and found.origin == "default path"
    assert found.problems == []


def test_path_from_install_info(tmp_path):
    write(tmp_path / "opt" / "npu" / "driver" / "version.info", "Version=25.2.0\n")
    content = INSTALL_INFO.format(prefix=tmp_path / "opt" / "npu")
    info = write(tmp_path / "etc" / "ascend_install.info", content)
    found = driver.find_driver(info, tmp_path / "Ascend")
    assert found.path == tmp_path / "opt" / "npu" / "driver" and found.version == "25.2.0"
    assert "Driver_Install_Path_Param" in found.origin


def test_no_driver(tmp_path):
    found = driver.find_driver(tmp_path / "missing.info", tmp_path / "Ascend")
    assert not found.found and found.version is None and found.problems == []


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "is empty"),
        (b"\x00\x01\xff\xfe\x80", "has no 'Version=' line"),
        (b"Version=\xff\xfe\x1b[0m\n", "unreadable version"),
        (b"Version=\n", "has no 'Version=' line"),
    ],
)
def test_garbage_and_empty_version_info(tmp_path, content, message):
    write(tmp_path / "Ascend" / "driver" / "version.info", content)
    found = driver.find_driver(tmp_path / "none", tmp_path / "Ascend")
    assert found.found and found.version is None
    assert any(message in p for p in found.problems), found.problems
    assert all(p.isprintable() for p in found.problems)


def test_missing_version_info(tmp_path):
    (tmp_path / "Ascend" / "driver").mkdir(parents=True)
    found = driver.find_driver(tmp_path / "none", tmp_path / "Ascend")
    assert found.found and any("version.info is missing" in p for p in found.problems)


def test_garbage_install_info_falls_back_to_default(tmp_path):
    write(tmp_path / "Ascend" / "driver" / "version.info", VERSION_INFO)
    info = write(tmp_path / "ascend_install.info", b"\x89PNG\r\n\x1a\n\x00\x00garbage")
    found = driver.find_driver(info, tmp_path / "Ascend")
    assert found.version == "24.1.rc3"
    assert any("names no driver path" in p for p in found.problems)
