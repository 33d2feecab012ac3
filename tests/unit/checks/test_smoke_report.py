"""The smoke test's report is one typed contract (``checks/smoke_report.py``): what verify's
verdict reads from it is declared there, and reports built by hand are checked against it."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Set

from typed_reports import unknown_keys

from ascend_env.checks import smoke_report, verify_result
from ascend_env.checks.smoke_report import SmokeReport
from ascend_env.hook.runtime import HookStatus

ROOT = Path(__file__).resolve().parents[3]
LOCALNS = {"HookStatus": HookStatus}


def declared_keys() -> Set[str]:
    """Every key of every report verify reads: the smoke test's, the hook's record, the guard's."""
    keys = {key for name in smoke_report.__all__ for key in getattr(smoke_report, name).__annotations__}
    keys |= set(HookStatus.__annotations__)
    return keys | {"apply", "applied", "reason", "error"}  # compile_guard.Decision.to_dict()


def _report(node: ast.expr) -> bool:
    """Whether ``node`` names a report (``smoke.report``, ``record``, ...), not a text."""
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return name in ("report", "record", "first", "installation", "result")


def read_keys(path: Path) -> Set[str]:
    """The string keys ``path`` reads: ``x["key"]``, ``x.get("key")`` and ``"key" in x``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            found.add(node.slice.value)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.add(node.args[0].value)
        elif (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Constant)
            and isinstance(node.ops[0], (ast.In, ast.NotIn))
            and _report(node.comparators[0])
        ):
            found.add(node.left.value)
    return {key for key in found if isinstance(key, str)}


def test_every_key_the_verdict_reads_is_declared():
    # mypy checks x["key"] on a TypedDict, not x.get("key"): a misspelt get would read None forever.
    document = (
        set(verify_result.VerifyResult.__annotations__)
        | set(verify_result.Check.__annotations__)
        | {"schema"}
    )
    unknown = read_keys(ROOT / "ascend_env" / "checks" / "verdict.py") - declared_keys() - document
    assert unknown == set()


def test_a_misspelt_key_is_caught(tmp_path):
    # The check itself, on both sides.
    path = tmp_path / "misspelt.py"
    path.write_text('installation.get("hook_startd")\nif "stepz" in report: pass\n', encoding="utf-8")
    assert read_keys(path) - declared_keys() == {"hook_startd", "stepz"}
    report = {"installation": {"patches": {"stauts": "applied"}}, "steps": {"isin": {"okay": True}}}
    assert unknown_keys(report, SmokeReport, LOCALNS) == ["installation.patches.stauts", "steps.isin.okay"]
