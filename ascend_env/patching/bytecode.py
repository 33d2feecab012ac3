"""Where Python keeps the bytecode of a source file, and which of it never looks at the source.

Python reads and writes a module's ``.pyc`` in ``__pycache__`` beside it, or, where a bytecode
prefix is set (``PYTHONPYCACHEPREFIX``, ``-X pycache_prefix=``, ``sys.pycache_prefix``; Python
>= 3.8), in a mirror of the source's directory under that prefix instead
(``importlib._bootstrap_external.cache_from_source``, CPython 3.8-3.13). Both places count: a
process with the prefix set uses only the mirror, one without it only ``__pycache__``, and an
image may set it for some processes and not others.

The startup hook's drift check calls :func:`unchecked_stale`: this module imports only the
standard library, ascend_env's atomic writer and the problem texts of ``patching/problems.py``.
"""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path
from typing import FrozenSet, List, Mapping, Optional, Set

from ascend_env.patching.problems import write_failed
from ascend_env.utils import atomic

__all__ = ["PREFIX_ENV", "cache_directories", "cached", "drop", "prefixes", "unchecked_stale"]

PREFIX_ENV = "PYTHONPYCACHEPREFIX"


def prefixes(environ: Optional[Mapping[str, str]] = None) -> List[Path]:
    """The bytecode prefixes in force: this interpreter's, and ``$PYTHONPYCACHEPREFIX`` (which
    the user's processes see even where this one ignores it, under ``-E`` or ``-I``), made
    absolute as Python makes them."""
    environ = os.environ if environ is None else environ
    found: List[Path] = []
    for value in (getattr(sys, "pycache_prefix", None), environ.get(PREFIX_ENV)):
        if value:
            path = Path(os.path.abspath(value))
            if path not in found:
                found.append(path)
    return found


def _directory_names(directory: Path) -> Set[Path]:
    """``directory`` under each name Python may give it: as given, resolved, and as each
    ``sys.path`` entry that is the same directory (a symlinked ``lib64``, say); a module's path,
    and so its place under a prefix, comes from the entry it was found through."""
    names = {Path(os.path.abspath(directory))}
    try:
        real = directory.resolve()
    except OSError:
        return names
    names.add(real)
    for entry in sys.path:
        if not entry:
            continue
        base = Path(os.path.abspath(entry))
        try:
            resolved = base.resolve()
        except OSError:
            continue
        if resolved == real or resolved in real.parents:
            names.add(base / real.relative_to(resolved))
    return names


def cache_directories(source: Path) -> List[Path]:
    """The directories that may hold bytecode of ``source``: its ``__pycache__`` and, for each
    prefix in force, the mirror of its directory under the prefix."""
    directories = [source.parent / "__pycache__"]
    found = prefixes()
    if found:
        for name in sorted(_directory_names(source.parent)):
            relative = str(name).lstrip(os.sep)
            directories.extend(prefix / relative for prefix in found)
    return directories


def cached(source: Path) -> List[Path]:
    """The ``.pyc`` files of ``source`` (a ``.py`` file) there are, for every interpreter and
    optimisation level, in ``__pycache__`` and under every prefix in force."""
    pattern = f"{glob.escape(source.stem)}.*.pyc"
    found: List[Path] = []
    for directory in cache_directories(source):
        try:
            found.extend(sorted(directory.glob(pattern)))
        except OSError:
            continue
    return found


def unchecked_stale(source: Path, text: bytes) -> List[Path]:
    """The ``.pyc`` files of ``source`` compiled with ``--invalidation-mode unchecked-hash`` from
    other text than ``text``: Python runs them without looking at the source, so ``text`` (the
    patched text) never runs where they are used."""
    if source.suffix != ".py":
        return []
    import importlib.util

    stale = []
    expected = None
    for pyc in cached(source):
        try:
            with open(pyc, "rb") as handle:
                header = handle.read(16)
        except OSError:
            continue
        flags = int.from_bytes(header[4:8], "little") if len(header) == 16 else 0
        if flags & 0b01 and not flags & 0b10:  # hash-based, source not checked (PEP 552)
            expected = importlib.util.source_hash(text) if expected is None else expected
            if header[8:16] != expected:
                stale.append(pyc)
    return stale


def drop(path: Path, keep: FrozenSet[Path] = frozenset()) -> None:
    """Remove the cached bytecode of ``path`` (a ``.py`` file), for every interpreter and
    optimisation level, in ``__pycache__`` and under any bytecode prefix in force
    (``PYTHONPYCACHEPREFIX``), before its source changes: a ``.pyc`` compiled with
    ``--invalidation-mode unchecked-hash`` (common in images) is never checked against its
    source, so the old code would go on running. Python writes a fresh one at the next import.
    ``keep`` names bytecode that the same run writes."""
    if path.suffix != ".py":
        return
    removed = set()
    for pyc in cached(path):
        if pyc in keep:
            continue
        try:
            pyc.unlink()
        except FileNotFoundError:  # another process removed it
            continue
        except OSError as exc:
            raise write_failed(pyc.parent, exc) from None
        removed.add(pyc.parent)
    for directory in sorted(removed):
        atomic.fsync_directory(directory)
