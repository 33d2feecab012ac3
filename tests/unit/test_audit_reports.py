"""The audited process's report (``ascend_env.sim.startup``) and the audit's reading of reports.

The reporter runs here with a fake counter in place of the simulator's, in child Pythons that
fork, exit, exec and die the ways real commands do; no torch is needed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import List

import pytest

from ascend_env import _audited
from ascend_env.checks import audit
from ascend_env.exceptions import EnvironmentProblem, UsageError
from ascend_env.sim import startup
from ascend_env.utils import supervise

ROOT = str(Path(audit.__file__).resolve().parents[1])

HARNESS = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    from pathlib import Path
    sys.path.insert(0, {root!r})
    from ascend_env import _audited
    COUNTS = {{}}
    SIGNAL_IN_COUNTS = []
    def counts():
        if SIGNAL_IN_COUNTS:
            os.kill(os.getpid(), SIGNAL_IN_COUNTS.pop())
        return dict(COUNTS)
    def fall(n=1, op="aten::isin.Tensor_Tensor_out"):
        COUNTS[op] = COUNTS.get(op, 0) + n
    """
)


def run_reporter(tmp_path: Path, body: str, before: str = "") -> tuple:
    """Run ``body`` after installing the reporter (``before`` runs first); returns (returncode, reports)."""
    reports = tmp_path / "reports"
    reports.mkdir()
    code = (HARNESS.format(root=ROOT) + textwrap.dedent(before)
            + "_audited.install(Path(sys.argv[1]), counts, 'test-table')\n" + textwrap.dedent(body))
    result = subprocess.run([sys.executable, "-c", code, str(reports)], capture_output=True, text=True,
                            timeout=30)
    return result, audit.collect(reports)


def by_origin(reports: List[dict], origin: str) -> List[dict]:
    return [r for r in reports if r["origin"] == origin]


def test_a_forked_child_reports_only_its_own_fallbacks(tmp_path):
    result, reports = run_reporter(tmp_path, """
        fall(2)
        pid = os.fork()
        if pid == 0:
            fall(1, "aten::sort")
            os._exit(4)
        os.waitpid(pid, 0)
        fall(1)
    """)
    assert result.returncode == 0, result.stderr
    (parent,), (child,) = by_origin(reports, "start"), by_origin(reports, "fork")
    assert parent["fallbacks"] == {"aten::isin.Tensor_Tensor_out": 3} and parent["end"] == {"how": "exit"}
    assert child["fallbacks"] == {"aten::sort": 1} and child["end"] == {"how": "os._exit", "code": 4}
    assert child["ppid"] == parent["pid"] != child["pid"] and child["table"] == "test-table"


def test_a_grandchild_subtracts_what_it_inherited_at_its_own_fork(tmp_path):
    result, reports = run_reporter(tmp_path, """
        fall(5)
        pid = os.fork()
        if pid == 0:
            fall(2)
            grandchild = os.fork()
            if grandchild == 0:
                fall(1)
                sys.exit(0)  # atexit runs in a forked child too
            os.waitpid(grandchild, 0)
            sys.exit(0)
        os.waitpid(pid, 0)
    """)
    assert result.returncode == 0, result.stderr
    (parent,) = by_origin(reports, "start")
    (child,) = [r for r in reports if r["ppid"] == parent["pid"]]
    (grandchild,) = [r for r in reports if r["ppid"] == child["pid"]]
    counts = [r["fallbacks"]["aten::isin.Tensor_Tensor_out"] for r in (parent, child, grandchild)]
    assert counts == [5, 2, 1], reports
    assert {r["end"]["how"] for r in reports} == {"exit"}


def test_sigterm_while_the_last_report_is_written(tmp_path):
    # The handler runs in the thread that is writing (the main thread): it must not wait on it.
    result, reports = run_reporter(tmp_path, """
        fall(1)
        SIGNAL_IN_COUNTS.append(signal.SIGTERM)
        os._exit(0)
    """)
    assert result.returncode == -signal.SIGTERM
    (report,) = reports
    assert report["end"] in ({"how": "signal", "signal": "SIGTERM"}, {"how": "os._exit", "code": 0})


