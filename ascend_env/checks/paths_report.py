"""The audit's side of the dispatch-path model (``audit --paths``): which SoC to simulate, which
findings fail the audit, the findings of every process summed (:class:`PathsSummary`), and the
report's lines about them. The model itself runs in the audited processes
(:mod:`ascend_env.sim.dispatch_model`); this module imports no torch.
"""

from __future__ import annotations

import collections
import difflib
import os
from typing import Callable, Dict, List, Literal, Mapping, Optional, Sequence, Tuple, TypedDict

from ascend_env.detect import machine, socs
from ascend_env.exceptions import UsageError
from ascend_env.sim import compile_mode
from ascend_env.sim.dispatch_model import STEADY_FROM, most_first
from ascend_env.sim.reports import Counts, GuardRecord, ProcessReport, Span, Steady, Warning64Record

__all__ = [
    "FAIL_ON",
    "MACHINE_SOC_ENV",
    "WITHOUT_PATHS",
    "AfterLastStep",
    "GuardSummary",
    "PathsSummary",
    "ProcessWarning",
    "RunSummary",
    "SocChoice",
    "StepSummary",
    "choose_soc",
    "failing",
    "failing_text",
    "fix_line",
    "format_text",
    "guard_text",
    "parse_fail_on",
    "socs_family",
    "summarize",
    "transformers_site",
]

FAIL_ON = ("fallbacks", "compiles", "syncs", "64bit", "stopped")
#: The findings of FAIL_ON that need no dispatch-path model (``--paths``).
WITHOUT_PATHS = ("fallbacks", "stopped")
MACHINE_SOC_ENV = machine.SOC_VARIABLE  # the machine's SoC, as the guard reads it

#: The SoC to simulate and where it came from (``--soc``, ``$ASCEND_ENV_SOC``, ``npu-smi info``
#: or ``assumed``).
SocChoice = TypedDict("SocChoice", {"name": str, "assumed": bool, "from": str})


class StepSummary(TypedDict):
    """One step of one ``generate()``, as the audit's report keeps it."""

    would_compile: int
    host_syncs: int
    warnings_64bit: int
    would_compile_by_op: Dict[str, int]
    host_syncs_by_site: Dict[str, int]
    paths: Dict[str, int]
    step: int


class AfterLastStep(TypedDict):
    """What ran in ``generate()`` after its last step (the loop's final check)."""

    would_compile: int
    host_syncs: int
    warnings_64bit: int


class RunSummary(TypedDict):
    """One ``generate()`` call of one process."""

    pid: int
    site: Optional[str]
    mode: Optional[str]
    steps: List[StepSummary]
    steady: Optional[Steady]
    after_last_step: AfterLastStep


class ProcessWarning(Warning64Record):
    """A 64-bit warning, with the process it was seen in."""

    pid: int


class GuardSummary(GuardRecord, total=False):
    """One distinct decision of the compile guard, with the processes where it was taken."""

    pids: List[int]


class PathsSummary(TypedDict):
    """The dispatch-path findings of every process that modelled them (``audit --json``'s
    ``"paths"``); the counts by op and site are summed over the processes, most first."""

    soc: Optional[str]
    soc_assumed: Optional[bool]
    jit_compile_at_exit: Optional[bool]
    op_paths: Optional[str]
    op_paths_source: Optional[str]
    steady_from: int
    processes: int
    would_compile: int
    host_syncs: int
    would_compile_by_op: Dict[str, int]
    would_compile_by_site: Dict[str, int]
    host_syncs_by_op: Dict[str, int]
    host_syncs_by_site: Dict[str, int]
    warnings_64bit: List[ProcessWarning]
    generate: List[RunSummary]
    errors: List[str]
    compile_guard: List[GuardSummary]


# ------------------------------------------------------------------------------- options


