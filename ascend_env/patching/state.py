"""``state.json``: the files ascend-env changed in one site-packages, and whether they still hold.

The state lists each file with its sha256 before and after, the tool version and the time.
:func:`read_state` parses it (the only place that does), :func:`drift` compares it with the
files. The startup hook calls :func:`drift` and :func:`has_state`, so this module imports, with
all it imports, only the standard library and ascend_env's ``exceptions``, ``utils.atomic``,
``utils.jsontext`` and the patching modules ``store``, ``bytecode``, ``problems``, ``faults`` and
``owners`` (``diffs`` once a state is read); ``tests/unit/patching/test_state.py`` holds it to that.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple, TypeVar

from ascend_env.exceptions import EnvironmentProblem
from ascend_env.patching import bytecode
from ascend_env.patching.problems import not_valid, start_over
from ascend_env.patching.store import DIRECTORY, STATE_FILE, read_file, state_dir
from ascend_env.utils import jsontext

__all__ = [
    "KINDS",
    "SCHEMA",
    "Entry",
    "State",
    "check_entry",
    "check_schema",
    "drift",
    "has_state",
    "installed_sites",
    "read_document",
    "read_state",
]

SCHEMA = 1
KINDS = ("patch", "record", "extra")

_T = TypeVar("_T")


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
            check_schema(data, SCHEMA)
            entries = []
            for item in data["entries"]:
                entry = Entry(
                    path=str(item["path"]),
                    kind=str(item["kind"]),
                    before=None if item["before"] is None else str(item["before"]),
                    after=None if item["after"] is None else str(item["after"]),
                    patch=None if item.get("patch") is None else str(item["patch"]),
                )
                check_entry(entry)
                entries.append(entry)
            return cls(
                tool_version=str(data["tool_version"]),
                applied_at=str(data["applied_at"]),
                distribution=str(data["distribution"]),
                version=str(data["version"]),
                entries=tuple(entries),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise not_valid(source, "state file", exc) from None


def check_schema(data: Any, schema: int) -> None:
    """Raise ValueError unless the document ``data`` has the schema number ``schema`` (AttributeError
    where it is not an object): the caller reports either as :func:`not_valid`."""
    if data.get("schema") != schema:
        raise ValueError(f"schema {data.get('schema')!r}")


def read_document(
    path: Path,
    parse: Callable[[Any, str], _T],
    problem: Callable[[Exception], EnvironmentProblem],
) -> Optional[_T]:
    """``parse(value, str(path))`` of the JSON document at ``path``, or None when there is no such
    file; ``problem(exc)`` is raised when the file cannot be read or is not JSON (an OSError, a
    UnicodeDecodeError or a :class:`json.JSONDecodeError`)."""
    try:
        data = jsontext.loads(jsontext.read_regular(path, follow=True).decode("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise problem(exc) from None
    return parse(data, str(path))


def check_entry(entry: Entry) -> None:
    """Raise ValueError for an entry no ascend-env writes: an unknown kind, a path that leaves
    site-packages or enters ``.ascend-env``, a hash that is not sha256 hex."""
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

    def problem(exc: Exception) -> EnvironmentProblem:
        if isinstance(exc, json.JSONDecodeError):
            return EnvironmentProblem(f"{path} is not JSON ({exc.msg}).", start_over(path.parent))
        return EnvironmentProblem(f"cannot read {path} ({exc}).", "check the directory's permissions.")

    return read_document(path, State.from_json, problem)


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
                f"{entry.path}: its bytecode {_where(path, pyc)} runs other code and is never checked "
                "against it"
                for pyc in bytecode.unchecked_stale(path, data)
            )
    return lines


def _where(source: Path, pyc: Path) -> str:
    """``pyc``'s name where it sits in ``__pycache__`` beside ``source``, else its full path."""
    return pyc.name if pyc.parent == source.parent / "__pycache__" else str(pyc)


def has_state(site_packages: Path) -> bool:
    """Whether ascend-env has changed ``site_packages`` (its ``state.json`` exists)."""
    return (state_dir(site_packages) / STATE_FILE).is_file()


def installed_sites(paths: Optional[List[str]] = None) -> List[Path]:
    """The directories of ``paths`` (default ``sys.path``) where ``install`` left a state file."""
    found = []
    for entry in sys.path if paths is None else paths:
        if entry and has_state(Path(entry)):
            found.append(Path(entry))
    return found
