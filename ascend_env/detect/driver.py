"""The Ascend NPU driver: where it is installed and which version it is.

``/etc/ascend_install.info`` names the install prefix (``Driver_Install_Path_Param=/usr/local/Ascend``);
the driver lives in ``<prefix>/driver`` and keeps its version in ``version.info``
(``Version=24.1.rc3``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Optional

from ascend_env.detect.cann import SYSTEM_PREFIX, parse_key_values, read_text, shown

__all__ = ["INSTALL_INFO", "PATH_KEYS", "Driver", "find_driver"]

INSTALL_INFO = Path("/etc/ascend_install.info")
PATH_KEYS = ("Driver_Install_Path_Param", "Driver_Install_Path")
_DRIVER_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}")


@dataclass
class Driver:
    """The driver that was found (``path is None`` when none was)."""

    path: Optional[Path] = None
    origin: str = ""
    version: Optional[str] = None
    version_source: Optional[Path] = None
    problems: List[str] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return self.path is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "found": self.found,
            "path": None if self.path is None else str(self.path),
            "origin": self.origin or None,
            "version": self.version,
            "version_source": None if self.version_source is None else str(self.version_source),
            "problems": list(self.problems),
        }


def _driver_dir(install_info: Path, default_prefix: Path, driver: Driver) -> Path:
    """The driver directory named by ``install_info``, else ``<default_prefix>/driver``."""
    if install_info.is_file():
        try:
            values = parse_key_values(read_text(install_info))
        except OSError as exc:
            driver.problems.append(f"cannot read {install_info}: {exc.strerror or exc}.")
            values = {}
        for key in PATH_KEYS:
            prefix = values.get(key, "")
            if prefix:
                driver.origin = f"{install_info} ({key})"
                return Path(prefix) / "driver"
        if values or not driver.problems:
            driver.problems.append(f"{install_info} names no driver path; trying {default_prefix}.")
    driver.origin = "default path"
    return default_prefix / "driver"


def find_driver(install_info: Path = INSTALL_INFO, default_prefix: Path = SYSTEM_PREFIX) -> Driver:
    """The installed driver and its version (never raises for broken files)."""
    driver = Driver()
    path = _driver_dir(install_info, default_prefix, driver)
    if not path.is_dir():
        return driver
    driver.path = path
    info = path / "version.info"
    if not info.is_file():
        driver.problems.append(f"{info} is missing; the driver version is unknown.")
        return driver
    try:
        text = read_text(info)
    except OSError as exc:
        driver.problems.append(f"cannot read {info}: {exc.strerror or exc}.")
        return driver
    version = parse_key_values(text).get("Version", "")
    if not _DRIVER_VERSION.fullmatch(version):
        if not text.strip():
            what = "is empty"
        elif version:
            what = f"has an unreadable version {shown(version)}"
        else:
            what = "has no 'Version=' line"
        driver.problems.append(f"{info} {what}; the driver version is unknown.")
        return driver
    driver.version = version
    driver.version_source = info
    return driver
