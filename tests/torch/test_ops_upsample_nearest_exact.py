"""``ascend_env.kernels.upsample_nearest_exact`` against the CPU: the forward bit for bit (strides
included) on PyTorch's OpInfo samples of ``nn.functional.interpolate`` (``nearest-exact``) and on
scale factors whose float rounding decides the index; the backward within float rounding of the
CPU's sum (two ``index_add`` associate the sums otherwise than the CPU's raster-order loop:
``2 * eps * max|grad|`` allowed, measured 0.55) and exact on integers; the CPU's refusals."""

from __future__ import annotations

import json
import sys
import types
import unittest
from typing import Any, List, Tuple

import pytest
import torch
import torch.nn.functional as F
from conftest import run_python
from torch.utils._python_dispatch import TorchDispatchMode

from ascend_env.kernels import upsample_nearest_exact
from ascend_env.kernels.upsample_nearest_exact import (
    upsample_nearest_exact2d_backward_grad_input,
)
from ascend_env.sim import optables

ATEN = torch.ops.aten
_OURS = {
    ATEN._upsample_nearest_exact2d.default: upsample_nearest_exact.upsample_nearest_exact2d,
    ATEN._upsample_nearest_exact2d.out: upsample_nearest_exact.upsample_nearest_exact2d_out,
    ATEN._upsample_nearest_exact2d_backward.default: upsample_nearest_exact.upsample_nearest_exact2d_backward,
    ATEN._upsample_nearest_exact2d_backward.grad_input: upsample_nearest_exact2d_backward_grad_input,
}


class _Ours(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.seen: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kernel = _OURS.get(func)
        if kernel is not None:
            self.calls += 1
            return kernel(*args, **(kwargs or {}))
        name = func._schema.name.split("::", 1)[1]
        overload = func._overloadname
        self.seen.add(name if overload == "default" else f"{name}.{overload}")
        return func(*args, **(kwargs or {}))


def opinfo_samples() -> List[Tuple[Any, Any]]:
    sys.modules.setdefault("expecttest", types.SimpleNamespace(TestCase=unittest.TestCase, ACCEPT=False))
    from torch.testing._internal.common_methods_invocations import op_db

    # torch 2.1's op_db has no nearest-exact variant: its nearest samples, called nearest-exact
    variants = {op.variant_test_name: op for op in op_db if op.name == "nn.functional.interpolate"}
    info = variants.get("nearest-exact", variants["nearest"])

    def exact(input: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if len(args) >= 3:  # torch 2.1's samples: (size, scale_factor, mode, align_corners)
            args = (*args[:2], "nearest-exact", *args[3:])
        else:
            kwargs["mode"] = "nearest-exact"
        return F.interpolate(input, *args, **kwargs)

    found = []
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8):
        for sample in info.sample_inputs("cpu", dtype, requires_grad=dtype.is_floating_point):
            if sample.input.dim() == 4:
                found.append((exact, sample))
    return found


SAMPLES = opinfo_samples()


def test_the_samples_are_there():
    assert len(SAMPLES) >= 30


@pytest.mark.parametrize("index", range(len(SAMPLES)))
def test_opinfo_sample(index):
    op, sample = SAMPLES[index]
    try:
        want = op(sample.input, *sample.args, **sample.kwargs)
    except RuntimeError as refused:  # torch 2.1: no float16/bfloat16 loop
        with pytest.raises(RuntimeError) as ours_refused:
            with _Ours():
                op(sample.input, *sample.args, **sample.kwargs)
        assert str(ours_refused.value) == str(refused)
        return
    with _Ours() as ours:
        got = op(sample.input, *sample.args, **sample.kwargs)
    assert ours.calls == 1
    assert torch.equal(got, want) and got.stride() == want.stride()
    if sample.input.requires_grad:
        grad = torch.randn(want.shape).to(want.dtype)
        (expected,) = torch.autograd.grad(want, sample.input, grad)
        with _Ours() as ours:
            (found,) = torch.autograd.grad(
                op(sample.input, *sample.args, **sample.kwargs), sample.input, grad
            )
        assert ours.calls == 2
        bound = 2 * torch.finfo(want.dtype).eps * float(expected.double().abs().max())
        assert float((found.double() - expected.double()).abs().max()) <= bound


@pytest.mark.parametrize("scale", [1.7, 0.33, 2.0, 3.14159, 0.999, 1.0 / 3])
@pytest.mark.parametrize("recompute", [True, False])
@pytest.mark.parametrize("channels_last", [True, False])
def test_scales_and_layouts(scale, recompute, channels_last):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 11, 13)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    kwargs = {"scale_factor": scale, "mode": "nearest-exact", "recompute_scale_factor": recompute}
    want = F.interpolate(x, **kwargs)
    with _Ours():
        got = F.interpolate(x, **kwargs)
    assert torch.equal(got, want) and got.stride() == want.stride()


