"""``audit``: run a command on the simulated NPU and collect every op that fell back to the CPU.

The command runs in its own session (so its process group can be stopped as one) with
``ascend_env/_audited_shim`` first on ``PYTHONPATH``; its ``sitecustomize`` reports every Python process
the command starts, forked ones included, to a report directory, and enables the simulator in
those that import torch (see :mod:`ascend_env._audited`). The audit follows the command's whole
process tree (:mod:`ascend_env.utils.supervise`), so that a Python process that ran outside the
simulator (``python -I``, ``-E``, ``-S``, a replaced ``PYTHONPATH``) is counted, and a command
that leaves processes behind is stopped. A watchdog stops the tree and removes the report
directory if the audit itself is killed. This module never imports torch: the command's own
Python does.

The parts: which op table (:mod:`ascend_env.checks.tables`), the processes' reports
(:mod:`ascend_env.checks.process_reports`), the findings (:mod:`ascend_env.checks.findings`), the
verdict and the text (:mod:`ascend_env.checks.audit_text`), and with ``--paths`` the dispatch-path
model's (:mod:`ascend_env.checks.paths_report`).
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import ascend_env.sim.dispatch_model
from ascend_env import _audited
from ascend_env.checks import (
    emulated_audit,
    measured_paths,
    paths_report,
    process_reports,
    tables,
    torch_npu_wheel,
)
from ascend_env.checks.findings import Findings, Outcome, Unaudited, findings_from
from ascend_env.exceptions import UsageError
from ascend_env.sim import compile_mode, emulated, optables
from ascend_env.utils import proctree, supervise, tee

__all__ = ["SCHEMA", "SCRATCH_PREFIX", "remove_stale_scratch", "run", "unaudited_reason"]

#: The version of ``audit --json``'s output; keys are only ever added within a version.
SCHEMA = 1
#: The report directories' names: ``ascend-env-audit-<pid>-<start>-<random>``.
SCRATCH_PREFIX = "ascend-env-audit-"
_FLAG_WHY = {
    "I": "-I (isolated mode: PYTHONPATH is ignored, so the audit's sitecustomize never runs)",
    "E": "-E (PYTHON* variables are ignored, PYTHONPATH among them: the audit's sitecustomize never runs)",
    "S": "-S (no site module: no sitecustomize runs)",
}


def run(
    command: Sequence[str],
    torch_npu: Optional[str] = None,
    timeout: Optional[float] = None,
    soc: Optional[str] = None,
    paths: bool = False,
    stdout: supervise.Output = None,
    cann: str = emulated.CANN_SIM,
    wheel: Optional[Path] = None,
) -> Findings:
    """Run ``command`` on the simulated NPU and return the audit's findings
    (:func:`ascend_env.checks.findings.findings_from`).

    Keys: ``table``, ``table_chosen`` (``given``, ``installed``, ``oldest``), ``command``,
    ``returncode``, ``processes`` (how many Python processes were audited), ``errors`` (processes
    where the simulator could not start), ``fallbacks`` (op -> count), ``ended`` (``"exited 3"``,
    ``"killed by SIGSEGV"``, ``"timed out after 5 s"``), ``timed_out``, ``timeout``, ``stopped``
    (processes still running that audit stopped), ``unaudited`` (Python processes that ran outside
    the simulator, and why), ``without_torch_npu`` (pids that used the npu device without
    importing torch_npu, where the release needs it), ``bad_reports`` and ``per_process``. After
    ``timeout`` seconds the command and every process it started are stopped. SIGINT or SIGTERM to
    this process stops them as well, removes the reports and raises
    :class:`ascend_env.utils.supervise.Interrupted`. With ``paths``, also ``soc`` and ``paths``
    (:func:`ascend_env.checks.paths_report.summarize`). ``stdout``: where the command's standard
    output goes, a file or a descriptor (default: this process's). ``cann``: ``emulated`` runs
    the real torch_npu on the emulated CANN instead of the simulator (``torch_npu``: the release
    whose wheel pip fetches, ``wheel``: a wheel file; neither: the installed torch_npu), judged by
    :func:`ascend_env.checks.emulated_audit.judge`.
    """
    _check_arguments(command, timeout)
    if cann == emulated.CANN_EMULATED:
        if not paths:
            return _run_emulated(command, torch_npu, wheel, timeout, soc, stdout)
        return _run_emulated_paths(command, torch_npu, wheel, timeout, soc, stdout)
    return _run_simulated(command, torch_npu, timeout, soc, paths, stdout)


def _run_simulated(
    command: Sequence[str],
    torch_npu: Optional[str],
    timeout: Optional[float],
    soc: Optional[str],
    paths: bool,
    stdout: supervise.Output,
    extra: Optional[Dict[str, str]] = None,
) -> Findings:
    """:func:`run` on the simulator; ``extra``: variables set for the command besides."""
    table = tables.choose_table(torch_npu)
    chosen_soc = paths_report.choose_soc(soc) if paths or soc else None
    remove_stale_scratch()
    scratch = _make_scratch()
    try:
        env = tables.audited_environment(table, scratch, {**os.environ, **(extra or {})})
        if chosen_soc is not None:
            env[compile_mode.SOC_ENV] = chosen_soc["name"]
        else:
            compile_mode.export_soc(env)
        if paths:
            env[ascend_env.sim.dispatch_model.ENV] = "1"
        else:
            env.pop(ascend_env.sim.dispatch_model.ENV, None)
        outcome = _supervised(command, env, scratch, timeout, stdout)
        reports = process_reports.read_reports(scratch)
    finally:
        _remove(scratch)
    findings = findings_from(table.label, command, outcome, reports.good, reports.bad, table.chosen)
    if paths:
        findings["soc"] = chosen_soc
        try:
            findings["paths"] = paths_report.summarize(reports.good, chosen_soc)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            findings["bad_reports"].append(f"the dispatch-path model's findings cannot be read ({exc!r})")
    return findings


def _run_emulated_paths(
    command: Sequence[str],
    torch_npu: Optional[str],
    wheel: Optional[Path],
    timeout: Optional[float],
    soc: Optional[str],
    stdout: supervise.Output,
) -> Findings:
    """:func:`run` on the emulated CANN with ``paths``: the binary's compiles and aclnn calls per
    decoding step, measured (``paths_measured``), and the dispatch-path model's figures for the same
    command on the SoC (``paths``), from a second run of it on the simulator with the release's table."""
    chosen = paths_report.choose_soc(soc)
    findings = _run_emulated(command, torch_npu, wheel, timeout, chosen["name"], stdout, measure=True)
    findings["paths_measured"]["soc"] = chosen["name"]
    release = findings["backend"]["release"]
    if release not in optables.releases():
        findings["paths_model"] = f"ascend-env has no op table of torch_npu {release}: no model to compare"
        return findings
    sys.stderr.write(
        f"ascend-env: audit: running the command again on the simulator (torch_npu {release}'s op table, "
        f"SoC {chosen['name']}, the emulated CANN's toolkit) for the dispatch-path model's figures\n"
    )
    # The model's run sees the machine the binary saw: the emulated CANN's toolkit (binary kernels
    # installed), which the compile guard reads.
    with tempfile.TemporaryDirectory(prefix="ascend-env-toolkit-") as toolkit:
        extra = emulated.make_toolkit(Path(toolkit))
        model = _run_simulated(command, release, timeout, chosen["name"], True, stdout, extra)
    findings["soc"] = chosen
    if "paths" in model:
        findings["paths"] = model["paths"]
    findings["paths_model"] = (
        None
        if model["returncode"] == 0
        else f"the command {model['ended']} on the simulator: the model may be partial"
    )
    return findings


def _run_emulated(
    command: Sequence[str],
    torch_npu: Optional[str],
    wheel: Optional[Path],
    timeout: Optional[float],
    soc: Optional[str],
    stdout: supervise.Output,
    measure: bool = False,
) -> Findings:
    """:func:`run` on the emulated CANN: the torch_npu chosen and checked to fit before anything
    runs, the command's fd 2 read as it is copied through; with ``measure``, the emulated CANN's
    counters per decoding step (``paths_measured``)."""
    choice = torch_npu_wheel.choose(torch_npu, wheel)
    soc_name = paths_report.choose_soc(soc)["name"] if soc else None
    remove_stale_scratch()
    scratch = _make_scratch()
    fd2 = emulated_audit.Fd2()
    copy = tee.Tee(fd2.line)
    try:
        env = emulated_audit.environment(choice, scratch, soc_name)
        if measure:
            env[emulated.PATHS_VARIABLE] = "1"
        try:
            outcome = _supervised(command, env, scratch, timeout, stdout, copy.fd)
        finally:
            copy.finish()
        reports = process_reports.read_reports(scratch)
    finally:
        copy.finish()
        _remove(scratch)
    where = "the real torch_npu on the emulated CANN"
    findings = findings_from(choice.label, command, outcome, reports.good, reports.bad, choice.source, where)
    findings = emulated_audit.judge(findings, choice, fd2, copy.identity, reports.good)
    if measure:
        findings["paths_measured"] = measured_paths.summarize(reports.good, soc_name)
    return findings


def _check_arguments(command: Sequence[str], timeout: Optional[float]) -> None:
    if not command:
        raise UsageError(
            "audit needs a command to run.",
            "put it after '--', e.g. ascend-env audit --torch-npu 2.1.0.post6 -- python my_script.py",
        )
    if timeout is not None and not timeout > 0:
        raise UsageError(
            f"--timeout must be a positive number of seconds, not {timeout:g}.",
            "give the seconds the command may run, e.g. --timeout 600",
        )


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
        words = entry.name[len(SCRATCH_PREFIX) :].split("-")
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
        time.sleep(proctree.TICK)


def _supervised(
    command: Sequence[str],
    env: Dict[str, str],
    scratch: Path,
    timeout: Optional[float],
    stdout: supervise.Output,
    stderr: supervise.Output = None,
) -> Outcome:
    """Run ``command`` under supervision (its whole tree followed by process image, stopped on a
    timeout or a signal) and say how it ended; the simulator's audit and the emulated CANN's alike."""
    try:
        supervised = supervise.supervise(
            command,
            env,
            scratch,
            _audited.REPORTS,
            timeout,
            stdout,
            lambda: process_reports.reported_images(scratch),
            _audited.EXEC,
            stderr=stderr,
        )
    except supervise.NotStarted as exc:
        raise UsageError(f"{exc}.", "check the command after '--'") from None
    return Outcome(
        supervised.pid,
        supervised.returncode,
        timeout,
        supervised.timed_out,
        supervised.stopped,
        _unaudited(supervised.tree, scratch),
    )


def _unaudited(tree: proctree.Tree, reports: Path) -> List[Unaudited]:
    """The Python process images of the tree that wrote no report, and why: the audit's
    ``sitecustomize`` never ran in them. Reports name process images (pid, start time, exec
    generation), so a Python that an audited process ``exec``s in its place is one of them unless
    it reported too. A process forked from a reporting one (same command line) is not among them:
    it inherited the reporter, and a fork that execs at once writes none."""
    reported = process_reports.reported_images(reports)
    members = tree.members
    found: List[Unaudited] = []
    seen = set()
    for member in members.values():
        for index, image in enumerate(member.images):
            key = (member.pid, member.start, image.generation)
            seen.add(key)
            # A report of a generation stands for the last program of that generation (a fork that
            # subprocess execs has the generation of the fork before it).
            last = all(later.generation != image.generation for later in member.images[index + 1 :])
            if not image.python or (key in reported.reports and last) or member.pid in reported.legacy:
                continue
            if index == 0 and _forked_from_reporter(members.get(member.ppid), image, reported):
                continue
            found.append({"pid": member.pid, "argv": list(image.argv), "why": unaudited_reason(image)})
    for done in process_reports.read_execs(reports):
        key = (done.pid, done.start, done.generation + 1)
        if key in seen or key in reported.reports or not proctree.is_python(done.path, done.argv):
            continue  # the tree saw what ran next, or it reported, or it is no Python
        seen.add(key)
        found.append({"pid": done.pid, "argv": done.argv, "why": _EXEC_WHY})
    return sorted(found, key=lambda u: u["pid"])


# Why a Python that an audited process exec'd in its place, and that ended before the tree saw it,
# wrote no report (its command line and environment were never read).
_EXEC_WHY = (
    "an audited process replaced itself (exec) by this Python, which wrote no report "
    "(-I, -E or -S, or an environment without the audit's)"
)


def _forked_from_reporter(
    parent: Optional[proctree.Member], image: proctree.Image, reported: proctree.Reported
) -> bool:
    if parent is None:
        return False
    reporting = parent.pid in reported.legacy
    return any(
        (reporting or (parent.pid, parent.start, seen.generation) in reported.reports)
        and seen.argv == image.argv
        for seen in parent.images
    )


def unaudited_reason(member: Union[proctree.Member, proctree.Image]) -> str:
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
        if _audited.shim_path() not in path:
            return "its PYTHONPATH does not hold the audit's sitecustomize (the command replaced PYTHONPATH)"
    return (
        "it wrote no report (it ended as it started, or its Python could not run the audit's sitecustomize)"
    )
