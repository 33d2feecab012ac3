"""``audit --paths --cann emulated``'s measured steps (``checks/measured_paths.py``): gathered from
the processes' reports, judged for ``--fail-on compiles`` on the binary's counts (not the model's),
and printed beside the model's figures."""

from __future__ import annotations

from typing import Any, Dict, List

from audit_support import report

from ascend_env.checks import audit_text, measured_paths
from ascend_env.checks.findings import Outcome, findings_from
from ascend_env.sim.reports import MeasuredStep


def step(compiles: int, aclnn: int = 0, **types: int) -> MeasuredStep:
    return {"compiles": compiles, "aclop": compiles, "aclnn": aclnn, "compiles_by_type": dict(types)}


def measured_report(pid: int, compiles: List[int], aclnn: int = 0) -> Any:
    found = report(pid, end={"how": "exit"})
    steps = [step(n, aclnn, Cast=n) if n else step(0, aclnn) for n in compiles]
    found["cann_steps"] = [{"site": "seed.py:11", "mode": "greedy_search", "steps": steps, "after": step(0)}]
    return found


def model_run(would_compile: List[int], op_api: int = 0) -> Dict[str, Any]:
    steps = [
        {
            "would_compile": n,
            "host_syncs": 0,
            "warnings_64bit": 0,
            "would_compile_by_op": {},
            "host_syncs_by_site": {},
            "paths": {"op_api": op_api} if op_api else {},
            "step": i,
        }
        for i, n in enumerate(would_compile)
    ]
    return {"pid": 99, "site": "seed.py:11", "mode": "greedy_search", "steps": steps, "steady": None}


def findings_with(compiles: List[int], model: List[int]) -> Any:
    reports = [measured_report(10, compiles)]
    findings = findings_from("2.1.0.post6", ["python", "seed.py"], Outcome(10, 0), reports)
    findings["backend"] = {"kind": "emulated_cann", "release": "2.1.0.post6", "words": "the real binary"}
    findings["paths_measured"] = measured_paths.summarize(reports, "Ascend910A")
    findings["paths"] = {  # the model's summary, as far as the verdict reads it
        "soc": "Ascend910A",
        "soc_assumed": False,
        "jit_compile_at_exit": True,
        "op_paths": "2.1.0.post6",
        "op_paths_source": "data",
        "steady_from": 2,
        "processes": 1,
        "would_compile": sum(model),
        "host_syncs": 0,
        "would_compile_by_op": {},
        "would_compile_by_site": {},
        "host_syncs_by_op": {},
        "host_syncs_by_site": {},
        "warnings_64bit": [],
        "generate": [model_run(model)],
        "errors": [],
        "compile_guard": [],
    }
    return findings


def test_summarize_keeps_each_run_and_its_steady_state() -> None:
    reports = [measured_report(10, [90, 61, 25, 26, 25]), report(11, end={"how": "exit"})]
    summary = measured_paths.summarize(reports, "Ascend910A")
    assert summary["processes"] == 1 and summary["soc"] == "Ascend910A"
    [run] = summary["generate"]
    assert run["pid"] == 10 and [s["compiles"] for s in run["steps"]] == [90, 61, 25, 26, 25]
    assert run["steady_compiles"] == {"min": 25, "max": 26, "total": 76}
    short = measured_paths.summarize([measured_report(12, [5, 3])], None)
    assert short["generate"][0]["steady_compiles"] is None  # no step from 2 on


def test_fail_on_compiles_is_judged_on_the_binary_not_the_model() -> None:
    # the model says nothing compiles in the steady state; the binary does: the audit fails
    findings = findings_with([90, 61, 25, 25], [70, 55, 0, 0])
    verdict = audit_text.verdict(findings, ("compiles",))
    assert verdict.code == 1
    assert (
        "the real binary made 50 online compiles (new aclopCompileAndExecute keys) in the steady"
        in verdict.line
    )
    assert "measured on the emulated CANN" in verdict.line
    # the model says the steady state compiles; the binary does not: the audit passes, saying so
    findings = findings_with([90, 61, 0, 0], [70, 55, 23, 23])
    verdict = audit_text.verdict(findings, ("compiles",))
    assert verdict.code == 0 and "no online compile (aclopCompileAndExecute), measured" in verdict.line
    # without --fail-on compiles the counts are shown, not judged
    assert measured_paths.failing(findings_with([9, 9, 9], [0, 0, 0])["paths_measured"], ("fallbacks",)) == []


def test_text_puts_the_binarys_counts_beside_the_models() -> None:
    findings = findings_with([90, 61, 25, 26, 25], [70, 55, 23, 24, 22])
    lines = measured_paths.format_text(findings["paths_measured"], findings["paths"], "2.1.0.post6")
    assert lines[0].startswith(
        "measured on the real torch_npu 2.1.0.post6 binary (emulated CANN, SoC Ascend910A)"
    )
    rows = {
        line.split()[0]: line.split()[1:]
        for line in lines
        if line.startswith("    ") and line.split()[0][0].isdigit()
    }
    assert rows["0"][:2] == ["90", "70"] and rows["1"][:2] == ["61", "55"]
    assert rows["2-4"][:2] == ["25-26", "22-24"] and rows["2-4"][-1] == "each"
    assert "    compiled online in step 4: Cast (25)" in lines
    text = audit_text.format_text(findings, ("compiles",))
    assert "measured on the real torch_npu 2.1.0.post6 binary" in text


def test_a_run_the_model_did_not_see_says_so() -> None:
    findings = findings_with([3, 2, 1], [3, 2, 1])
    findings["paths"]["generate"] = []
    lines = measured_paths.format_text(findings["paths_measured"], findings["paths"], "2.1.0.post6")
    assert "    the model saw no generate() here: no figures beside these" in lines
    empty = measured_paths.summarize([], "Ascend910B1")
    assert "no generate() ran on the binary" in measured_paths.format_text(empty, None, "2.3.1")[1]
