"""A plan: the writes of one run, computed in memory before anything is written, and its report.

``install`` and ``restore`` each build one (:mod:`~ascend_env.patching.install`,
:mod:`~ascend_env.patching.restore`); :meth:`Plan.journal` is what the transaction carries out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Generic, List, Optional, TypeVar

from ascend_env.patching.journal import Change, Journal
from ascend_env.patching.records import sha256_hex
from ascend_env.patching.state import State

__all__ = ["Plan", "sha256_or_none"]

_Report = TypeVar("_Report")


def sha256_or_none(data: Optional[bytes]) -> Optional[str]:
    """The sha256 hex of ``data``; None for a file that is absent."""
    return None if data is None else sha256_hex(data)


@dataclass
class Plan(Generic[_Report]):
    """The writes of one run, computed in memory, and the report it gives."""

    site_packages: Path
    report: _Report
    changes: List[Change] = field(default_factory=list)
    blobs: Dict[str, bytes] = field(default_factory=dict)
    state: Optional[State] = None

    def write(self, path: str, current: Optional[bytes], new: Optional[bytes]) -> None:
        """Set ``path`` from ``current`` to ``new`` (None: absent); the journal keeps both."""
        before, after = sha256_or_none(current), sha256_or_none(new)
        self.changes.append(Change(path, before, after))
        for name, data in ((after, new), (before, current)):
            if name is not None and data is not None:
                self.blobs[name] = data

    def journal(self, action: str) -> Journal:
        """The journal that carries out this plan: its changes, and the state to leave (None:
        ascend-env's directory goes)."""
        return Journal(action, tuple(self.changes), self.state)
