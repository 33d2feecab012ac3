"""``ascend_env.checks.audit.run``: running and stopping a command (no torch: these commands never
import it)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from ascend_env.checks import audit, audit_text
from ascend_env.exceptions import EnvironmentProblem, UsageError
from ascend_env.utils import supervise


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
    assert audit_text.verdict(findings) == (
        1,
        "audit failed on the simulator (torch_npu 2.4.0's op table): the command timed out after "
        "0.5 s; fix: give it more time "
        "(--timeout) or let it end by itself",
    )
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
def test_a_signal_to_the_audit_stops_the_command_and_removes_the_reports(
    tmp_path, monkeypatch, signum, sigint_as_python_starts
):
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
    with pytest.raises(supervise.Interrupted) as raised:
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
