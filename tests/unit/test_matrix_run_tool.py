"""tools/matrix_run.py: one transformers release installed, then the matrix proof run on it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "matrix_run.py"
spec = importlib.util.spec_from_file_location("matrix_run", TOOL)
matrix_run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(matrix_run)


@pytest.mark.parametrize("argv", [[], ["4.44.2", "4.46.3"], ["latest"], ["4.44.2; rm -rf /"]])
def test_anything_but_one_version_is_refused_before_pip_runs(argv, monkeypatch, capsys):
    calls: List[list] = []
    monkeypatch.setattr(subprocess, "call", lambda command: calls.append(command) or 0)
    assert matrix_run.main(argv) == 2
    assert calls == [] and "4.44.2" in capsys.readouterr().err


def test_installs_the_exact_release_then_runs_the_matrix_with_the_envs_pytest(monkeypatch):
    calls: List[list] = []
    monkeypatch.setattr(subprocess, "call", lambda command: calls.append(command) or 0)
    assert matrix_run.main(["4.40.0"]) == 0
    install, tests = calls
    assert install[:4] == [sys.executable, "-I", "-m", "pip"] and install[-1] == "transformers==4.40.0"
    assert tests[:2] == [str(Path(sys.executable).with_name("pytest")), "tests/matrix"]


def test_a_failed_install_runs_no_test(monkeypatch):
    calls: List[list] = []
    monkeypatch.setattr(subprocess, "call", lambda command: calls.append(command) or 1)
    assert matrix_run.main(["4.40.0"]) == 1
    assert len(calls) == 1
