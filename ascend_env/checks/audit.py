"""``audit``: run a command on the simulated NPU and collect every op that fell back to the CPU.

The command runs in its own session (so its process group can be stopped as one) with
``ascend_env/sim/shim`` first on ``PYTHONPATH``; its ``sitecustomize`` enables the simulator in
every Python process the command starts, forked ones included, and each process keeps its own
report up to date in a report directory (see ``ascend_env.sim.startup``). This module never
imports torch: the command's own Python does.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.metadata
import importlib.util
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Set, TypedDict

from ascend_env.exceptions import EnvironmentProblem, UsageError
from ascend_env.sim import compile_mode, optables, startup
from ascend_env.sim import paths as sim_paths

SHIM_DIR = Path(__file__).resolve().parent.parent / "sim" / "shim"

#: The version of ``audit --json``'s output; keys are only ever added within a version.
SCHEMA = 1
#: After the command exits, how long the processes it left behind may take to end by themselves.
LINGER_SECONDS = 3.0
#: After SIGTERM, how long processes have to write their reports and end before SIGKILL.
GRACE_SECONDS = 3.0
_TICK = 0.05
# How many processes that ended abnormally the text report names.
_LISTED = 10


class Interrupted(Exception):
    """SIGINT or SIGTERM reached the audit; the command was stopped and its reports removed."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


def _installed_torch_npu() -> Optional[Path]:
    """The package directory of the torch_npu installed in this Python, without importing it."""
    try:
        spec = importlib.util.find_spec("torch_npu")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def choose_table(torch_npu: Optional[str]) -> Dict[str, str]:
    """The environment that tells the audited processes which op table to run.

    An explicit release wins; otherwise the installed torch_npu's own YAML op lists, else the
    newest table. Returns the variables plus ``"label"`` (the table's name, for the report).
    """
    if torch_npu:
        version = optables.canonical(torch_npu)
        return {"label": version, startup.TORCH_NPU: version}
    package = _installed_torch_npu()
    if package is not None:
        try:
            version = importlib.metadata.version("torch_npu")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        try:
            disable = optables.has_fallback_disable(version)
        except UsageError:
            disable = False
        label = f"{version} (installed, {package})"
        return {
            "label": label, startup.OPLISTS: str(package), startup.LABEL: label,
            startup.FALLBACK_DISABLE: "1" if disable else "0",
        }
    version = optables.newest()
    return {"label": version, startup.TORCH_NPU: version}


