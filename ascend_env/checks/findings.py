"""What an audit found: how the command and each of its Python processes ended (:class:`Outcome`,
:func:`process_ending`), and the findings over every process's report (:func:`findings_from`:
``audit --json``'s document, :class:`Findings`).
"""

from __future__ import annotations

import collections
import signal
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, TypedDict

from ascend_env.checks import measured_paths, paths_report
from ascend_env.exceptions import EnvironmentProblem
from ascend_env.sim.reports import ProcessReport

__all__ = [
    "Ending",
    "Findings",
    "Outcome",
    "ProcessFindings",
    "Unaudited",
    "describe_exit",
    "findings_from",
    "plural",
    "process_ending",
]


def plural(count: int, word: str, suffix: str = "s") -> str:
    """``"1 op"``, ``"3 ops"``; ``suffix`` for words such as process (``"es"``)."""
    return f"{count} {word}{suffix if count != 1 else ''}"


def _signal_name(number: int) -> str:
    """``"SIGSEGV"`` for 11; ``"signal 64"`` for a number without a name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe_exit(returncode: int) -> str:
    """How a process ended, from its wait status as subprocess gives it: "exited 3", "killed by SIGKILL"."""
    return f"killed by {_signal_name(-returncode)}" if returncode < 0 else f"exited {returncode}"


class Unaudited(TypedDict):
    """A Python process of the command that ran outside the simulator, and why."""

    pid: int
    argv: List[str]
    why: str


class Outcome:
    """How the command ran: its pid and exit status, whether it timed out, what audit had to stop,
    and the Python processes of its tree that ran unaudited."""

    def __init__(
        self,
        pid: int,
        returncode: int,
        timeout: Optional[float] = None,
        timed_out: bool = False,
        stopped: int = 0,
        unaudited: Sequence[Unaudited] = (),
    ) -> None:
        self.pid = pid
        self.returncode = returncode
        self.timeout = timeout
        self.timed_out = timed_out
        self.stopped = stopped
        self.unaudited = list(unaudited)

    def ended(self) -> str:
        """``"exited 0"``, ``"killed by SIGSEGV"`` or ``"timed out after 5 s"``."""
        if self.timed_out and self.timeout is not None:
            return f"timed out after {self.timeout:g} s"
        return describe_exit(self.returncode)


class Ending(NamedTuple):
    """How one audited process ended, in words, and whether that was abnormal."""

    ended: str
    abnormal: bool


def process_ending(report: ProcessReport, outcome: Outcome) -> Ending:
    """How one audited process ended.

    The command's own process is described by its exit status; the others by the last report
    they wrote (``"end"`` is None when they died before writing one: a signal or a crash).
    """
    if report.get("pid") == outcome.pid:
        return Ending(describe_exit(outcome.returncode), outcome.returncode != 0)
    end = report.get("end")
    if not isinstance(end, dict):
        return Ending("ended without a last report (killed by a signal, or crashed)", True)
    how = end.get("how")
    if how == "exit":
        return Ending("exited", False)
    if how == "exec":
        return Ending("replaced itself (exec)", False)
    if how == "os._exit":
        return Ending(f"os._exit({end.get('code')})", end.get("code") != 0)
    if how == "exception":
        return Ending(f"uncaught {end.get('exception')}", True)
    if how == "signal":
        # SIGTERM is how parents stop their workers (multiprocessing.Pool.terminate, torchrun):
        # not abnormal by itself; a timeout or a failed command says so at the top.
        return Ending(f"terminated by {end.get('signal')}", end.get("signal") != "SIGTERM")
    return Ending(f"ended ({how})", True)


class ProcessFindings(TypedDict):
    """One audited Python process: who it was, what fell back in it, how it ended."""

    pid: Optional[int]
    ppid: Optional[int]
    argv: Optional[List[str]]
    rank: Optional[str]
    origin: Optional[str]
    fallbacks: Dict[str, int]
    is_command: bool
    ended: str
    abnormal: bool
    torch: bool
    torch_npu: Optional[str]
    npu_used: Optional[bool]
    autoload: Optional[bool]
    hook_events: Optional[List[str]]


class _Findings(TypedDict):
    table: str
    table_chosen: str
    command: List[str]
    returncode: int
    processes: int
    errors: List[str]
    fallbacks: Dict[str, int]
    ended: str
    timed_out: bool
    timeout: Optional[float]
    stopped: int
    unaudited: List[Unaudited]
    without_torch_npu: List[int]
    bad_reports: List[str]
    per_process: List[ProcessFindings]


class Findings(_Findings, total=False):
    """What :func:`ascend_env.checks.audit.run` found, in the order ``--json`` writes it; ``soc``
    and ``paths`` only with the dispatch-path model (``ascend_env.checks.paths_report.summarize``);
    ``backend`` says what ran (the simulator where it is missing)."""

    soc: Optional[paths_report.SocChoice]
    paths: paths_report.PathsSummary
    # On the emulated CANN (ascend_env.checks.emulated_audit.judge): what ran, how fallbacks are
    # counted ("processes": CAUTION lines), what keeps the run from proving anything, the entry
    # points the emulated CANN lacks that were called, and its counters over every process.
    backend: Dict[str, Any]
    fallbacks_counted: str
    not_proven: List[str]
    unimplemented: List[str]
    cann: Dict[str, Dict[str, int]]
    # With --paths on the emulated CANN (ascend_env.checks.measured_paths): the binary's counts per
    # decoding step, and why the model's figures beside them are missing or partial (None: whole).
    paths_measured: measured_paths.MeasuredSummary
    paths_model: Optional[str]


def findings_from(
    label: str,
    command: Sequence[str],
    outcome: Outcome,
    reports: Sequence[ProcessReport],
    bad_reports: Sequence[str] = (),
    chosen: str = "given",
    where: str = "the simulated NPU",
) -> Findings:
    """The audit's findings from the command's outcome and its processes' reports.

    Raises EnvironmentProblem where nothing ran on the simulator (``where``: on the emulated CANN,
    its words): no Python process imported torch (or none reported), none ran unaudited, and the
    command did not time out.
    """
    audited = [r for r in reports if "unaudited" not in r]
    unaudited = list(outcome.unaudited) + [
        {"pid": int(r["pid"]), "argv": list(r.get("argv") or []), "why": str(r["unaudited"])}
        for r in reports
        if "unaudited" in r
    ]
    errors = [str(report["error"]) for report in audited if "error" in report]
    simulated = any(r.get("torch", True) for r in audited)
    if not (simulated or errors or unaudited or bad_reports or outcome.timed_out):
        seen = (
            f"{plural(len(audited), 'Python process', 'es')} ran, and none imported torch"
            if audited
            else "no Python process reported"
        )
        emulated = where != "the simulated NPU"
        seen = seen.replace("imported torch", "imported torch_npu") if emulated else seen
        once = "torch_npu" if emulated else "torch"
        raise EnvironmentProblem(
            f"no Python process of the command ran on {where}, so nothing was audited "
            f"(the command {outcome.ended()}): {seen}; a Python process runs there once it imports {once}.",
            f"run a Python command whose Python has {once} and ascend-env, e.g. -- python my_script.py",
        )
    per_process = [_process_findings(report, outcome) for report in audited if "error" not in report]
    totals: collections.Counter[str] = collections.Counter()
    for process in per_process:
        totals.update(process["fallbacks"])
    return {
        "table": label,
        "table_chosen": chosen,
        "command": list(command),
        "returncode": outcome.returncode,
        "processes": len(per_process),
        "errors": errors,
        "fallbacks": dict(sorted(totals.items(), key=lambda item: (-item[1], item[0]))),
        "ended": outcome.ended(),
        "timed_out": outcome.timed_out,
        "timeout": outcome.timeout,
        "stopped": outcome.stopped,
        "unaudited": unaudited,
        "without_torch_npu": [int(p["pid"] or 0) for p in per_process if _without_torch_npu(p)],
        "bad_reports": list(bad_reports),
        "per_process": per_process,
    }


def _without_torch_npu(process: ProcessFindings) -> bool:
    """Whether a process used the npu device without importing torch_npu, where the simulated
    release does not autoload: on a real NPU it fails (no npu device without torch_npu)."""
    return bool(process["npu_used"]) and process["torch_npu"] is None and not process["autoload"]


def _process_findings(report: ProcessReport, outcome: Outcome) -> ProcessFindings:
    ending = process_ending(report, outcome)
    return {
        "pid": report.get("pid"),
        "ppid": report.get("ppid"),
        "argv": report.get("argv"),
        "rank": report.get("rank"),
        "origin": report.get("origin"),
        "fallbacks": {str(k): int(v) for k, v in dict(report.get("fallbacks") or {}).items()},
        "is_command": report.get("pid") == outcome.pid,
        "ended": ending.ended,
        "abnormal": ending.abnormal,
        "torch": bool(report.get("torch", True)),
        "torch_npu": report.get("torch_npu"),
        "npu_used": report.get("npu_used"),
        "autoload": report.get("autoload"),
        "hook_events": report.get("hook_events"),
    }
