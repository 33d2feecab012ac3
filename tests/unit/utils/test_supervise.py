"""ascend_env.utils.supervise on its own: a command run in its own session, its tree followed,
stopped on a timeout, what it leaves behind stopped, and a killed supervisor cleaned up after."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ascend_env.utils import proctree, supervise

ROOT = str(Path(supervise.__file__).resolve().parents[2])
VARIABLE = "TEST_SUPERVISE_SCRATCH"


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(path: Path, seconds: float = 30) -> str:
    deadline = time.monotonic() + seconds
    while not (path.exists() and path.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return path.read_text()


def environment(scratch: Path) -> dict:
    return dict(os.environ, **{VARIABLE: str(scratch)})


def test_a_command_that_ends_by_itself(tmp_path):
    command = ["sh", "-c", "sh -c 'exit 0'; exit 3"]
    done = supervise.supervise(command, environment(tmp_path), tmp_path, VARIABLE)
    assert (done.returncode, done.timed_out, done.stopped) == (3, False, 0)
    assert done.pid in done.tree.members or not done.tree.available
    assert tmp_path.is_dir()  # only the watchdog of a killed supervisor removes it


def test_a_timeout_stops_the_whole_tree(tmp_path):
    pidfile = tmp_path / "pid"
    start = time.monotonic()
    done = supervise.supervise(
        ["sh", "-c", f"setsid sleep 30 & echo $! > {pidfile}; wait"],
        environment(tmp_path),
        tmp_path,
        VARIABLE,
        timeout=0.5,
    )
    assert done.timed_out and done.returncode < 0 and done.stopped >= 1
    assert time.monotonic() - start < 10
    assert not alive(int(pidfile.read_text()))  # in a session of its own, and still stopped


def test_what_the_command_leaves_running_is_stopped_after_the_linger(tmp_path, monkeypatch):
    monkeypatch.setattr(supervise, "LINGER_SECONDS", 0.2)
    pidfile = tmp_path / "pid"
    done = supervise.supervise(
        ["sh", "-c", f"sleep 30 & echo $! > {pidfile}"], environment(tmp_path), tmp_path, VARIABLE
    )
    assert (done.returncode, done.timed_out, done.stopped) == (0, False, 1)
    assert not alive(int(pidfile.read_text()))


def test_a_command_that_cannot_start(tmp_path):
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(supervise.NotStarted) as raised:
        supervise.supervise([str(tmp_path / "no-such-program")], environment(tmp_path), tmp_path, VARIABLE)
    assert raised.value.program.endswith("no-such-program") and isinstance(raised.value.error, OSError)
    assert str(raised.value).endswith("no-such-program': No such file or directory")
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_reported_pids_are_asked_at_each_poll(tmp_path):
    asked = []
    supervise.supervise(
        ["sh", "-c", "sleep 0.3"],
        environment(tmp_path),
        tmp_path,
        VARIABLE,
        reported=lambda: asked.append(1) or proctree.Reported(),
    )
    assert len(asked) >= 2


KILLED = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    sys.path.insert(0, {root!r})
    from ascend_env.utils import supervise
    scratch, pidfile = Path(sys.argv[1]), sys.argv[2]
    env = dict(os.environ, {variable}=str(scratch))
    supervise.supervise(["sh", "-c", "setsid sleep 300 & echo $! > " + pidfile + "; wait"], env, scratch,
                        {variable!r})
    """
)


def test_a_killed_supervisor_leaves_nothing_behind(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    pidfile = tmp_path / "pid"
    code = KILLED.format(root=ROOT, variable=VARIABLE)
    proc = subprocess.Popen([sys.executable, "-c", code, str(scratch), str(pidfile)])
    try:
        pid = int(wait_for(pidfile))
        time.sleep(0.3)  # the supervisor has told its watchdog of every member by now
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 20
        while (alive(pid) or scratch.exists()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(pid) and not scratch.exists()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_watchdog_stops_what_it_was_told_of_unless_done(tmp_path):
    sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        told = [f"{sleeper.pid} {proctree.start_time(sleeper.pid)}\n"]
        assert proctree.watch(str(tmp_path), VARIABLE, sleeper.pid, told + ["done\n"], grace=0.1) is False
        assert sleeper.poll() is None and tmp_path.is_dir()
        assert proctree.watch(str(tmp_path), VARIABLE, sleeper.pid, told, grace=0.1) is True
        assert sleeper.wait(timeout=10) == -signal.SIGTERM and not tmp_path.exists()
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
