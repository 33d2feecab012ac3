"""``patches/manifest.json``: which patch each transformers release needs, with file hashes.

Format (schema 1)::

    {"schema": 1, "distribution": "transformers", "generated_by": "tools/check_patches.py",
     "nothing_to_do": {"below": "4.40.0", "from": "5.1.0", "why": "..."},
     "patches": {"<id>": {"path": "transformers/<id>.patch", "target": "<file>",
                          "verified_on": ["4.40.0", ...]}},
     "releases": {"4.40.0": {"<file>": {"patch": "<id>", "before": "<sha256>", "after": "<sha256>"}}}}

A listed release needs exactly its listed patches; a version below ``below`` or at or after
``from`` needs none; any other version is unknown, except that ``X+ascend.N`` (written by
``patch-wheel``) is looked up as ``X``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Type, TypeVar, Union

from packaging.version import InvalidVersion, Version

from ascend_env.exceptions import EnvironmentProblem
from ascend_env.patching.diffs import MAX_PATCH_CHARS, safe_relative_path, valid_patch_id
from ascend_env.utils import jsontext

__all__ = [
    "MANIFEST",
    "MAX_MANIFEST_CHARS",
    "SCHEMA",
    "FileChange",
    "Lookup",
    "Manifest",
    "NothingToDo",
    "PatchEntry",
    "Release",
    "UnknownRelease",
    "load_manifest",
    "parse_manifest",
    "patches_dir",
    "read_patch_text",
]

SCHEMA = 1
MANIFEST = "manifest.json"
#: The largest manifest read (the shipped one is about 35 KB).
MAX_MANIFEST_CHARS = 4 << 20
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_T = TypeVar("_T")


def patches_dir() -> Path:
    """The ``patches`` directory shipped in the package, or the checkout's in an editable install."""
    import ascend_env

    package = Path(ascend_env.__file__).resolve().parent
    shipped = package / "patches"
    if (shipped / MANIFEST).is_file():
        return shipped
    checkout = package.parent / "patches"
    return checkout if checkout.is_dir() else shipped


@dataclass(frozen=True)
class PatchEntry:
    id: str
    path: str  # relative to the patches directory
    target: str  # relative to site-packages
    verified_on: Tuple[str, ...]


@dataclass(frozen=True)
class FileChange:
    patch: str
    before: str
    after: str


@dataclass(frozen=True)
class Release:
    """A release the manifest lists: each target file with its patch and hashes."""

    version: str
    changes: Dict[str, FileChange]


@dataclass(frozen=True)
class NothingToDo:
    version: str
    why: str


@dataclass(frozen=True)
class UnknownRelease:
    version: str


#: What a version of the distribution needs: its listed patches, nothing, or it is unknown.
Lookup = Union[Release, NothingToDo, UnknownRelease]


@dataclass(frozen=True)
class _NothingRange:
    """``nothing_to_do``: versions below ``below`` or from ``from_`` on need no patch."""

    below: Version
    from_: Version
    why: str

    def holds(self, version: Version) -> bool:
        return version < self.below or version >= self.from_


@dataclass(frozen=True)
class Manifest:
    distribution: str
    below: Version
    from_: Version
    why: str
    patches: Dict[str, PatchEntry]
    releases: Dict[str, Release]

    def lookup(self, version: str) -> Lookup:
        """What ``version`` of the distribution needs."""
        if version in self.releases:
            return self.releases[version]
        try:
            parsed = Version(version)
        except InvalidVersion:
            return UnknownRelease(version)
        if parsed.local is not None and parsed.local.startswith("ascend"):
            parsed = Version(parsed.public)  # a patch-wheel build: the files of its public release
        for key, release in self.releases.items():
            if Version(key) == parsed:
                return release
        if parsed < self.below or parsed >= self.from_:
            return NothingToDo(version, self.why)
        return UnknownRelease(version)


def _fail(source: str, what: str) -> EnvironmentProblem:
    return EnvironmentProblem(
        f"{source}: {what}.",
        "reinstall ascend-env, or regenerate the manifest with tools/check_patches.py.",
    )


def _get(data: Any, key: str, kind: Type[_T], source: str, where: str) -> _T:
    if not isinstance(data, dict) or key not in data:
        raise _fail(source, f"{where} lacks '{key}'")
    value = data[key]
    if not isinstance(value, kind):
        raise _fail(source, f"{where}.{key} is not a {kind.__name__}")
    return value


