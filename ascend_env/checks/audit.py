"""``audit``: run a command on the simulated NPU and collect every op that fell back to the CPU.

The command runs in its own session (so its process group can be stopped as one) with
``ascend_env/sim/shim`` first on ``PYTHONPATH``; its ``sitecustomize`` reports every Python process
the command starts, forked ones included, to a report directory, and enables the simulator in
those that import torch (see :mod:`ascend_env._audited`). The audit follows the command's whole
process tree (:mod:`ascend_env.checks.proctree`), so that a Python process that ran outside the
simulator (``python -I``, ``-E``, ``-S``, a replaced ``PYTHONPATH``) is counted, and a command
that leaves processes behind is stopped. A watchdog stops the tree and removes the report
directory if the audit itself is killed. This module never imports torch: the command's own
Python does.
"""

from __future__ import annotations

import collections
import importlib.metadata
import importlib.util
import os
import signal
import stat
import tempfile
import time
from pathlib import Path
from typing import (
    IO,
    Any,
    Dict,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Set,
    Tuple,
    TypedDict,
    Union,
    cast,
)

from packaging.version import InvalidVersion, Version

from ascend_env import _audited
from ascend_env.checks import paths_report
from ascend_env.exceptions import EnvironmentProblem, UsageError
from ascend_env.sim import compile_mode, optables, startup
from ascend_env.sim import paths as sim_paths
from ascend_env.sim.reports import ProcessReport
from ascend_env.utils import jsontext, proctree, supervise

SHIM_DIR = Path(__file__).resolve().parent.parent / "sim" / "shim"

#: The version of ``audit --json``'s output; keys are only ever added within a version.
SCHEMA = 1
#: ``--torch-npu affected``: every release that lacks an NPU kernel ascend-env registers.
AFFECTED = "affected"
#: A report larger than this is not read (a process wrote over the report directory).
MAX_REPORT_BYTES = 64 << 20
#: The report directories' names: ``ascend-env-audit-<pid>-<start>-<random>``.
SCRATCH_PREFIX = "ascend-env-audit-"
# torch_npu's first release with a torch.backends entry point (Ascend/pytorch v2.5.1-7.0.0 setup.py).
_AUTOLOAD_FROM = Version("2.5.1")
_TICK = proctree.TICK
#: SIGINT or SIGTERM reached the audit; the command was stopped and its reports removed.
Interrupted = supervise.Interrupted
_FLAG_WHY = {
    "I": "-I (isolated mode: PYTHONPATH is ignored, so the audit's sitecustomize never runs)",
    "E": "-E (PYTHON* variables are ignored, PYTHONPATH among them: the audit's sitecustomize never runs)",
    "S": "-S (no site module: no sitecustomize runs)",
}
# How many processes that ended abnormally (or ran unaudited) the text report names.
_LISTED = 10


# ------------------------------------------------------------------------------- which table


def affected_releases() -> List[str]:
    """The releases with a table that lack an NPU kernel ascend-env registers (the registry's
    fixes): 2.1.0.post3 to 2.1.0.post6, 2.2.x and 2.3.1."""
    from ascend_env.kernels.registry import FIXES

    return [r for r in optables.releases() if any(fix.needed_by(r) for fix in FIXES)]