def _audited_environment(table: Mapping[str, str], reports: Path,
                        base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """``base`` (default: this process's environment) set up for an audited command."""
    env = dict(os.environ if base is None else base)
    for key in (startup.TORCH_NPU, startup.OPLISTS, startup.LABEL, startup.FALLBACK_DISABLE):
        env.pop(key, None)
    env.update({k: v for k, v in table.items() if k != "label"})
    env[startup.REPORTS] = str(reports)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(SHIM_DIR) + (os.pathsep + path if path else "")
    # A real torch_npu, if installed, must not claim the PrivateUse1 backend first.
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    return env


def collect(reports: Path) -> List[dict[str, Any]]:
    """The reports the audited processes wrote, oldest pid first."""
    found = []
    for path in sorted(reports.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            found.append(data)
    return sorted(found, key=lambda r: r.get("pid", 0) if isinstance(r.get("pid"), int) else 0)


def _signal_name(number: int) -> str:
    """``"SIGSEGV"`` for 11; ``"signal 64"`` for a number without a name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe_exit(returncode: int) -> str:
    """How a process ended, from its wait status as subprocess gives it: "exited 3", "killed by SIGKILL"."""
    return f"killed by {_signal_name(-returncode)}" if returncode < 0 else f"exited {returncode}"


class Outcome:
    """How the command ran: its pid and exit status, whether it timed out, what audit had to stop."""

    def __init__(self, pid: int, returncode: int, timeout: Optional[float] = None, timed_out: bool = False,
                 stopped: int = 0) -> None:
        self.pid = pid
        self.returncode = returncode
        self.timeout = timeout
        self.timed_out = timed_out
        self.stopped = stopped

    def ended(self) -> str:
        """``"exited 0"``, ``"killed by SIGSEGV"`` or ``"timed out after 5 s"``."""
        if self.timed_out and self.timeout is not None:
            return f"timed out after {self.timeout:g} s"
        return describe_exit(self.returncode)


class Ending(NamedTuple):
    """How one audited process ended, in words, and whether that was abnormal."""

    ended: str
    abnormal: bool


def process_ending(report: Mapping[str, Any], outcome: Outcome) -> Ending:
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


class _Findings(TypedDict):
    table: str
    command: List[str]
    returncode: int
    processes: int
    errors: List[str]
    fallbacks: Dict[str, int]
    ended: str
    timed_out: bool
    timeout: Optional[float]
    stopped: int
    per_process: List[ProcessFindings]


class Findings(_Findings, total=False):
    """What :func:`run` found, in the order ``--json`` writes it; ``soc`` and ``paths`` only with
    the dispatch-path model (``ascend_env.sim.paths.summarize``)."""

    soc: Optional[Dict[str, Any]]
    paths: Dict[str, Any]


def findings_from(
    label: str, command: Sequence[str], outcome: Outcome, reports: Sequence[dict[str, Any]]
) -> Findings:
    """The audit's findings from the command's outcome and its processes' reports."""
    if not reports:
        raise EnvironmentProblem(
            "no Python process of the command ran on the simulated NPU, so nothing was audited "
            f"(the command {outcome.ended()}).",
            "run a Python command that can import ascend_env and torch, e.g. -- python my_script.py",
        )
    errors = [str(report["error"]) for report in reports if "error" in report]
    per_process = [_process_findings(report, outcome) for report in reports if "error" not in report]
    totals: collections.Counter[str] = collections.Counter()
    for process in per_process:
        totals.update(process["fallbacks"])
    return {
        "table": label,
        "command": list(command),
        "returncode": outcome.returncode,
        "processes": len(per_process),
        "errors": errors,
        "fallbacks": dict(sorted(totals.items(), key=lambda item: (-item[1], item[0]))),
        "ended": outcome.ended(),
        "timed_out": outcome.timed_out,
        "timeout": outcome.timeout,
        "stopped": outcome.stopped,
        "per_process": per_process,
    }


def _process_findings(report: Mapping[str, Any], outcome: Outcome) -> ProcessFindings:
    ending = process_ending(report, outcome)
    return {
        "pid": report.get("pid"), "ppid": report.get("ppid"), "argv": report.get("argv"),
        "rank": report.get("rank"), "origin": report.get("origin"),
        "fallbacks": {str(k): int(v) for k, v in dict(report.get("fallbacks") or {}).items()},
        "is_command": report.get("pid") == outcome.pid, "ended": ending.ended, "abnormal": ending.abnormal,
    }


def run(command: Sequence[str], torch_npu: Optional[str] = None, timeout: Optional[float] = None,
        soc: Optional[str] = None, paths: bool = False) -> Findings:
    """Run ``command`` on the simulated NPU and return the audit's findings (see ``findings_from``).

    Keys: ``table``, ``command``, ``returncode``, ``processes`` (how many Python processes ran on
    the simulator), ``errors`` (processes where it could not start), ``fallbacks`` (op -> count),
    ``ended`` (``"exited 3"``, ``"killed by SIGSEGV"``, ``"timed out after 5 s"``), ``timed_out``,
    ``timeout``, ``stopped`` (processes still running that audit stopped) and ``per_process``
    (each process's fallbacks and how it ended). After ``timeout`` seconds the command and every
    process it started are stopped. SIGINT or SIGTERM to this process stops them as well, removes
    the reports and raises :class:`Interrupted`. With ``paths``, also ``soc`` and ``paths``
    (``ascend_env.sim.paths.summarize``): torch_npu's dispatch paths modelled on the SoC ``soc``.
    """
    _check_arguments(command, timeout)
    table = choose_table(torch_npu)
    chosen_soc = sim_paths.choose_soc(soc) if paths or soc else None
    if chosen_soc is not None:
        table[compile_mode.SOC_ENV] = chosen_soc["name"]
    if paths:
        table[sim_paths.ENV] = "1"
    scratch = Path(tempfile.mkdtemp(prefix="ascend-env-audit-"))
    try:
        env = _audited_environment(table, scratch)
        if not paths:
            env.pop(sim_paths.ENV, None)
        outcome = _supervise(list(command), env, timeout, scratch)
        reports = collect(scratch)
    finally:
        _remove(scratch)
    findings = findings_from(table["label"], command, outcome, reports)
    if paths:
        findings["soc"] = chosen_soc
        findings["paths"] = sim_paths.summarize(reports, chosen_soc)
    return findings


def _check_arguments(command: Sequence[str], timeout: Optional[float]) -> None:
    if not command:
        raise UsageError(
            "audit needs a command to run.",
            "put it after '--', e.g. ascend-env audit --torch-npu 2.1.0.post6 -- python my_script.py",
        )
    if timeout is not None and not timeout > 0:
        raise UsageError(f"--timeout must be a positive number of seconds, not {timeout:g}.",
                         "give the seconds the command may run, e.g. --timeout 600")


def _remove(directory: Path) -> None:
    import shutil

    for _ in range(3):  # a process being killed may still be writing its report
        shutil.rmtree(directory, ignore_errors=True)
        if not directory.exists():
            return
        time.sleep(_TICK)


class _Signals:
    """SIGINT and SIGTERM while the command runs: the first raises Interrupted, later ones hurry."""

    def __init__(self) -> None:
        self.raising = True
        self.hurry = False

    def handle(self, signum: int, frame: object) -> None:
        if self.raising:
            self.raising = False
            raise Interrupted(signum)
        self.hurry = True

    @contextlib.contextmanager
    def installed(self) -> Iterator[_Signals]:
        if threading.current_thread() is not threading.main_thread():
            yield self  # signal handlers can only be set in the main thread
            return
        previous = {sig: signal.signal(sig, self.handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _supervise(command: List[str], env: Dict[str, str], timeout: Optional[float], reports: Path) -> Outcome:
    """Run the command in a session of its own; stop it after ``timeout`` and on SIGINT/SIGTERM."""
    signals = _Signals()
    with signals.installed():
        try:
            # A session of its own: one process group to stop, and the terminal's Ctrl-C reaches
            # the audit, which then stops the command, instead of the command alone.
            proc = subprocess.Popen(command, env=env, start_new_session=True)
        except OSError as exc:
            raise UsageError(
                f"cannot run {command[0]!r}: {exc.strerror or exc}.", "check the command after '--'"
            ) from None
        try:
            try:
                proc.wait(timeout=timeout)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
            stopped = _stop(proc, reports, 0.0 if timed_out else LINGER_SECONDS, signals)
            returncode = proc.wait()
        except BaseException:
            signals.raising = False
            _stop(proc, reports, 0.0, signals)
            raise
    return Outcome(proc.pid, returncode, timeout, timed_out, stopped)


def _stop(proc: subprocess.Popen[bytes], reports: Path, linger: float, signals: _Signals) -> int:
    """Let what is left of the command end within ``linger`` seconds, then SIGTERM, then SIGKILL it.

    Returns how many processes were still running and had to be signalled.
    """
    group = proc.pid  # the session leader's pid is the process group's id
    deadline = time.monotonic() + linger
    members, strays = _alive(proc, group, reports)
    while (members or strays) and time.monotonic() < deadline and not signals.hurry:
        time.sleep(_TICK)
        members, strays = _alive(proc, group, reports)
    stopped = len(members | strays)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not (members or strays):
            break
        if members:
            _kill(os.killpg, group, sig)
        for pid in strays:
            _kill(os.kill, pid, sig)
        deadline = time.monotonic() + GRACE_SECONDS
        while (members or strays) and time.monotonic() < deadline:
            if signals.hurry and sig == signal.SIGTERM:
                break
            time.sleep(_TICK)
            members, strays = _alive(proc, group, reports)
    return stopped


def _kill(send: Any, target: int, sig: int) -> None:
    try:
        send(target, sig)
    except OSError:  # already gone
        pass


def _alive(proc: subprocess.Popen[bytes], group: int, reports: Path) -> tuple[Set[int], Set[int]]:
    """Live processes of the command: those in its process group, and audited ones outside it
    (torchrun, for one, starts its ranks in sessions of their own)."""
    proc.poll()  # reap the leader, so that it is not counted as a zombie member
    members = _group_members(group)
    return members, _audited_elsewhere(reports, members)


def _group_members(group: int) -> Set[int]:
    """The live (not zombie) processes whose process group is ``group``."""
    if not os.path.isdir("/proc"):
        try:
            os.killpg(group, 0)
        except OSError:
            return set()
        return {group}
    found = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        state = _stat(int(entry.name))
        if state is not None and state[1] == group:
            found.add(int(entry.name))
    return found


def _stat(pid: int) -> Optional[tuple[str, int]]:
    """(state, process group) of a live process from /proc/PID/stat; None if gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()  # after "pid (comm) "; comm may hold spaces
    if len(fields) < 3 or fields[0] in ("Z", "X", "x"):
        return None
    return fields[0], int(fields[2])


def _audited_elsewhere(reports: Path, exclude: Set[int]) -> Set[int]:
    """Running processes outside ``exclude`` whose environment names this audit's report directory."""
    marker = f"{startup.REPORTS}={reports}".encode()
    found = set()
    for report in collect(reports):
        pid = report.get("pid")
        if not isinstance(pid, int) or pid in exclude or report.get("end") is not None:
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0") and _stat(pid) is not None:
            found.add(pid)
    return found


def exit_code(findings: Findings, fail_on: Sequence[str] = ("fallbacks",)) -> int:
    """1 if the simulator failed to start, the command failed or timed out, or a finding of
    ``fail_on`` is present (``fallbacks``; with ``--paths``: ``compiles``, ``syncs``, ``64bit``);
    else 0."""
    if findings["errors"] or findings["returncode"] != 0 or findings.get("timed_out"):
        return 1
    if "fallbacks" in fail_on and findings["fallbacks"]:
        return 1
    if "paths" in findings and sim_paths.failing(findings["paths"], tuple(fail_on)):
        return 1
    return 0


def _plural(count: int, word: str, suffix: str = "s") -> str:
    return f"{count} {word}{suffix if count != 1 else ''}"


def _who(process: Mapping[str, Any]) -> str:
    argv = " ".join(str(a) for a in process.get("argv") or []) or "?"
    if len(argv) > 60:
        argv = argv[:57] + "..."
    rank = f", rank {process['rank']}" if process.get("rank") is not None else ""
    return f"pid {process.get('pid')} ({argv}{rank})"


def _where(name: str, per_process: Sequence[Mapping[str, Any]]) -> str:
    """Which processes an op fell back in: "rank 1", "pids 12, 14" or "3 processes"."""
    hits = [p for p in per_process if name in p.get("fallbacks", {})]
    ranks = [str(p["rank"]) for p in hits if p.get("rank") is not None]
    if hits and len(ranks) == len(hits) and len(set(ranks)) == len(ranks):
        return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(sorted(ranks, key=_rank_key))
    if len(hits) <= 3:
        return ("pid " if len(hits) == 1 else "pids ") + ", ".join(str(p.get("pid")) for p in hits)
    return _plural(len(hits), "process", "es")


def _rank_key(rank: str) -> tuple[int, str]:
    return (int(rank), rank) if rank.isdigit() else (1 << 30, rank)


def format_text(findings: Findings) -> str:
    """The human-readable report."""
    lines = [f"audit: torch_npu {findings['table']} op table on the simulated NPU"]
    if findings.get("timed_out"):
        lines.append(f"the command {findings['ended']}; audit stopped it")
    elif findings["returncode"] < 0:
        lines.append(f"the command was {describe_exit(findings['returncode'])}")
    elif findings["returncode"] != 0:
        lines.append(f"the command exited {findings['returncode']}")
    if findings.get("stopped") and not findings.get("timed_out"):
        lines.append(f"audit stopped {_plural(findings['stopped'], 'process', 'es')} "
                     "still running after the command ended")
    for error in findings["errors"]:
        lines.append(f"the simulated NPU could not start in one process: {error}")
    per_process = findings.get("per_process", [])
    # The command's own process is the line above; the list is for the others.
    abnormal = [p for p in per_process if p.get("abnormal") and not p.get("is_command")]
    if abnormal:
        lines.append(f"{_plural(len(abnormal), 'Python process', 'es')} ended abnormally:")
        lines.extend(f"  {_who(p)}: {p['ended']}" for p in abnormal[:_LISTED])
        if len(abnormal) > _LISTED:
            lines.append(f"  ... and {len(abnormal) - _LISTED} more (--json lists them all)")
    fallbacks = findings["fallbacks"]
    processes = findings["processes"]
    where = _plural(processes, "Python process", "es")
    if not fallbacks:
        lines.append(f"no op fell back to the CPU ({where})")
        return "\n".join(lines + _paths_text(findings))
    lines.append(f"{_plural(len(fallbacks), 'op')} fell back to the CPU ({where}):")
    width = max(len(name) for name in fallbacks)
    count_width = max(len(str(count)) for count in fallbacks.values())
    for name, count in fallbacks.items():
        line = f"  {name.ljust(width)}  {count}"
        if processes > 1 and per_process:
            line = f"  {name.ljust(width)}  {str(count).rjust(count_width)}  ({_where(name, per_process)})"
        lines.append(line)
    return "\n".join(lines + _paths_text(findings))


def _paths_text(findings: Findings) -> List[str]:
    return sim_paths.format_text(findings["paths"]) if "paths" in findings else []