def _version(text: str, source: str, where: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise _fail(source, f"{where} {text!r} is not a version") from None


def parse_manifest(data: Any, source: str = MANIFEST) -> Manifest:
    """Validate a decoded manifest; raises :class:`EnvironmentProblem` naming what is wrong."""
    if not isinstance(data, dict):
        raise _fail(source, "the top level is not an object")
    schema = data.get("schema")
    if schema != SCHEMA:
        raise _fail(source, f"schema {schema!r} is not {SCHEMA}")
    distribution = _get(data, "distribution", str, source, "manifest")
    nothing = _nothing_range(_get(data, "nothing_to_do", dict, source, "manifest"), source)
    patches = {
        patch_id: _patch_entry(patch_id, entry, source)
        for patch_id, entry in _get(data, "patches", dict, source, "manifest").items()
    }
    releases = {
        version: _release(version, files, nothing, patches, source)
        for version, files in _get(data, "releases", dict, source, "manifest").items()
    }
    return Manifest(distribution, nothing.below, nothing.from_, nothing.why, patches, releases)


def _nothing_range(nothing: Dict[str, Any], source: str) -> _NothingRange:
    below = _version(_get(nothing, "below", str, source, "nothing_to_do"), source, "nothing_to_do.below")
    from_ = _version(_get(nothing, "from", str, source, "nothing_to_do"), source, "nothing_to_do.from")
    why = _get(nothing, "why", str, source, "nothing_to_do")
    if not below < from_:
        raise _fail(source, "nothing_to_do.below is not below nothing_to_do.from")
    return _NothingRange(below, from_, why)


def _patch_entry(patch_id: str, entry: Any, source: str) -> PatchEntry:
    where = f"patches.{patch_id}"
    if not valid_patch_id(patch_id):
        raise _fail(source, f"{where}: the id is not lowercase letters, digits, '.', '_' or '-'")
    path = _get(entry, "path", str, source, where)
    target = _get(entry, "target", str, source, where)
    if not (safe_relative_path(path) and path.endswith(".patch")):
        raise _fail(source, f"{where}.path {path!r} is not a relative .patch path")
    if not safe_relative_path(target):
        raise _fail(source, f"{where}.target {target!r} is not a relative path inside site-packages")
    verified = _get(entry, "verified_on", list, source, where)
    if not all(isinstance(v, str) for v in verified):
        raise _fail(source, f"{where}.verified_on holds a non-string")
    return PatchEntry(patch_id, path, target, tuple(verified))


def _release(
    version: str, files: Any, nothing: _NothingRange, patches: Dict[str, PatchEntry], source: str
) -> Release:
    if nothing.holds(_version(version, source, "release")):
        raise _fail(source, f"release {version} lies in the nothing-to-do range")
    if not isinstance(files, dict) or not files:
        raise _fail(source, f"releases.{version} is not a non-empty object")
    changes = {
        target: _file_change(f"releases.{version}.{target}", target, change, patches, source)
        for target, change in files.items()
    }
    return Release(version, changes)


def _file_change(
    where: str, target: str, change: Any, patches: Dict[str, PatchEntry], source: str
) -> FileChange:
    patch_id = _get(change, "patch", str, source, where)
    before = _get(change, "before", str, source, where)
    after = _get(change, "after", str, source, where)
    if patch_id not in patches:
        raise _fail(source, f"{where} names the unknown patch {patch_id!r}")
    if patches[patch_id].target != target:
        raise _fail(source, f"{where}: patch {patch_id} targets {patches[patch_id].target}")
    if not (_SHA256.match(before) and _SHA256.match(after)) or before == after:
        raise _fail(source, f"{where}: before/after are not two different sha256 hex digests")
    return FileChange(patch_id, before, after)


def load_manifest(directory: Optional[Path] = None) -> Manifest:
    """Read and validate ``manifest.json`` in ``directory`` (default: :func:`patches_dir`)."""
    directory = patches_dir() if directory is None else directory
    path = directory / MANIFEST
    try:
        text = _read_bounded(path, MAX_MANIFEST_CHARS)
    except FileNotFoundError:
        raise EnvironmentProblem(
            f"no patch manifest at {path}.",
            "reinstall ascend-env (the wheel ships patches/manifest.json).",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(str(path), f"cannot be read ({exc})") from None
    if len(text) > MAX_MANIFEST_CHARS:
        raise _fail(str(path), f"is larger than {MAX_MANIFEST_CHARS} characters")
    try:
        data = jsontext.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(str(path), f"is not JSON ({exc.msg} at line {exc.lineno})") from None
    return parse_manifest(data, str(path))


def read_patch_text(directory: Path, entry: PatchEntry) -> str:
    """The text of one patch file listed in the manifest."""
    path = directory / entry.path
    try:
        # One character past the limit at most: parse_patch refuses it without the rest in memory.
        return _read_bounded(path, MAX_PATCH_CHARS)
    except (OSError, UnicodeDecodeError) as exc:
        raise EnvironmentProblem(
            f"patch {entry.id}: cannot read {path} ({exc}).", "reinstall ascend-env."
        ) from None


def _read_bounded(path: Path, limit: int) -> str:
    """The UTF-8 text of ``path``, but no more than ``limit`` + 1 characters of it: a larger file
    is never read whole (a 3 GiB one took 9.4 GB of memory before the size check)."""
    with open(path, encoding="utf-8") as handle:
        return handle.read(limit + 1)
