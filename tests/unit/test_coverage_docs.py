"""The coverage matrix's docs are its data: docs/coverage.md and the summary in docs/simulator.md
are exactly what ``tools/coverage_matrix.py render`` writes from docs/coverage.json."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import coverage_beyond  # noqa: E402
import coverage_matrix  # noqa: E402
from coverage_workloads import WORKLOADS  # noqa: E402


def _record(before: dict, after: dict, strategies: dict) -> dict:
    arch = {"category": "decoder-only", "error": None}
    return {
        "table": "2.2.0",
        "torch": "2.3.1",
        "transformers": "4.57.6",
        "python": "3.10.13",
        "strategies": list(strategies),
        "seconds": 1,
        "phases": {
            "before": {"llama": {**arch, "fallbacks": before, "strategies": strategies}},
            "after": {"llama": {**arch, "fallbacks": after, "strategies": strategies}},
        },
    }


def test_the_generated_docs_match_the_data():
    for path, text in coverage_matrix.render().items():
        assert path.read_text(encoding="utf-8") == text, f"{path}: run python tools/coverage_matrix.py render"


def test_the_data_shows_nothing_after_install():
    runs = coverage_matrix.load(coverage_matrix.DATA)["runs"]
    assert runs, "docs/coverage.json holds no run"
    for name, record in runs.items():
        assert coverage_matrix.problems(record) == [], name


def test_the_page_names_every_fallback_of_the_data():
    page = coverage_matrix.PAGE.read_text(encoding="utf-8")
    for record in coverage_matrix.load(coverage_matrix.DATA)["runs"].values():
        for phase in coverage_matrix.PHASES:
            for arch in record["phases"][phase].values():
                for op in arch["fallbacks"]:
                    # Beyond generation an op outside aten keeps its namespace (`torchvision::nms`).
                    assert f"`{op.split('::')[-1]}`" in page or coverage_beyond._op(op) in page


def test_problems_catch_a_fallback_after_install_and_different_tokens():
    clean = _record({"aten::isin.Tensor_Tensor_out": 3}, {}, {"greedy_2eos": "same"})
    assert coverage_matrix.problems(clean) == []
    late = _record({}, {"aten::polar.out": 2}, {"greedy_2eos": "same"})
    assert coverage_matrix.problems(late) == ["after install: llama: aten::polar.out fell back"]
    differs = _record(
        {},
        {},
        {
            "sampling": "differs",
            "assisted": "npu error: RuntimeError: x",
            "static_cache": "not covered: ValueError: y",
        },
    )
    assert coverage_matrix.problems(differs) == [
        "before: llama sampling: differs",
        "before: llama assisted: npu error: RuntimeError: x",
        "after: llama sampling: differs",
        "after: llama assisted: npu error: RuntimeError: x",
    ]


def test_strategy_status():
    assert coverage_matrix._strategy_status([[1, 2]], [[1, 2]]) == "same"
    assert coverage_matrix._strategy_status([[1, 2]], [[1, 3]]) == "differs"
    assert coverage_matrix._strategy_status({"error": "E: cpu"}, {"error": "E: cpu"}) == "not covered: E: cpu"
    assert coverage_matrix._strategy_status([[1]], {"error": "E: npu"}) == "npu error: E: npu"


def test_render_lists_fallbacks_and_what_was_not_covered(tmp_path):
    data = tmp_path / "coverage.json"
    coverage_matrix.merge(
        data,
        _record({"aten::polar.out": 2}, {}, {"greedy_2eos": "same", "static_cache": "not covered: E: y"}),
    )
    page = coverage_matrix.render_page(coverage_matrix.load(data))
    assert "| llama | decoder-only | `polar.out` | none | 1 of 1 | static_cache (E: y) |" in page
    summary = coverage_matrix.summary_lines(coverage_matrix.load(data))
    assert summary[-1] == (
        "| torch_npu 2.2.0 table, torch 2.3.1, transformers 4.57.6 | `polar.out` (all 1 models) | none |"
    )


def test_a_model_never_built_does_not_read_as_nothing_fell_back(tmp_path):
    data = tmp_path / "coverage.json"
    record = _record({}, {}, {})
    for phase in ("before", "after"):
        record["phases"][phase]["llama"]["error"] = "LookupError: transformers 4.40.0 has no model type 'x'"
    coverage_matrix.merge(data, record)
    page = coverage_matrix.render_page(coverage_matrix.load(data))
    row = (
        "| llama | decoder-only | - | - | - | not built: LookupError: transformers 4.40.0 has no model "
        "type 'x' |"
    )
    assert row in page and "0 of 0" not in page and "| none |" not in page


def test_merge_adds_architectures_to_an_earlier_run(tmp_path):
    data = tmp_path / "coverage.json"
    coverage_matrix.merge(data, _record({}, {}, {"greedy_2eos": "same"}))
    second = _record({}, {}, {"sampling": "same"})
    for phase in ("before", "after"):
        second["phases"][phase]["mamba"] = second["phases"][phase].pop("llama")
    coverage_matrix.merge(data, second)
    (record,) = coverage_matrix.load(data)["runs"].values()
    assert set(record["phases"]["after"]) == {"llama", "mamba"}
    assert record["strategies"] == ["greedy_2eos", "sampling"] and record["seconds"] == 2


def test_run_refuses_unknown_names():
    with pytest.raises(SystemExit):
        coverage_matrix.main(["run", "--table", "2.2.0", "--archs", "no_such_model"])


def test_merge_adds_strategies_to_an_architecture(tmp_path):
    data = tmp_path / "coverage.json"
    first = {"greedy_2eos": "same", "stop_strings": "not covered: E"}
    coverage_matrix.merge(data, _record({"aten::isin.Tensor_Tensor_out": 3}, {}, first))
    coverage_matrix.merge(data, _record({"aten::isin.Tensor_Tensor_out": 1}, {}, {"stop_strings": "same"}))
    (record,) = coverage_matrix.load(data)["runs"].values()
    llama = record["phases"]["before"]["llama"]
    assert llama["strategies"] == {"greedy_2eos": "same", "stop_strings": "same"}
    assert llama["fallbacks"] == {"aten::isin.Tensor_Tensor_out": 4}


def test_the_matrix_is_each_table_with_its_pinned_torch_and_other_pairings_are_extra(tmp_path):
    cells = coverage_matrix.matrix_cells()
    assert [(c["table"], c["torch"]) for c in cells] == [
        ("2.1.0.post6", "2.1.0"),
        ("2.1.0.post6", "2.1.0"),
        ("2.2.0", "2.2.0"),
        ("2.2.0", "2.2.0"),
        ("2.3.1", "2.3.1"),
        ("2.3.1", "2.3.1"),
    ]
    data = tmp_path / "coverage.json"
    extra = _record({}, {}, {"greedy_2eos": "same"})  # table 2.2.0 with torch 2.3.1
    pinned = {**_record({}, {}, {"greedy_2eos": "same"}), "table": "2.3.1"}
    coverage_matrix.merge(data, extra)
    coverage_matrix.merge(data, pinned)
    document = coverage_matrix.load(data)
    text = coverage_matrix.matrix_text(document)
    assert "1 of its 6 cells are measured below" in text
    assert "torch_npu 2.2.0 table, torch 2.2.0, transformers 4.57.6" in text  # named as not yet measured
    assert text.endswith("follow as extra: table 2.2.0 with torch 2.3.1 and transformers 4.57.6.")
    page = coverage_matrix.render_page(document)
    assert page.index("## torch_npu 2.3.1 table") < page.index("## torch_npu 2.2.0 table, torch 2.3.1")
    assert "An extra pairing (torch_npu 2.2.0 pins torch 2.2.0); Python 3.10.13" in page
    assert "An extra pairing (torch_npu 2.3.1" not in page


def test_a_model_not_built_for_another_reason_than_a_missing_model_type_is_a_problem():
    record = _record({}, {}, {})
    assert coverage_matrix.problems(record) == []
    record["phases"]["before"]["llama"]["error"] = "LookupError: transformers 4.40.0 has no model type 'x'"
    assert coverage_matrix.problems(record) == []
    # transformers 4.53.3 imports einops wherever torch_npu imports; without it no model builds.
    error = "ModuleNotFoundError: Could not import module 'LlamaForCausalLM'."
    record["phases"]["after"]["llama"]["error"] = error
    assert coverage_matrix.problems(record) == [f"after: llama not built: {error}"]


def test_notes_are_kept_across_merges_and_printed_under_the_run(tmp_path):
    data = tmp_path / "coverage.json"
    coverage_matrix.merge(data, {**_record({}, {}, {"greedy_2eos": "same"}), "notes": ["einops installed"]})
    coverage_matrix.merge(data, {**_record({}, {}, {"sampling": "same"}), "notes": ["einops installed", "b"]})
    (record,) = coverage_matrix.load(data)["runs"].values()
    assert record["notes"] == ["einops installed", "b"]
    page = coverage_matrix.render_page(coverage_matrix.load(data))
    assert "\nNote: einops installed\n\nNote: b\n" in page


# -- the workloads beyond text generation ------------------------------------------------------------


def _workloads(table: str, before: dict, after: dict, status: str = "same") -> dict:
    arch = {"category": "vision", "error": None, "strategies": {"detect": status}}
    return {
        **_record({}, {}, {}),
        "table": table,
        "suite": "workloads",
        "torchvision": "0.18.1",
        "strategies": ["detect"],
        "phases": {
            "before": {"faster_rcnn": {**arch, "fallbacks": before}},
            "after": {"faster_rcnn": {**arch, "fallbacks": after}},
        },
    }


def test_a_workload_op_without_a_kernel_after_install_is_shown_not_a_problem():
    fixed = "aten::repeat_interleave.Tensor"
    assert fixed in coverage_matrix.fixed_ops("2.2.0")
    gapped = "aten::unique_dim"  # no kernel in the registry on any table
    assert gapped not in coverage_matrix.fixed_ops("2.2.0")
    gap = _workloads("2.2.0", {gapped: 4, fixed: 1}, {gapped: 4})
    assert coverage_matrix.problems(gap) == []
    late = _workloads("2.2.0", {fixed: 1}, {fixed: 1})
    assert coverage_matrix.problems(late) == [f"after install: faster_rcnn: {fixed} fell back"]
    differs = _workloads("2.2.0", {}, {}, status="differs")
    assert coverage_matrix.problems(differs) == [
        "before: faster_rcnn detect: differs",
        "after: faster_rcnn detect: differs",
    ]
    # In generation every fallback after install is a problem, with or without a kernel.
    generation = _record({}, {"torchvision::nms": 1}, {"greedy_2eos": "same"})
    assert coverage_matrix.problems(generation) == ["after install: llama: torchvision::nms fell back"]


def test_the_page_marks_what_still_falls_back_after_install_per_table(tmp_path):
    data = tmp_path / "coverage.json"
    fallbacks = {"aten::unique_dim": 4, "aten::repeat_interleave.Tensor": 1}
    coverage_matrix.merge(data, _workloads("2.2.0", fallbacks, {"aten::unique_dim": 4}))
    coverage_matrix.merge(data, _record({"aten::isin.Tensor_Tensor_out": 3}, {}, {"greedy_2eos": "same"}))
    document = coverage_matrix.load(data)
    assert len(document["runs"]) == 2  # the two suites of one table and torch are two runs
    page = coverage_matrix.render_page(document)
    assert "# Beyond text generation" in page
    assert (
        "| faster_rcnn | vision | `repeat_interleave.Tensor` x1, `unique_dim` x4 | "
        "`unique_dim` x4 (no kernel yet) | yes |  |"
    ) in page
    assert "| `unique_dim` | 2.2.0: faster_rcnn | 2.2.0: faster_rcnn |" in page
    assert "| `repeat_interleave.Tensor` | 2.2.0: faster_rcnn | none |" in page
    # The generation matrix neither counts the workloads run as a cell nor lists it as extra.
    text = coverage_matrix.matrix_text(document)
    assert text.endswith("follow as extra: table 2.2.0 with torch 2.3.1 and transformers 4.57.6.")
    assert text.count("table 2.2.0 with torch 2.3.1") == 1
    summary = coverage_matrix.summary_lines(document)
    assert summary[-1] == (
        "| workloads: torch_npu 2.2.0 table, torch 2.3.1, transformers 4.57.6 | "
        "`repeat_interleave.Tensor` (faster_rcnn); `unique_dim` (faster_rcnn) | "
        "`unique_dim` (no kernel yet) |"
    )


def test_the_page_names_every_workload_and_the_data_covers_each_table():
    page = coverage_matrix.PAGE.read_text(encoding="utf-8")
    runs = coverage_beyond.runs(coverage_matrix.load(coverage_matrix.DATA))
    assert sorted({record["table"] for record in runs.values()}) == sorted(coverage_beyond.TABLES)
    for record in runs.values():
        assert set(record["phases"]["before"]) == set(WORKLOADS), coverage_matrix.key(record)
    for name in WORKLOADS:
        assert f"| {name} |" in page


def test_torchvision_is_a_test_dependency_pinned_to_the_torch_it_pairs_with():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert not any(d.startswith("torchvision") for d in project["dependencies"])
    extras = project["optional-dependencies"]
    pairs = {"2.1.0": "0.16.0", "2.2.0": "0.17.0", "2.3.1": "0.18.1", "2.13.0": "0.28.0"}
    torch_by_marker = {
        d.split(";")[1].strip(): d.split(";")[0].split("==")[1]
        for d in extras["sim"]
        if d.startswith("torch==")
    }
    vision = [d for d in extras["test-vision"] if d.startswith("torchvision")]
    assert len(vision) == len(pairs)
    for requirement in vision:
        pin, marker = (part.strip() for part in requirement.split(";"))
        assert pin == f"torchvision=={pairs[torch_by_marker[marker]]}", requirement
    tox = (ROOT / "tox.ini").read_text(encoding="utf-8")
    assert "2.3.1: test-vision" in tox
