"""ascend_env.utils.proctree: reading a Python command line (the tree and the watchdog are
exercised through ascend_env.utils.supervise and the audit)."""

from __future__ import annotations

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