def releases_asked(value: Optional[str]) -> List[Optional[str]]:
    """``--torch-npu``'s releases: one, several comma-separated, or ``affected``; ``[None]`` when
    none was named (the installed torch_npu, else the oldest release)."""
    if value is None:
        return [None]
    chosen: List[Optional[str]] = []
    for part in (p.strip() for p in value.split(",")):
        if not part:
            continue
        found = affected_releases() if part.lower() == AFFECTED else [optables.canonical(part)]
        chosen += [release for release in found if release not in chosen]
    if not chosen:
        raise UsageError(f"--torch-npu {value!r} names no release.",
                         f"name one or more, e.g. --torch-npu 2.1.0.post6,2.2.0, or --torch-npu {AFFECTED}")
    return chosen


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
    """The environment that tells the audited processes (and verify's simulated smoke test) which
    op table to run.

    An explicit release wins; otherwise the installed torch_npu's own YAML op lists; otherwise the
    oldest release with a table: it lacks the kernels the affected releases lack, where a newer one
    would hide their fallbacks. Returns the variables plus ``"label"`` (the table's name, for the
    report), ``"chosen"`` (``given``, ``installed`` or ``oldest``) and ``"autoloads"`` (``1`` where
    the release is loaded by ``import torch`` itself).
    """
    if torch_npu:
        version = optables.canonical(torch_npu)
        return {"label": version, "chosen": "given", "autoloads": _autoloads(version),
                startup.TORCH_NPU: version}
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
            "label": label, "chosen": "installed", "autoloads": _installed_autoloads(),
            startup.OPLISTS: str(package), startup.LABEL: label,
            startup.FALLBACK_DISABLE: "1" if disable else "0",
        }
    version = optables.releases()[0]
    return {"label": version, "chosen": "oldest", "autoloads": _autoloads(version),
            startup.TORCH_NPU: version}


def _autoloads(version: str) -> str:
    """``1`` where torch_npu ``version`` has a ``torch.backends`` entry point (>= 2.5.1)."""
    try:
        return "1" if Version(version) >= _AUTOLOAD_FROM else "0"
    except InvalidVersion:
        return "0"


def _installed_autoloads() -> str:
    """``1`` where the installed torch_npu declares a ``torch.backends`` entry point."""
    try:
        points = importlib.metadata.distribution("torch_npu").entry_points
    except importlib.metadata.PackageNotFoundError:
        return "0"
    return "1" if any(point.group == "torch.backends" for point in points) else "0"


def _audited_environment(table: Mapping[str, str], reports: Path,
                         base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """``base`` (default: this process's environment) set up for an audited command."""
    env = dict(os.environ if base is None else base)
    for key in startup.VARIABLES:
        env.pop(key, None)
    env.update({k: v for k, v in table.items() if k not in ("label", "chosen", "autoloads")})
    env[_audited.REPORTS] = str(reports)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(SHIM_DIR) + (os.pathsep + path if path else "")
    # torch loads backends at import unless this is "0" (torch/__init__.py); the simulated release
    # stands in for torch_npu's entry point as the user's setting allows.
    user_autoload = env.get("TORCH_DEVICE_BACKEND_AUTOLOAD", "1") == "1"
    env[startup.AUTOLOAD] = "1" if table.get("autoloads") == "1" and user_autoload else "0"
    # A real torch_npu, if installed, must not claim the PrivateUse1 backend first.
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    return env


# ------------------------------------------------------------------------------- reports


class Reports(NamedTuple):
    """What the processes wrote: the reports that read well, and a problem for each that did not."""

    good: List[ProcessReport]
    bad: List[str]


def read_reports(directory: Path) -> Reports:
    """The reports in ``directory``, oldest pid first, read as the state files are read: bounded
    in size and depth, each value checked; a report that is not as the reporter writes it is a
    problem (``"<file>: <why>"``), never an exception."""
    good: List[ProcessReport] = []
    bad: List[str] = []
    try:
        names = sorted(name for name in os.listdir(directory) if name.endswith(".json"))
    except OSError:
        names = []
    for name in names:
        problem, report = _read_report(directory / name)
        if report is not None:
            good.append(report)
        elif problem is not None:
            bad.append(f"{name}: {problem}")
    good.sort(key=lambda r: r["pid"])
    return Reports(good, bad)


def collect(reports: Path) -> List[ProcessReport]:
    """The reports the audited processes wrote that read well, oldest pid first."""
    return read_reports(reports).good


def _read_report(path: Path) -> Tuple[Optional[str], Optional[ProcessReport]]:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_REPORT_BYTES + 1)
    except FileNotFoundError:  # replaced or removed as it was listed
        return None, None
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})", None
    if len(data) > MAX_REPORT_BYTES:
        return f"larger than {MAX_REPORT_BYTES} bytes", None
    try:
        value = jsontext.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return f"is not JSON ({str(exc)[:120]})", None
    problem = _report_problem(value)
    return (problem, None) if problem else (None, cast(ProcessReport, value))


