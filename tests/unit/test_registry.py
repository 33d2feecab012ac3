"""The registry of fixes agrees with the torch_npu op tables, release by release."""

from __future__ import annotations

import pytest

from ascend_env.detect.npu_oplists import ISIN_OVERLOADS
from ascend_env.kernels import registry
from ascend_env.sim import optables


@pytest.mark.parametrize("fix", registry.FIXES, ids=lambda fix: fix.op)
def test_releases_are_exactly_those_where_the_op_falls_back(fix):
    for release in optables.releases():
        table = optables.load(release)
        falls_back = all(op not in table for op in fix.when_missing)
        assert fix.needed_by(release) is falls_back, (fix.op, release)


def test_a_functional_op_falls_back_only_with_its_out_form():
    by_op = {fix.op: fix for fix in registry.FIXES}
    for op, fix in by_op.items():
        assert fix.when_missing[0] == op
        for other in fix.when_missing[1:]:
            assert other in (op + "_out", op + ".out") and other in by_op


def test_every_overload_of_each_fixed_op_has_a_fix():
    assert registry.families() == ("isin", "polar")
    assert {fix.op for fix in registry.FIXES if fix.family == "isin"} == set(ISIN_OVERLOADS)
    assert {fix.op for fix in registry.FIXES if fix.family == "polar"} == {"polar", "polar.out"}
    for fix in registry.FIXES:
        assert fix.module == f"ascend_env.kernels.{fix.family}"


def test_kernels_holds_every_fix():
    pytest.importorskip("torch")
    assert set(registry.kernels()) == {fix.op for fix in registry.FIXES}


def test_every_fix_says_why():
    for fix in registry.FIXES:
        assert fix.reason and fix.qualified_name == f"aten::{fix.op}"


def test_unknown_release():
    fix = registry.FIXES[0]
    assert fix.needed_by(None) is None
    assert fix.needed_by("not a version") is None
    assert fix.needed_by("2.1.0.post6") is True
    assert fix.needed_by("2.4.0") is False


def test_polar_copies_to_the_host_exactly_where_op_plugin_b761d58_is_pinned():
    """The releases whose polar kernel copies to the host are those built from op-plugin
    b761d5824d7b (PolarKernelNpuOpApi.cpp), as the op-path data records each release's commit."""
    import json

    from ascend_env.sim import oppaths

    records = json.loads(oppaths.DATA_FILE.read_text(encoding="utf-8"))["releases"]
    pinned = {r["version"] for r in records if r["op_plugin_commit"].startswith("b761d5824d7b")}
    assert pinned == {"2.1.0.post6", "2.2.0.post2", "2.3.1"}
    polar = {fix.op: fix for fix in registry.FIXES}["polar"]
    for release in optables.releases():
        assert polar.copies_to_host(release) is (release in pinned), release
        if release in pinned:
            assert "polar" in optables.load(release)  # registered, so never overridden
    assert polar.copies_to_host(None) is False and polar.copies_to_host("garbage") is False
    assert not any(fix.copies_to_host("2.3.1") for fix in registry.FIXES if fix.family == "isin")
