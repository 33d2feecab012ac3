"""The audit's words: its verdict (exit code and last line, :func:`verdict`), the text report
(:func:`format_text`), and the verdict over several releases' runs (:func:`combined_verdict`).
"""

from __future__ import annotations

import re
import sys
from typing import Any, List, Mapping, NamedTuple, Sequence, Tuple, Union

from ascend_env import origin
from ascend_env.checks import measured_paths, paths_report
from ascend_env.checks.emulated_audit import BACKEND, cann_text
from ascend_env.checks.findings import Findings, Unaudited, describe_exit, plural
from ascend_env.checks.tables import AFFECTED

__all__ = [
    "Verdict",
    "combined_verdict",
    "exit_code",
    "format_text",
    "header",
    "ran_on",
    "unaudited_fix",
    "verdict",
]

# How many processes that ended abnormally (or ran unaudited) the text report names.
_LISTED = 10


class Verdict(NamedTuple):
    """The exit code, and the last line of the text report: the verdict and its cause."""

    code: int
    line: str


def verdict(findings: Findings, fail_on: Sequence[str] = ("fallbacks",)) -> Verdict:
    """2 if the simulator could not start in a process (an environment problem); 1 if the command
    failed or timed out, a Python process ran unaudited, one used the npu device without
    torch_npu where the release needs it, a report could not be read, or a finding of
    ``fail_on`` is present (``fallbacks``; ``stopped``: processes audit had to stop after the
    command ended; with ``--paths``: ``compiles``, ``syncs``, ``64bit``); else 0, its line saying
    so where audit had to stop a process."""
    if findings["errors"]:
        count = len(findings["errors"])
        what = "the emulated CANN" if _emulated(findings) else "the simulated NPU"
        return Verdict(
            2,
            f"audit error: {what} could not start in {plural(count, 'process', 'es')}: "
            f"{findings['errors'][0]}",
        )
    causes: List[str] = []
    fixes: List[str] = []
    fallbacks = findings["fallbacks"]
    if "fallbacks" in fail_on and fallbacks:
        named = ", ".join(list(fallbacks)[:2]) + (", ..." if len(fallbacks) > 2 else "")
        causes.append(f"{plural(len(fallbacks), 'op')} fell back to the CPU ({named})")
        fixes.append(_fallback_fix(fallbacks))
    if findings["unaudited"]:
        causes.append(f"{plural(len(findings['unaudited']), 'Python process', 'es')} ran unaudited")
        fixes.append(unaudited_fix(findings["unaudited"]))
    if findings["without_torch_npu"]:
        causes.append(
            f"{plural(len(findings['without_torch_npu']), 'process', 'es')} used the npu device "
            "without importing torch_npu"
        )
        fixes.append("add `import torch_npu` before the script uses the npu device")
    if findings["bad_reports"]:
        causes.append(f"{plural(len(findings['bad_reports']), 'report')} could not be read")
        fixes.append("audit again (a process of the command wrote over the audit's report directory)")
    if findings.get("timed_out"):
        causes.append(f"the command {findings['ended']}")
        fixes.append("give it more time (--timeout) or let it end by itself")
    elif findings["returncode"] != 0:
        causes.append(f"the command {findings['ended']}")
        fixes.append("see the command's own output above")
    if "paths" in findings:
        failing = paths_report.failing(findings["paths"], tuple(fail_on))
        if "paths_measured" in findings:  # the binary's compiles, measured, are the proof
            failing = [name for name in failing if name != "compiles"]
        if failing:
            causes.append(paths_report.failing_text(findings["paths"], failing))
            fixes.append(paths_report.fix_line(findings["paths"], failing))
    if "paths_measured" in findings and measured_paths.failing(findings["paths_measured"], tuple(fail_on)):
        causes.append(measured_paths.failing_text(findings["paths_measured"]))
        fixes.append(
            paths_report.fix_line(findings["paths"], ["compiles"])
            if "paths" in findings
            else "turn JIT compile off where binary kernels are installed "
            "(torch_npu.npu.set_compile_mode(jit_compile=False); ascend-env install does it)"
        )
    # Processes still running once the command ended, that audit stopped: what they would have
    # done later (a daemon that falls back 8 s on) was never audited.
    stopped = 0 if findings.get("timed_out") else int(findings.get("stopped") or 0)
    left = f"audit stopped {plural(stopped, 'process', 'es')} still running after the command ended"
    if stopped and "stopped" in fail_on:
        causes.append(f"{left} (what they did after that is not audited)")
        fixes.append("let the command wait for every process it starts (or stop its daemons) before it ends")
    where = ran_on(findings)
    not_proven = list(findings.get("not_proven") or [])
    if not_proven and not causes:
        return Verdict(
            1,
            f"audit not proven on {where}: {'; '.join(not_proven)}; fix: {_not_proven_fix(findings)}",
        )
    if not causes:
        processes = plural(findings["processes"], "audited Python process", "es")
        if tuple(fail_on) == ("fallbacks",):
            line = f"audit passed on {where}: nothing fell back to the CPU in {processes}"
        else:
            none = {**_NONE_FOUND, **(_NONE_MEASURED if "paths_measured" in findings else {})}
            found = "; ".join(none[name] for name in fail_on if name in none)
            line = f"audit passed on {where} (--fail-on {','.join(fail_on)}): {found} in {processes}"
        if stopped:
            line += f", but {left}: what they would have done later is not audited (--fail-on stopped fails)"
        return Verdict(0, line)
    if not_proven:
        causes.append(f"not proven: {not_proven[0]}")
    return Verdict(1, f"audit failed on {where}: {'; '.join(causes)}; fix: {fixes[0]}")


