"""``status``: what is applied, from the recorded state and the release's files, as a verdict
with its exit code (0 fine, 1 act); only reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional

from ascend_env.exceptions import reinstall
from ascend_env.patching.inspection import FileStatus, Inspection, inspect_site, unknown_release
from ascend_env.patching.journal import read_journal
from ascend_env.patching.manifest import NothingToDo, UnknownRelease
from ascend_env.patching.records import find_distribution
from ascend_env.patching.sites import DISTRIBUTION, isin_falls_back
from ascend_env.patching.state import State, drift, read_state

__all__ = ["StatusName", "StatusReport", "StatusVerdict", "status"]

StatusName = Literal[
    "applied",
    "not applied",
    "partly applied",
    "conflict",
    "drifted",
    "interrupted",
    "nothing to do",
    "transformers removed",
    "hook only",
]


@dataclass(frozen=True)
class StatusVerdict:
    """The status, its exit code (0 fine, 1 act) and what explains it."""

    status: StatusName
    code: int
    detail: Optional[str] = None
    drift: Optional[List[str]] = None
    run: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        data: Dict[str, Any] = {"status": self.status}
        # An interrupted run names what to run before why; the JSON keeps that key order.
        order = ("run", "detail") if self.status == "interrupted" else ("detail", "drift", "run")
        for key in order:
            value = getattr(self, key)
            if value is not None:
                data[key] = value
        return data


@dataclass
class StatusReport:
    """What ``status`` found; :meth:`to_dict` is its ``--json`` form."""

    site_packages: str
    transformers: Optional[str]
    files: List[FileStatus]
    state: Optional[State]
    verdict: StatusVerdict

    @property
    def code(self) -> int:
        """The exit code: 0 fine, 1 act."""
        return self.verdict.code

    def to_dict(self) -> Dict[str, Any]:
        data: Dict[str, Any] = {
            "site_packages": self.site_packages,
            "transformers": self.transformers,
            "files": [f.to_dict() for f in self.files],
        }
        if self.state is not None:
            data.update(applied_at=self.state.applied_at, tool_version=self.state.tool_version)
        data.update(self.verdict.to_dict())
        return data


def status(
    site_packages: Path, *, directory: Optional[Path] = None, search_sys_path: bool = False
) -> StatusReport:
    """What is applied; the report's :attr:`~StatusReport.code` is the exit code (0 fine, 1 act).

    Raises where it cannot tell (exit code 2).
    """
    journal = read_journal(site_packages)
    state = read_state(site_packages)
    where = str(site_packages)
    if find_distribution(site_packages, DISTRIBUTION) is None and journal is None:
        return StatusReport(where, None, [], state, _without_transformers(site_packages, state))
    inspection = inspect_site(site_packages, None, directory)
    dist = inspection.distribution
    assert dist is not None
    if journal is not None:
        verdict = StatusVerdict(
            "interrupted",
            1,
            detail=f"an ascend-env {journal.action} was interrupted",
            run="python -m ascend_env install (or python -m ascend_env restore)",
        )
    else:
        recorded = _recorded(site_packages, state)
        verdict = recorded or _by_release(site_packages, inspection, search_sys_path)
    return StatusReport(where, dist.version, inspection.files, state, verdict)


def _recorded(site_packages: Path, state: Optional[State]) -> Optional[StatusVerdict]:
    """The status that the recorded state gives; None where the release's files must say it."""
    if state is None:
        return None
    lines = drift(site_packages)
    if lines:
        return StatusVerdict(
            "drifted",
            1,
            drift=lines,
            run="python -m ascend_env install (re-applies), or python -m ascend_env restore",
        )
    if any(entry.kind == "patch" for entry in state.entries):
        return StatusVerdict("applied", 0)
    return None  # only the startup hook was installed


def _by_release(site_packages: Path, inspection: Inspection, search_sys_path: bool) -> StatusVerdict:
    """The status that the release and its files give, with nothing recorded for them."""
    outcome, dist = inspection.outcome, inspection.distribution
    assert dist is not None
    if isinstance(outcome, NothingToDo):
        return StatusVerdict("nothing to do", 0, detail=f"transformers {dist.version}: {outcome.why}")
    if isinstance(outcome, UnknownRelease):
        raise unknown_release(dist)
    kinds = {f.status for f in inspection.files}
    if kinds == {"applied"}:
        return StatusVerdict("applied", 0, detail="patched outside ascend-env (no state recorded for them)")
    if kinds == {"clean"}:
        if isin_falls_back(site_packages, search_sys_path):
            detail = "torch_npu has no native NPU isin"
            return StatusVerdict("not applied", 1, detail=detail, run="python -m ascend_env install")
        return StatusVerdict("not applied", 0)
    return StatusVerdict(
        "partly applied" if "conflict" not in kinds else "conflict",
        1,
        run=f"{reinstall('transformers', dist.version)}, then python -m ascend_env install",
    )


def _without_transformers(site_packages: Path, state: Optional[State]) -> StatusVerdict:
    """status where transformers is not installed: a hook-only install, nothing at all, or files
    kept for a transformers that was uninstalled after install (restore cleans them up)."""
    if state is None:
        return StatusVerdict("nothing to do", 0, detail="transformers is not installed here")
    if any(entry.kind in ("patch", "record") for entry in state.entries):
        return StatusVerdict(
            "transformers removed",
            1,
            detail=f"transformers {state.version} was uninstalled after install; ascend-env still "
            "records its patched files and keeps their originals",
            run="python -m ascend_env restore (removes that record and the startup hook; install --hook-only "
            "puts the hook back)",
        )
    lines = drift(site_packages)
    if lines:
        run = "python -m ascend_env install --hook-only, or python -m ascend_env restore"
        return StatusVerdict("drifted", 1, drift=lines, run=run)
    detail = "transformers is not installed; the startup hook serves any caller"
    return StatusVerdict("hook only", 0, detail=detail)
