"""The audit's verdict and text report (``ascend_env.checks.audit_text``), over findings built from
reports as the reporter writes them."""

from __future__ import annotations

from audit_support import ISIN, report

from ascend_env.checks import audit_text
from ascend_env.checks.findings import Outcome, findings_from
from ascend_env.exceptions import EnvironmentProblem
from ascend_env.sim.reports import ProcessReport


def test_findings_add_up_every_process_and_keep_each():
    reports = [
        report(10, {ISIN: 2}, {"how": "exit"}),
        report(11, {ISIN: 1, "aten::sort": 1}, None, origin="fork"),
        ProcessReport(pid=12, argv=["x"], error="no compiler"),
    ]
    findings = findings_from("2.1.0.post6", ["python", "w.py"], Outcome(10, 0), reports)
    assert findings["fallbacks"] == {ISIN: 3, "aten::sort": 1} and findings["processes"] == 2
    assert findings["errors"] == ["no compiler"] and findings["ended"] == "exited 0"
    assert [(p["pid"], p["is_command"], p["abnormal"]) for p in findings["per_process"]] == [
        (10, True, False),
        (11, False, True),
    ]
    # A simulator that cannot start is the environment's problem (exit 2), said once, last.
    assert audit_text.exit_code(findings) == 2
    text = audit_text.format_text(findings)
    assert "1 Python process ended abnormally:\n  pid 11 (w.py): ended without a last report" in text
    assert f"  {ISIN}  3  (pids 10, 11)" in text
    assert text.count("no compiler") == 1
    assert text.splitlines()[-1] == "audit error: the simulated NPU could not start in 1 process: no compiler"


def test_ranks_name_where_an_op_fell_back():
    done = {"how": "exit"}
    reports = [report(10), report(11, {}, done, rank="0"), report(12, {ISIN: 1}, done, rank="1")]
    findings = findings_from("t", ["torchrun"], Outcome(10, 0), reports)
    lines = audit_text.format_text(findings).splitlines()
    assert lines[1:-1] == ["1 op fell back to the CPU (3 Python processes):", f"  {ISIN}  1  (rank 1)"]
    assert lines[-1] == (
        f"audit failed on the simulator (torch_npu t's op table): 1 op fell back to the CPU "
        f"({ISIN}); fix: run "
        "python -m ascend_env install (its startup hook registers an NPU kernel for them), "
        "then audit again"
    )


def test_a_timeout_fails_even_without_fallbacks():
    findings = findings_from("t", ["x"], Outcome(10, -15, 3, True, 2), [report(10)])
    assert audit_text.exit_code(findings) == 1 and findings["timed_out"] is True
    lines = audit_text.format_text(findings).splitlines()
    assert lines[1] == "the command timed out after 3 s; audit stopped it"


def test_the_last_line_states_the_verdict_and_its_cause():
    done = {"how": "exit"}
    passed = findings_from("2.4.0", ["x"], Outcome(10, 0), [report(10, end=done)])
    assert audit_text.format_text(passed).splitlines()[-1] == (
        "audit passed on the simulator (torch_npu 2.4.0's op table): nothing fell back to the CPU "
        "in 1 audited Python process"
    )
    many = {f"aten::op{i}": 1 for i in range(70)}
    failed = findings_from("2.1.0.post6", ["x"], Outcome(10, 3), [report(10, many, done)])
    last = audit_text.format_text(failed).splitlines()[-1]
    assert last.startswith(
        "audit failed on the simulator (torch_npu 2.1.0.post6's op table): 70 ops fell back to the "
        "CPU (aten::op0, "
        "aten::op1, ...); the command exited 3; fix: no NPU kernel in this release"
    )
    assert audit_text.verdict(failed).code == 1


def test_a_long_list_of_abnormal_endings_is_cut_in_text_only():
    reports = [report(10, end={"how": "exit"})] + [report(pid) for pid in range(11, 26)]
    findings = findings_from("t", ["x"], Outcome(10, 0), reports)
    lines = audit_text.format_text(findings).splitlines()
    assert lines[1] == "15 Python processes ended abnormally:"
    assert lines[12] == "  ... and 5 more (--json lists them all)"
    assert sum(p["abnormal"] for p in findings["per_process"]) == 15


def test_several_releases_fail_by_the_worst_and_name_each():
    done = {"how": "exit"}
    ok = findings_from("2.4.0", ["x"], Outcome(10, 0), [report(10, end=done)])
    bad = findings_from("2.2.0", ["x"], Outcome(10, 0), [report(10, {ISIN: 1}, done)])
    assert audit_text.combined_verdict([("2.2.0", bad), ("2.4.0", ok)], ("fallbacks",)) == (
        1,
        "audit failed on 1 of 2 releases: 2.2.0 (each release's last line above says why)",
    )
    assert audit_text.combined_verdict([("2.4.0", ok), ("2.5.1", ok)], ("fallbacks",)) == (
        0,
        "audit passed on all 2 releases: 2.4.0, 2.5.1",
    )
    error = EnvironmentProblem("no compiler", "install one")
    assert audit_text.combined_verdict([("2.4.0", ok), ("2.5.1", error)], ("fallbacks",)).code == 2


def test_a_process_that_used_npu_without_torch_npu_fails_where_the_release_needs_it():
    done = {"how": "exit"}
    used = dict(report(10, end=done), npu_used=True, torch_npu=None, autoload=False)
    findings = findings_from("2.1.0.post6", ["x"], Outcome(10, 0), [used])
    assert findings["without_torch_npu"] == [10] and audit_text.exit_code(findings) == 1
    lines = audit_text.format_text(findings).splitlines()
    assert lines[1] == "1 Python process used the npu device without importing torch_npu:"
    assert lines[2].startswith(
        "  pid 10 (w.py): on torch_npu 2.1.0.post6 this script fails on a real NPU: add `import torch_npu`"
    )
    assert lines[-1].endswith("fix: add `import torch_npu` before the script uses the npu device")
    for fine in (dict(used, torch_npu="simulated"), dict(used, autoload=True), dict(used, npu_used=False)):
        again = findings_from("2.1.0.post6", ["x"], Outcome(10, 0), [fine])
        assert again["without_torch_npu"] == [] and audit_text.exit_code(again) == 0