def _emulated(findings: Mapping[str, Any]) -> bool:
    backend = findings.get("backend")
    return isinstance(backend, Mapping) and backend.get("kind") == BACKEND


def ran_on(findings: Mapping[str, Any]) -> str:
    """What the audit ran on, as its verdict line names it: "the simulator (torch_npu R's op
    table)" or "the real torch_npu R binary on the emulated CANN"."""
    backend = findings.get("backend")
    if isinstance(backend, Mapping) and backend.get("words"):
        return str(backend["words"])
    return f"the simulator (torch_npu {findings['table'].split(' ', 1)[0]}'s op table)"


def _not_proven_fix(findings: Mapping[str, Any]) -> str:
    if findings.get("unimplemented"):
        return (
            "the emulated CANN needs these entry points (report them to ascend-env); until then "
            "audit this command on the simulator (--cann sim)"
        )
    return (
        "audit again with torch_npu's warnings on (RANK=0, no TORCH_NPU_DISABLED_WARNING) and fd 2 "
        "left to the audit"
    )


def _fallback_fix(fallbacks: Mapping[str, int]) -> str:
    from ascend_env.kernels.registry import OVERLOADS

    registered = {fix.qualified_name for fix in OVERLOADS}
    if all(name in registered for name in fallbacks):
        return (
            "run python -m ascend_env install (its startup hook registers an NPU kernel for them), "
            "then audit again"
        )
    return (
        "no NPU kernel in this release: keep these ops out of the decoding loop, or move to a torch_npu "
        "that has them (--torch-npu NEWER shows which)"
    )


def exit_code(findings: Findings, fail_on: Sequence[str] = ("fallbacks",)) -> int:
    """The verdict's exit code (see :func:`verdict`)."""
    return verdict(findings, fail_on).code


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
    return plural(len(hits), "process", "es")


def _rank_key(rank: str) -> Tuple[int, str]:
    return (int(rank), rank) if rank.isdigit() else (1 << 30, rank)


def header(findings: Mapping[str, Any]) -> str:
    """The report's first line: the table, and why it was chosen where the audit chose it."""
    if _emulated(findings):
        return (
            f"audit: the real torch_npu binary on the emulated CANN, not a real NPU: torch_npu "
            f"{findings['table']}"
        )
    line = f"audit: torch_npu {findings['table']} op table on the simulated NPU"
    if findings.get("table_chosen") == "oldest":
        line += (
            " (no --torch-npu and no torch_npu installed: the oldest known release, which lacks the "
            f"kernels the affected releases lack; --torch-npu {AFFECTED} runs each of them)"
        )
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
        lines.append(
            f"audit stopped {plural(findings['stopped'], 'process', 'es')} "
            "still running after the command ended"
        )
    for error in findings["errors"][1:]:
        what = "the emulated CANN" if _emulated(findings) else "the simulated NPU"
        lines.append(f"{what} could not start in one process: {error}")
    per_process = findings.get("per_process", [])
    # The command's own process is the line above; the list is for the others.
    abnormal = [p for p in per_process if p.get("abnormal") and not p.get("is_command")]
    if abnormal:
        lines.append(f"{plural(len(abnormal), 'Python process', 'es')} ended abnormally:")
        lines.extend(f"  {_who(p)}: {p['ended']}" for p in abnormal[:_LISTED])
        if len(abnormal) > _LISTED:
            lines.append(f"  ... and {len(abnormal) - _LISTED} more (--json lists them all)")
    lines += _unaudited_text(findings)
    lines += _without_torch_npu_text(findings)
    for problem in findings["bad_reports"][:_LISTED]:
        lines.append(f"a report cannot be read: {problem}")
    lines += _fallbacks_text(findings)
    lines += cann_text(findings) if _emulated(findings) else []
    lines += paths_report.format_text(findings["paths"]) if "paths" in findings else []
    if "paths_measured" in findings:
        release = str((findings.get("backend") or {}).get("release"))
        lines += measured_paths.format_text(findings["paths_measured"], findings.get("paths"), release)
        if findings.get("paths_model"):
            lines.append(f"  the model's figures: {findings['paths_model']}")
    lines.append(verdict(findings, fail_on).line)
    return "\n".join(lines)


