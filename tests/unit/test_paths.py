"""ascend_env.sim.paths, the dispatch-path model, without torch: its mirrors of the C++ backend,
the silencers, and the report it writes (``ascend_env.sim.reports.PathsReport``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ascend_env import sim
from ascend_env.checks import smoke
from ascend_env.sim import oppaths, paths
from ascend_env.sim.reports import Counts, PathsReport, RunReport, Span, Steady, Warning64Record

BACKEND = Path(sim.__file__).resolve().parent / "csrc" / "sim_backend.cpp"


def cpp() -> str:
    return BACKEND.read_text(encoding="utf-8")


def cpp_block(start: str) -> str:
    """The C++ from ``start`` to the first line that is a closing brace alone."""
    text = cpp()
    at = text.index(start)
    return text[at : text.index("\n}", at)]


# ---------------------------------------------------------------- the mirrors of sim/csrc/sim_backend.cpp


def test_infrastructure_is_the_backends_kinfrastructure():
    found = re.search(r"kInfrastructure = \{(.*?)\};", cpp(), re.S)
    assert found, "kInfrastructure is gone from sim_backend.cpp"
    listed = set(re.findall(r'"([^"]+)"', found.group(1)))
    assert len(listed) >= 9 and paths.INFRASTRUCTURE == listed


def test_infrastructure_is_what_the_backend_registers_whatever_the_table():
    block = cpp_block("TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {")
    registered = set(re.findall(r'm\.impl\("([^"]+)"', block))
    assert registered and registered == paths.INFRASTRUCTURE


def test_the_silencers_are_read_as_the_backend_reads_them():
    body = cpp_block("bool warnings_silenced() {")
    assert set(re.findall(r'std::getenv\("(\w+)"\)', body)) == {paths.RANK, paths.LOG_LEVEL}
    assert set(re.findall(r'env_is\("(\w+)", "1"\)', body)) == set(paths.WARNING_SWITCHES)
    assert set(re.findall(r'upper == "(\w+)"', body)) == set(paths.QUIET_LOG_LEVELS)
    assert 'strcmp(rank, "0")' in body  # RANK silences unless it is empty or "0"


# One table for the three rules: the backend's CAUTION line (sim_backend.cpp, mirrored above), the
# model's 64-bit warnings (paths.warnings_silenced) and verify's child environment
# (smoke.silencers: every variable that can silence must be named, so that verify can neutralise it).
SILENCING = [
    ({}, False),
    ({"RANK": "0"}, False),
    ({"RANK": ""}, False),
    ({"RANK": "1"}, True),
    ({"TORCH_NPU_DISABLED_WARNING": "1"}, True),
    ({"TORCH_NPU_WARNING_DISABLE": "1"}, True),
    ({"TORCH_NPU_WARNING_DISABLE": "0"}, False),
    ({"TORCH_CPP_LOG_LEVEL": "error"}, True),
    ({"TORCH_CPP_LOG_LEVEL": "3"}, True),
    ({"TORCH_CPP_LOG_LEVEL": "WARNING"}, False),
    ({"RANK": " 0"}, True),
    ({"RANK": "0 "}, True),
]


@pytest.mark.parametrize("environ, silenced", SILENCING)
def test_silencers_are_those_of_the_fallback_line(environ, silenced):
    assert paths.warnings_silenced(environ) is silenced
    if silenced:
        assert smoke.silencers(environ), "verify would leave this silencer in its child's environment"


# ---------------------------------------------------------------- the report the model writes


def keys(typed) -> set:
    return set(typed.__annotations__)


def test_the_report_is_a_paths_report():
    model = paths.Model(oppaths.lookup("2.1.0.post6"), sim.enabled_ops())
    model.enter_generate("chat.py:12")
    model.generation_mode("sample")
    for compiles in (5, 3, 1, 1):
        model.bucket().compiles["cat"] += compiles
        model.bucket().syncs["_local_scalar_dense"] += 1
        model.step_done()
    model.exit_generate()
    report = model.report()
    assert set(report) == keys(PathsReport)
    assert set(report["totals"]) == set(report["outside_generate"]) == keys(Counts)
    (run,) = report["generate"]
    assert set(run) == keys(RunReport) and (run["site"], run["mode"]) == ("chat.py:12", "sample")
    assert all(set(step) == keys(Counts) for step in run["steps"] + [run["after"]])
    assert set(run["steady"]) == keys(Steady) and set(run["steady"]["would_compile"]) == keys(Span)
    assert run["steady"]["would_compile"] == {"min": 1, "max": 1, "total": 2}
    assert paths.steady_compiles(report) == (2, {"cat": 2})


def test_a_warning_record_is_a_warning64_record():
    model = paths.Model(oppaths.lookup("2.1.0.post6"), frozenset())
    warning = model.data.warnings[0]
    model.warn(warning, "add.Tensor", (model.bucket(), model.totals))
    model.warn(warning, "add.Tensor", (model.bucket(), model.totals))
    (record,) = model.report()["warnings_64bit"]
    assert set(record) == keys(Warning64Record) and record["count"] == 2


def test_steady_compiles_counts_every_generate_from_the_steady_step():
    def run(*compiles):
        steps = [
            dict(paths.Bucket().to_json(), would_compile=c, would_compile_by_op={"cat": c} if c else {})
            for c in compiles
        ]
        return {"steps": steps}

    found = {"generate": [run(9, 9, 1, 2), run(9, 9, 0, 4, 3), run(9)]}
    assert paths.steady_compiles(found) == (10, {"cat": 10})
    assert paths.steady_compiles({"generate": []}) == (0, {})


def test_the_table_is_asked_of_the_simulator():
    assert sim.enabled_table() is None and sim.enabled_ops() == frozenset()
    assert Path(sim.shim_path(), "sitecustomize.py").is_file()
