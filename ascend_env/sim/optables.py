"""The op tables of every torch_npu release on PyPI, shipped as package data.

A release's table is the set of aten ops its ``supported:`` lists name (see
``ascend_env.detect.npu_oplists``):
the ops with a native NPU kernel. ``ascend_env/data/optables/optables.json`` holds them all, the
first release in full and each later one as the ops added and removed relative to the one before;
``tools/gen_optables.py`` regenerates it from the wheels. The file also records whether a release's
binaries honour ``TORCH_NPU_FALLBACK_CPU_DISABLE``, and the upstream ``_foreach_*`` ops each release
registers by hand (:func:`by_hand`: PyTorch's CPU kernel, a loop over the per-tensor ops, registered
under PrivateUse1 by ``ForeachRegister.cpp``; they are in no ``supported:`` list).
:func:`registered` is both: the upstream aten ops the release's binary registers under PrivateUse1.
"""

from __future__ import annotations

import difflib
import functools
import json
from pathlib import Path
from typing import Any, Dict, FrozenSet, List, Tuple

from packaging.version import InvalidVersion, Version

from ascend_env.exceptions import REINSTALL_ASCEND_ENV, EnvironmentProblem, UsageError

__all__ = [
    "DATA_FILE",
    "by_hand",
    "canonical",
    "has_fallback_disable",
    "load",
    "nearest",
    "newest",
    "read_releases",
    "registered",
    "releases",
]

DATA_FILE = Path(__file__).resolve().parent.parent / "data" / "optables" / "optables.json"


def read_releases(path: Path, what: str) -> Any:
    """The ``releases`` list of a data file shipped with ascend-env (``what`` names it in the error)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))["releases"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EnvironmentProblem(
            f"ascend-env's {what} ({path}) cannot be read: {exc}.",
            f"reinstall ascend-env: {REINSTALL_ASCEND_ENV}",
        ) from None


@functools.lru_cache(maxsize=None)
def _tables() -> Dict[Version, Tuple[str, FrozenSet[str], bool, FrozenSet[str]]]:
    """Version -> (release as written, ops, honours TORCH_NPU_FALLBACK_CPU_DISABLE, by hand)."""
    records = read_releases(DATA_FILE, "op tables")
    tables: Dict[Version, Tuple[str, FrozenSet[str], bool, FrozenSet[str]]] = {}
    ops: set[str] = set()
    hand: set[str] = set()
    for record in records:
        ops = (ops - set(record["removed"])) | set(record["added"])
        hand = (hand - set(record["by_hand_removed"])) | set(record["by_hand_added"])
        entry = (record["version"], frozenset(ops), bool(record["fallback_disable"]), frozenset(hand))
        tables[Version(record["version"])] = entry
    return tables


def releases() -> List[str]:
    """Every torch_npu release with a table, oldest first."""
    return [_tables()[v][0] for v in sorted(_tables())]


def newest() -> str:
    """The newest release with a table."""
    return releases()[-1]


def nearest(version: str, count: int = 3) -> List[str]:
    """The ``count`` known releases closest to ``version``: by position in release order, or,
    where ``version`` is no version at all (``2.1.0.pos6``), by spelling (the newest where none
    is alike)."""
    known = sorted(_tables())
    try:
        wanted = Version(version)
    except InvalidVersion:
        alike = difflib.get_close_matches(version, releases(), n=count, cutoff=0.6)
        return alike or [_tables()[v][0] for v in known[-count:]]
    below = [v for v in known if v < wanted]
    above = [v for v in known if v > wanted]
    picked = below[-count:] + above[:count]
    picked.sort(key=lambda v: (abs(known.index(v) - len(below) + 0.5), v))
    return [_tables()[v][0] for v in sorted(picked[:count])]


def _entry(version: str) -> Tuple[str, FrozenSet[str], bool, FrozenSet[str]]:
    try:
        key = Version(version)
    except InvalidVersion:
        key = None
    if key is None or key not in _tables():
        raise UsageError(
            f"no op table for torch_npu {version!r}; the closest known releases are "
            f"{', '.join(nearest(version))} (tables cover {releases()[0]} to {newest()}).",
            "pass one of those releases, or regenerate the tables with tools/gen_optables.py",
        )
    return _tables()[key]


def load(version: str) -> FrozenSet[str]:
    """The ops with a native NPU kernel in torch_npu ``version`` (names as in ``oplists``)."""
    return _entry(version)[1]


def canonical(version: str) -> str:
    """``version`` as the table names it (``2.1.0-post6`` -> ``2.1.0.post6``)."""
    return _entry(version)[0]


def has_fallback_disable(version: str) -> bool:
    """Whether torch_npu ``version`` honours ``TORCH_NPU_FALLBACK_CPU_DISABLE=1``."""
    return _entry(version)[2]


def by_hand(version: str) -> FrozenSet[str]:
    """The upstream ``_foreach_*`` ops torch_npu ``version`` registers by hand under PrivateUse1 with
    PyTorch's CPU kernel (a loop calling the per-tensor ops on the NPU), none of them in :func:`load`."""
    return _entry(version)[3]


def registered(version: str) -> FrozenSet[str]:
    """Every op torch_npu ``version`` registers under PrivateUse1 that :func:`load` or
    :func:`by_hand` knows: what the real dispatcher shows (an op outside it falls back)."""
    return load(version) | by_hand(version)