def parse_fail_on(text: Optional[str]) -> Tuple[str, ...]:
    """``--fail-on fallbacks,compiles,...``: the findings that fail the audit (default fallbacks)."""
    if text is None:
        return ("fallbacks",)
    chosen = tuple(part.strip().lower() for part in text.split(",") if part.strip())
    bad = [part for part in chosen if part not in FAIL_ON]
    if bad or not chosen:
        meant = [close for part in bad for close in difflib.get_close_matches(part, FAIL_ON, n=1, cutoff=0.6)]
        raise UsageError(
            f"--fail-on {text!r}: unknown finding{'s' if len(bad) != 1 else ''} {', '.join(map(repr, bad))}."
            + (f" Did you mean {', '.join(map(repr, meant))}?" if meant else "")
            if bad
            else "--fail-on needs at least one finding.",
            "use a comma-separated list of " + ", ".join(FAIL_ON) + " (e.g. --fail-on fallbacks,compiles)",
        )
    return chosen


def choose_soc(
    soc: Optional[str],
    environ: Optional[Mapping[str, str]] = None,
    npu_smi: Optional[Callable[[], str]] = None,
) -> SocChoice:
    """The SoC to simulate: ``--soc``, else the machine's (``$ASCEND_ENV_SOC``, else ``npu-smi
    info`` as ``detect`` and the compile-mode guard read it; ``npu_smi`` stands in for running it),
    else :data:`ascend_env.sim.compile_mode.DEFAULT_SOC`, assumed. An unknown name raises
    UsageError listing the known."""
    environ = os.environ if environ is None else environ
    if soc:
        return {"name": socs.canonical(soc), "assumed": False, "from": "--soc"}
    chosen = environ.get(MACHINE_SOC_ENV)
    if chosen:
        return {
            "name": socs.canonical(chosen, MACHINE_SOC_ENV),
            "assumed": False,
            "from": f"${MACHINE_SOC_ENV}",
        }
    found, source = machine.machine_soc(environ, npu_smi)
    if found is not None:
        return {"name": found, "assumed": False, "from": source}
    return {"name": compile_mode.DEFAULT_SOC, "assumed": True, "from": "assumed"}


# ------------------------------------------------------------------------------- summary


def summarize(reports: Sequence[ProcessReport], soc: Optional[SocChoice] = None) -> PathsSummary:
    """The paths findings of every process that modelled them, for the audit's report; ``soc`` is
    the audit's :func:`choose_soc` (the processes cannot tell an assumed SoC from a chosen one)."""
    by_op: collections.Counter[str] = collections.Counter()
    by_site: collections.Counter[str] = collections.Counter()
    syncs_by_op: collections.Counter[str] = collections.Counter()
    syncs_by_site: collections.Counter[str] = collections.Counter()
    warnings: List[ProcessWarning] = []
    runs: List[RunSummary] = []
    processes = [r for r in reports if isinstance(r.get("paths"), dict)]
    for report in processes:
        data = report["paths"]
        totals = data["totals"]
        by_op.update(totals.get("would_compile_by_op", {}))
        by_site.update(totals.get("would_compile_by_site", {}))
        syncs_by_op.update(totals.get("host_syncs_by_op", {}))
        syncs_by_site.update(totals.get("host_syncs_by_site", {}))
        warnings += [{**w, "pid": report["pid"]} for w in data.get("warnings_64bit", [])]
        for run in data.get("generate", []):
            after = run["after"]
            runs.append(
                {
                    "pid": report["pid"],
                    "site": run.get("site"),
                    "mode": run.get("mode"),
                    "steps": [_step(step, index) for index, step in enumerate(run["steps"])],
                    "steady": run["steady"],
                    "after_last_step": {
                        "would_compile": after["would_compile"],
                        "host_syncs": after["host_syncs"],
                        "warnings_64bit": after["warnings_64bit"],
                    },
                }
            )
    first = processes[0]["paths"] if processes else None
    return {
        "soc": soc["name"] if soc else first.get("soc") if first else None,
        "soc_assumed": soc["assumed"] if soc else first.get("soc_assumed") if first else None,
        "jit_compile_at_exit": first.get("jit_compile") if first else None,
        "op_paths": first.get("op_paths") if first else None,
        "op_paths_source": first.get("op_paths_source") if first else None,
        "steady_from": STEADY_FROM,
        "processes": len(processes),
        "would_compile": sum(by_op.values()),
        "host_syncs": sum(syncs_by_op.values()),
        "would_compile_by_op": most_first(by_op),
        "would_compile_by_site": most_first(by_site),
        "host_syncs_by_op": most_first(syncs_by_op),
        "host_syncs_by_site": most_first(syncs_by_site),
        "warnings_64bit": warnings,
        "generate": runs,
        "errors": [e for r in processes for e in r["paths"].get("errors", [])],
        "compile_guard": _guards(processes),
    }


