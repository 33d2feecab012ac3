"""What an audit found (``ascend_env.checks.findings``): how the command and each process ended,
and the findings over the processes' reports."""

from __future__ import annotations

import pytest
from audit_support import report

from ascend_env.checks import audit_text
from ascend_env.checks.findings import Ending, Outcome, describe_exit, findings_from, process_ending
from ascend_env.exceptions import EnvironmentProblem


@pytest.mark.parametrize(
    "returncode, text",
    [(0, "exited 0"), (3, "exited 3"), (-11, "killed by SIGSEGV"), (-9, "killed by SIGKILL")],
)
def test_describe_exit(returncode, text):
    assert describe_exit(returncode) == text
    assert Outcome(10, returncode).ended() == text


def test_a_timeout_is_the_ending():
    assert Outcome(10, -15, timeout=2.5, timed_out=True).ended() == "timed out after 2.5 s"


@pytest.mark.parametrize(
    "end, text, abnormal",
    [
        ({"how": "exit"}, "exited", False),
        ({"how": "exec"}, "replaced itself (exec)", False),
        ({"how": "os._exit", "code": 0}, "os._exit(0)", False),
        ({"how": "os._exit", "code": 3}, "os._exit(3)", True),
        ({"how": "exception", "exception": "KeyError"}, "uncaught KeyError", True),
        ({"how": "signal", "signal": "SIGTERM"}, "terminated by SIGTERM", False),
        (None, "ended without a last report (killed by a signal, or crashed)", True),
    ],
)
def test_process_ending(end, text, abnormal):
    ending = process_ending(report(20, end=end), Outcome(10, 0))
    assert ending == Ending(text, abnormal)


def test_the_commands_own_process_ends_as_the_command_did():
    outcome = Outcome(10, -11)
    ending = process_ending(report(10, end=None), outcome)
    assert ending == Ending("killed by SIGSEGV", True)


def test_nothing_audited_says_how_the_command_ended():
    with pytest.raises(EnvironmentProblem, match=r"audited \(the command killed by SIGKILL\): no Python pro"):
        findings_from("t", ["x"], Outcome(10, -9), [])


def test_processes_that_never_imported_torch_audit_nothing():
    light = dict(report(10, end={"how": "exit"}), torch=False)
    with pytest.raises(
        EnvironmentProblem,
        match=r"\(the command exited 1\): 1 Python process ran, and none "
        "imported torch",
    ) as raised:
        findings_from("t", ["x"], Outcome(10, 1), [light])
    assert raised.value.exit_code == 2
    # One that did is audited; the light one still counts as an audited process.
    findings = findings_from("t", ["x"], Outcome(10, 0), [light, report(11, end={"how": "exit"})])
    assert findings["processes"] == 2 and audit_text.exit_code(findings) == 0
    assert [p["torch"] for p in findings["per_process"]] == [False, True]