def test_counts_seen_before_sigkill_survive_it(tmp_path):
    result, reports = run_reporter(tmp_path, f"""
        fall(3)
        time.sleep({_audited.POLL_SECONDS * 6})
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    assert result.returncode == -signal.SIGKILL
    (report,) = reports
    assert report["fallbacks"] == {"aten::isin.Tensor_Tensor_out": 3} and report["end"] is None


def test_a_process_is_reported_from_its_start(tmp_path):
    result, reports = run_reporter(tmp_path, "os.kill(os.getpid(), signal.SIGKILL)\n")
    assert result.returncode == -signal.SIGKILL
    assert [(r["fallbacks"], r["end"]) for r in reports] == [({}, None)]


def test_sigterm_writes_the_report_and_still_kills(tmp_path):
    result, reports = run_reporter(tmp_path, """
        fall(1)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
    """)
    assert result.returncode == -signal.SIGTERM
    (report,) = reports
    assert report["end"] == {"how": "signal", "signal": "SIGTERM"}
    assert report["fallbacks"] == {"aten::isin.Tensor_Tensor_out": 1}


def test_an_ignored_sigterm_stays_ignored(tmp_path):
    result, reports = run_reporter(tmp_path, """
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGTERM)
    """, before="signal.signal(signal.SIGTERM, signal.SIG_IGN)\n")
    assert result.returncode == 0, result.stderr
    assert reports[0]["end"] == {"how": "exit"}


def test_an_uncaught_exception_is_told(tmp_path):
    result, reports = run_reporter(tmp_path, "fall(1)\nraise ValueError('boom')\n")
    assert result.returncode == 1
    assert reports[0]["end"] == {"how": "exception", "exception": "ValueError"}


def test_exec_writes_the_last_report_first(tmp_path):
    result, reports = run_reporter(tmp_path, """
        fall(1)
        os.execv(sys.executable, [sys.executable, "-c", "pass"])
    """)
    assert result.returncode == 0, result.stderr
    assert reports[0]["end"] == {"how": "exec"} and reports[0]["fallbacks"] != {}


def test_a_fork_that_execs_at_once_is_not_a_process(tmp_path):
    # subprocess forks through the at-fork hooks when it has a preexec_fn.
    result, reports = run_reporter(tmp_path, """
        subprocess.run(["true"], preexec_fn=lambda: None, check=True)
        subprocess.run(["true"], check=True)
    """)
    assert result.returncode == 0, result.stderr
    assert len(reports) == 1


def test_install_twice_is_refused(tmp_path):
    result, _ = run_reporter(tmp_path, "_audited.install(Path(sys.argv[1]), counts, 'again')\n")
    assert result.returncode == 1 and "already installed" in result.stderr


# ---------------------------------------------------------------- reading the reports

ISIN = "aten::isin.Tensor_Tensor_out"


def report(pid: int, fallbacks=None, end=None, rank=None, origin="start") -> dict:
    return {"pid": pid, "ppid": 1, "argv": ["w.py"], "rank": rank, "origin": origin, "table": "t",
            "fallbacks": fallbacks or {}, "end": end}


@pytest.mark.parametrize("returncode, text", [(0, "exited 0"), (3, "exited 3"), (-11, "killed by SIGSEGV"),
                                              (-9, "killed by SIGKILL")])
def test_describe_exit(returncode, text):
    assert audit.describe_exit(returncode) == text
    assert audit.Outcome(10, returncode).ended() == text


def test_a_timeout_is_the_ending():
    assert audit.Outcome(10, -15, timeout=2.5, timed_out=True).ended() == "timed out after 2.5 s"


@pytest.mark.parametrize("end, text, abnormal", [
    ({"how": "exit"}, "exited", False),
    ({"how": "exec"}, "replaced itself (exec)", False),
    ({"how": "os._exit", "code": 0}, "os._exit(0)", False),
    ({"how": "os._exit", "code": 3}, "os._exit(3)", True),
    ({"how": "exception", "exception": "KeyError"}, "uncaught KeyError", True),
    ({"how": "signal", "signal": "SIGTERM"}, "terminated by SIGTERM", False),
    (None, "ended without a last report (killed by a signal, or crashed)", True),
])
def test_process_ending(end, text, abnormal):
    ending = audit.process_ending(report(20, end=end), audit.Outcome(10, 0))
    assert ending == audit.Ending(text, abnormal)


def test_the_commands_own_process_ends_as_the_command_did():
    outcome = audit.Outcome(10, -11)
    ending = audit.process_ending(report(10, end=None), outcome)
    assert ending == audit.Ending("killed by SIGSEGV", True)


def test_findings_add_up_every_process_and_keep_each():
    reports = [report(10, {ISIN: 2}, {"how": "exit"}),
               report(11, {ISIN: 1, "aten::sort": 1}, None, origin="fork"),
               {"pid": 12, "argv": ["x"], "error": "no compiler"}]
    findings = audit.findings_from("2.1.0.post6", ["python", "w.py"], audit.Outcome(10, 0), reports)
    assert findings["fallbacks"] == {ISIN: 3, "aten::sort": 1} and findings["processes"] == 2
    assert findings["errors"] == ["no compiler"] and findings["ended"] == "exited 0"
    assert [(p["pid"], p["is_command"], p["abnormal"]) for p in findings["per_process"]] == [
        (10, True, False), (11, False, True)]
    # A simulator that cannot start is the environment's problem (exit 2), said once, last.
    assert audit.exit_code(findings) == 2
    text = audit.format_text(findings)
    assert "1 Python process ended abnormally:\n  pid 11 (w.py): ended without a last report" in text
    assert f"  {ISIN}  3  (pids 10, 11)" in text
    assert text.count("no compiler") == 1
    assert text.splitlines()[-1] == "audit error: the simulated NPU could not start in 1 process: no compiler"


def test_ranks_name_where_an_op_fell_back():
    done = {"how": "exit"}
    reports = [report(10), report(11, {}, done, rank="0"), report(12, {ISIN: 1}, done, rank="1")]
    findings = audit.findings_from("t", ["torchrun"], audit.Outcome(10, 0), reports)
    lines = audit.format_text(findings).splitlines()
    assert lines[1:-1] == ["1 op fell back to the CPU (3 Python processes):", f"  {ISIN}  1  (rank 1)"]
    assert lines[-1] == (f"audit failed on torch_npu t: 1 op fell back to the CPU ({ISIN}); fix: run "
                         "python -m ascend_env install (its startup hook registers an NPU kernel for them), "
                         "then audit again")


def test_a_timeout_fails_even_without_fallbacks():
    findings = audit.findings_from("t", ["x"], audit.Outcome(10, -15, 3, True, 2), [report(10)])
    assert audit.exit_code(findings) == 1 and findings["timed_out"] is True
    assert audit.format_text(findings).splitlines()[1] == "the command timed out after 3 s; audit stopped it"


def test_nothing_audited_says_how_the_command_ended():
    with pytest.raises(EnvironmentProblem, match=r"audited \(the command killed by SIGKILL\): no Python pro"):
        audit.findings_from("t", ["x"], audit.Outcome(10, -9), [])


def test_processes_that_never_imported_torch_audit_nothing():
    light = dict(report(10, end={"how": "exit"}), torch=False)
    with pytest.raises(EnvironmentProblem, match=r"\(the command exited 1\): 1 Python process ran, and none "
                                                 "imported torch") as raised:
        audit.findings_from("t", ["x"], audit.Outcome(10, 1), [light])
    assert raised.value.exit_code == 2
    # One that did is audited; the light one still counts as an audited process.
    findings = audit.findings_from("t", ["x"], audit.Outcome(10, 0), [light, report(11, end={"how": "exit"})])
    assert findings["processes"] == 2 and audit.exit_code(findings) == 0
    assert [p["torch"] for p in findings["per_process"]] == [False, True]


def test_the_last_line_states_the_verdict_and_its_cause():
    done = {"how": "exit"}
    passed = audit.findings_from("2.4.0", ["x"], audit.Outcome(10, 0), [report(10, end=done)])
    assert audit.format_text(passed).splitlines()[-1] == (
        "audit passed on torch_npu 2.4.0: nothing fell back to the CPU in 1 audited Python process")
    many = {f"aten::op{i}": 1 for i in range(70)}
    failed = audit.findings_from("2.1.0.post6", ["x"], audit.Outcome(10, 3), [report(10, many, done)])
    last = audit.format_text(failed).splitlines()[-1]
    assert last.startswith("audit failed on torch_npu 2.1.0.post6: 70 ops fell back to the CPU (aten::op0, "
                           "aten::op1, ...); the command exited 3; fix: no NPU kernel in this release")
    assert audit.verdict(failed).code == 1


# ---------------------------------------------------------------- running and stopping a command

def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_timeout_stops_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "pid"
    start = time.monotonic()
    findings = audit.run(["sh", "-c", f"sleep 30 & echo $! > {pidfile}; wait"], "2.4.0", timeout=0.5)
    assert findings["ended"] == "timed out after 0.5 s" and findings["processes"] == 0
    assert audit.verdict(findings) == (1, "audit failed on torch_npu 2.4.0: the command timed out after 0.5 "
                                          "s; fix: give it more time (--timeout) or let it end by itself")
    assert time.monotonic() - start < 10
    assert not alive(int(pidfile.read_text()))


def test_what_the_command_leaves_running_is_stopped(tmp_path, monkeypatch):
    monkeypatch.setattr(supervise, "LINGER_SECONDS", 0.2)
    pidfile = tmp_path / "pid"
    with pytest.raises(EnvironmentProblem, match=r"the command exited 0"):
        audit.run(["sh", "-c", f"sleep 30 & echo $! > {pidfile}"], "2.4.0")
    assert not alive(int(pidfile.read_text()))


@pytest.fixture
def sigint_as_python_starts():
    """SIGINT as an interactive Python starts with it (KeyboardInterrupt), whatever it was: a shell's
    background job ignores it, and a test must not depend on how the suite was started."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_audit_stops_the_command_and_removes_the_reports(tmp_path, monkeypatch, signum,
                                                                          sigint_as_python_starts):
    pidfile = tmp_path / "pid"
    made = []
    real_mkdtemp = audit.tempfile.mkdtemp
    monkeypatch.setattr(audit.tempfile, "mkdtemp", lambda **kw: made.append(real_mkdtemp(**kw)) or made[-1])

    def send() -> None:
        for _ in range(200):
            if pidfile.exists() and pidfile.read_text().strip():
                break
            time.sleep(0.05)
        os.kill(os.getpid(), signum)

    threading.Thread(target=send, daemon=True).start()
    with pytest.raises(audit.Interrupted) as raised:
        audit.run(["sh", "-c", f"sleep 30 & echo $! > {pidfile}; wait"], "2.4.0")
    assert raised.value.signum == signum
    assert not alive(int(pidfile.read_text()))
    assert made and not os.path.exists(made[0])
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # as it was before the audit
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_an_ignored_sigint_stays_ignored(tmp_path):
    """In a shell's background job SIGINT is ignored (Ctrl-C is for the foreground job): the audit
    keeps it so, and runs the command to its end."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        with pytest.raises(EnvironmentProblem, match=r"the command exited 0"):
            audit.run(["sh", "-c", "sleep 1"], "2.4.0")  # not interrupted: nothing audited, said so
        timer.join()
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_timeout_must_be_positive():
    with pytest.raises(UsageError, match="--timeout"):
        audit.run(["true"], "2.4.0", timeout=0)


def test_a_long_list_of_abnormal_endings_is_cut_in_text_only():
    reports = [report(10, end={"how": "exit"})] + [report(pid) for pid in range(11, 26)]
    findings = audit.findings_from("t", ["x"], audit.Outcome(10, 0), reports)
    lines = audit.format_text(findings).splitlines()
    assert lines[1] == "15 Python processes ended abnormally:"
    assert lines[12] == "  ... and 5 more (--json lists them all)"
    assert sum(p["abnormal"] for p in findings["per_process"]) == 15


# ---------------------------------------------------------------- bad reports are findings, never crashes

@pytest.mark.parametrize("content, problem", [
    ("[" * 100_000 + "]" * 100_000, "is not JSON (nested more than 100 levels deep"),
    ('{"pid": 5, "fallbacks": {"aten::isin": "many"}}', "has fallbacks that are not counts by op"),
    ('{"pid": 5, "fallbacks": {"aten::isin": -1}}', "has fallbacks that are not counts by op"),
    ('{"pid": "5"}', "has no pid"),
    ('{"pid": true}', "has no pid"),
    ("[1, 2]", "holds a list, not an object"),
    ('{"pid": 5, "argv": "x"}', "has an argv that is not a list of strings"),
    ('{"pid": 5, "end": 3}', "has an end that is not an object"),
    ('{"pid": 5, "torch": "yes"}', "has a torch that is not true or false"),
    ('{"pid": 5, "paths": []}', "has paths that are not an object"),
    ("not json", "is not JSON"),
])
def test_a_bad_report_is_a_finding(tmp_path, content, problem):
    (tmp_path / "5-abcd.json").write_text(content)
    (tmp_path / "6-abcd.json").write_text('{"pid": 6, "fallbacks": {}, "end": {"how": "exit"}}')
    reports = audit.read_reports(tmp_path)
    assert [r["pid"] for r in reports.good] == [6]
    (bad,) = reports.bad
    assert bad.startswith(f"5-abcd.json: {problem}")
    findings = audit.findings_from("t", ["x"], audit.Outcome(6, 0), reports.good, reports.bad)
    assert audit.exit_code(findings) == 1
    text = audit.format_text(findings).splitlines()
    assert f"a report cannot be read: {bad}" in text
    assert text[-1].startswith("audit failed on torch_npu t: 1 report could not be read; fix: audit again")


def test_bad_bytes_and_a_huge_report_are_findings(tmp_path, monkeypatch):
    monkeypatch.setattr(audit, "MAX_REPORT_BYTES", 1000)
    (tmp_path / "7-a.json").write_bytes(b'{"pid": 7, "argv": ["\xff"]}')
    (tmp_path / "8-a.json").write_text('{"pid": 8, "argv": ["' + "x" * 2000 + '"]}')
    assert audit.read_reports(tmp_path).bad == [
        "7-a.json: is not JSON ('utf-8' codec can't decode byte 0xff in position 21: invalid start byte)",
        "8-a.json: larger than 1000 bytes"]


def test_what_the_reporter_writes_reads_back(tmp_path):
    data = {"pid": 3, "argv": ["x\udcff", "é", "\U0001f600", 'q"\\\n\t\x01'], "fallbacks": {"aten::a": 2},
            "end": None, "torch": False, "ratio": 0.5, "nested": [[1], {"k": None}]}
    path = str(tmp_path / "3-x.json")
    _audited.write_json(path, data)
    text = Path(path).read_text(encoding="ascii")
    import json

    assert json.loads(text) == data
    assert audit.read_reports(tmp_path).good == [data]
    assert list(tmp_path.iterdir()) == [Path(path)]  # no temporary file left


# ---------------------------------------------------------------- which releases

def test_affected_releases_are_those_without_an_npu_isin():
    from ascend_env.sim import optables

    affected = audit.affected_releases()
    assert affected == ["2.1.0.post3", "2.1.0.post6", "2.2.0", "2.2.0.post2", "2.3.1"]
    assert all("isin.Tensor_Tensor_out" not in optables.load(r) for r in affected)
    others = [r for r in optables.releases() if r not in affected]
    assert all("isin.Tensor_Tensor_out" in optables.load(r) for r in others)


@pytest.mark.parametrize("value, releases", [
    (None, [None]), ("2.1.0-post6", ["2.1.0.post6"]),
    ("2.1.0.post6, 2.2.0,2.1.0.post6", ["2.1.0.post6", "2.2.0"]),
    ("affected,2.4.0", ["2.1.0.post3", "2.1.0.post6", "2.2.0", "2.2.0.post2", "2.3.1", "2.4.0"]),
    ("AFFECTED", ["2.1.0.post3", "2.1.0.post6", "2.2.0", "2.2.0.post2", "2.3.1"]),
])
def test_releases_asked(value, releases):
    assert audit.releases_asked(value) == releases


@pytest.mark.parametrize("value", [",", "2.1.0.post99", "2.2.0,nope"])
def test_bad_releases_are_usage_errors(value):
    with pytest.raises(UsageError):
        audit.releases_asked(value)


def test_with_none_named_and_none_installed_the_oldest_release_runs(monkeypatch):
    from ascend_env.sim import optables

    monkeypatch.setattr(audit, "_installed_torch_npu", lambda: None)
    table = audit.choose_table(None)  # audit's, and verify's simulated smoke test's, default
    assert table["label"] == table[startup.TORCH_NPU] == "2.1.0.post3" and table["chosen"] == "oldest"
    assert table["label"] == optables.releases()[0] != optables.newest()
    assert audit.header({"table": "2.1.0.post3", "table_chosen": "oldest"}).startswith(
        "audit: torch_npu 2.1.0.post3 op table on the simulated NPU (no --torch-npu and no torch_npu "
        "installed: the oldest known release")


@pytest.mark.parametrize("release, user, expected", [
    ("2.5.1", None, "1"), ("2.5.1", "1", "1"), ("2.5.1", "0", "0"), ("2.5.1", "false", "0"),
    ("2.4.0.post4", None, "0"), ("2.1.0.post6", "1", "0"), ("2.14.0", None, "1"),
])
def test_autoload_follows_the_release_and_the_users_switch(tmp_path, release, user, expected):
    base = {} if user is None else {"TORCH_DEVICE_BACKEND_AUTOLOAD": user}
    env = audit._audited_environment(audit.choose_table(release), tmp_path, base)
    assert env[startup.AUTOLOAD] == expected
    assert env["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "0"  # a real torch_npu must not load itself


def test_several_releases_fail_by_the_worst_and_name_each():
    done = {"how": "exit"}
    ok = audit.findings_from("2.4.0", ["x"], audit.Outcome(10, 0), [report(10, end=done)])
    bad = audit.findings_from("2.2.0", ["x"], audit.Outcome(10, 0), [report(10, {ISIN: 1}, done)])
    assert audit.combined_verdict([("2.2.0", bad), ("2.4.0", ok)], ("fallbacks",)) == (
        1, "audit failed on 1 of 2 releases: 2.2.0 (each release's last line above says why)")
    assert audit.combined_verdict([("2.4.0", ok), ("2.5.1", ok)], ("fallbacks",)) == (
        0, "audit passed on all 2 releases: 2.4.0, 2.5.1")
    error = EnvironmentProblem("no compiler", "install one")
    assert audit.combined_verdict([("2.4.0", ok), ("2.5.1", error)], ("fallbacks",)).code == 2


def test_a_process_that_used_npu_without_torch_npu_fails_where_the_release_needs_it():
    done = {"how": "exit"}
    used = dict(report(10, end=done), npu_used=True, torch_npu=None, autoload=False)
    findings = audit.findings_from("2.1.0.post6", ["x"], audit.Outcome(10, 0), [used])
    assert findings["without_torch_npu"] == [10] and audit.exit_code(findings) == 1
    lines = audit.format_text(findings).splitlines()
    assert lines[1] == "1 Python process used the npu device without importing torch_npu:"
    assert lines[2].startswith("  pid 10 (w.py): on torch_npu 2.1.0.post6 this script fails on a real NPU: "
                               "add `import torch_npu`")
    assert lines[-1].endswith("fix: add `import torch_npu` before the script uses the npu device")
    for fine in (dict(used, torch_npu="simulated"), dict(used, autoload=True), dict(used, npu_used=False)):
        again = audit.findings_from("2.1.0.post6", ["x"], audit.Outcome(10, 0), [fine])
        assert again["without_torch_npu"] == [] and audit.exit_code(again) == 0
