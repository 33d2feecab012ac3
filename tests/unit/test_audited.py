"""The audited process's report (``ascend_env._audited``).

The reporter runs here with a fake counter in place of the simulator's, in child Pythons that
fork, exit, exec and die the ways real commands do; no torch is needed.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import List

from ascend_env import _audited
from ascend_env.checks import process_reports
from ascend_env.sim.reports import ProcessReport
from ascend_env.utils import jsonwrite

ROOT = str(Path(_audited.__file__).resolve().parents[1])

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
    code = (
        HARNESS.format(root=ROOT)
        + textwrap.dedent(before)
        + "_audited.install(Path(sys.argv[1]), counts, 'test-table')\n"
        + textwrap.dedent(body)
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(reports)], capture_output=True, text=True, timeout=30
    )
    return result, process_reports.collect(reports)


def by_origin(reports: List[dict], origin: str) -> List[dict]:
    return [r for r in reports if r["origin"] == origin]


def test_a_forked_child_reports_only_its_own_fallbacks(tmp_path):
    result, reports = run_reporter(
        tmp_path,
        """
        fall(2)
        pid = os.fork()
        if pid == 0:
            fall(1, "aten::sort")
            os._exit(4)
        os.waitpid(pid, 0)
        fall(1)
    """,
    )
    assert result.returncode == 0, result.stderr
    (parent,), (child,) = by_origin(reports, "start"), by_origin(reports, "fork")
    assert parent["fallbacks"] == {"aten::isin.Tensor_Tensor_out": 3} and parent["end"] == {"how": "exit"}
    assert child["fallbacks"] == {"aten::sort": 1} and child["end"] == {"how": "os._exit", "code": 4}
    assert child["ppid"] == parent["pid"] != child["pid"] and child["table"] == "test-table"


def test_a_grandchild_subtracts_what_it_inherited_at_its_own_fork(tmp_path):
    result, reports = run_reporter(
        tmp_path,
        """
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
    """,
    )
    assert result.returncode == 0, result.stderr
    (parent,) = by_origin(reports, "start")
    (child,) = [r for r in reports if r["ppid"] == parent["pid"]]
    (grandchild,) = [r for r in reports if r["ppid"] == child["pid"]]
    counts = [r["fallbacks"]["aten::isin.Tensor_Tensor_out"] for r in (parent, child, grandchild)]
    assert counts == [5, 2, 1], reports
    assert {r["end"]["how"] for r in reports} == {"exit"}


def test_sigterm_while_the_last_report_is_written(tmp_path):
    # The handler runs in the thread that is writing (the main thread): it must not wait on it.
    result, reports = run_reporter(
        tmp_path,
        """
        fall(1)
        SIGNAL_IN_COUNTS.append(signal.SIGTERM)
        os._exit(0)
    """,
    )
    assert result.returncode == -signal.SIGTERM
    (report,) = reports
    assert report["end"] in ({"how": "signal", "signal": "SIGTERM"}, {"how": "os._exit", "code": 0})


def test_counts_seen_before_sigkill_survive_it(tmp_path):
    result, reports = run_reporter(
        tmp_path,
        f"""
        fall(3)
        time.sleep({_audited.POLL_SECONDS * 6})
        os.kill(os.getpid(), signal.SIGKILL)
    """,
    )
    assert result.returncode == -signal.SIGKILL
    (report,) = reports
    assert report["fallbacks"] == {"aten::isin.Tensor_Tensor_out": 3} and report["end"] is None


def test_a_process_is_reported_from_its_start(tmp_path):
    result, reports = run_reporter(tmp_path, "os.kill(os.getpid(), signal.SIGKILL)\n")
    assert result.returncode == -signal.SIGKILL
    assert [(r["fallbacks"], r["end"]) for r in reports] == [({}, None)]


def test_sigterm_writes_the_report_and_still_kills(tmp_path):
    result, reports = run_reporter(
        tmp_path,
        """
        fall(1)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
    """,
    )
    assert result.returncode == -signal.SIGTERM
    (report,) = reports
    assert report["end"] == {"how": "signal", "signal": "SIGTERM"}
    assert report["fallbacks"] == {"aten::isin.Tensor_Tensor_out": 1}


def test_an_ignored_sigterm_stays_ignored(tmp_path):
    result, reports = run_reporter(
        tmp_path,
        """
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGTERM)
    """,
        before="signal.signal(signal.SIGTERM, signal.SIG_IGN)\n",
    )
    assert result.returncode == 0, result.stderr
    assert reports[0]["end"] == {"how": "exit"}


def test_an_uncaught_exception_is_told(tmp_path):
    result, reports = run_reporter(tmp_path, "fall(1)\nraise ValueError('boom')\n")
    assert result.returncode == 1
    assert reports[0]["end"] == {"how": "exception", "exception": "ValueError"}


def test_exec_writes_the_last_report_first(tmp_path):
    result, reports = run_reporter(
        tmp_path,
        """
        fall(1)
        os.execv(sys.executable, [sys.executable, "-c", "pass"])
    """,
    )
    assert result.returncode == 0, result.stderr
    assert reports[0]["end"] == {"how": "exec"} and reports[0]["fallbacks"] != {}


def test_a_fork_that_execs_at_once_is_not_a_process(tmp_path):
    # subprocess forks through the at-fork hooks when it has a preexec_fn.
    result, reports = run_reporter(
        tmp_path,
        """
        subprocess.run(["true"], preexec_fn=lambda: None, check=True)
        subprocess.run(["true"], check=True)
    """,
    )
    assert result.returncode == 0, result.stderr
    assert len(reports) == 1


def test_install_twice_is_refused(tmp_path):
    result, _ = run_reporter(tmp_path, "_audited.install(Path(sys.argv[1]), counts, 'again')\n")
    assert result.returncode == 1 and "already installed" in result.stderr


def test_what_the_reporter_writes_reads_back(tmp_path):
    data = {
        "pid": 3,
        "argv": ["x\udcff", "é", "\U0001f600", 'q"\\\n\t\x01'],
        "fallbacks": {"aten::a": 2},
        "end": None,
        "torch": False,
        "ratio": 0.5,
        "nested": [[1], {"k": None}],
    }
    path = str(tmp_path / "3-x.json")
    jsonwrite.write_json(path, data)
    text = Path(path).read_text(encoding="ascii")

    assert json.loads(text) == data
    assert process_reports.read_reports(tmp_path).good == [data]
    assert list(tmp_path.iterdir()) == [Path(path)]  # no temporary file left


def test_a_report_holds_the_keys_of_a_process_report(tmp_path):
    result, reports = run_reporter(tmp_path, "fall(1)\n")
    assert result.returncode == 0, result.stderr
    (report,) = reports
    assert set(report) <= set(ProcessReport.__annotations__) and report["torch"] is False


def test_the_shim_reports_where_the_reporter_does():
    # _audited_shim/sitecustomize.py runs where ascend_env may not import: it spells the variable out.
    shim = Path(_audited.__file__).parent / "_audited_shim" / "sitecustomize.py"
    named = set(re.findall(r'"(ASCEND_ENV_AUDIT_\w+)"', shim.read_text(encoding="utf-8")))
    assert named == {_audited.REPORTS, _audited.EXEC}


def test_the_simulated_torch_npu_is_found_where_the_simulator_puts_it():
    from ascend_env import sim

    assert _audited._PKGS == sim.torch_npu_path()
