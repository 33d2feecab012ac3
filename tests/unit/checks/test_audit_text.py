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


def test_a_simulator_that_cannot_start_ends_with_its_own_fix():
    """An unreadable build cache (another user's) is an EnvironmentProblem in the audited process
    (``ascend_env.sim.build``); its report carries the problem and the fix, and the audit's last
    lines say both (a bare PermissionError once left no fix)."""
    error = str(
        EnvironmentProblem(
            "the simulated NPU's build cache /c/sim-x cannot be read by this user (uid 1000): "
            "Permission denied (it belongs to uid 0); another user built it.",
            "set ASCEND_ENV_CACHE_DIR to a directory of your own that only you can write (mkdir -m 700 DIR)",
        )
    )
    reports = [
        report(10, end={"how": "exit"}),
        ProcessReport(pid=11, argv=["x"], error=f"EnvironmentProblem: {error}"),
    ]
    findings = findings_from("2.4.0", ["x"], Outcome(10, 0), reports)
    assert audit_text.exit_code(findings) == 2
    last = audit_text.format_text(findings).splitlines()[-2:]
    assert last[0].startswith(
        "audit error: the simulated NPU could not start in 1 process: EnvironmentProblem: "
    )
    fix = "set ASCEND_ENV_CACHE_DIR to a directory of your own that only you can write (mkdir -m 700 DIR)"
    assert last[1] == f"  fix: {fix}"


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


def test_a_pass_under_other_findings_says_what_it_did_not_find():
    """--fail-on syncs alone passes a run whose ops fell back: its last line must not say that
    nothing fell back."""
    done = {"how": "exit"}
    fell_back = findings_from("2.1.0.post6", ["x"], Outcome(10, 0), [report(10, {ISIN: 1}, done)])
    assert audit_text.verdict(fell_back, ("64bit",)) == (
        0,
        "audit passed on the simulator "
        "(torch_npu 2.1.0.post6's op table) (--fail-on 64bit): no 64-bit warnings in 1 audited "
        "Python process",
    )
    assert audit_text.verdict(fell_back, ("fallbacks",)).code == 1


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


# audit had to stop a process the command left running (a double-forked daemon that would have
# fallen back later): the verdict says so, and --fail-on stopped fails on it (issue 42, item 10).
def test_a_process_audit_had_to_stop_is_in_the_verdict():
    done = {"how": "exit"}
    findings = findings_from("2.4.0", ["x"], Outcome(10, 0, None, False, 2), [report(10, end=done)])
    passed = audit_text.verdict(findings)
    assert passed.code == 0 and passed.line == (
        "audit passed on the simulator "
        "(torch_npu 2.4.0's op table): nothing fell back to the CPU in 1 audited Python process, "
        "but audit stopped 2 processes still running after the command ended: what they would have "
        "done later is not audited (--fail-on stopped fails)"
    )
    failed = audit_text.verdict(findings, ("fallbacks", "stopped"))
    assert failed.code == 1 and failed.line.startswith(
        "audit failed on the simulator "
        "(torch_npu 2.4.0's op table): audit stopped 2 processes still running after the command "
        "ended (what they did after that is not audited); fix: let the command wait"
    )
    lines = audit_text.format_text(findings, ("stopped",)).splitlines()
    assert "audit stopped 2 processes still running after the command ended" in lines
    # none stopped: as before; a timeout says it stopped the command, and fails anyway
    clean = findings_from("2.4.0", ["x"], Outcome(10, 0), [report(10, end=done)])
    assert audit_text.verdict(clean, ("stopped",)) == audit_text.Verdict(
        0,
        "audit passed on the simulator (torch_npu 2.4.0's op table) (--fail-on stopped): no process left "
        "running in 1 audited Python process",
    )
    assert audit_text.verdict(clean).line.endswith("in 1 audited Python process")
    timed = findings_from("2.4.0", ["x"], Outcome(10, -15, 3, True, 2), [report(10)])
    assert "still running" not in audit_text.verdict(timed, ("stopped",)).line


def test_fail_on_stopped_is_an_option_that_needs_no_paths(monkeypatch, capsys):
    import json

    from ascend_env.checks import audit, paths_report
    from ascend_env.cli import main

    assert paths_report.parse_fail_on("fallbacks,stopped") == ("fallbacks", "stopped")
    asked = {}

    def run(command, torch_npu=None, timeout=None, soc=None, paths=False, stdout=None, **emulated):
        asked["paths"] = paths
        return findings_from(
            "2.4.0", command, Outcome(10, 0, None, False, 1), [report(10, end={"how": "exit"})]
        )

    monkeypatch.setattr(audit, "run", run)
    code = main(["audit", "--json", "--torch-npu", "2.4.0", "--fail-on", "stopped", "--", "x"])
    document = json.loads(capsys.readouterr().out)
    assert code == 1 and document["ok"] is False and asked["paths"] is False
    assert document["stopped"] == 1 and "audit stopped 1 process" in document["verdict"]
    assert main(["audit", "--json", "--torch-npu", "2.4.0", "--", "x"]) == 0
    assert "--fail-on stopped fails" in json.loads(capsys.readouterr().out)["verdict"]