def _step(step: Counts, index: int) -> StepSummary:
    return {
        "would_compile": step["would_compile"],
        "host_syncs": step["host_syncs"],
        "warnings_64bit": step["warnings_64bit"],
        "would_compile_by_op": step["would_compile_by_op"],
        "host_syncs_by_site": step["host_syncs_by_site"],
        "paths": step["paths"],
        "step": index,
    }


def _guards(processes: Sequence[ProcessReport]) -> List[GuardSummary]:
    """What the compile guard did, once per distinct decision, with the pids where it was taken."""
    found: Dict[str, GuardSummary] = {}
    for report in processes:
        guard = report["paths"].get("compile_guard")
        if not isinstance(guard, dict):
            continue
        key = repr(sorted((k, repr(v)) for k, v in guard.items()))
        found.setdefault(key, {**guard, "pids": []})["pids"].append(report["pid"])
    return list(found.values())


# ------------------------------------------------------------------------------- the verdict's part


def failing(summary: PathsSummary, fail_on: Sequence[str]) -> List[str]:
    """The chosen paths findings present: ``compiles`` / ``syncs`` count the steady state of each
    ``generate()`` (every op when none ran), ``syncs`` only those outside transformers' own files
    (:func:`transformers_site`); ``64bit`` any 64-bit warning."""
    found = []
    if "compiles" in fail_on and _steady_count(summary, "would_compile"):
        found.append("compiles")
    if "syncs" in fail_on and _callers_syncs(summary):
        found.append("syncs")
    if "64bit" in fail_on and summary["warnings_64bit"]:
        found.append("64bit")
    return found


def _steady_count(summary: PathsSummary, key: Literal["would_compile", "host_syncs"]) -> int:
    """``key`` over the steady state of every ``generate()``; over every op where none has one."""
    steady = [run["steady"] for run in summary["generate"] if run["steady"]]
    return sum(s[key]["total"] for s in steady) if steady else int(summary[key])


def transformers_site(site: str) -> bool:
    """Whether a call site (``file:line``, as the model names it: from ``site-packages`` on) is in
    transformers' own files: its ``generate()`` (the stopping check ``this_peer_finished``, the
    cache position) or its models. No caller can move those host syncs out of the decoding loop; a
    model's remote code (``transformers_modules``), the script and other libraries can."""
    parts = site.rpartition(":")[0].replace(os.sep, "/").split("/")
    return "transformers" in parts[:-1]


def _callers_syncs(summary: PathsSummary) -> int:
    """The host syncs that :func:`_steady_count` counts, but those at transformers' own sites."""
    steady = [run for run in summary["generate"] if run["steady"]]
    if not steady:
        return int(summary["host_syncs"]) - _theirs(summary["host_syncs_by_site"])
    total = 0
    for run in steady:
        first = run["steady"]["first"] if run["steady"] else 0
        total += sum(s["host_syncs"] - _theirs(s["host_syncs_by_site"]) for s in run["steps"][first:])
    return total


def _theirs(by_site: Mapping[str, int]) -> int:
    return sum(count for site, count in by_site.items() if transformers_site(site))


def failing_text(summary: PathsSummary, failing: List[str]) -> str:
    """The failing paths findings in words, for the verdict line."""
    words = []
    where = "in the steady state of generate()" if any(r["steady"] for r in summary["generate"]) else "in all"
    if "compiles" in failing:
        words.append(
            f"{_steady_count(summary, 'would_compile')} would-be online compiles {where} "
            f"on {summary['soc']} (--fail-on compiles)"
        )
    if "syncs" in failing:
        words.append(
            f"{_callers_syncs(summary)} host syncs outside transformers' own code {where} (--fail-on syncs)"
        )
    if "64bit" in failing:
        words.append(f"{len(summary['warnings_64bit'])} 64-bit slow-path warnings (--fail-on 64bit)")
    return "; ".join(words)


