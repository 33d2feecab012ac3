"""The words every command uses for what ascend-env has installed in one site-packages.

ascend-env installs two things there: the patches to transformers' files, and the startup hook
that registers an NPU isin where torch_npu has none (and guards the compile mode). The hook is
what ``verify`` requires everywhere; the patches only where ``install --patches auto`` finds a
torch_npu without an NPU isin, and they are optional once the hook is in. So:

=============  ==================================  ==============  ====  =====================
``status``     transformers' files                 startup hook    exit  ``install`` says
=============  ==================================  ==============  ====  =====================
applied        patched                             installed       0     applied
hook only      unpatched (none needed, or          installed       0     hook installed
               ``--hook-only``), or no transformers
not applied    unpatched                           not installed   1     (before install)
applied        patched (a ``+ascend`` wheel)       not installed   1     (before install)
drifted, partly applied, conflict, interrupted,    either          1     (run what status says)
transformers removed
=============  ==================================  ==============  ====  =====================

``install`` says ``already applied`` / ``hook already installed`` when it had nothing to write,
and ``would apply`` / ``would install the hook`` with ``--dry-run``. ``detect`` says that install
has work to do exactly where the startup hook is not installed, and ``verify`` fails its hook check
there. docs/states.md is this table for users; tests/golden holds every command to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

__all__ = [
    "APPLIED",
    "BROKEN",
    "HOOK_ONLY",
    "INSTALL",
    "NOT_APPLIED",
    "InstallWord",
    "State",
    "combine",
    "install_word",
]

APPLIED = "applied"
HOOK_ONLY = "hook only"
NOT_APPLIED = "not applied"
#: The patch states that need the user to act whether or not the hook is installed.
BROKEN = ("drifted", "partly applied", "conflict", "interrupted", "transformers removed")

INSTALL = "python -m ascend_env install"

InstallWord = Literal[
    "applied",
    "would apply",
    "already applied",
    "hook installed",
    "would install the hook",
    "hook already installed",
]


@dataclass(frozen=True)
class State:
    """One site-packages' state in :data:`status`'s words: the word, its exit code, why, and
    what to run (None: nothing)."""

    status: str
    code: int
    detail: Optional[str] = None
    run: Optional[str] = None


def combine(
    patches: str,
    code: int,
    hook_installed: bool,
    detail: Optional[str] = None,
    run: Optional[str] = None,
    *,
    transformers: bool = True,
) -> State:
    """The state from the patches' state (``patches``, its exit ``code``, ``detail`` and ``run``,
    as :func:`ascend_env.patching.engine.status` gives them), whether the hook's files are in, and
    whether ``transformers`` is installed there."""
    if patches in BROKEN:
        return State(patches, max(code, 1), detail, run)
    if not hook_installed:
        missing = "the startup hook is not installed"
        run = INSTALL if transformers else INSTALL + " --hook-only"
        return State(APPLIED if patches == APPLIED else NOT_APPLIED, 1, _joined(detail, missing), run)
    if patches == APPLIED:
        return State(APPLIED, code, detail, run)
    return State(
        HOOK_ONLY,
        0,
        detail
        or "transformers' files are not patched; the startup hook registers "
        "an NPU isin where torch_npu has none",
    )


def install_word(patched: bool, changed: bool, dry_run: bool) -> InstallWord:
    """What ``install`` says it did: ``patched`` when the patches are in place after it (or
    would be), ``changed`` when it wrote (or would write) anything."""
    if not changed:
        return "already applied" if patched else "hook already installed"
    if dry_run:
        return "would apply" if patched else "would install the hook"
    return "applied" if patched else "hook installed"


def _joined(detail: Optional[str], more: str) -> str:
    return f"{detail}; {more}" if detail else more
