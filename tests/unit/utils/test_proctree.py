"""ascend_env.utils.proctree: reading a Python command line (the tree and the watchdog are
exercised through ascend_env.utils.supervise and the audit)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ascend_env.utils import proctree


@pytest.mark.parametrize(
    "argv, flags",
    [
        (["python", "-IS", "x.py"], "IS"),
        (["python", "-X", "dev", "-E", "-c", "pass"], "E"),
        (["python", "-Wignore", "-s", "-m", "pip"], "s"),
        (["python", "-c", "-I"], ""),
        (["python", "--", "-I"], ""),
        (["python", "-bB", "-OO", "x.py", "-I"], "bBOO"),
    ],
)
def test_python_flags(argv, flags):
    assert proctree.python_flags(argv) == flags


def test_a_process_that_reported_before_it_was_met_still_has_its_command_line():
    # Under load the supervisor's first poll can come after the command's report: its command line
    # must still be read once, or a fork of it (``platform`` runs ``uname -p`` so) looks unaudited.
    argv = [sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()", "marker"]
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        # A reporter has run long past its exec: wait for the child's Python to be up (polled right
        # after the fork, its command line can still be empty or the parent's)
        assert child.stdout is not None and child.stdout.readline() == b"up\n"
        tree = proctree.Tree(os.getpid())
        reported = proctree.Reported(frozenset({(child.pid, proctree.start_time(child.pid) or 0, 0)}))
        tree.poll(reported)
        member = tree.members[child.pid]
        assert member.argv == argv and member.python
        member.argv = ["changed"]
        tree.poll(reported)
        assert member.argv == ["changed"]  # a reporter's program is not read again
        # ... until it runs exec (the image's generation then has an exec marker)
        tree.poll(proctree.Reported(reported.reports, reported.reports))
        assert member.argv == argv and len(member.images) == 2
    finally:
        child.communicate(b"")
