"""Carry out ``install`` and ``restore`` on one site-packages directory, and say its ``status``.

Each run plans first, outside the lock, reading only (:mod:`~ascend_env.patching.install`,
:mod:`~ascend_env.patching.restore`): every new byte string is computed in memory. Only then,
in one :func:`~ascend_env.patching.journal.transaction` (the lock held, any interrupted run
finished), does it plan again and commit, or roll back where there is nothing to write. The
commands import this module alone; it names what they use from the others.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Callable, Mapping, Optional, TypeVar

from ascend_env.exceptions import AscendEnvError
from ascend_env.patching.inspection import FileState, FileStatus, Inspection, inspect_site
from ascend_env.patching.install import (
    PATCH_MODES,
    InstallReport,
    drop_stale_bytecode,
    plan_install,
    startup_hook_files,
)
from ascend_env.patching.journal import needs_recovery, transaction
from ascend_env.patching.plan import Plan
from ascend_env.patching.restore import RestoredFile, RestoreReport, plan_restore
from ascend_env.patching.sites import check_not_shared, default_site_packages, resolve_site_packages
from ascend_env.patching.status import StatusReport, StatusVerdict, status
from ascend_env.patching.store import holds_ours
from ascend_env.states import install_word

__all__ = [
    "PATCH_MODES",
    "FileState",
    "FileStatus",
    "InstallReport",
    "Inspection",
    "RestoreReport",
    "RestoredFile",
    "StatusReport",
    "StatusVerdict",
    "check_not_shared",
    "default_site_packages",
    "inspect_site",
    "install",
    "plan_install",
    "plan_restore",
    "resolve_site_packages",
    "restore",
    "startup_hook_files",
    "status",
]

_T = TypeVar("_T")


def install(
    site_packages: Path,
    *,
    patches: str = "auto",
    dry_run: bool = False,
    directory: Optional[Path] = None,
    extra_files: Optional[Mapping[str, bytes]] = None,
    search_sys_path: bool = False,
) -> InstallReport:
    """Patch transformers in ``site_packages`` (see :func:`~ascend_env.patching.install.plan_install`);
    what it did or would do."""
    replan = partial(
        plan_install,
        site_packages,
        patches=patches,
        directory=directory,
        extra_files=extra_files,
        search_sys_path=search_sys_path,
    )
    return _install(site_packages, replan, dry_run)


def _install(site_packages: Path, replan: Callable[[], Plan[InstallReport]], dry_run: bool) -> InstallReport:
    """:func:`install`, with ``replan`` planning from what is on disk at the call."""
    plan = _settled(replan)
    if dry_run:
        if plan.report.result in ("applied", "hook installed"):
            patched = plan.report.result == "applied"
            plan.report.result = install_word(patched, changed=True, dry_run=True)
        plan.report.dry_run = True
        return plan.report
    if plan.state is None and not needs_recovery(site_packages):
        plan.report.bytecode_dropped = drop_stale_bytecode(site_packages)
        return plan.report
    with transaction(site_packages) as change:
        plan = replan()  # again: another run may have changed things
        if plan.state is not None:
            change.commit(plan.journal("install"), plan.blobs)
        else:
            change.rollback()
    plan.report.recovered = _recovered(change.recovered)
    return plan.report


def restore(site_packages: Path, *, dry_run: bool = False) -> RestoreReport:
    """Put back the recorded original bytes and remove ascend-env's files and state; what it did
    or would do."""
    plan = _settled(lambda: plan_restore(site_packages))
    if dry_run:
        if plan.report.result == "restored":
            plan.report.result = "would restore"
        plan.report.dry_run = True
        return plan.report
    if plan.report.result == "nothing to restore" and not holds_ours(site_packages):
        return plan.report
    with transaction(site_packages) as change:
        plan = plan_restore(site_packages)
        if plan.report.result == "nothing to restore":  # no state recorded
            change.rollback()
        else:
            change.commit(plan.journal("restore"), plan.blobs)
    plan.report.recovered = _recovered(change.recovered)
    return plan.report


def _settled(plan: Callable[[], _T]) -> _T:
    """``plan()`` outside the lock, tried once more if it fails.

    A run holding the lock may change what the plan reads while it reads it (a finishing
    ``restore`` removes ``.ascend-env`` and its stored bytes). A second failure is real.
    """
    try:
        return plan()
    except AscendEnvError:
        return plan()


def _recovered(action: Optional[str]) -> Optional[str]:
    return f"finished an interrupted {action}" if action else None
