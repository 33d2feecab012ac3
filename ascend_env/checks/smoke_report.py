"""The report the smoke test's process hands to ``verify``, typed: one definition for the writer
(:mod:`ascend_env.checks.smoke`), the reader (:mod:`ascend_env.checks.verify`) and the tests.

The report travels as one JSON document; :class:`SmokeReport` lists its keys. Every key is
optional: a process that fails early writes only what it got to (``device_error``,
``torch_error``, ``error``), and one that checks an import order alone has no ``steps`` results.

Types only: importing this module imports nothing else of ascend_env, and no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, TypedDict

if TYPE_CHECKING:
    from ascend_env.hook.runtime import HookStatus

__all__ = [
    "Backend",
    "CompileRecord",
    "Imports",
    "Installation",
    "OverloadResult",
    "Patches",
    "SmokeError",
    "SmokeReport",
    "StepResult",
    "WarningRecord",
]


class Patches(TypedDict, total=False):
    """The patch state of the smoke test's transformers (``patching.engine.status``), or why it is
    ``unknown`` (``error``, ``fix``)."""

    status: str
    code: int
    transformers: Optional[str]
    detail: Optional[str]
    drift: List[str]
    run: Optional[str]
    files: Dict[str, str]
    error: str
    fix: Optional[str]


class Installation(TypedDict, total=False):
    """The patches and the startup hook's files next to that transformers; ``error`` and ``fix``
    alone when its site-packages cannot be found."""

    error: str
    fix: Optional[str]
    site_packages: str
    patches: Patches
    hook_files: List[str]
    hook_current: bool
    hook_started: bool
    hook_disabled: bool


class Imports(TypedDict, total=False):
    """How torch_npu was reached (``order``, one of ``smoke.IMPORTS``): ``available`` is what
    transformers' check said, ``skipped`` why an order could not be tried, ``module`` the file."""

    order: str
    available: bool
    skipped: str
    module: Optional[str]


class Backend(TypedDict, total=False):
    """The backend that started: ``kind`` is ``npu``, ``emulated_cann`` or ``simulator``; ``chosen``
    says how the simulated table was chosen. ``imports`` is moved to the report's own key once it started."""

    kind: str
    release: Optional[str]
    name: str
    fallback_disable: bool
    chosen: str
    imports: Imports


class OverloadResult(TypedDict):
    """One overload of a fixed op against the CPU."""

    ok: bool
    error: Optional[str]


class StepResult(TypedDict, total=False):
    """One step: a fixed op's ``overloads`` (none, and ``skipped`` why, where the module that defines
    the op does not import), or generate()'s ``ok``, ``error`` and ``tokens``; then
    whether TORCH_NPU_FALLBACK_CPU_DISABLE was in force, the simulator's counts and the time."""

    overloads: Dict[str, OverloadResult]
    skipped: str
    ok: bool
    error: Optional[str]
    tokens: List[List[int]]
    transformers: str
    fallback_disable: bool
    fallbacks: Dict[str, int]
    seconds: float


class CompileRecord(TypedDict, total=False):
    """The compile mode generate() ran in; on the simulator, the would-be online compiles of its
    steady state (``steady_*``), or why they were not modelled (``unmodelled``)."""

    soc: Optional[str]
    soc_known: bool
    soc_assumed: bool
    jit_compile: Optional[bool]
    guard: Optional[Dict[str, Any]]
    unmodelled: str
    steady_from: int
    steady_would_compile: int
    steady_would_compile_by_op: Dict[str, int]


class SmokeError(TypedDict):
    """An exception that stopped the smoke test; ``environment``: an AscendEnvError (the
    environment's problem, not a verdict)."""

    type: str
    problem: str
    fix: Optional[str]
    environment: bool


class WarningRecord(TypedDict):
    """One Python warning the smoke test's process caught."""

    category: str
    message: str
    where: str


class SmokeReport(TypedDict, total=False):
    """The smoke test's report (``--report FILE``); ``verify`` adds ``npu_machine`` and ``cann``
    when torch_npu did not start on a machine with an NPU."""

    pid: int
    python: str
    silencers: Dict[str, str]
    installation: Installation
    simulator_reason: str
    device_error: str
    torch_error: str
    backend: Backend
    imports: Imports
    steps: Dict[str, StepResult]
    deferred: List[str]
    hook: HookStatus
    compile: CompileRecord
    error: SmokeError
    warnings: List[WarningRecord]
    npu_machine: str
    cann: str
    emulated_cann: Dict[str, Any]  # the emulated CANN's counters (ascend_env.sim.emulated.report)
