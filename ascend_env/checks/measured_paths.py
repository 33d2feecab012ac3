"""``audit --paths --cann emulated``: what the real torch_npu binary asked of CANN per decoding step,
measured on the emulated CANN, beside the dispatch-path model's figures for the same script.

Each audited process on the emulated CANN reports its ``generate()`` calls step by step
(:mod:`ascend_env.sim.cann_steps`: ``aclopCompileAndExecute`` calls with a new key, which a real
NPU compiles online, every aclop call, every aclnn kernel). :func:`summarize` gathers them;
:func:`format_text` prints them beside the model's would-compile counts and op_api ops
(:mod:`ascend_env.checks.paths_report`, from a second run of the command on the simulator), so
that where the model and the binary differ the user sees it; :func:`failing` judges
``--fail-on compiles`` on the measured counts: the binary, not the model, is the proof.
"""

from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence, Tuple, TypedDict

from ascend_env.checks.paths_report import PathsSummary, RunSummary
from ascend_env.sim.dispatch_model import STEADY_FROM
from ascend_env.sim.reports import MeasuredRun, MeasuredStep, ProcessReport, Span

__all__ = ["MeasuredRunSummary", "MeasuredSummary", "failing", "failing_text", "format_text", "summarize"]


class MeasuredRunSummary(TypedDict):
    """One ``generate()`` call of one process, measured; ``steady``: the compiles and aclnn calls
    per step from step :data:`STEADY_FROM` on (None where the call had no such step)."""

    pid: int
    site: str
    mode: Optional[str]
    steps: List[MeasuredStep]
    after_last_step: Optional[MeasuredStep]
    steady_compiles: Optional[Span]
    steady_aclnn: Optional[Span]


class MeasuredSummary(TypedDict):
    """``audit --json``'s ``"paths_measured"``: the measured runs, and the SoC they ran as."""

    soc: Optional[str]
    steady_from: int
    processes: int
    generate: List[MeasuredRunSummary]


def _span(values: List[int]) -> Optional[Span]:
    return {"min": min(values), "max": max(values), "total": sum(values)} if values else None


def summarize(reports: Sequence[ProcessReport], soc: Optional[str]) -> MeasuredSummary:
    """The measured steps of every process that took them."""
    runs: List[MeasuredRunSummary] = []
    processes = [r for r in reports if isinstance(r.get("cann_steps"), list)]
    for report in processes:
        found: List[MeasuredRun] = report.get("cann_steps") or []
        for run in found:
            steady = run["steps"][STEADY_FROM:]
            runs.append(
                {
                    "pid": int(report["pid"]),
                    "site": str(run["site"]),
                    "mode": run.get("mode"),
                    "steps": list(run["steps"]),
                    "after_last_step": run.get("after"),
                    "steady_compiles": _span([s["compiles"] for s in steady]),
                    "steady_aclnn": _span([s["aclnn"] for s in steady]),
                }
            )
    return {"soc": soc, "steady_from": STEADY_FROM, "processes": len(processes), "generate": runs}


def _steady_compiles(summary: MeasuredSummary) -> int:
    """The compiles over the steady state of every ``generate()``; over every step where none has one."""
    steady = [run["steady_compiles"] for run in summary["generate"] if run["steady_compiles"]]
    if steady:
        return sum(span["total"] for span in steady)
    return sum(step["compiles"] for run in summary["generate"] for step in run["steps"])


def failing(summary: MeasuredSummary, fail_on: Sequence[str]) -> List[str]:
    """``compiles`` where the binary compiled online in the steady state of a ``generate()``."""
    return ["compiles"] if "compiles" in fail_on and _steady_compiles(summary) else []


def failing_text(summary: MeasuredSummary) -> str:
    steady = any(run["steady_compiles"] for run in summary["generate"])
    where = "in the steady state of generate()" if steady else "in generate()"
    return (
        f"the real binary made {_steady_compiles(summary)} online compiles (new aclopCompileAndExecute "
        f"keys) {where}, measured on the emulated CANN"
    )


# ------------------------------------------------------------------------------- text


def _model_runs(model: Optional[Mapping[str, Any]]) -> List[RunSummary]:
    return list(model.get("generate") or []) if model else []


def _pairs(summary: MeasuredSummary, model: Optional[PathsSummary]) -> List[Tuple[MeasuredRunSummary, Any]]:
    """Each measured run with the model's run of the same place in the same order (the two runs of
    the command have different pids: matched by call site and mode, in order)."""
    left = list(_model_runs(model))
    pairs: List[Tuple[MeasuredRunSummary, Any]] = []
    for run in summary["generate"]:
        match = next((m for m in left if (m.get("site"), m.get("mode")) == (run["site"], run["mode"])), None)
        if match is not None:
            left.remove(match)
        pairs.append((run, match))
    return pairs


def _range(values: List[int]) -> str:
    return (
        "-"
        if not values
        else str(values[0])
        if min(values) == max(values)
        else f"{min(values)}-{max(values)}"
    )


def format_text(summary: MeasuredSummary, model: Optional[PathsSummary], release: str) -> List[str]:
    """The report's lines: per ``generate()``, per step, the binary's compiles and aclnn calls,
    measured, beside the model's would-compile counts and op_api ops."""
    soc = summary["soc"] or "?"
    lines = [
        f"measured on the real torch_npu {release} binary (emulated CANN, SoC {soc}), beside the model's "
        "figures (the simulator, the same command run again):"
    ]
    if not summary["generate"]:
        lines.append("  no generate() ran on the binary: nothing measured per step")
    for run, theirs in _pairs(summary, model):
        steps = run["steps"]
        mode = run["mode"] or "decoding mode unknown"
        lines += [
            f"  generate() at {run['site']} ({mode}, pid {run['pid']}): {len(steps)} steps",
            "    step      compiles  model   aclnn calls  model op_api ops",
        ]
        model_steps: List[Any] = list(theirs["steps"]) if theirs else []
        groups = [[index] for index in range(min(STEADY_FROM, len(steps)))]
        if len(steps) > STEADY_FROM:
            groups.append(list(range(STEADY_FROM, len(steps))))
        for group in groups:
            label = str(group[0]) if len(group) == 1 else f"{group[0]}-{group[-1]}"
            ours = [steps[i] for i in group]
            model_group = [model_steps[i] for i in group if i < len(model_steps)]
            lines.append(
                f"    {label.ljust(8)} {_range([s['compiles'] for s in ours]):>9}  "
                f"{_range([s['would_compile'] for s in model_group]):>5}   "
                f"{_range([s['aclnn'] for s in ours]):>11}  "
                f"{_range([s.get('paths', {}).get('op_api', 0) for s in model_group]):>16}"
                f"{' each' if len(group) > 1 else ''}"
            )
        if theirs is None:
            lines.append("    the model saw no generate() here: no figures beside these")
        last = steps[-1] if steps else None
        if last and last["compiles_by_type"]:
            kinds = ", ".join(f"{kind} ({n})" for kind, n in list(last["compiles_by_type"].items())[:8])
            lines.append(f"    compiled online in step {len(steps) - 1}: {kinds}")
    return lines
