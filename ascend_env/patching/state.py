"""What ascend-env changed in a site-packages directory, and whether it still holds.

Everything lives in ``<site-packages>/.ascend-env/``: ``state.json`` (the files changed,
with sha256 before and after, the tool version and the time), ``journal.json`` (only
while a change is in flight or was interrupted), ``originals/<sha256>`` (the bytes
``restore`` puts back) and ``lock``. This module imports only the standard library so
that the startup hook can call :func:`drift` cheaply.
"""

from __future__ import annotations

import glob
import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, List, Optional, Tuple

from ascend_env.exceptions import EnvironmentProblem
from ascend_env.utils import jsontext

__all__ = ["Entry", "State", "drift", "file_sha256", "read_state", "state_dir"]

DIRECTORY = ".ascend-env"
STATE_FILE = "state.json"
JOURNAL_FILE = "journal.json"
ORIGINALS = "originals"
TMP = "tmp"
LOCK_FILE = "lock"
SCHEMA = 1
KINDS = ("patch", "record", "extra")


def state_dir(site_packages: Path) -> Path:
    """``<site-packages>/.ascend-env``."""
    return Path(site_packages) / DIRECTORY


def read_file(path: Path) -> Optional[bytes]:
    """The bytes of the file at ``path``, or None when there is no such file.

    One read, no separate existence check: another run may remove the file at any moment.
    """
    try:
        return path.read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def file_sha256(path: Path) -> Optional[str]:
    """The sha256 hex of the file at ``path``, or None when there is no such file."""
    data = read_file(path)
    return None if data is None else hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Entry:
    """One file ascend-env changed: ``before`` is None when it did not exist."""

    path: str  # relative to site-packages
    kind: str  # "patch", "record" or "extra"
    before: Optional[str]
    after: Optional[str]
    patch: Optional[str] = None


@dataclass(frozen=True)
class State:
    tool_version: str
    applied_at: str
    distribution: str
    version: str
    entries: Tuple[Entry, ...] = field(default_factory=tuple)
    schema: int = SCHEMA

    def to_json(self) -> bytes:
        data = asdict(self)
        data["entries"] = [asdict(entry) for entry in self.entries]
        return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")

    @classmethod
    def from_json(cls, data: Any, source: str) -> State:
        try:
            if data.get("schema") != SCHEMA:
                raise ValueError(f"schema {data.get('schema')!r}")
            entries = []
            for item in data["entries"]:
                entry = Entry(
                    path=str(item["path"]),
                    kind=str(item["kind"]),
                    before=None if item["before"] is None else str(item["before"]),
                    after=None if item["after"] is None else str(item["after"]),
                    patch=None if item.get("patch") is None else str(item["patch"]),
                )
                _check_entry(entry)
                entries.append(entry)
            return cls(
                tool_version=str(data["tool_version"]),
                applied_at=str(data["applied_at"]),
                distribution=str(data["distribution"]),
                version=str(data["version"]),
                entries=tuple(entries),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise EnvironmentProblem(
                f"{source} is not a valid ascend-env state file ({exc}).",
                f"reinstall transformers (pip install --force-reinstall --no-deps transformers), "
                f"then delete {Path(source).parent}.",
            ) from None


def _check_entry(entry: Entry) -> None:
    from ascend_env.patching.diffs import safe_relative_path

    if entry.kind not in KINDS:
        raise ValueError(f"unknown kind {entry.kind!r}")
    if not safe_relative_path(entry.path) or entry.path.split("/", 1)[0] == DIRECTORY:
        raise ValueError(f"unsafe path {entry.path!r}")
    for digest in (entry.before, entry.after):
        if digest is not None and (len(digest) != 64 or digest.strip("0123456789abcdef")):
            raise ValueError(f"bad sha256 {digest!r}")


def read_state(site_packages: Path) -> Optional[State]:
    """The state file's content, or None when nothing is applied."""
    path = state_dir(site_packages) / STATE_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise EnvironmentProblem(
            f"cannot read {path} ({exc}).", "check the directory's permissions."
        ) from None
    try:
        data = jsontext.loads(text)
    except json.JSONDecodeError as exc:
        raise EnvironmentProblem(
            f"{path} is not JSON ({exc.msg}).",
            f"reinstall transformers (pip install --force-reinstall --no-deps transformers), then delete "
            f"{path.parent}.",
        ) from None
    return State.from_json(data, str(path))


def drift(site_packages: Path) -> List[str]:
    """One line per file that no longer holds what ascend-env wrote; empty when all hold.

    Cheap: reads the state file and hashes the few files it lists. Never raises for a
    missing or unreadable state; that is reported as a line.
    """
    try:
        state = read_state(Path(site_packages))
    except EnvironmentProblem as exc:
        return [exc.problem]
    if state is None:
        return []
    lines = []
    for entry in state.entries:
        path = Path(site_packages) / entry.path
        data = read_file(path)
        found = None if data is None else hashlib.sha256(data).hexdigest()
        if found != entry.after:
            what = "is missing" if found is None else "changed since ascend-env install"
            lines.append(f"{entry.path} {what}")
        elif data is not None:
            lines.extend(
                f"{entry.path}: its bytecode {pyc.name} runs other code and is never checked against it"
                for pyc in unchecked_stale_bytecode(path, data)
            )
    return lines


def cached_bytecode(path: Path) -> List[Path]:
    """The ``.pyc`` files in ``__pycache__`` for the module ``path`` (every interpreter and
    optimisation level)."""
    return list((path.parent / "__pycache__").glob(f"{glob.escape(path.stem)}.*.pyc"))


def unchecked_stale_bytecode(path: Path, source: bytes) -> List[Path]:
    """The cached ``.pyc`` files of ``path`` (a ``.py`` file) that were compiled with
    ``--invalidation-mode unchecked-hash`` from other text than ``source``: Python runs them
    without looking at the source, so ``source`` (the patched text) never runs."""
    if path.suffix != ".py":
        return []
    import importlib.util

    stale = []
    try:
        candidates = sorted(cached_bytecode(path))
    except OSError:
        return []
    expected = None
    for pyc in candidates:
        try:
            with open(pyc, "rb") as handle:
                header = handle.read(16)
        except OSError:
            continue
        flags = int.from_bytes(header[4:8], "little") if len(header) == 16 else 0
        if flags & 0b01 and not flags & 0b10:  # hash-based, source not checked (PEP 552)
            expected = importlib.util.source_hash(source) if expected is None else expected
            if header[8:16] != expected:
                stale.append(pyc)
    return stale