def test_backward_is_exact_on_integers():
    grad = torch.randint(-50, 50, (2, 3, 9, 17)).float()
    want = ATEN._upsample_nearest_exact2d_backward(grad, [9, 17], [2, 3, 4, 6])
    assert torch.equal(
        upsample_nearest_exact.upsample_nearest_exact2d_backward(grad, [9, 17], [2, 3, 4, 6]), want
    )
    out = torch.empty(0)
    assert (
        upsample_nearest_exact.upsample_nearest_exact2d_backward_grad_input(
            grad, [9, 17], [2, 3, 4, 6], grad_input=out
        )
        is out
    )
    assert torch.equal(out, want)


@pytest.mark.parametrize(
    "shape, size",
    [((2, 3, 4), [5, 5]), ((1, 0, 4, 4), [5, 5]), ((1, 1, 4, 4), [5]), ((1, 1, 4, 4), [0, 5])],
)
def test_refusals_are_the_cpus(shape, size):
    x = torch.ones(shape)
    with pytest.raises(Exception) as native:
        ATEN._upsample_nearest_exact2d(x, size)
    with pytest.raises(Exception) as ours:
        upsample_nearest_exact.upsample_nearest_exact2d(x, size)
    assert type(ours.value) is type(native.value)
    assert str(ours.value).splitlines()[0] == str(native.value).splitlines()[0]


def test_native_ops_is_exactly_what_is_dispatched():
    x = torch.randn(1, 2, 5, 7).to(memory_format=torch.channels_last)
    grad = torch.ones(1, 2, 9, 4)
    calls = (
        lambda: upsample_nearest_exact.upsample_nearest_exact2d(x, [9, 4]),
        lambda: upsample_nearest_exact.upsample_nearest_exact2d_out(x, [9, 4], out=torch.empty(0)),
        lambda: upsample_nearest_exact.upsample_nearest_exact2d_backward(grad, [9, 4], [1, 2, 5, 7]),
    )
    for call in calls:
        call()  # the host's indices, computed once
    upsample_nearest_exact._INDICES.clear()  # uploaded again: empty + copy_
    seen: set = set()
    for call in calls:
        with _Ours() as ops:
            call()
        seen |= ops.seen
    assert seen == upsample_nearest_exact.NATIVE_OPS


def test_native_ops_are_native_in_every_torch_npu_release():
    for release in optables.releases():
        assert not upsample_nearest_exact.NATIVE_OPS - optables.load(release), release


ON_TABLE = """
import json, torch
import torch.nn.functional as F
from ascend_env import sim
from ascend_env.hook import runtime
sim.enable({table!r})
torch.manual_seed(0)
x = torch.randn(2, 3, 7, 9)
def run(device):
    leaf = x.to(device).detach().requires_grad_()
    y = F.interpolate(leaf, scale_factor=1.7, mode="nearest-exact")
    (y * y).sum().backward()
    return y.detach().cpu(), leaf.grad.cpu()
want = run("cpu")
run("npu")
before = dict(sim.fallbacks())
sim.reset()
registered = runtime.activate("torch_npu")
got = run("npu")
print(json.dumps({{"before": before, "after": dict(sim.fallbacks()),
    "registered": [op for op in registered if "nearest_exact" in op],
    "equal": [bool(torch.equal(g, w)) for g, w in zip(got, want)]}}))
"""


@pytest.mark.parametrize("table, lacks", [("2.4.0", True), ("2.4.0.post2", False)])
def test_interpolate_on_the_simulated_npu(table, lacks):
    done = run_python(ON_TABLE.format(table=table))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["after"] == {} and result["equal"] == [True, True]
    if lacks:
        assert result["before"] == {  # structured: the functionals fall back through these
            "aten::_upsample_nearest_exact2d.out": 1,
            "aten::_upsample_nearest_exact2d_backward.grad_input": 1,
        }
        assert result["registered"] == list(upsample_nearest_exact.KERNELS)
    else:
        assert result["before"] == {} and result["registered"] == []
