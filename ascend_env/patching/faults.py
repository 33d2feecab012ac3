"""The write points at which a test may kill a run, as ``kill -9`` would.

``ASCEND_ENV_CRASH_AT=<label>`` makes the process die with ``os._exit(137)`` when it reaches the
write point ``label``; the labels are listed in :data:`CRASH_POINTS`. The crash and recovery
tests kill install and restore at each of them, and the next run must finish the change.
"""

from __future__ import annotations

import os

__all__ = ["CRASH_ENV", "CRASH_POINTS", "crash_point"]

CRASH_ENV = "ASCEND_ENV_CRASH_AT"
# "change-N-temp" and "change-N" exist for every change N (0-based) of a commit.
CRASH_POINTS = (
    "blob",
    "blobs",
    "journal-temp",
    "journal",
    "change-N-temp",
    "change-N",
    "state",
    "commit",
    "cleanup",
)


def crash_point(label: str) -> None:
    """Die at once, as ``kill -9`` would, when ``ASCEND_ENV_CRASH_AT`` names ``label`` (tests only)."""
    if os.environ.get(CRASH_ENV) == label:
        os._exit(137)
