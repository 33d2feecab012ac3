"""A fix whose op another module defines (``requires``: torchvision) is not tried where that module
does not import: the smoke step says why, and verify shows it as not tried (not failed, not a
silent pass)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from ascend_env.checks import smoke_fixes, verdict
from ascend_env.checks.verify_result import Smoke
from ascend_env.kernels.registry import by_name


def _fix(requires: str):
    return dataclasses.replace(by_name()["nms"], requires=requires)


def test_a_missing_module_is_not_tried_and_says_why():
    result = smoke_fixes.check_fix(None, _fix("ascend_env_no_such_module"), "npu:0")
    assert result == {
        "overloads": {},
        "skipped": "ascend_env_no_such_module is not installed: its ops do not exist",
    }


def test_a_module_that_fails_to_import_is_not_tried_and_says_how(monkeypatch, tmp_path: Path):
    (tmp_path / "ascend_env_broken_ops.py").write_text("raise OSError('libcudart.so.12: cannot open')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "ascend_env_broken_ops", raising=False)
    result = smoke_fixes.check_fix(None, _fix("ascend_env_broken_ops"), "npu:0")
    assert result["overloads"] == {}
    assert (
        result["skipped"] == "ascend_env_broken_ops does not import (OSError: libcudart.so.12: cannot open)"
    )


@pytest.mark.parametrize("skipped", [True, False])
def test_verify_shows_it_as_not_tried(skipped):
    result = {"overloads": {}, "skipped": "torchvision is not installed: its ops do not exist"}
    if not skipped:
        result = {"overloads": {"nms": {"ok": False, "error": "differs"}}}
    run = Smoke(device="sim", steps=["nms"], report={"steps": {"nms": result}})
    check = verdict._step_check("nms", [run])
    assert check is not None
    if skipped:
        assert check.ok and check.detail == "not tried: torchvision is not installed: its ops do not exist"
    else:
        assert not check.ok and "differs" in check.detail