_OPTIONAL_STR = ("rank", "origin", "table", "torch_npu", "error", "unaudited", "extra_error")
_OPTIONAL_BOOL = ("torch", "npu_used", "autoload")


def _report_problem(value: Any) -> Optional[str]:
    """Why ``value`` is not a report as :class:`ascend_env._audited.Reporter` writes it."""
    if not isinstance(value, dict):
        return f"holds a {type(value).__name__}, not an object"
    if not _is_int(value.get("pid")):
        return "has no pid"
    if value.get("ppid") is not None and not _is_int(value["ppid"]):
        return "has a ppid that is not a number"
    argv = value.get("argv")
    if argv is not None and not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
        return "has an argv that is not a list of strings"
    for key in _OPTIONAL_STR:
        if value.get(key) is not None and not isinstance(value[key], str):
            return f"has a {key} that is not a string"
    for key in _OPTIONAL_BOOL:
        if key in value and not isinstance(value[key], bool):
            return f"has a {key} that is not true or false"
    fallbacks = value.get("fallbacks", {})
    if not isinstance(fallbacks, dict) or not all(
            isinstance(k, str) and _is_int(v) and v >= 0 for k, v in fallbacks.items()):
        return "has fallbacks that are not counts by op"
    end = value.get("end")
    if end is not None and not isinstance(end, dict):
        return "has an end that is not an object"
    events = value.get("hook_events")
    if events is not None and not (isinstance(events, list) and all(isinstance(e, str) for e in events)):
        return "has hook_events that are not a list of strings"
    if "paths" in value and not isinstance(value["paths"], dict):
        return "has paths that are not an object"
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# ------------------------------------------------------------------------------- endings


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

    def __init__(self, pid: int, returncode: int, timeout: Optional[float] = None, timed_out: bool = False,
                 stopped: int = 0, unaudited: Sequence[Unaudited] = ()) -> None:
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


# ------------------------------------------------------------------------------- findings


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
    """What :func:`run` found, in the order ``--json`` writes it; ``soc`` and ``paths`` only with
    the dispatch-path model (``ascend_env.sim.paths.summarize``)."""

    soc: Optional[paths_report.SocChoice]
    paths: paths_report.PathsSummary


def findings_from(
    label: str, command: Sequence[str], outcome: Outcome, reports: Sequence[ProcessReport],
    bad_reports: Sequence[str] = (), chosen: str = "given",
) -> Findings:
    """The audit's findings from the command's outcome and its processes' reports.

    Raises EnvironmentProblem where nothing ran on the simulator: no Python process imported torch
    (or none reported), none ran unaudited, and the command did not time out.
    """
    audited = [r for r in reports if "unaudited" not in r]
    unaudited = list(outcome.unaudited) + [
        {"pid": int(r["pid"]), "argv": list(r.get("argv") or []), "why": str(r["unaudited"])}
        for r in reports if "unaudited" in r]
    errors = [str(report["error"]) for report in audited if "error" in report]
    simulated = any(r.get("torch", True) for r in audited)
    if not (simulated or errors or unaudited or bad_reports or outcome.timed_out):
        seen = (f"{_plural(len(audited), 'Python process', 'es')} ran, and none imported torch" if audited
                else "no Python process reported")
        raise EnvironmentProblem(
            "no Python process of the command ran on the simulated NPU, so nothing was audited "
            f"(the command {outcome.ended()}): {seen}; a Python process runs on the simulator once it "
            "imports torch.",
            "run a Python command whose Python has torch and ascend-env, e.g. -- python my_script.py",
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
        "pid": report.get("pid"), "ppid": report.get("ppid"), "argv": report.get("argv"),
        "rank": report.get("rank"), "origin": report.get("origin"),
        "fallbacks": {str(k): int(v) for k, v in dict(report.get("fallbacks") or {}).items()},
        "is_command": report.get("pid") == outcome.pid, "ended": ending.ended, "abnormal": ending.abnormal,
        "torch": bool(report.get("torch", True)), "torch_npu": report.get("torch_npu"),
        "npu_used": report.get("npu_used"), "autoload": report.get("autoload"),
        "hook_events": report.get("hook_events"),
    }