def guard_text(guard: GuardRecord) -> str:
    """Why the compile guard did or did not act, from one of :func:`summarize`'s ``compile_guard``."""
    if not guard.get("ran"):
        return f"did not run: {guard.get('why')}"
    if guard.get("applied"):
        return f"acted: JIT compile turned off ({guard.get('reason')})"
    if guard.get("error"):
        return f"failed: {guard.get('error')}"
    reason = str(guard.get("reason") or "")
    if reason.startswith("no binary kernels"):
        return (
            f"did not act: this machine has {reason} (the guard reads this machine's CANN, not the "
            "simulated SoC's)"
        )
    return f"did not act: {reason}"


def fix_line(summary: PathsSummary, failing: List[str]) -> str:
    """What to do about the failing paths findings (as verify's compile-mode check says it)."""
    if "compiles" in failing or "64bit" in failing:
        guards = summary.get("compile_guard") or []
        guard: GuardRecord = guards[0] if guards else {"ran": False, "why": "no process reported it"}
        soc = str(summary.get("soc") or "")
        family = socs_family(soc)
        reason = str(guard.get("reason") or "")
        if guard.get("applied"):
            return (
                "the guard turned JIT compile off and the code turned it back on: drop that "
                "torch_npu.npu.set_compile_mode(jit_compile=True) call"
            )
        if not guard.get("ran") and "not installed" in str(guard.get("why")):
            return (
                "run: python -m ascend_env install (its startup hook turns JIT compile off where the "
                "binary kernels are installed)"
            )
        if not guard.get("ran") and "never imported" in str(guard.get("why")):
            return "import torch_npu in the script (the startup hook's guard runs when torch_npu is imported)"
        if reason.startswith("no binary kernels"):
            return (
                f"on the {soc} machine, install the binary kernels (Ascend-cann-kernels-{family}): the "
                "startup hook then turns JIT compile off; to model that here, point ASCEND_TOOLKIT_HOME "
                "at a toolkit that has them"
            )
        if reason.startswith("turned off"):
            return (
                "run python -m ascend_env install without --no-compile-guard, with "
                "ASCEND_ENV_COMPILE_GUARD unset"
            )
        return (
            "call torch_npu.npu.set_compile_mode(jit_compile=False) where the binary kernels are "
            "installed, or let the startup hook do it (python -m ascend_env install)"
        )
    return (
        "read the host syncs by call site above: move each device-to-host read in your code "
        "(item(), .cpu(), if tensor:) out of the decoding loop; transformers' own are not counted"
    )


def socs_family(soc: str) -> str:
    """The binary-kernel package's family of ``soc`` (``910a``), or ``<soc>`` when unknown."""
    return socs.family(soc).lower() if soc and socs.lookup(soc) else "<soc>"


# ------------------------------------------------------------------------------- text


