"""The coverage page's part beyond text generation: the runs of ``tools/coverage_workloads.py``.

``tools/coverage_matrix.py run --suite workloads`` records them in docs/coverage.json (``"suite":
"workloads"``); this module renders them into docs/coverage.md (a table per run and one of every op
that falls back, per table, before and after install) and into the generated summary of
docs/simulator.md. An op that still falls back after install is marked "no kernel yet" where the fix
registry has none for it on that table: the page shows it, it does not hide it.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(1, str(ROOT))

from coverage_workloads import WORKLOADS  # noqa: E402

from ascend_env.detect import compat  # noqa: E402
from ascend_env.kernels.registry import FIXES  # noqa: E402

SUITE = "workloads"
# The CI sample of this suite (tox -e torch-2.3.1, table 2.2.0): one detection model, the fused
# encoder layer, the audio ops, the vision-language forward and the bit shifts.
SAMPLE = ("faster_rcnn", "transformer_encoder", "istft", "qwen2_vl", "unpack_4bit")
SAMPLE_SECONDS = 73  # pytest's wall time of the sample, measured (torch 2.3.1, Python 3.10)
# The tables this suite is run with: the affected ones of the generation matrix and a newer release.
TABLES = ("2.1.0.post6", "2.2.0", "2.3.1", "2.5.1")


def runs(document: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """The runs of this suite, by key."""
    return {name: record for name, record in document["runs"].items() if suite_of(record) == SUITE}


def chosen(archs: Optional[str], sample: bool) -> List[str]:
    """The workloads a run takes: ``archs`` (comma-separated) when given, else the sample or all."""
    if archs is not None:
        return [name for name in archs.split(",") if name]
    return list(SAMPLE if sample else WORKLOADS)


def suite_of(record: Dict[str, Any]) -> str:
    """``generation`` (tools/coverage_models.py) or ``workloads`` (tools/coverage_workloads.py)."""
    return str(record.get("suite", "generation"))


def fixed(table: str) -> List[str]:
    """The ops the fix registry registers on torch_npu ``table``."""
    return sorted(op.qualified_name for fix in FIXES for op in fix.ops if op.needed_by(table))


def _op(op: str) -> str:
    return f"`{op.split('::')[-1]}`" if op.startswith("aten::") else f"`{op}`"


def _pairing(record: Dict[str, Any]) -> str:
    """``An extra pairing (...); `` where the run's torch is not the one its table's release pins."""
    row = compat.load().find(record["table"])
    pinned = row.torch if row is not None else "unknown"
    return (
        ""
        if pinned == record["torch"]
        else f"An extra pairing (torch_npu {record['table']} pins torch {pinned}); "
    )


def _order(name: str) -> int:
    """A workload's place in WORKLOADS (the page's row order)."""
    return list(WORKLOADS).index(name) if name in WORKLOADS else len(WORKLOADS)


def _after(fallbacks: Dict[str, int], table: str, counts: bool = False) -> str:
    """The ops that fell back after install (``x<count>``: calls in the step), each without a kernel
    in the registry marked so."""
    known = fixed(table)
    return (
        ", ".join(
            _op(op) + (f" x{n}" if counts else "") + ("" if op in known else " (no kernel yet)")
            for op, n in sorted(fallbacks.items())
        )
        or "none"
    )


def _status(arch: Dict[str, Any]) -> str:
    compared = [s for s in arch["strategies"].values() if not s.startswith("not covered")]
    return "yes" if compared and all(s == "same" for s in compared) else ("-" if not compared else "no")


def _not_covered(arch: Dict[str, Any]) -> str:
    reasons = [arch["error"]] if arch["error"] else []
    reasons += [
        s.split(": ", 1)[1] for s in arch["strategies"].values() if s.startswith(("not covered", "npu"))
    ]
    return "; ".join(r.replace("|", "/")[:110] for r in reasons)


def page_lines(document: Dict[str, Any]) -> List[str]:
    """The page's part for this suite (nothing when no run was recorded)."""
    found = runs(document)
    if not found:
        return []
    intro = (
        "Workloads that Ascend users report beside transformers, each one step on the CPU and then on "
        "the simulated NPU under `ascend-env audit`, before and after `ascend-env install`, as above; "
        "every output tensor is compared with the CPU's (integers equal, floats within 1e-4). No "
        "weights are loaded: torchvision models are built with `weights=None, weights_backbone=None` "
        "at 64 pixels and 3 classes, transformers models from tiny configs. An op that still falls "
        "back after install is marked *no kernel yet* where the fix registry (ascend_env/kernels/"
        "registry/) has no kernel for it on that table: a known gap, shown, not a failure of the run."
    )
    lines = [
        "# Beyond text generation",
        "",
        *textwrap.wrap(intro, 100),
        "",
        "| workload | kind | step |",
        "|---|---|---|",
    ]
    for name, (category, step, _needs, function) in WORKLOADS.items():
        about = " ".join((function.__doc__ or "").split()).replace("``", "`")
        lines.append(f"| {name} | {category} | {step}: {about} |")
    lines += [
        "",
        "Run one table (`tools/coverage_workloads.py`; torchvision pinned to the torch it pairs with):",
        "",
        "```console",
        "$ python tools/coverage_matrix.py run --suite workloads --table 2.2.0 \\",
        "    --python /path/to/env/bin/python",
        "```",
        "",
        *textwrap.wrap(
            f"CI runs a sample (in `tox -e torch-2.3.1`, with torchvision 0.18.1: {SAMPLE_SECONDS} seconds "
            f"measured on 2 shared cores, both phases, `tests/coverage/test_workloads_sample.py`): table "
            f"2.2.0 with torch 2.3.1, {', '.join(SAMPLE)}.",
            100,
        ),
        "",
        "## Every op that falls back, per table",
        "",
        "| op | falls back before install (table: workloads) | after install |",
        "|---|---|---|",
    ]
    ops: Dict[str, Dict[str, Dict[str, List[str]]]] = {}
    for record in found.values():
        for phase in ("before", "after"):
            for arch_name, arch in record["phases"][phase].items():
                for op in arch["fallbacks"]:
                    where = ops.setdefault(op, {"before": {}, "after": {}})[phase]
                    where.setdefault(record["table"], []).append(arch_name)
    for op, phases in sorted(ops.items()):
        cells = [
            "; ".join(
                f"{table}: {', '.join(sorted(set(names)))}" for table, names in sorted(phases[p].items())
            )
            or "none"
            for p in ("before", "after")
        ]
        lines.append(f"| {_op(op)} | {cells[0]} | {cells[1]} |")
    lines.append("")
    for name, record in found.items():
        lines += [
            f"## {name}",
            "",
            f"{_pairing(record)}Python {record['python']}; torchvision {record.get('torchvision', 'none')}; "
            f"{record['seconds']} s on 2 shared cores. `x<n>`: the op's calls in the step on the NPU.",
            "",
            "| workload | kind | fell back before install | after install | same outputs | not covered |",
            "|---|---|---|---|---|---|",
        ]
        after = record["phases"]["after"]
        ordered = sorted(record["phases"]["before"].items(), key=lambda item: _order(item[0]))
        for arch_name, arch in ordered:
            later = after.get(arch_name, {"fallbacks": {}, "strategies": {}, "error": None})
            if arch["error"]:
                lines.append(f"| {arch_name} | {arch['category']} | - | - | - | {_not_covered(arch)} |")
                continue
            before = ", ".join(f"{_op(op)} x{n}" for op, n in sorted(arch["fallbacks"].items())) or "none"
            after_ops = _after(later["fallbacks"], record["table"], counts=True)
            lines.append(
                f"| {arch_name} | {arch['category']} | {before} | {after_ops} | "
                f"{_status(later)} | {_not_covered(later)} |"
            )
        lines.append("")
    return lines


def summary_lines(document: Dict[str, Any]) -> List[str]:
    """Rows of docs/simulator.md's generated summary: per run, the ops before and after install."""
    lines = []
    for name, record in runs(document).items():
        by_op: Dict[str, List[str]] = {}
        for arch_name, arch in record["phases"]["before"].items():
            for op in arch["fallbacks"]:
                by_op.setdefault(op, []).append(arch_name)
        before = "; ".join(f"{_op(op)} ({', '.join(sorted(names))})" for op, names in sorted(by_op.items()))
        late: Dict[str, int] = {}
        for arch in record["phases"]["after"].values():
            late.update(dict.fromkeys(arch["fallbacks"], 1))
        lines.append(f"| {name} | {before or 'none'} | {_after(late, record['table'])} |")
    return lines
