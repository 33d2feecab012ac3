"""bench/bench_tables.py: the manual's benchmark tables, rendered from bench/results/*.json."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("bench_tables", ROOT / "bench" / "bench_tables.py")
bench_tables = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_tables)

MARKER = re.compile(r"^<!-- bench-table: ([a-z0-9_-]+) -->$", re.MULTILINE)
ISIN_ROW = {
    "group": "vocab",
    "label": "arange(32000) T=1000",
    "native_us": 1622.34,
    "ours": 0.3312,
    "bound": None,
    "seed": 55203.404,
    "seed_scaled": True,
    "seed_vs_ours": 169818.4,
    "mps_friendly": 0.8804,
    "mps_branch": 245.42,
}


def test_every_marker_in_the_manual_has_its_results_and_every_result_is_shown():
    used = {name for page in (ROOT / "docs").glob("*.md") for name in MARKER.findall(page.read_text("utf-8"))}
    results = {path.stem for path in (ROOT / "bench" / "results").glob("*.json")}
    assert used == results == {"isin", "startup", "audit_startup"}


@pytest.mark.parametrize("name", ["isin", "startup", "audit_startup"])
def test_each_results_file_renders_one_line_per_row(name):
    path = ROOT / "bench" / "results" / f"{name}.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    lines = bench_tables.render_file(path).splitlines()
    assert document["bench"] == name and document["command"].startswith(f"python bench/{name}.py")
    assert len(lines) == len(document["rows"]) + 2 and all(line.startswith("| ") for line in lines)


def test_an_audit_startup_row():
    row = {
        "python": "3.8.18",
        "command": "-c 'pass'",
        "environment": "audited",
        "wall_ms": 75.71,
        "wall_ratio": 1.296,
        "cpu_ms": 22.66,
        "cpu_ratio": 1.2712,
    }
    assert bench_tables.audit_startup_row(row) == (
        "| 3.8.18 | `python -c 'pass'` | audited | 75.7 ms | 1.30 | 22.7 ms | 1.27 |"
    )


def test_an_isin_row_marks_scaled_seed_figures_and_absent_candidates():
    assert bench_tables.isin_row(ISIN_ROW) == (
        "| vocab: arange(32000) T=1000 | 1,622.3 µs | 0.33x | n/a | ~55203.40x | ~169,818x faster "
        "| 0.88x | 245.42x |"
    )


def test_a_startup_row_signs_the_added_time():
    row = {
        "environment": "hooked",
        "set": "bare venv",
        "wall_ms": 9.134,
        "wall_added_ms": 0.254,
        "wall_ratio": 1.0291,
        "cpu_ms": 9.01,
        "cpu_added_ms": -0.004,
        "cpu_ratio": 0.9996,
    }
    assert bench_tables.startup_row(row) == (
        "| hooked, bare venv | 9.13 ms | +0.25 ms | 1.029 | 9.01 ms | -0.00 ms | 1.000 |"
    )


@pytest.mark.parametrize(
    "document",
    [
        {"bench": "other", "rows": [ISIN_ROW]},
        {"bench": "isin", "rows": []},
        {"bench": "isin", "rows": [{k: v for k, v in ISIN_ROW.items() if k != "seed"}]},
        {"bench": "isin", "rows": [dict(ISIN_ROW, ours="fast")]},
    ],
)
def test_what_no_benchmark_wrote_is_refused(document):
    with pytest.raises(bench_tables.ResultError):
        bench_tables.render(document)
