"""Where the running ascend-env came from: the wheel or the clone a fix line installs it from.

ascend-env is not on a public index (and a name there could be anyone's), so a line that tells
the user to install it into another Python names what this one was installed from: the checkout
it runs from, or the wheel file or directory that pip recorded in ``direct_url.json`` (PEP 610,
written for every install from a local path or URL). Installed from an internal index, there is
nothing recorded to point at, and the line says so in words.
"""

from __future__ import annotations

import json
import shlex
from importlib import metadata
from pathlib import Path
from typing import Optional
from urllib.parse import unquote, urlparse

__all__ = ["NAME", "PLACEHOLDER", "install_command", "source"]

NAME = "ascend-env"
PLACEHOLDER = "<the ascend-env wheel or clone this one came from>"
_PACKAGE = Path(__file__).resolve().parent


def source(package: Path = _PACKAGE) -> Optional[str]:
    """The checkout, wheel or directory the ascend_env in ``package`` comes from; None if unknown."""
    root = package.parent
    if _is_our_project(root / "pyproject.toml"):
        return str(root)  # a clone, run in place (PYTHONPATH, or an editable install)
    try:
        dist = metadata.distribution(NAME)
    except metadata.PackageNotFoundError:
        return None
    if Path(str(dist.locate_file("ascend_env"))).resolve() != package:
        return None  # another copy's record
    try:
        url = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
    except (ValueError, AttributeError):
        return None
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return unquote(parsed.path)
    return url or None


def _is_our_project(pyproject: Path) -> bool:
    try:
        text = pyproject.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return f'name = "{NAME}"' in text


def install_command(python: str, package: Path = _PACKAGE) -> str:
    """The command that installs this ascend-env into ``python``."""
    where = source(package)
    return f"{shlex.quote(python)} -m pip install {shlex.quote(where) if where else PLACEHOLDER}"