# ------------------------------------------------------------------------------- running


def run(command: Sequence[str], torch_npu: Optional[str] = None, timeout: Optional[float] = None,
        soc: Optional[str] = None, paths: bool = False, stdout: Union[None, int, IO[Any]] = None) -> Findings:
    """Run ``command`` on the simulated NPU and return the audit's findings (see ``findings_from``).

    Keys: ``table``, ``table_chosen`` (``given``, ``installed``, ``oldest``), ``command``,
    ``returncode``, ``processes`` (how many Python processes were audited), ``errors`` (processes
    where the simulator could not start), ``fallbacks`` (op -> count), ``ended`` (``"exited 3"``,
    ``"killed by SIGSEGV"``, ``"timed out after 5 s"``), ``timed_out``, ``timeout``, ``stopped``
    (processes still running that audit stopped), ``unaudited`` (Python processes that ran outside
    the simulator, and why), ``without_torch_npu`` (pids that used the npu device without
    importing torch_npu, where the release needs it), ``bad_reports`` and ``per_process``. After
    ``timeout`` seconds the command and every process it started are stopped. SIGINT or SIGTERM to
    this process stops them as well, removes the reports and raises :class:`Interrupted`. With
    ``paths``, also ``soc`` and ``paths`` (``ascend_env.sim.paths.summarize``). ``stdout``: where
    the command's standard output goes, a file or a descriptor (default: this process's).
    """
    _check_arguments(command, timeout)
    table = choose_table(torch_npu)
    chosen_soc = paths_report.choose_soc(soc) if paths or soc else None
    if chosen_soc is not None:
        table[compile_mode.SOC_ENV] = chosen_soc["name"]
    if paths:
        table[sim_paths.ENV] = "1"
    remove_stale_scratch()
    scratch = _make_scratch()
    try:
        env = _audited_environment(table, scratch)
        if not paths:
            env.pop(sim_paths.ENV, None)
        if chosen_soc is None:
            compile_mode.export_soc(env)
        try:
            supervised = supervise.supervise(command, env, scratch, _audited.REPORTS, timeout, stdout,
                                             lambda: _reported_pids(scratch))
        except supervise.NotStarted as exc:
            raise UsageError(f"{exc}.", "check the command after '--'") from None
        outcome = Outcome(supervised.pid, supervised.returncode, timeout, supervised.timed_out,
                          supervised.stopped, _unaudited(supervised.tree, scratch))
        reports = read_reports(scratch)
    finally:
        _remove(scratch)
    findings = findings_from(table["label"], command, outcome, reports.good, reports.bad, table["chosen"])
    if paths:
        findings["soc"] = chosen_soc
        try:
            findings["paths"] = paths_report.summarize(reports.good, chosen_soc)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            findings["bad_reports"].append(f"the dispatch-path model's findings cannot be read ({exc!r})")
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


def _make_scratch() -> Path:
    """A new report directory, named after this audit (pid and start time) so that the next
    audit can tell whether its audit is gone."""
    me = os.getpid()
    return Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{me}-{proctree.start_time(me) or 0}-"))


