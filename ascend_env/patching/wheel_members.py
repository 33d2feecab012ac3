"""A wheel's members checked against its own ``RECORD`` and the release's layout (``patch-wheel``).

A released transformers wheel holds the package directory and its ``.dist-info``; ``RECORD``
lists every member with its hash and size (the binary distribution format, PEP 427 / PEP 376).
:func:`check_layout` refuses, before anything is written, a member whose name leaves the tree
(absolute, ``..``, a backslash or drive), a link or device, a name given twice, a member outside
the package directories and the ``.dist-info`` (a top-level ``.pth``, a ``.data`` directory,
another package), any ``.pth`` file, and a ``RECORD`` whose rows and members differ.
:class:`MemberHash` then checks each member's bytes as they are read.
"""

from __future__ import annotations

import hashlib
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Dict, List, NoReturn

from ascend_env.exceptions import EnvironmentProblem
from ascend_env.patching.records import RecordEntry, parse_record, record_digest

__all__ = ["ALGORITHMS", "SIGNATURES", "MemberHash", "check_layout", "tampered"]

#: The hash algorithms a RECORD may use (sha256 or stronger; md5 and sha1 are not allowed).
ALGORITHMS = ("sha256", "sha384", "sha512")
#: RECORD's signatures, which RECORD does not list (and the patched wheel drops).
SIGNATURES = ("RECORD.jws", "RECORD.p7s")
_ALLOWED_TYPES = (0, stat.S_IFREG, stat.S_IFDIR)


def tampered(wheel: Path, project: str, version: str, what: str) -> EnvironmentProblem:
    """The refusal of a wheel that is not the released one."""
    return EnvironmentProblem(
        f"{wheel} is not the {project} {version} wheel as released: {what}; nothing was written.",
        f"download the release again (pip download --no-deps {project}=={version}) and pass that "
        "file; do not patch a wheel of unknown origin.",
    )


def _bad_name(name: str) -> bool:
    """Whether ``name`` could land outside the directory it is unpacked into."""
    if not name or name.startswith("/") or "\\" in name or "\0" in name:
        return True
    parts = name.rstrip("/").split("/")
    return ":" in parts[0] or any(part in ("", ".", "..") for part in parts)


def _file_type(info: zipfile.ZipInfo) -> int:
    return stat.S_IFMT(info.external_attr >> 16) if info.create_system == 3 else 0


def _check_names(fail: _Fail, infos: List[zipfile.ZipInfo], tops: Collection[str]) -> None:
    seen: Dict[str, int] = {}
    for info in infos:
        name = info.filename
        if _bad_name(name):
            fail(f"member {name!r} is named outside the wheel's tree")
        if _file_type(info) not in _ALLOWED_TYPES:
            kind = "a symbolic link" if _file_type(info) == stat.S_IFLNK else "not a plain file"
            fail(f"member {name} is {kind}")
        seen[name] = seen.get(name, 0) + 1
        if seen[name] == 2:
            fail(f"member {name} is in the archive twice")
        top = name.split("/", 1)[0]
        if top not in tops or (not info.is_dir() and "/" not in name):
            fail(f"it holds {name}, which the release does not have (only {', '.join(sorted(tops))})")
        if name.endswith(".pth"):
            fail(f"it holds {name}, a .pth file, which the release does not have")


class _Fail:
    """Raises :func:`tampered` for one wheel."""

    def __init__(self, wheel: Path, project: str, version: str) -> None:
        self.wheel, self.project, self.version = wheel, project, version

    def __call__(self, what: str) -> NoReturn:
        raise tampered(self.wheel, self.project, self.version, what)


def check_layout(
    wheel: Path,
    project: str,
    version: str,
    infos: List[zipfile.ZipInfo],
    record: bytes,
    dist_info: str,
    packages: Collection[str],
) -> Dict[str, RecordEntry]:
    """Refuse a wheel whose members' names, kinds or places are not a release's, or whose
    ``RECORD`` (``record``, the bytes of ``<dist_info>/RECORD``) does not list exactly its files;
    the RECORD rows by member name. ``infos``: every entry of the archive, directories included;
    ``packages``: the top-level package directories the release has."""
    fail = _Fail(wheel, project, version)
    _check_names(fail, infos, {*packages, dist_info})
    try:
        rows = parse_record(record.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise tampered(wheel, project, version, f"its RECORD cannot be read ({exc})") from None
    by_name: Dict[str, RecordEntry] = {}
    for row in rows:
        if row.path in by_name:
            fail(f"its RECORD lists {row.path} twice")
        by_name[row.path] = row
    own = {f"{dist_info}/RECORD", *(f"{dist_info}/{name}" for name in SIGNATURES)}
    files = {info.filename for info in infos if not info.is_dir()}
    for name in sorted(files - own):
        entry = by_name.get(name)
        if entry is None or not entry.hash:
            fail(f"{name} has no hash in its RECORD")
        algorithm = entry.hash.partition("=")[0]
        if algorithm not in ALGORITHMS:
            fail(f"{name}'s RECORD hash is {algorithm}, not one of {', '.join(ALGORITHMS)}")
    missing = sorted(set(by_name) - files - own)
    if missing:
        fail(f"its RECORD lists {missing[0]}, which the wheel does not hold")
    return by_name


@dataclass
class MemberHash:
    """The hash of one member as it is read, compared with its RECORD row by :meth:`check`."""

    name: str
    row: RecordEntry

    def __post_init__(self) -> None:
        self._hash = hashlib.new(self.row.hash.partition("=")[0])
        self._size = 0

    def update(self, block: bytes) -> None:
        self._hash.update(block)
        self._size += len(block)

    def check(self, wheel: Path, project: str, version: str) -> None:
        """Refuse the wheel where the bytes read differ from the row's hash or size."""
        algorithm = self.row.hash.partition("=")[0]
        found = algorithm + record_digest(self._hash.digest())[len("sha256") :]
        if found != self.row.hash or (self.row.size and self.row.size != str(self._size)):
            raise tampered(
                wheel,
                project,
                version,
                f"{self.name} differs from its RECORD row ({found}, {self._size} bytes; RECORD says "
                f"{self.row.hash}, {self.row.size or 'no size'})",
            )
