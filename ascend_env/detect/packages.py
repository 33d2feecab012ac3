"""Installed distributions, read from their metadata (nothing is imported).

Every function takes the directories to search (``paths``); ``None`` means the running
interpreter's ``sys.path``, as ``importlib.metadata`` does.
"""

from __future__ import annotations

import site
import sys
import sysconfig
from importlib import metadata
from pathlib import Path
from typing import List, Optional, Sequence, Set

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

__all__ = [
    "Distribution",
    "find",
    "find_all",
    "location",
    "metadata_dir",
    "name_of",
    "package_dir",
    "requirement_on",
    "requirements",
    "search_path",
    "site_packages",
    "top_level",
    "version",
]

Distribution = metadata.Distribution


def site_packages() -> List[Path]:
    """The running interpreter's site-packages directories (existing ones, no duplicates)."""
    found: List[str] = []
    for key in ("purelib", "platlib"):
        found.append(sysconfig.get_paths().get(key, ""))
    getsitepackages = getattr(site, "getsitepackages", None)
    if getsitepackages is not None:
        found.extend(getsitepackages())
    if site.ENABLE_USER_SITE and site.USER_SITE:
        found.append(site.USER_SITE)
    result: List[Path] = []
    for entry in found:
        path = Path(entry) if entry else None
        if path is not None and path.is_dir() and path not in result:
            result.append(path)
    return result


def search_path(paths: Optional[Sequence[Path]] = None) -> List[str]:
    """The directories that :func:`find` searches, as strings."""
    return list(sys.path) if paths is None else [str(p) for p in paths]


def name_of(dist: Distribution) -> str:
    """The distribution's project name as written in its metadata (``""`` when missing)."""
    try:
        # An email.message.Message at run time; PackageMetadata declares get() from Python 3.12 only.
        return dist.metadata.get("Name") or ""  # type: ignore[attr-defined]
    except Exception:  # a broken METADATA file must not stop the search
        return ""


def find_all(name: str, paths: Optional[Sequence[Path]] = None) -> List[Distribution]:
    """Every installed distribution of project ``name``, in search order (first one wins).

    A metadata directory that another install of the project lists among its files is part of
    that install, not one of its own: torch_npu's wheels (2.1.0.post6 among them) ship a
    ``torch_npu.egg-info`` beside their ``.dist-info`` and list it in RECORD.
    """
    wanted = canonicalize_name(name)
    found = [
        dist
        for dist in metadata.distributions(path=search_path(paths))
        if canonicalize_name(name_of(dist)) == wanted
    ]
    if len(found) < 2:
        return found
    owned: Set[Path] = set()
    for dist in found:
        owned.update(_listed_metadata_dirs(dist))
    return [dist for dist in found if not _is_listed(dist, owned)]


def _listed_metadata_dirs(dist: Distribution) -> Set[Path]:
    """The ``.egg-info`` / ``.dist-info`` directories among ``dist``'s RECORD entries, other than its own."""
    own = metadata_dir(dist)
    own_resolved = _resolved(own) if own is not None else None
    try:
        files = dist.files or []
    except Exception:  # a broken RECORD lists nothing
        return set()
    listed: Set[Path] = set()
    for entry in files:
        parts = entry.parts
        for depth, part in enumerate(parts[:-1]):
            if part.endswith((".egg-info", ".dist-info")):
                where = _resolved(Path(str(dist.locate_file(Path(*parts[: depth + 1])))))
                if where is not None and where != own_resolved:
                    listed.add(where)
                break
    return listed


def _is_listed(dist: Distribution, owned: Set[Path]) -> bool:
    path = metadata_dir(dist)
    return path is not None and _resolved(path) in owned


def _resolved(path: Path) -> Optional[Path]:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return None


def find(name: str, paths: Optional[Sequence[Path]] = None) -> Optional[Distribution]:
    """The distribution of project ``name`` that Python would import, or ``None``."""
    found = find_all(name, paths)
    return found[0] if found else None


def version(dist: Distribution) -> Optional[str]:
    """The ``Version`` of ``dist``, or ``None`` when its metadata has none."""
    try:
        # An email.message.Message at run time; PackageMetadata declares get() from Python 3.12 only.
        value = dist.metadata.get("Version")  # type: ignore[attr-defined]
    except Exception:
        return None
    return value.strip() if value and value.strip() else None


def location(dist: Distribution) -> Optional[Path]:
    """The directory that holds ``dist``'s files (its site-packages), when known."""
    try:
        return Path(str(dist.locate_file(""))).resolve()
    except (OSError, RuntimeError, TypeError):
        return None


def metadata_dir(dist: Distribution) -> Optional[Path]:
    """The ``.dist-info`` / ``.egg-info`` directory, when ``dist`` lives in one."""
    path = getattr(dist, "_path", None)
    return None if path is None else Path(str(path))


def top_level(dist: Distribution) -> List[str]:
    """The import names listed in ``top_level.txt`` (may be empty)."""
    try:
        text = dist.read_text("top_level.txt") or ""
    except (OSError, UnicodeDecodeError):
        return []
    return [line.strip() for line in text.splitlines() if line.strip()]


def package_dir(dist: Distribution, top_level_name: str) -> Path:
    """Where the import package ``top_level_name`` of ``dist`` lives."""
    return Path(str(dist.locate_file(top_level_name)))


def requirements(dist: Distribution) -> List[Requirement]:
    """``dist``'s ``Requires-Dist`` entries that parse (others are skipped)."""
    parsed: List[Requirement] = []
    for text in dist.requires or []:
        try:
            parsed.append(Requirement(text))
        except InvalidRequirement:
            continue
    return parsed


def requirement_on(dist: Distribution, name: str) -> Optional[Requirement]:
    """``dist``'s requirement on project ``name`` (without extras markers), or ``None``."""
    wanted = canonicalize_name(name)
    for req in requirements(dist):
        if canonicalize_name(req.name) == wanted and (req.marker is None or "extra" not in str(req.marker)):
            return req
    return None