def remove_stale_scratch(directory: Optional[str] = None) -> List[str]:
    """Remove the report directories of audits that are gone (killed before they could), owned
    by this user, in ``directory`` (default: the temporary directory); returns their paths."""
    directory = tempfile.gettempdir() if directory is None else directory
    removed: List[str] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(SCRATCH_PREFIX):
            continue
        words = entry.name[len(SCRATCH_PREFIX):].split("-")
        if len(words) < 3 or not words[0].isdigit() or not words[1].isdigit():
            continue  # not named by this release: whose it is cannot be told
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            continue
        if proctree.start_time(int(words[0])) == int(words[1]):
            continue  # its audit still runs
        _remove(Path(entry.path))
        removed.append(entry.path)
    return removed


def _remove(directory: Path) -> None:
    import shutil

    for _ in range(3):  # a process being killed may still be writing its report
        shutil.rmtree(directory, ignore_errors=True)
        if not directory.exists():
            return
        time.sleep(_TICK)


def _reported_pids(reports: Path) -> Set[int]:
    """The pids that wrote a report (from the file names: ``<pid>-<random>.json``)."""
    try:
        names = os.listdir(reports)
    except OSError:
        return set()
    return {int(name.split("-", 1)[0]) for name in names if name.split("-", 1)[0].isdigit()}


def _unaudited(tree: proctree.Tree, reports: Path) -> List[Unaudited]:
    """The Python processes of the tree that wrote no report, and why: the audit's
    ``sitecustomize`` never ran in them. A process forked from a reporting one (same command
    line) is not among them: it inherited the reporter, and a fork that execs at once writes none."""
    reported = _reported_pids(reports)
    members = tree.members
    found: List[Unaudited] = []
    for member in members.values():
        if not member.python or member.pid in reported:
            continue
        parent = members.get(member.ppid)
        if parent is not None and parent.pid in reported and parent.argv == member.argv:
            continue
        found.append({"pid": member.pid, "argv": list(member.argv), "why": unaudited_reason(member)})
    return sorted(found, key=lambda u: u["pid"])


def unaudited_reason(member: proctree.Member) -> str:
    """Why a Python process wrote no report: the option or environment that kept the audit's
    ``sitecustomize`` from running, as far as its command line and environment tell."""
    flags = proctree.python_flags(member.argv)
    for letter in ("I", "E", "S"):
        if letter in flags:
            return _FLAG_WHY[letter]
    if member.environ:
        if _audited.REPORTS not in member.environ:
            return f"its environment has no {_audited.REPORTS} (the command replaced the environment)"
        path = member.environ.get("PYTHONPATH", "").split(os.pathsep)
        if str(SHIM_DIR) not in path:
            return "its PYTHONPATH does not hold the audit's sitecustomize (the command replaced PYTHONPATH)"
    return ("it wrote no report (it ended as it started, or its Python could not run the audit's "
            "sitecustomize)")


# ------------------------------------------------------------------------------- verdict


class Verdict(NamedTuple):
    """The exit code, and the last line of the text report: the verdict and its cause."""

    code: int
    line: str