def format_text(summary: PathsSummary, limit: int = 8) -> List[str]:
    """The report's lines about the dispatch paths."""
    soc = summary["soc"] or "?"
    assumed = f" (assumed: pass --soc, or set ${MACHINE_SOC_ENV})" if summary["soc_assumed"] else ""
    jit = "on" if summary["jit_compile_at_exit"] else "off"
    lines = [
        f"dispatch paths on SoC {soc}{assumed}, JIT compile {jit}"
        f" at exit; op paths of torch_npu {summary['op_paths']} from {summary['op_paths_source']}",
        f"  {summary['would_compile']} would compile (new acl_op keys with JIT on; a simulated count, not a "
        f"hardware measurement), {summary['host_syncs']} host syncs",
    ]
    for warning in summary["warnings_64bit"]:
        lines.append(
            f"  64-bit warning {warning['file']}:{warning['line']} ({warning['op']}, "
            f"{warning['count']}x, first at {warning['site']})"
            f"{'' if warning['printed'] else ' [silenced]'}"
        )
    titles = collections.Counter((r["pid"], r.get("site"), r.get("mode")) for r in summary["generate"])
    seen: collections.Counter[Tuple[int, Optional[str], Optional[str]]] = collections.Counter()
    for run in summary["generate"]:
        same = (run["pid"], run.get("site"), run.get("mode"))
        seen[same] += 1
        lines += _format_run(run, f", call {seen[same]} of {titles[same]}" if titles[same] > 1 else "")
    tables = (
        ("would compile by op", summary["would_compile_by_op"]),
        ("host syncs by op", summary["host_syncs_by_op"]),
        ("host syncs by call site", summary["host_syncs_by_site"]),
        ("would compile by call site", summary["would_compile_by_site"]),
    )
    for title, counts in tables:
        items = list(counts.items())
        if not items:
            continue
        lines.append(f"  {title}:")
        width = max(len(name) for name, _ in items[:limit])
        lines += [f"    {name.ljust(width)}  {count}" for name, count in items[:limit]]
        if len(items) > limit:
            lines.append(f"    ... {len(items) - limit} more (see --json)")
    for error in summary["errors"]:
        lines.append(f"  the model failed on an op: {error}")
    for guard in summary.get("compile_guard") or []:
        pids = guard.get("pids") or []
        where = "" if len(pids) <= 1 else f" (in {len(pids)} processes)"
        lines.append(f"  compile guard{where}: {guard_text(guard)}")
    if _steady_count(summary, "would_compile") or summary["warnings_64bit"]:
        lines.append(f"  fix: {fix_line(summary, ['compiles'])}")
    elif _callers_syncs(summary):
        lines.append(f"  fix: {fix_line(summary, ['syncs'])}")
    elif _steady_count(summary, "host_syncs"):
        where = " in the steady state of generate()" if any(r["steady"] for r in summary["generate"]) else ""
        lines.append(
            f"  host syncs{where}: all at transformers' own call sites (its stopping check, its cache "
            "position): none for your code to move, and --fail-on syncs does not count them"
        )
    return lines


def _span(counts: Span) -> str:
    return str(counts["min"]) if counts["min"] == counts["max"] else f"{counts['min']}-{counts['max']}"


def _format_run(run: RunSummary, call: str = "") -> List[str]:
    steps = run["steps"]
    mode = run.get("mode") or "decoding mode unknown"
    lines = [
        f"  generate() at {run.get('site') or '<unknown>'} ({mode}, pid {run['pid']}{call}): "
        f"{len(steps)} steps (steady state from step {STEADY_FROM})",
        "    step     would compile  host syncs  64-bit",
    ]
    index = 0
    while index < len(steps):
        row = (steps[index]["would_compile"], steps[index]["host_syncs"], steps[index]["warnings_64bit"])
        end = index
        while (
            index >= STEADY_FROM
            and end + 1 < len(steps)
            and (
                steps[end + 1]["would_compile"],
                steps[end + 1]["host_syncs"],
                steps[end + 1]["warnings_64bit"],
            )
            == row
        ):
            end += 1
        label = str(index) if end == index else f"{index}-{end}"
        each = "" if end == index else " each"
        lines.append(f"    {label.ljust(8)} {row[0]:>13}  {row[1]:>10}  {row[2]:>6}{each}")
        index = end + 1
    steady = run["steady"]
    if steady:
        compiles = steady["would_compile"]
        syncs = steady["host_syncs"]
        lines.append(
            f"    steady state (steps {STEADY_FROM}-{len(steps) - 1}): "
            f"{_span(compiles)} would compile and {_span(syncs)} host syncs per step"
        )
        last = steps[-1]
        if last["host_syncs_by_site"]:
            lines.append(
                "    host syncs of step "
                + str(len(steps) - 1)
                + ": "
                + ", ".join(f"{site} ({count})" for site, count in last["host_syncs_by_site"].items())
            )
        if last["would_compile_by_op"]:
            lines.append(
                "    would compile in step "
                + str(len(steps) - 1)
                + ": "
                + ", ".join(f"{op} ({count})" for op, count in last["would_compile_by_op"].items())
            )
    return lines
