"""The registry of fixes: one parametrized suite over every fix, against the torch_npu op tables
and, where torch is installed, against the dispatcher and the kernel modules."""

from __future__ import annotations

import importlib
import json
import re

import pytest

from ascend_env.detect.npu_oplists import ISIN_OVERLOADS
from ascend_env.kernels import registry
from ascend_env.sim import optables, references

FIXES = pytest.mark.parametrize("fix", registry.FIXES, ids=lambda fix: fix.name)
OPS = pytest.mark.parametrize("op", registry.OVERLOADS, ids=lambda op: op.qualified_name)


@OPS
def test_releases_are_exactly_those_where_the_op_falls_back(op):
    if op.fix.namespace != "aten":  # the tables are torch_npu's aten ops: none of another namespace
        assert op.overload.releases == (">=0",), "an op outside aten is missing from every release"
        return
    for release in optables.releases():
        table = optables.load(release)
        falls_back = all(name not in table for name in op.when_missing)
        assert op.needed_by(release) is falls_back, (op.op, release)


@OPS
def test_a_functional_op_falls_back_only_with_its_out_form(op):
    by_op = {other.op: other for other in op.fix.ops}
    assert op.when_missing[0] == op.op
    for other in op.when_missing[1:]:
        assert other in by_op, f"{op.op} calls {other}, which the fix must register too"
        assert by_op[other].overload.releases == op.overload.releases


@FIXES
def test_every_field_is_declared(fix):
    assert re.fullmatch(r"[a-z_]+", fix.name)
    assert fix.module.startswith("ascend_env.kernels.") and fix.reason and fix.upstream
    assert fix.namespace in ("aten", "torchvision") and fix.dispatch_key == "PrivateUse1"
    assert (fix.requires is None) is (fix.namespace == "aten")
    assert fix.overloads and fix.smoke
    for op in fix.ops:
        assert op.qualified_name == f"{fix.namespace}::{op.op}" and op.family == fix.name


@FIXES
def test_names_are_unique_and_not_taken_from_the_op(fix):
    names = [other.name for other in registry.FIXES]
    assert names.count(fix.name) == 1
    assert registry.by_name()[fix.name] is fix
    ops = [op.qualified_name for op in registry.OVERLOADS]
    assert all(ops.count(op.qualified_name) == 1 for op in fix.ops)


@FIXES
def test_smoke_samples_cover_every_overload_that_falls_back_somewhere(fix):
    sampled = {sample.overload for sample in fix.smoke}
    assert sampled <= {op.op for op in fix.ops}
    for op in fix.ops:
        if op.overload.releases:
            assert op.op in sampled, f"no smoke sample runs {op.op}"
    for sample in fix.smoke:
        assert not (sample.out and sample.outs), sample


def test_the_isin_fix_holds_every_isin_overload_and_polar_both():
    fixes = registry.by_name()
    assert {op.op for op in fixes["isin"].ops} == set(ISIN_OVERLOADS)
    assert {op.op for op in fixes["polar"].ops} == {"polar", "polar.out"}


def test_unknown_release():
    op = registry.OVERLOADS[0]
    assert op.needed_by(None) is None
    assert op.needed_by("not a version") is None
    assert op.needed_by("2.1.0.post6") is True
    assert op.needed_by("2.4.0") is False
    assert registry.by_name()["isin"].needed_by(None) is None
    assert registry.fixes_needed_by("2.4.0") == tuple(fix for fix in registry.FIXES if fix.needed_by("2.4.0"))


def test_polar_copies_to_the_host_exactly_where_op_plugin_b761d58_is_pinned():
    """The releases whose polar kernel copies to the host are those built from op-plugin
    b761d5824d7b (PolarKernelNpuOpApi.cpp), as the op-path data records each release's commit."""
    from ascend_env.sim import oppaths

    records = json.loads(oppaths.DATA_FILE.read_text(encoding="utf-8"))["releases"]
    pinned = {r["version"] for r in records if r["op_plugin_commit"].startswith("b761d5824d7b")}
    assert pinned == {"2.1.0.post6", "2.2.0.post2", "2.3.1"}
    polar = registry.by_name()["polar"]
    for release in optables.releases():
        assert polar.copies_to_host(release) is (release in pinned), release
        if release in pinned:
            assert "polar" in optables.load(release)  # registered, so never overridden
    assert polar.copies_to_host(None) is False and polar.copies_to_host("garbage") is False
    assert not registry.by_name()["isin"].copies_to_host("2.3.1")


# -- with torch: the dispatcher and the kernel modules ---------------------------------------------


@FIXES
def test_the_module_holds_a_kernel_per_overload_and_its_native_ops(fix):
    pytest.importorskip("torch")
    module = importlib.import_module(fix.module)
    assert set(module.KERNELS) == {op.op for op in fix.ops}
    assert registry.kernels([fix]) == {op.op: module.KERNELS[op.op] for op in fix.ops}
    for release in optables.releases():  # built only from ops every release runs natively
        missing = module.NATIVE_OPS - optables.load(release)
        assert not missing, f"torch_npu {release} lacks {sorted(missing)}"


@OPS
def test_no_fix_overrides_an_op_that_pytorch_decomposes(op):
    torch = pytest.importorskip("torch")
    if op.fix.requires is not None:
        pytest.importorskip(op.fix.requires)
    assert not torch._C._dispatch_has_kernel_for_dispatch_key(op.qualified_name, "CompositeImplicitAutograd")
    # An op that PyTorch decomposes only for tracing (torch._decomp) still has a kernel per backend.
    # (or a device kernel only, which the simulator models: _fused_adamw_ before torch 2.4)
    assert op.op in references.kernels() or any(
        torch._C._dispatch_has_kernel_for_dispatch_key(op.qualified_name, key)
        for key in ("CPU", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")
    )


@OPS
def test_each_overload_is_declared_with_the_schema_its_kernel_takes(op):
    torch = pytest.importorskip("torch")
    if op.fix.requires is not None:
        pytest.importorskip(op.fix.requires)
    name, _, overload = op.op.partition(".")
    packet = getattr(getattr(torch.ops, op.fix.namespace), name)
    assert (overload or "default") in packet.overloads()
