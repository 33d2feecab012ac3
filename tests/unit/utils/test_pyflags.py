"""status's probe and verify's smoke test run their child Python with this interpreter's flags."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

import ascend_env
from ascend_env.checks import verify
from ascend_env.hook import files

ROOT = str(Path(ascend_env.__file__).resolve().parents[1])


@pytest.mark.parametrize(
    "flags, expected",
    [
        ([], []),
        (["-s"], ["-s"]),
        (["-E"], ["-E"]),
        (["-s", "-E"], ["-s", "-E"]),
        (["-I"], ["-I"]),
        (["-I", "-S"], ["-I", "-S"]),
    ],
)
def test_child_flags_repeat_the_ones_that_change_imports(flags: List[str], expected: List[str]):
    code = (
        f"import sys; sys.path.insert(0, {ROOT!r}); from ascend_env.utils.pyflags import child_flags; "
        "import json; print(json.dumps([child_flags(sys.executable), child_flags('/no/such/python')]))"
    )
    result = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    same, other = json.loads(result.stdout)
    assert same == expected and other == []


def test_status_probe_and_verify_smoke_pass_them_on(monkeypatch):
    """Both children get the flags: run as python -s, status and verify answer for one environment."""
    from ascend_env.utils import pyflags

    monkeypatch.setattr(pyflags, "child_flags", lambda python: ["-s"] if python == sys.executable else [])
    commands: List[list] = []

    def run(command, **kwargs):
        commands.append(command)
        text = kwargs.get("text")
        return subprocess.CompletedProcess(command, 0, "{}" if text else b"", "" if text else b"")

    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(verify, "child_flags", pyflags.child_flags)
    files.probe(sys.executable)
    verify.run_smoke(verify.Options(python=sys.executable), "cpu", ["isin"], {})
    assert [command[:2] for command in commands] == [[sys.executable, "-s"], [sys.executable, "-s"]]
