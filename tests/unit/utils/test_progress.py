"""ascend_env.utils.progress: lines on stderr, never stdout; -q silences, -v tells more; a child's
lines reach the parent's stderr even where the parent captures the child's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ascend_env.utils import progress

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    for name in (progress.VARIABLE, progress.FD_VARIABLE, "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)


def test_a_step_says_when_it_starts_and_how_long_it_took(capsys):
    with progress.step("building the thing"):
        print("result")
    out, err = capsys.readouterr()
    assert out == "result\n"
    lines = err.splitlines()
    assert lines[0] == "ascend-env: building the thing ..."
    assert lines[1].startswith("ascend-env: building the thing: done in ") and lines[1].endswith(" s")


def test_a_step_that_could_not_be_tried_does_not_say_done(capsys):
    """verify's accelerate process where accelerate is not installed: the result says "not
    tried", and so must the progress line."""
    with progress.step("the hook, through import accelerate") as ending:
        ending.outcome = "not tried (accelerate is not installed)"
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(
        "ascend-env: the hook, through import accelerate: not tried (accelerate is not installed), after "
    )
    assert "done" not in last


def test_a_failing_step_says_so_and_raises(capsys):
    with pytest.raises(RuntimeError), progress.step("compiling"):
        raise RuntimeError("boom")
    assert "ascend-env: compiling: failed after " in capsys.readouterr().err


def test_an_interrupted_step_says_stopped(capsys):
    with pytest.raises(KeyboardInterrupt), progress.step("compiling"):
        raise KeyboardInterrupt
    assert "ascend-env: compiling: stopped after " in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "normal", "verbose"),
    [
        ("-1", False, False),
        ("0", True, False),
        ("1", True, True),
        ("", True, False),
        ("x", True, False),
        ("-5", False, False),
        ("7", True, True),
    ],
)
def test_the_verbosity_decides_what_is_said(monkeypatch, capsys, value, normal, verbose):
    monkeypatch.setenv(progress.VARIABLE, value)
    progress.say("normal line")
    progress.say("verbose line", verbose=True)
    with progress.step("a verbose step", verbose=True):
        pass
    err = capsys.readouterr().err
    assert ("normal line" in err) is normal
    assert ("verbose line" in err) is verbose
    assert ("a verbose step" in err) is verbose


def test_set_level_is_what_children_read():
    env: dict = {}
    progress.set_level(progress.QUIET, env)
    assert env == {progress.VARIABLE: "-1"} and progress.level(env) == progress.QUIET
    progress.set_level(5, env)
    assert progress.level(env) == progress.VERBOSE


def test_plain_lines_off_a_terminal_dimmed_on_one(monkeypatch):
    assert progress._styled("x", tty=False) == "x"
    assert progress._styled("x", tty=True) == "\033[2mx\033[0m"
    monkeypatch.setenv("NO_COLOR", "1")
    assert progress._styled("x", tty=True) == "x"


_CHILD = textwrap.dedent("""
    import subprocess, sys
    from ascend_env.utils import progress
    progress.say("from the child")
    print("child stdout")
    # A grandchild gets the variable but not the file descriptor: its line stays in its own stderr.
    subprocess.run([sys.executable, "-c",
                    "import os; from ascend_env.utils import progress; os.open(os.devnull, os.O_RDONLY)"
                    "; progress.say('from the grandchild')"], check=True)
""")


def _parent(tmp_path: Path, forward: bool) -> subprocess.CompletedProcess:
    """A parent that captures its child's stderr (as verify does) and prints it afterwards."""
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(f"""
        import os, subprocess, sys
        from ascend_env.utils import progress
        env = dict(os.environ)
        child = [sys.executable, "-c", {_CHILD!r}]
        if {forward!r}:
            with progress.forwarded(env) as fds:
                done = subprocess.run(child, env=env, capture_output=True, text=True, pass_fds=fds)
        else:
            done = subprocess.run(child, env=env, capture_output=True, text=True)
        print("captured stderr:", repr(done.stderr))
        print("captured stdout:", repr(done.stdout))
    """)
    )
    env = {k: v for k, v in os.environ.items() if k not in (progress.VARIABLE, progress.FD_VARIABLE)}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60, check=True
    )


def test_a_captured_child_s_progress_reaches_the_parent_s_stderr(tmp_path):
    done = _parent(tmp_path, forward=True)
    assert done.stderr == "ascend-env: from the child\n"
    assert "captured stderr: 'ascend-env: from the grandchild\\n'" in done.stdout
    assert "captured stdout: 'child stdout\\n'" in done.stdout


def test_without_forwarding_the_child_s_progress_stays_in_its_stderr(tmp_path):
    done = _parent(tmp_path, forward=False)
    assert done.stderr == ""
    assert "ascend-env: from the child" in done.stdout


def test_a_stale_descriptor_is_not_written_to(monkeypatch, tmp_path, capsys):
    other = os.open(tmp_path / "unrelated", os.O_WRONLY | os.O_CREAT)
    try:
        monkeypatch.setenv(progress.FD_VARIABLE, f"{other}:1:2")  # not this file's device and inode
        progress.say("line")
    finally:
        os.close(other)
    assert (tmp_path / "unrelated").read_text() == ""
    assert capsys.readouterr().err == "ascend-env: line\n"


def test_a_note_is_said_once_at_the_start(capsys):
    with progress.step("building", note="once; cached in /c"):
        pass
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "ascend-env: building (once; cached in /c) ..."
    assert lines[1].startswith("ascend-env: building: done in ")


def test_forwarding_works_with_stdin_closed(tmp_path):
    """A Docker RUN step closes stdin (``exec 0<&-``): the duplicate must not take fd 0, which the
    child gets as its stdin."""
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent("""
        import os, subprocess, sys
        from ascend_env.utils import progress
        env = dict(os.environ)
        child = [sys.executable, "-c", "from ascend_env.utils import progress; progress.say('child')"]
        with progress.forwarded(env) as fds:
            assert min(fds) >= 3, fds
            done = subprocess.run(child, env=env, capture_output=True, text=True, pass_fds=fds,
                                  stdin=subprocess.DEVNULL)
        print(repr(done.stderr))
    """)
    )
    env = {k: v for k, v in os.environ.items() if k not in (progress.VARIABLE, progress.FD_VARIABLE)}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        ["sh", "-c", f"exec 0<&-\nexec {sys.executable} {script}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == ("''\n", "ascend-env: child\n")
