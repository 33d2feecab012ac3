"""The reports a simulated process hands to the audit, typed: one definition for the writer, the
reader and the tests.

- :class:`ProcessReport`: each audited Python process image's report,
  ``<pid>-<start>-<exec generation>-<random>.json`` in the audit's report directory, written
  by :class:`ascend_env._audited.Reporter` (the facts of :mod:`ascend_env.sim.startup` added to
  the last one) and by ``_audited_shim/sitecustomize.py`` for
  a Python that cannot import ascend_env; read by :mod:`ascend_env.checks.process_reports`.
- :class:`PathsReport`: the dispatch-path model's findings in one process
  (:meth:`ascend_env.sim.dispatch_model.Model.report`), a report's ``"paths"``; summed over the processes
  by :func:`ascend_env.checks.paths_report.summarize`.

Types only: importing this module imports nothing else of ascend_env, and no torch.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, TypedDict

__all__ = [
    "Counts",
    "GuardRecord",
    "LastFacts",
    "MeasuredRun",
    "MeasuredStep",
    "PathsReport",
    "ProcessEnd",
    "ProcessReport",
    "RunReport",
    "Span",
    "Steady",
    "Warning64Record",
]


class ProcessEnd(TypedDict, total=False):
    """How a process ended, in its last report: ``how`` is ``exit``, ``exec``, ``os._exit`` (with
    ``code``), ``exception`` (with ``exception``, the type's name) or ``signal`` (with ``signal``)."""

    how: str
    code: Optional[int]
    exception: str
    signal: str


class Counts(TypedDict):
    """What ran in one ``generate()`` step (or outside generate, or in all): counts by op, path
    (``fallback``, ``acl_op``, ``op_api``, ``torch_npu``) and call site, most first."""

    would_compile: int
    host_syncs: int
    warnings_64bit: int
    paths: Dict[str, int]
    would_compile_by_op: Dict[str, int]
    would_compile_by_site: Dict[str, int]
    host_syncs_by_op: Dict[str, int]
    host_syncs_by_site: Dict[str, int]
    warnings_64bit_by_site: Dict[str, int]


class Span(TypedDict):
    """One count over the steady steps: the least and most in a step, and their sum."""

    min: int
    max: int
    total: int


class Steady(TypedDict):
    """The steady state of one ``generate()``: ``steps`` steps from step ``first`` on."""

    steps: int
    first: int
    would_compile: Span
    host_syncs: Span
    warnings_64bit: Span


class RunReport(TypedDict):
    """One ``generate()`` call: its steps, what ran after the last one, where it was called from
    and in which decoding mode (None before transformers 4.39)."""

    steps: List[Counts]
    after: Counts
    steady: Optional[Steady]
    site: Optional[str]
    mode: Optional[str]


class Warning64Record(TypedDict):
    """One of torch_npu's 64-bit slow-path warnings: where torch_npu prints it from, for which
    op, its text, the first call site, how often, and whether it was printed (or silenced)."""

    file: str
    line: int
    op: str
    text: str
    site: str
    count: int
    printed: bool


class GuardRecord(TypedDict, total=False):
    """What the startup hook's compile-mode guard did in the process: ``ran`` and ``why`` not, or
    its decision (``ascend_env.hook.compile_guard.Decision``'s fields)."""

    ran: bool
    why: str
    apply: bool
    reason: str
    soc: Optional[str]
    soc_source: Optional[str]
    kernels: Optional[str]
    applied: bool
    error: Optional[str]


class PathsReport(TypedDict):
    """The dispatch-path model's findings in one process."""

    soc: str
    soc_assumed: bool
    jit_compile: bool
    jit_compile_set: Optional[bool]
    op_paths: str
    op_paths_source: str
    steady_from: int
    totals: Counts
    outside_generate: Counts
    generate: List[RunReport]
    warnings_64bit: List[Warning64Record]
    errors: List[str]
    compile_guard: GuardRecord


class MeasuredStep(TypedDict):
    """What one decoding step (or the time after the last) asked of the emulated CANN
    (:mod:`ascend_env.sim.cann_steps`)."""

    compiles: int
    aclop: int
    aclnn: int
    compiles_by_type: Dict[str, int]


class MeasuredRun(TypedDict):
    """One ``generate()`` call of one process on the emulated CANN, measured."""

    site: str
    mode: Optional[str]
    steps: List[MeasuredStep]
    after: Optional[MeasuredStep]


class LastFacts(TypedDict, total=False):
    """What a process's last report adds (:mod:`ascend_env.sim.startup`): whether it used the npu
    device, the dispatch-path model's findings, how the startup hook heard of torch_npu (None
    where the hook does not run)."""

    npu_used: bool
    paths: PathsReport
    hook_events: Optional[List[str]]
    cann: Dict[str, Any]
    cann_steps: List[MeasuredRun]
    silenced: bool
    fd2: Optional[List[int]]


class _Identity(TypedDict):
    pid: int


class ProcessReport(_Identity, total=False):
    """One audited Python process's report: who it is, the op table it ran, its fallbacks (op ->
    count, its own: a forked child subtracts what it inherited), how it ended (None until it
    did, or forever when a signal or a crash ended it), and what it learnt (``torch``: the
    simulator ran here; ``error``: why it could not start; ``unaudited``: why this Python ran
    outside the simulator; ``start`` and ``generation``: the process image, with ``pid``, as
    ``exec`` keeps the pid)."""

    start: int
    generation: int
    ppid: int
    argv: List[str]
    rank: Optional[str]
    origin: str
    table: Optional[str]
    fallbacks: Dict[str, int]
    end: Optional[ProcessEnd]
    torch: bool
    torch_npu: Optional[str]
    autoload: bool
    error: str
    extra_error: str
    npu_used: bool
    paths: PathsReport
    hook_events: Optional[List[str]]
    unaudited: str
    cann: Dict[str, Any]  # on the emulated CANN (ascend_env.sim.emulated.last_facts): its counters
    cann_steps: List[MeasuredRun]  # with --paths on the emulated CANN: its counters per decoding step
    silenced: bool  # torch_npu's warnings were silenced in this process
    fd2: Optional[List[int]]  # where its fd 2 went: device, inode
