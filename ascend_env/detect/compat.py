"""Which torch, CANN and Python each torch_npu release goes with, and the verdict for one setup.

The table is ``ascend_env/data/compat.json``. Rows with ``status: official`` come from the
Ascend/pytorch version tables; ``inferred`` rows are PyPI releases those tables do not list (torch
pin and Python versions from the wheels; CANN from the named sources, or ``null`` when unknown).

A verdict is ``ok``, ``unknown`` or ``mismatch``, the worst of its checks:

* ``torch``: the installed torch release must equal the row's (local labels such as ``+cpu`` are
  ignored, as PEP 440 ignores them for ``==2.1.0``); torch missing is a mismatch.
* ``requires``: the installed torch_npu's own ``Requires-Dist`` on torch. A ``+cpu`` pin (x86_64
  wheels up to 2.11.x) that only differs in the local label is ``ok`` with a note.
* ``python``: the running Python must be one the release has wheels for.
* ``cann``: a CANN the row lists is ``ok``; one older than every listed CANN is a ``mismatch``;
  a newer one, or a row without CANN, is ``unknown``; no CANN at all is a ``mismatch``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

from packaging.requirements import Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ascend_env.detect.cann import CannVersion, parse_version
from ascend_env.exceptions import REINSTALL_ASCEND_ENV, EnvironmentProblem

__all__ = [
    "DATA_FILE",
    "MISMATCH",
    "OK",
    "UNKNOWN",
    "Check",
    "Row",
    "Table",
    "Verdict",
    "check_requirement",
    "load",
    "python_line",
    "torch_matches",
    "verdict",
]

DATA_FILE = Path(__file__).resolve().parent.parent / "data" / "compat.json"

OK = "ok"
UNKNOWN = "unknown"
MISMATCH = "mismatch"
_RANK = {OK: 0, UNKNOWN: 1, MISMATCH: 2}


@dataclass(frozen=True)
class Row:
    """One torch_npu release."""

    torch_npu: str
    torch: str
    cann: Optional[Tuple[str, ...]]
    python: Tuple[str, ...]
    status: str
    sources: Tuple[str, ...] = ()
    branch: Optional[str] = None
    python_from: str = "official"
    on_pypi: bool = True
    x86_64_requires_torch: Optional[str] = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Row:
        cann = data.get("cann")
        return cls(
            torch_npu=str(data["torch_npu"]),
            torch=str(data["torch"]),
            cann=None if cann is None else tuple(str(c) for c in cann),
            python=tuple(str(p) for p in data.get("python", ())),
            status=str(data.get("status", "inferred")),
            sources=tuple(str(s) for s in data.get("sources", ())),
            branch=data.get("branch"),
            python_from=str(data.get("python_from", "official")),
            on_pypi=bool(data.get("on_pypi", True)),
            x86_64_requires_torch=data.get("x86_64_requires_torch"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "torch_npu": self.torch_npu,
            "torch": self.torch,
            "cann": None if self.cann is None else list(self.cann),
            "python": list(self.python),
            "status": self.status,
            "branch": self.branch,
            "sources": list(self.sources),
        }


@dataclass(frozen=True)
class Table:
    """The compatibility table."""

    rows: Tuple[Row, ...]

    def find(self, torch_npu: str) -> Optional[Row]:
        """The row for a torch_npu version (its local label, e.g. ``+git1a2b``, is ignored)."""
        wanted = _public(torch_npu)
        if wanted is None:
            return None
        for row in self.rows:
            if _public(row.torch_npu) == wanted:
                return row
        return None

    def same_torch(self, torch_npu: str) -> List[Row]:
        """The rows for the same torch release as ``torch_npu`` (for hints)."""
        release = _release(torch_npu)
        return [row for row in self.rows if release is not None and _release(row.torch_npu) == release]


def _public(text: str) -> Optional[Version]:
    try:
        return Version(Version(text.strip()).public)
    except InvalidVersion:
        return None


def _release(text: str) -> Optional[Tuple[int, ...]]:
    version = _public(text)
    return None if version is None else version.release[:3]


def load(path: Optional[Path] = None) -> Table:
    """The table from ``path`` (default: the one shipped in the package)."""
    try:
        if path is None:
            text = DATA_FILE.read_text(encoding="utf-8")
        else:
            text = Path(path).read_text(encoding="utf-8")
        data = json.loads(text)
        return Table(tuple(Row.from_dict(row) for row in data["rows"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EnvironmentProblem(
            f"the compatibility table {path or 'ascend_env/data/compat.json'} cannot be read ({exc}).",
            f"reinstall ascend-env: {REINSTALL_ASCEND_ENV}",
        ) from None


@dataclass(frozen=True)
class Check:
    """One part of a verdict."""

    name: str
    status: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "reason": self.reason}


@dataclass
class Verdict:
    """``status`` is the worst of ``checks``; ``row`` is the table row used, if any."""

    status: str = UNKNOWN
    checks: List[Check] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    row: Optional[Row] = None

    @property
    def reasons(self) -> List[str]:
        """The reasons of the checks that set the status."""
        return [c.reason for c in self.checks if c.status == self.status]

    def add(self, name: str, status: str, reason: str) -> None:
        self.checks.append(Check(name, status, reason))
        self.status = max((c.status for c in self.checks), key=_RANK.__getitem__)

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.status,
            "reasons": self.reasons,
            "checks": [c.to_dict() for c in self.checks],
            "notes": list(self.notes),
            "row": None if self.row is None else self.row.to_dict(),
        }


def torch_matches(pinned: str, installed: str) -> Optional[bool]:
    """Whether torch ``installed`` satisfies ``==pinned`` (local labels ignored); ``None`` if unparseable."""
    try:
        return SpecifierSet(f"=={pinned}").contains(Version(installed).public, prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return None


def check_requirement(requirement: str, installed: str) -> Tuple[str, str]:
    """(status, reason) for torch ``installed`` against a torch_npu ``Requires-Dist`` line."""
    try:
        req = Requirement(requirement)
        version = Version(installed)
    except ValueError:
        return UNKNOWN, f"cannot compare torch {installed!r} with torch_npu's requirement {requirement!r}."
    if req.specifier.contains(version, prereleases=True):
        return OK, f"torch {installed} satisfies torch_npu's requirement '{req}'."
    loose = SpecifierSet(",".join(str(s).split("+", 1)[0] for s in req.specifier))
    if loose.contains(Version(version.public), prereleases=True):
        return OK, (
            f"torch {installed} is the release torch_npu requires ('{req}') but not that build: "
            "pip check reports it; the x86_64 torch_npu wheels up to 2.11.x ask for the +cpu build "
            "(PyTorch's CPU index, given to pip with --index-url)."
        )
    return MISMATCH, f"torch {installed} does not satisfy torch_npu's requirement '{req}'."


def _cann_entry_matches(entry: str, installed: CannVersion) -> bool:
    if entry.lower().endswith(".x"):
        line = entry[:-2].split(".")
        return len(line) == 2 and (str(installed.major), str(installed.minor)) == tuple(line)
    listed = parse_version(entry)
    return listed is not None and listed.release == installed.release


def _check_torch(row: Row, torch: Optional[str]) -> Tuple[str, str]:
    """(status, reason) for the installed torch version (``None``: not installed)."""
    if torch is None:
        return MISMATCH, f"torch_npu {row.torch_npu} needs torch {row.torch}, and torch is not installed."
    match = torch_matches(row.torch, torch)
    if match is None:
        return UNKNOWN, f"the torch version {torch!r} cannot be compared."
    if match:
        return OK, f"torch {torch} is the torch {row.torch} that torch_npu {row.torch_npu} is built for."
    return MISMATCH, f"torch_npu {row.torch_npu} is built for torch {row.torch}, not torch {torch}."


def _check_cann(row: Row, cann: Optional[str]) -> Tuple[str, str]:
    """(status, reason) for the CANN version found (``None``: no toolkit found)."""
    listed = ", ".join(row.cann) if row.cann else ""
    if cann is None:
        need = f" (CANN {listed})" if listed else ""
        return MISMATCH, f"torch_npu {row.torch_npu} needs the CANN toolkit{need}, and none was found."
    installed = parse_version(cann)
    if installed is None:
        return UNKNOWN, f"the CANN version {cann!r} cannot be compared."
    if not row.cann:
        return UNKNOWN, f"the table lists no CANN version for torch_npu {row.torch_npu}."
    if any(_cann_entry_matches(entry, installed) for entry in row.cann):
        build = " (a pre-release build of it)" if installed.suffix else ""
        return OK, f"CANN {cann}{build} is listed for torch_npu {row.torch_npu}."
    exact = [v for v in map(parse_version, row.cann) if v is not None]
    if exact and installed < min(exact, key=CannVersion.sort_key):
        return MISMATCH, (
            f"CANN {cann} is older than the CANN {listed} that torch_npu {row.torch_npu} is built for."
        )
    return UNKNOWN, (
        f"CANN {cann} is not the CANN {listed} listed for torch_npu {row.torch_npu}; "
        "the table does not say whether it works."
    )


def _check_python(row: Row, python: str) -> Tuple[str, str]:
    """(status, reason) for the running Python ``major.minor``."""
    if not row.python:
        return UNKNOWN, f"the table lists no Python versions for torch_npu {row.torch_npu}."
    if python in row.python:
        return OK, f"Python {python} is supported by torch_npu {row.torch_npu}."
    return MISMATCH, (
        f"torch_npu {row.torch_npu} supports Python {', '.join(row.python)}, not Python {python}."
    )


def verdict(
    table: Table,
    torch_npu: Optional[str],
    torch: Optional[str],
    cann: Optional[str],
    python: str,
    requires_torch: Optional[str] = None,
) -> Verdict:
    """The verdict for one environment (versions as strings; ``None`` where absent)."""
    result = Verdict()
    if torch_npu is None:
        result.add("torch_npu", UNKNOWN, "torch_npu is not installed; there is nothing to match.")
        return result
    if requires_torch:
        if torch is None:
            reason = f"torch_npu requires '{requires_torch}', and torch is not installed."
            result.add("requires", MISMATCH, reason)
        else:
            result.add("requires", *check_requirement(requires_torch, torch))
    row = table.find(torch_npu)
    result.row = row
    if row is None:
        known = [r.torch_npu for r in table.same_torch(torch_npu)]
        hint = f" (listed for that torch: {', '.join(known)})" if known else ""
        result.add("torch_npu", UNKNOWN, f"torch_npu {torch_npu} is not in the compatibility table{hint}.")
        return result
    if "+" in torch_npu:
        result.notes.append(f"torch_npu {torch_npu} is a local build; compared as {row.torch_npu}.")
    result.add("torch_npu", OK, f"torch_npu {row.torch_npu} is in the table ({row.status} row).")
    result.add("torch", *_check_torch(row, torch))
    result.add("python", *_check_python(row, python))
    result.add("cann", *_check_cann(row, cann))
    return result


def python_line(version_info: Sequence[int]) -> str:
    """``"3.11"`` for ``sys.version_info``."""
    return f"{version_info[0]}.{version_info[1]}"
