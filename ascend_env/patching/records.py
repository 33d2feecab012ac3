"""Installed distributions and their RECORD files (PEP 376 / PEP 627).

A RECORD line is ``path,sha256=<urlsafe base64 without padding>,size``. Rewriting keeps
every line that does not name a changed file byte for byte.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Collection, Dict, Iterable, List, Mapping, Optional

from packaging.utils import canonicalize_name

from ascend_env.exceptions import EnvironmentProblem, reinstall, reinstall_over

if TYPE_CHECKING:
    from importlib.metadata import PathDistribution

__all__ = [
    "Distribution",
    "RecordEntry",
    "add_rows",
    "find_distribution",
    "is_record",
    "parse_record",
    "record_digest",
    "record_hash",
    "remove_rows",
    "rewrite_record",
    "sha256_hex",
]


def sha256_hex(data: bytes) -> str:
    """The sha256 of ``data`` as lowercase hex (the manifest's and state's form)."""
    return hashlib.sha256(data).hexdigest()


def record_hash(data: bytes) -> str:
    """The RECORD form of the sha256 of ``data``: ``sha256=<urlsafe b64, no padding>``."""
    return record_digest(hashlib.sha256(data).digest())


def record_digest(digest: bytes) -> str:
    """The RECORD form of a sha256 ``digest`` (for data hashed in blocks)."""
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


@dataclass(frozen=True)
class RecordEntry:
    """One RECORD row; ``hash`` and ``size`` are empty for RECORD itself and .pyc files."""

    path: str
    hash: str
    size: str

    def matches(self, data: bytes) -> bool:
        """Whether ``data`` has this row's hash (and size, when given)."""
        if not self.hash:
            return False
        if self.size and self.size != str(len(data)):
            return False
        algorithm, _, _ = self.hash.partition("=")
        if algorithm != "sha256":
            return False
        return self.hash == record_hash(data)


def parse_record(text: str) -> List[RecordEntry]:
    """The rows of a RECORD file's text."""
    rows = []
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        path, hash_, size = (row + ["", "", ""])[:3]
        rows.append(RecordEntry(path, hash_, size))
    return rows


def _format_row(path: str, data: bytes) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow([path, record_hash(data), len(data)])
    return out.getvalue()


def rewrite_record(record: bytes, changes: Mapping[str, bytes]) -> bytes:
    """``record`` with the rows of the paths in ``changes`` given the new bytes' hash and size.

    Every other line, and each line's ending, is kept as it was. Raises
    :class:`EnvironmentProblem` when a changed path has no row.
    """
    lines = record.decode("utf-8").splitlines(keepends=True)
    remaining = dict(changes)
    out = []
    for line in lines:
        body = line.rstrip("\r\n")
        ending = line[len(body) :]
        path = _row_path(line)
        if path is not None and path in remaining:
            out.append(_format_row(path, remaining.pop(path)) + ending)
        else:
            out.append(line)
    if remaining:
        raise EnvironmentProblem(
            f"RECORD has no row for {', '.join(sorted(remaining))}.",
            f"reinstall the distribution: {reinstall('<name>', '<version>')}.",
        )
    return "".join(out).encode("utf-8")


def add_rows(record: bytes, files: Mapping[str, bytes]) -> bytes:
    """``record`` with a row for each of ``files``: rewritten where it has one, appended where not."""
    text = record.decode("utf-8")
    present = {row[0] for row in csv.reader(text.splitlines()) if row}
    listed = {path: data for path, data in files.items() if path in present}
    new = rewrite_record(record, listed) if listed else record
    ending = "\r\n" if text.endswith("\r\n") else "\n"
    if new and not new.endswith(b"\n"):
        new += ending.encode()
    missing = sorted((path, data) for path, data in files.items() if path not in present)
    return new + "".join(_format_row(path, data) + ending for path, data in missing).encode("utf-8")


