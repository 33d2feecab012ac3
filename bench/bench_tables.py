"""Markdown tables from the benchmarks' ``--json`` results (standard library only).

``bench/isin.py``, ``bench/startup.py`` and ``bench/audit_startup.py`` print their rows with these
functions, and the docs build (``tools/mkdocs_hooks.py``) renders ``bench/results/*.json`` with
them, so that a table in the manual is always one that a benchmark run wrote.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

ISIN_HEADER = [
    "| case | native | ours | ours, bound | seed patch | ours vs seed | mps_friendly | mps branch |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
]
STARTUP_HEADER = [
    "| environment | wall | added | ratio | CPU | added | ratio |",
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
]

AUDIT_STARTUP_HEADER = [
    "| Python | command | environment | wall | ratio | CPU | ratio |",
    "| --- | --- | --- | ---: | ---: | ---: | ---: |",
]


class ResultError(ValueError):
    """A results file that is not what a benchmark's ``--json`` writes."""


def ratio(value: Optional[float], approx: bool = False) -> str:
    """``1.23x``; ``~`` marks a figure scaled from a prefix; ``n/a`` where nothing was timed."""
    if value is None:
        return "n/a"
    return f"{'~' if approx else ''}{value:.2f}x"


def isin_row(row: Dict[str, Any]) -> str:
    """One case of ``bench/isin.py`` as a table row."""
    approx = "~" if row["seed_scaled"] else ""
    return (
        f"| {row['group']}: {row['label']} | {row['native_us']:,.1f} µs | {ratio(row['ours'])} "
        f"| {ratio(row['bound'])} "
        f"| {ratio(row['seed'], row['seed_scaled'])} | {approx}{row['seed_vs_ours']:,.0f}x faster "
        f"| {ratio(row['mps_friendly'])} | {ratio(row['mps_branch'])} |"
    )


def startup_row(row: Dict[str, Any]) -> str:
    """One environment of ``bench/startup.py`` as a table row."""
    cells = []
    for kind in ("wall", "cpu"):
        cells += [f"{row[kind + '_ms']:.2f} ms", f"{row[kind + '_added_ms']:+.2f} ms"]
        cells.append(f"{row[kind + '_ratio']:.3f}")
    return f"| {row['environment']}, {row['set']} | " + " | ".join(cells) + " |"


def audit_startup_row(row: Dict[str, Any]) -> str:
    """One kind of start of ``bench/audit_startup.py`` as a table row."""
    return (
        f"| {row['python']} | `python {row['command']}` | {row['environment']} | {row['wall_ms']:.1f} ms "
        f"| {row['wall_ratio']:.2f} | {row['cpu_ms']:.1f} ms | {row['cpu_ratio']:.2f} |"
    )


RENDERERS = {
    "isin": (ISIN_HEADER, isin_row),
    "startup": (STARTUP_HEADER, startup_row),
    "audit_startup": (AUDIT_STARTUP_HEADER, audit_startup_row),
}


def render(document: Dict[str, Any]) -> str:
    """The Markdown table of one results document."""
    bench = document.get("bench")
    if bench not in RENDERERS or not isinstance(document.get("rows"), list) or not document["rows"]:
        expected = ", ".join(sorted(RENDERERS))
        raise ResultError(f"not a benchmark result with rows (bench: {bench!r}; expected one of {expected})")
    header, row_of = RENDERERS[bench]
    try:
        lines: List[str] = header + [row_of(row) for row in document["rows"]]
    except (KeyError, TypeError, ValueError) as error:
        raise ResultError(f"a {bench} row lacks a field or holds the wrong type: {error!r}") from error
    return "\n".join(lines)


def render_file(path: Path) -> str:
    """The Markdown table of the results file at ``path``."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ResultError(f"cannot read {path}: {error}") from error
    if not isinstance(document, dict):
        raise ResultError(f"{path} does not hold a JSON object")
    return render(document)


def write(path: Path, document: Dict[str, Any]) -> None:
    """Write a results document as ``--json PATH`` does (indented, one trailing newline)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
