"""Every fix of the registry on the simulated NPU, one parametrized suite: on a table that lacks
the op it falls back without the hook and runs on the device with it, equal to the CPU on the fix's
smoke samples; on a table that has it nothing is registered."""

from __future__ import annotations

import json
from typing import Optional

import pytest
from conftest import run_python

from ascend_env.kernels import registry
from ascend_env.sim import optables

SCRIPT = """
import importlib, json, torch
from ascend_env import sim
from ascend_env.checks import smoke_fixes
from ascend_env.hook import runtime
from ascend_env.kernels import registry
sim.enable({table!r})
fix = registry.by_name()[{name!r}]
if fix.requires is not None:
    importlib.import_module(fix.requires)
before = smoke_fixes.check_fix(torch, fix, "npu")["overloads"]
fell_back = dict(sim.fallbacks())
sim.reset()
registered = runtime.activate("torch_npu")
after = smoke_fixes.check_fix(torch, fix, "npu")["overloads"]
print(json.dumps({{
    "before": before, "fell_back": fell_back, "registered": registered,
    "after": after, "after_fell_back": dict(sim.fallbacks()), "errors": runtime.status()["errors"],
}}))
"""


def _table(fix: registry.Fix, lacking: bool) -> Optional[str]:
    """The first release whose table lacks (or has) one of ``fix``'s overloads."""
    for release in optables.releases():
        if bool(fix.needed_by(release)) is lacking:
            return release
    return None


CASES = [
    pytest.param(fix, lacking, id=f"{fix.name}-{'lacking' if lacking else 'native'}")
    for fix in registry.FIXES
    for lacking in (True, False)
]


@pytest.mark.parametrize("fix, lacking", CASES)
def test_fix_on_the_simulated_npu(fix, lacking):
    table = _table(fix, lacking)
    if table is None:
        pytest.skip(f"no table {'lacks' if lacking else 'has'} {fix.name}")
    if fix.requires is not None:
        pytest.importorskip(fix.requires)
    done = run_python(SCRIPT.format(table=table, name=fix.name))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["errors"] == []
    for run in ("before", "after"):  # equal to the CPU either way: on the CPU or on the device
        assert set(result[run]) == {sample.overload for sample in fix.smoke}
        assert all(item["ok"] for item in result[run].values()), result[run]
    assert result["after_fell_back"] == {}
    mine = [op for op in result["registered"] if op in {other.op for other in fix.ops}]
    if lacking:
        assert result["fell_back"], "the samples must reach the fallback on a table that lacks the op"
        qualified = {op.qualified_name for op in fix.ops}
        assert set(result["fell_back"]) <= qualified, result["fell_back"]
        assert mine == [op.op for op in fix.ops if op.needed_by(table)]
        for op in result["fell_back"]:  # torch_npu's CAUTION line, as the simulator prints it
            assert op.split("::")[1] in done.stderr
    else:
        assert result["fell_back"] == {} and mine == []