def verdict(findings: Findings, fail_on: Sequence[str] = ("fallbacks",)) -> Verdict:
    """2 if the simulator could not start in a process (an environment problem); 1 if the command
    failed or timed out, a Python process ran unaudited, one used the npu device without
    torch_npu where the release needs it, a report could not be read, or a finding of
    ``fail_on`` is present (``fallbacks``; with ``--paths``: ``compiles``, ``syncs``, ``64bit``);
    else 0."""
    if findings["errors"]:
        count = len(findings["errors"])
        return Verdict(2, "audit error: the simulated NPU could not start in "
                          f"{_plural(count, 'process', 'es')}: {findings['errors'][0]}")
    causes: List[str] = []
    fixes: List[str] = []
    fallbacks = findings["fallbacks"]
    if "fallbacks" in fail_on and fallbacks:
        named = ", ".join(list(fallbacks)[:2]) + (", ..." if len(fallbacks) > 2 else "")
        causes.append(f"{_plural(len(fallbacks), 'op')} fell back to the CPU ({named})")
        fixes.append(_fallback_fix(fallbacks))
    if findings["unaudited"]:
        causes.append(f"{_plural(len(findings['unaudited']), 'Python process', 'es')} ran unaudited")
        fixes.append("let every Python of the command run the audit's sitecustomize: no -I, -E or -S, "
                     "and add to PYTHONPATH rather than replace it")
    if findings["without_torch_npu"]:
        causes.append(f"{_plural(len(findings['without_torch_npu']), 'process', 'es')} used the npu device "
                      "without importing torch_npu")
        fixes.append("add `import torch_npu` before the script uses the npu device")
    if findings["bad_reports"]:
        causes.append(f"{_plural(len(findings['bad_reports']), 'report')} could not be read")
        fixes.append("audit again (a process of the command wrote over the audit's report directory)")
    if findings.get("timed_out"):
        causes.append(f"the command {findings['ended']}")
        fixes.append("give it more time (--timeout) or let it end by itself")
    elif findings["returncode"] != 0:
        causes.append(f"the command {findings['ended']}")
        fixes.append("see the command's own output above")
    if "paths" in findings:
        failing = paths_report.failing(findings["paths"], tuple(fail_on))
        if failing:
            causes.append(paths_report.failing_text(findings["paths"], failing))
            fixes.append(paths_report.fix_line(findings["paths"], failing))
    release = findings["table"].split(" ", 1)[0]
    if not causes:
        return Verdict(0, f"audit passed on torch_npu {release}: nothing fell back to the CPU in "
                          f"{_plural(findings['processes'], 'audited Python process', 'es')}")
    return Verdict(1, f"audit failed on torch_npu {release}: {'; '.join(causes)}; fix: {fixes[0]}")


def _fallback_fix(fallbacks: Mapping[str, int]) -> str:
    from ascend_env.kernels.registry import FIXES

    registered = {fix.qualified_name for fix in FIXES}
    if all(name in registered for name in fallbacks):
        return ("run python -m ascend_env install (its startup hook registers an NPU kernel for them), "
                "then audit again")
    return ("no NPU kernel in this release: keep these ops out of the decoding loop, or move to a torch_npu "
            "that has them (--torch-npu NEWER shows which)")


def exit_code(findings: Findings, fail_on: Sequence[str] = ("fallbacks",)) -> int:
    """The verdict's exit code (see :func:`verdict`)."""
    return verdict(findings, fail_on).code


# ------------------------------------------------------------------------------- text


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


def _rank_key(rank: str) -> Tuple[int, str]:
    return (int(rank), rank) if rank.isdigit() else (1 << 30, rank)


def header(findings: Mapping[str, Any]) -> str:
    """The report's first line: the table, and why it was chosen where the audit chose it."""
    line = f"audit: torch_npu {findings['table']} op table on the simulated NPU"
    if findings.get("table_chosen") == "oldest":
        line += (" (no --torch-npu and no torch_npu installed: the oldest known release, which lacks the "
                 f"kernels the affected releases lack; --torch-npu {AFFECTED} runs each of them)")
    return line


