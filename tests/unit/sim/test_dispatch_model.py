"""ascend_env.sim.dispatch_model, the dispatch-path model, without torch: its mirrors of the C++ backend,
and the report it writes (``ascend_env.sim.reports.PathsReport``)."""

from __future__ import annotations

import re
from pathlib import Path

from sim_source import cpp, cpp_block

from ascend_env import _audited, sim
from ascend_env.sim import compile_keys, dispatch_model, oppaths, optables
from ascend_env.sim.reports import Counts, PathsReport, RunReport, Span, Steady, Warning64Record

# ---------------------------------------------------------------- the mirrors of sim/csrc/sim_backend.cpp


def test_infrastructure_is_the_backends_kinfrastructure():
    found = re.search(r"kInfrastructure = \{(.*?)\};", cpp(), re.S)
    assert found, "kInfrastructure is gone from sim_backend.cpp"
    listed = set(re.findall(r'"([^"]+)"', found.group(1)))
    assert len(listed) >= 9 and dispatch_model.INFRASTRUCTURE == listed


def test_infrastructure_is_what_the_backend_registers_whatever_the_table():
    block = cpp_block("TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {")
    registered = set(re.findall(r'm\.impl\("([^"]+)"', block))
    assert registered and registered == dispatch_model.INFRASTRUCTURE


# ---------------------------------------------------------------- the report the model writes


def keys(typed) -> set:
    return set(typed.__annotations__)


def test_the_report_is_a_paths_report():
    model = dispatch_model.Model(oppaths.lookup("2.1.0.post6"), sim.enabled_ops())
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
    assert dispatch_model.steady_compiles(report) == (2, {"cat": 2})


def test_a_warning_record_is_a_warning64_record():
    model = dispatch_model.Model(oppaths.lookup("2.1.0.post6"), frozenset())
    warning = model.data.warnings[0]
    model.warn(warning, "add.Tensor", (model.bucket(), model.totals))
    model.warn(warning, "add.Tensor", (model.bucket(), model.totals))
    (record,) = model.report()["warnings_64bit"]
    assert set(record) == keys(Warning64Record) and record["count"] == 2


def test_steady_compiles_counts_every_generate_from_the_steady_step():
    def run(*compiles):
        steps = [
            dict(
                dispatch_model.Bucket().to_json(),
                would_compile=c,
                would_compile_by_op={"cat": c} if c else {},
            )
            for c in compiles
        ]
        return {"steps": steps}

    found = {"generate": [run(9, 9, 1, 2), run(9, 9, 0, 4, 3), run(9)]}
    assert dispatch_model.steady_compiles(found) == (10, {"cat": 10})
    assert dispatch_model.steady_compiles({"generate": []}) == (0, {})


def test_the_table_is_asked_of_the_simulator():
    assert sim.enabled_table() is None and sim.enabled_ops() == frozenset()
    assert Path(_audited.shim_path(), "sitecustomize.py").is_file()


def test_a_foreach_op_registered_by_hand_runs_on_the_npu_not_the_fallback(monkeypatch):
    # 2.1.0.post6 registers _foreach_lgamma by hand (ForeachRegister.cpp): its per-tensor loop runs,
    # each lgamma counted by itself; an upstream op the release registers nowhere falls back. On
    # torch 2.1 these ops have a CPU kernel only (no CompositeExplicitAutograd one, as from 2.4).
    monkeypatch.setattr(dispatch_model, "_composite", lambda name: False)
    data = oppaths.lookup("2.1.0.post6")
    model = dispatch_model.Model(data, optables.load("2.1.0.post6"), optables.by_hand("2.1.0.post6"))
    assert model.path("_foreach_lgamma") == "torch_npu"
    assert model.path("_foreach_mul.Tensor") == "torch_npu"
    assert model.path("isin.Tensor_Tensor_out") == "fallback"
    assert dispatch_model.Model(data, optables.load("2.1.0.post6")).path("_foreach_lgamma") == "fallback"


def test_the_kernel_a_call_reaches_follows_the_real_binary():
    # Measured on the real 2.1.0.post6 with ACL_OP_JIT_COMPILE on (tests/cann/test_paths_binary.py).
    def route(name):
        return "acl_op" if name in {"fill_.Scalar", "masked_fill_.Scalar", "add.Tensor"} else "torch_npu"

    kernel = compile_keys.acl_kernel
    assert kernel("add.Tensor", "acl_op", (), {}, route) == "add.Tensor"
    # dropout when not training runs nothing; when training, its kernel
    assert kernel("dropout", "acl_op", (None, 0.1, False), {}, route) is None
    assert kernel("dropout", "acl_op", (None, 0.0, True), {}, route) is None
    assert kernel("dropout", "acl_op", (None, 0.1, True), {}, route) == "dropout"
    # a composite reaches the op-plugin kernel inside it
    assert kernel("masked_fill.Scalar", "torch_npu", (), {}, route) == "masked_fill_.Scalar"
    assert kernel("full", "torch_npu", ([2, 3], 1.0), {}, route) == "fill_.Scalar"
    assert kernel("full", "torch_npu", ([2, 3], 1.0), {}, lambda name: "op_api") is None
    assert kernel("unsqueeze", "torch_npu", (), {}, route) is None


def test_a_scalar_compiles_by_its_type_not_its_value():
    class Arg:
        def __init__(self, kind):
            self.type = kind

    class Func:
        class _schema:
            arguments = [Arg("Tensor"), Arg("Scalar"), Arg("int")]

    signature = compile_keys.positional
    assert signature(Func, (None, 3, 1)) == signature(Func, (None, 4, 1))
    assert signature(Func, (None, 3, 1)) != signature(Func, (None, 3.0, 1))
    assert signature(Func, (None, 3, 1)) != signature(Func, (None, 3, 2))  # an int attribute counts