def remove_rows(record: bytes, paths: Collection[str]) -> bytes:
    """``record`` without the rows of ``paths`` (where it has them); every other line is kept
    byte for byte."""
    lines = record.decode("utf-8").splitlines(keepends=True)
    kept = [line for line in lines if _row_path(line) not in paths]
    return "".join(kept).encode("utf-8")


def _row_path(line: str) -> Optional[str]:
    body = line.rstrip("\r\n")
    rows = list(csv.reader([body])) if body else []
    return rows[0][0] if rows and rows[0] else None


def is_record(path: str) -> bool:
    """Whether ``path`` (relative to site-packages) is a distribution's RECORD file."""
    parent, _, name = path.rpartition("/")
    return name == "RECORD" and parent.endswith(".dist-info") and "/" not in parent


@dataclass(frozen=True)
class Distribution:
    """An installed distribution: where it lives and what its RECORD lists."""

    name: str
    version: str
    site_packages: Path
    dist_info: str  # directory name relative to site_packages
    record: Dict[str, RecordEntry]

    @property
    def record_path(self) -> str:
        return f"{self.dist_info}/RECORD"


def _dist_info_dirs(site_packages: Path) -> Iterable[Path]:
    try:
        return sorted(p for p in site_packages.iterdir() if p.name.endswith(".dist-info") and p.is_dir())
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot read {site_packages}: {exc.strerror}.", "pass a readable site-packages directory."
        ) from None


@dataclass(frozen=True)
class _Candidate:
    """A ``.dist-info`` directory whose METADATA names the wanted distribution."""

    directory: Path
    name: str
    version: str
    dist: PathDistribution


def _candidate(directory: Path, wanted: str) -> Optional[_Candidate]:
    """``directory`` when its METADATA has a version and names ``wanted`` (canonical), else None."""
    from importlib.metadata import PathDistribution  # on first use: the startup hook imports this module

    dist = PathDistribution(directory)
    try:
        # An email.message.Message at run time; PackageMetadata declares get() from Python 3.12 only.
        dist_name, version = dist.metadata.get("Name"), dist.metadata.get("Version")  # type: ignore[attr-defined]
    except (TypeError, AttributeError, KeyError, OSError):  # no or unreadable METADATA
        return None
    if dist_name and version and canonicalize_name(dist_name) == wanted:
        return _Candidate(directory, dist_name, version, dist)
    return None


def _read_record(found: _Candidate, name: str) -> Dict[str, RecordEntry]:
    """The rows of ``found``'s RECORD by path; raises :class:`EnvironmentProblem` without one."""
    try:
        text = found.dist.read_text("RECORD")
    except (OSError, UnicodeDecodeError) as exc:
        raise EnvironmentProblem(
            f"{found.directory.name}/RECORD cannot be read as text ({exc}).",
            f"put the distribution's files back over it: {reinstall_over(name, found.version)}.",
        ) from None
    if text is None:
        raise EnvironmentProblem(
            f"{found.directory.name} has no RECORD file, so pip can neither uninstall it nor "
            "reinstall it in place.",
            f"put its files back without uninstalling: {reinstall_over(name, found.version)}.",
        )
    return {entry.path: entry for entry in parse_record(text)}


def find_distribution(site_packages: Path, name: str) -> Optional[Distribution]:
    """The distribution ``name`` installed in ``site_packages`` (that directory only), or None."""
    wanted = canonicalize_name(name)
    candidates = (_candidate(directory, wanted) for directory in _dist_info_dirs(site_packages))
    found = [candidate for candidate in candidates if candidate is not None]
    if not found:
        return None
    if len(found) > 1:
        raise EnvironmentProblem(
            f"{site_packages} holds {len(found)} {name} distributions: "
            f"{', '.join(candidate.directory.name for candidate in found)}.",
            f"remove the stale ones: {reinstall(name)}.",
        )
    return Distribution(
        name=found[0].name,
        version=found[0].version,
        site_packages=site_packages,
        dist_info=found[0].directory.name,
        record=_read_record(found[0], name),
    )