def _fallbacks_text(findings: Findings) -> List[str]:
    fallbacks = findings["fallbacks"]
    processes = findings["processes"]
    per_process = findings.get("per_process", [])
    where = plural(processes, "Python process", "es")
    if not fallbacks:
        said = ": no CAUTION line from the binary" if _emulated(findings) else ""
        return [f"no op fell back to the CPU ({where}){said}"]
    if _emulated(findings):
        lines = [
            f"{plural(len(fallbacks), 'op')} fell back to the CPU, as the binary's CAUTION lines say "
            f"({where}):"
        ]
        width = max(len(name) for name in fallbacks)
        for name, count in fallbacks.items():
            lines.append(f"  {name.ljust(width)}  at least once in {plural(count, 'process', 'es')}")
        return lines
    lines = [f"{plural(len(fallbacks), 'op')} fell back to the CPU ({where}):"]
    width = max(len(name) for name in fallbacks)
    count_width = max(len(str(count)) for count in fallbacks.values())
    for name, count in fallbacks.items():
        line = f"  {name.ljust(width)}  {count}"
        if processes > 1 and per_process:
            line = f"  {name.ljust(width)}  {str(count).rjust(count_width)}  ({_where(name, per_process)})"
        lines.append(line)
    return lines


#: What a passed audit did not find, per ``--fail-on`` finding (the default's line says it its own way).
_NONE_FOUND = {
    "fallbacks": "nothing fell back to the CPU",
    "compiles": "no would-be online compiles",
    "syncs": "no host syncs outside transformers' own code",
    "64bit": "no 64-bit warnings",
    "stopped": "no process left running",
}
_NONE_MEASURED = {"compiles": "no online compile (aclopCompileAndExecute), measured on the emulated CANN"}

#: What the audit's sitecustomize reports where its Python cannot import ascend_env
#: (``_audited_shim/sitecustomize.py``, which cannot import this module to share it).
_NO_ASCEND_ENV = re.compile(r"^this Python \((.*)\) cannot import ascend_env \(")


def unaudited_fix(unaudited: Sequence[Unaudited]) -> str:
    """What to do about the processes that ran unaudited: a Python without ascend-env (another
    interpreter first on PATH, say) gets it, or the command runs the one that has it; else every
    Python must run the audit's sitecustomize."""
    found = (_NO_ASCEND_ENV.match(u["why"]) for u in unaudited)
    pythons = list(dict.fromkeys(match.group(1) for match in found if match))
    if pythons:
        return (
            f"run the command with a Python that has ascend-env (this one: {sys.executable}), or install "
            f"ascend-env into {', '.join(pythons)}: {origin.install_command(pythons[0])}"
        )
    return (
        "let every Python of the command run the audit's sitecustomize: no -I, -E or -S, "
        "and add to PYTHONPATH rather than replace it"
    )


def _unaudited_text(findings: Findings) -> List[str]:
    unaudited = findings["unaudited"]
    if not unaudited:
        return []
    lines = [
        f"{plural(len(unaudited), 'Python process', 'es')} ran outside the simulator (unaudited: "
        "what fell back there is not counted):"
    ]
    lines += [f"  {_who(u)}: {u['why']}" for u in unaudited[:_LISTED]]
    if len(unaudited) > _LISTED:
        lines.append(f"  ... and {len(unaudited) - _LISTED} more (--json lists them all)")
    return lines


def _without_torch_npu_text(findings: Findings) -> List[str]:
    pids = set(findings["without_torch_npu"])
    if not pids:
        return []
    release = findings["table"].split(" ", 1)[0]
    lines = [f"{plural(len(pids), 'Python process', 'es')} used the npu device without importing torch_npu:"]
    lines += [
        f"  {_who(p)}: on torch_npu {release} this script fails on a real NPU: add `import torch_npu` "
        "(torch_npu loads itself with import torch only from 2.5.1, on torch 2.5 or later)"
        for p in findings["per_process"]
        if p["pid"] in pids
    ][:_LISTED]
    return lines


def combined_verdict(
    results: Sequence[Tuple[str, Union[Findings, Exception]]], fail_on: Sequence[str]
) -> Verdict:
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
    return Verdict(
        code,
        f"audit failed on {len(failed)} of {len(results)} releases: {', '.join(failed)} "
        "(each release's last line above says why)",
    )