def format_text(findings: Findings, fail_on: Sequence[str] = ("fallbacks",)) -> str:
    """The human-readable report; its last line is the verdict and its cause."""
    lines = [header(findings)]
    if findings.get("timed_out"):
        lines.append(f"the command {findings['ended']}; audit stopped it")
    elif findings["returncode"] < 0:
        lines.append(f"the command was {describe_exit(findings['returncode'])}")
    elif findings["returncode"] != 0:
        lines.append(f"the command exited {findings['returncode']}")
    if findings.get("stopped") and not findings.get("timed_out"):
        lines.append(f"audit stopped {_plural(findings['stopped'], 'process', 'es')} "
                     "still running after the command ended")
    for error in findings["errors"][1:]:
        lines.append(f"the simulated NPU could not start in one process: {error}")
    per_process = findings.get("per_process", [])
    # The command's own process is the line above; the list is for the others.
    abnormal = [p for p in per_process if p.get("abnormal") and not p.get("is_command")]
    if abnormal:
        lines.append(f"{_plural(len(abnormal), 'Python process', 'es')} ended abnormally:")
        lines.extend(f"  {_who(p)}: {p['ended']}" for p in abnormal[:_LISTED])
        if len(abnormal) > _LISTED:
            lines.append(f"  ... and {len(abnormal) - _LISTED} more (--json lists them all)")
    lines += _unaudited_text(findings)
    lines += _without_torch_npu_text(findings)
    for problem in findings["bad_reports"][:_LISTED]:
        lines.append(f"a report cannot be read: {problem}")
    lines += _fallbacks_text(findings)
    lines += paths_report.format_text(findings["paths"]) if "paths" in findings else []
    lines.append(verdict(findings, fail_on).line)
    return "\n".join(lines)


def _fallbacks_text(findings: Findings) -> List[str]:
    fallbacks = findings["fallbacks"]
    processes = findings["processes"]
    per_process = findings.get("per_process", [])
    where = _plural(processes, "Python process", "es")
    if not fallbacks:
        return [f"no op fell back to the CPU ({where})"]
    lines = [f"{_plural(len(fallbacks), 'op')} fell back to the CPU ({where}):"]
    width = max(len(name) for name in fallbacks)
    count_width = max(len(str(count)) for count in fallbacks.values())
    for name, count in fallbacks.items():
        line = f"  {name.ljust(width)}  {count}"
        if processes > 1 and per_process:
            line = f"  {name.ljust(width)}  {str(count).rjust(count_width)}  ({_where(name, per_process)})"
        lines.append(line)
    return lines


def _unaudited_text(findings: Findings) -> List[str]:
    unaudited = findings["unaudited"]
    if not unaudited:
        return []
    lines = [f"{_plural(len(unaudited), 'Python process', 'es')} ran outside the simulator (unaudited: "
             "what fell back there is not counted):"]
    lines += [f"  {_who(u)}: {u['why']}" for u in unaudited[:_LISTED]]
    if len(unaudited) > _LISTED:
        lines.append(f"  ... and {len(unaudited) - _LISTED} more (--json lists them all)")
    return lines


def _without_torch_npu_text(findings: Findings) -> List[str]:
    pids = set(findings["without_torch_npu"])
    if not pids:
        return []
    release = findings["table"].split(" ", 1)[0]
    lines = [f"{_plural(len(pids), 'Python process', 'es')} used the npu device without importing torch_npu:"]
    lines += [f"  {_who(p)}: on torch_npu {release} this script fails on a real NPU: add `import torch_npu` "
              "(torch_npu loads itself with import torch only from 2.5.1, on torch 2.5 or later)"
              for p in findings["per_process"] if p["pid"] in pids][:_LISTED]
    return lines


# ------------------------------------------------------------------------------- several releases


def combined_verdict(results: Sequence[Tuple[str, Union[Findings, Exception]]],
                     fail_on: Sequence[str]) -> Verdict:
    """The verdict over several releases' runs: the worst exit code, each failing release named."""
    codes = []
    failed = []
    for release, result in results:
        if isinstance(result, Exception):
            codes.append(getattr(result, "exit_code", 2))
            failed.append(f"{release} (error)")
            continue
        found = verdict(result, fail_on)
        codes.append(found.code)
        if found.code:
            failed.append(release)
    code = max(codes) if codes else 0
    if not failed:
        return Verdict(0, f"audit passed on all {len(results)} releases: {', '.join(r for r, _ in results)}")
    return Verdict(code, f"audit failed on {len(failed)} of {len(results)} releases: {', '.join(failed)} "
                         "(each release's last line above says why)")
