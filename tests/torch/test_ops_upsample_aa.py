"""``ascend_env.kernels.upsample_aa`` against the CPU: PyTorch's OpInfo samples of
``nn.functional.interpolate`` (bilinear, bicubic) with ``antialias=True`` and of
``_upsample_bilinear2d_aa``, down and up, ``align_corners`` both, sizes and scale factors; float
results within ``16 * eps * max|result|`` of the CPU's (``mm``/``bmm`` associate the weighted sums
otherwise than the CPU's loops; measured 7.6 eps at most), uint8 equal (the CPU's int16 weights,
rounded per pass); gradients the same bound; the CPU's refusals (float16, bfloat16, uint8
gradients, bad sizes)."""

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

from ascend_env.kernels import upsample_aa
from ascend_env.sim import optables

ATEN = torch.ops.aten
_OURS = {}
for _mode in ("bilinear", "bicubic"):
    _name = f"_upsample_{_mode}2d_aa"
    _OURS[getattr(ATEN, _name).default] = upsample_aa.KERNELS[_name]
    _OURS[getattr(ATEN, _name).out] = upsample_aa.KERNELS[f"{_name}.out"]
    _OURS[getattr(ATEN, f"{_name}_backward").default] = upsample_aa.KERNELS[f"{_name}_backward"]
    _OURS[getattr(ATEN, f"{_name}_backward").grad_input] = upsample_aa.KERNELS[f"{_name}_backward.grad_input"]


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


def _interpolate(input: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    return F.interpolate(input, *args, antialias=True, **kwargs)


def opinfo_samples() -> List[Tuple[Any, Any]]:
    sys.modules.setdefault("expecttest", types.SimpleNamespace(TestCase=unittest.TestCase, ACCEPT=False))
    from torch.testing._internal.common_methods_invocations import op_db

    found = []
    for info in op_db:
        if info.name == "nn.functional.interpolate" and info.variant_test_name in ("bilinear", "bicubic"):
            op = _interpolate
        elif info.name == "_upsample_bilinear2d_aa":
            op = info.op
        else:
            continue
        for dtype in (torch.float32, torch.float64):
            for sample in info.sample_inputs("cpu", dtype, requires_grad=True):
                if sample.input.dim() == 4:
                    found.append((op, sample))
    return found


SAMPLES = opinfo_samples()


def _bound(want: torch.Tensor) -> float:
    want = want.detach()
    return 16 * torch.finfo(want.dtype).eps * max(float(want.double().abs().max()), 1e-30)


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    got, want = got.detach(), want.detach()
    return got.dtype == want.dtype and float((got.double() - want.double()).abs().max()) <= _bound(want)


def test_the_samples_are_there():
    assert len(SAMPLES) >= 60


@pytest.mark.parametrize("index", range(len(SAMPLES)))
def test_opinfo_sample(index):
    op, sample = SAMPLES[index]
    want = op(sample.input, *sample.args, **sample.kwargs)
    with _Ours() as ours:
        got = op(sample.input, *sample.args, **sample.kwargs)
    assert ours.calls == 1
    assert got.shape == want.shape and got.stride() == want.stride() and _close(got, want)
    grad = torch.randn(want.shape, dtype=want.dtype)
    (expected,) = torch.autograd.grad(want, sample.input, grad)
    with _Ours() as ours:
        (found,) = torch.autograd.grad(op(sample.input, *sample.args, **sample.kwargs), sample.input, grad)
    assert ours.calls == 2
    assert _close(found, expected)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("size, scale", [((4, 29), None), ((40, 9), None), (None, 0.37), (None, (2.6, 0.45))])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_down_up_and_scales(mode, size, scale, align_corners, dtype):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 17, 23, dtype=dtype, requires_grad=True)
    kwargs = {
        "size": size,
        "scale_factor": scale,
        "mode": mode,
        "align_corners": align_corners,
        "antialias": True,
    }
    want = F.interpolate(x, **kwargs)
    with _Ours() as ours:
        got = F.interpolate(x, **kwargs)
    assert ours.calls == 1 and _close(got, want)
    grad = torch.randn(want.shape, dtype=dtype)
    (expected,) = torch.autograd.grad(want, x, grad)
    with _Ours():
        (found,) = torch.autograd.grad(F.interpolate(x, **kwargs), x, grad)
    assert _close(found, expected)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("size", [(5, 7), (31, 40), (17, 9), (1, 1)])
def test_uint8_is_the_cpus(mode, size):
    torch.manual_seed(0)
    x = torch.randint(0, 256, (2, 1, 17, 23), dtype=torch.uint8)
    want = F.interpolate(x, size=size, mode=mode, antialias=True)
    with _Ours():
        got = F.interpolate(x, size=size, mode=mode, antialias=True)
    assert got.dtype == torch.uint8 and torch.equal(got, want)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_channels_last_and_out_forms(mode):
    torch.manual_seed(0)
    x = torch.randn(1, 3, 9, 12).to(memory_format=torch.channels_last)
    want = getattr(ATEN, f"_upsample_{mode}2d_aa")(x, [4, 5], False)
    got = upsample_aa.KERNELS[f"_upsample_{mode}2d_aa"](x, [4, 5], False)
    assert got.stride() == want.stride() and _close(got, want)
    out = torch.empty(0)
    assert upsample_aa.KERNELS[f"_upsample_{mode}2d_aa.out"](x, [4, 5], False, out=out) is out
    assert _close(out, want)
    grad = torch.randn(1, 3, 4, 5)
    want_grad = getattr(ATEN, f"_upsample_{mode}2d_aa_backward")(
        grad, [4, 5], [1, 3, 9, 12], False, 0.4, 0.45
    )
    grad_input = torch.empty(0)
    kernel = upsample_aa.KERNELS[f"_upsample_{mode}2d_aa_backward.grad_input"]
    assert kernel(grad, [4, 5], [1, 3, 9, 12], False, 0.4, 0.45, grad_input=grad_input) is grad_input
    assert _close(grad_input, want_grad)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize(
    "shape, size, dtype",
    [
        ((2, 3, 4), [5, 5], torch.float32),
        ((1, 0, 4, 4), [5, 5], torch.float32),
        ((1, 1, 4, 4), [5], torch.float32),
        ((1, 1, 4, 4), [0, 5], torch.float32),
        ((1, 1, 4, 4), [2, 2], torch.float16),
        ((1, 1, 4, 4), [2, 2], torch.bfloat16),
    ],
)
def test_refusals_are_the_cpus(mode, shape, size, dtype):
    x = torch.ones(shape, dtype=dtype)
    with pytest.raises(Exception) as native:
        getattr(ATEN, f"_upsample_{mode}2d_aa")(x, size, False)
    with pytest.raises(Exception) as ours:
        upsample_aa.KERNELS[f"_upsample_{mode}2d_aa"](x, size, False)
    assert type(ours.value) is type(native.value)
    assert str(ours.value).splitlines()[0] == str(native.value).splitlines()[0]


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16])
def test_gradient_refusals_are_the_cpus(mode, dtype):
    grad = torch.ones(1, 1, 2, 2, dtype=dtype)
    with pytest.raises(Exception) as native:
        getattr(ATEN, f"_upsample_{mode}2d_aa_backward")(grad, [2, 2], [1, 1, 4, 4], False)
    with pytest.raises(Exception) as ours:
        upsample_aa.KERNELS[f"_upsample_{mode}2d_aa_backward"](grad, [2, 2], [1, 1, 4, 4], False)
    assert type(ours.value) is type(native.value)
    assert str(ours.value).splitlines()[0] == str(native.value).splitlines()[0]


def test_native_ops_is_exactly_what_is_dispatched():
    x = torch.randn(1, 2, 5, 7).to(memory_format=torch.channels_last)
    image = torch.randint(0, 256, (1, 1, 5, 7), dtype=torch.uint8)
    grad = torch.ones(1, 2, 9, 4).to(memory_format=torch.channels_last)
    calls = []
    for mode in ("bilinear", "bicubic"):
        name = f"_upsample_{mode}2d_aa"
        calls += [
            lambda name=name: upsample_aa.KERNELS[name](x, [9, 4], False),
            lambda name=name: upsample_aa.KERNELS[name](image, [9, 4], False),
            lambda name=name: upsample_aa.KERNELS[f"{name}.out"](x, [9, 4], True, out=torch.empty(0)),
            lambda name=name: upsample_aa.KERNELS[f"{name}_backward"](grad, [9, 4], [1, 2, 5, 7], False),
        ]
    for call in calls:
        call()  # the host's weights, computed once
    upsample_aa._MATRICES.clear()  # uploaded again: empty + copy_
    seen: set = set()
    for call in calls:
        with _Ours() as ops:
            call()
        seen |= ops.seen
    assert seen == upsample_aa.NATIVE_OPS


def test_native_ops_are_native_in_every_torch_npu_release():
    for release in optables.releases():
        assert not upsample_aa.NATIVE_OPS - optables.load(release), release


ON_TABLE = """
import json, torch
import torch.nn.functional as F
from ascend_env import sim
from ascend_env.hook import runtime
sim.enable({table!r})
torch.manual_seed(0)
x = torch.randn(2, 3, 13, 9)
def run(device):
    out = []
    for mode in ("bilinear", "bicubic"):
        leaf = x.to(device).detach().requires_grad_()
        y = F.interpolate(leaf, size=(5, 17), mode=mode, antialias=True)
        (y * y).sum().backward()
        out += [y.detach().cpu(), leaf.grad.cpu()]
    return out
want = run("cpu")
run("npu")
before = dict(sim.fallbacks())
sim.reset()
registered = runtime.activate("torch_npu")
got = run("npu")
print(json.dumps({{"before": before, "after": dict(sim.fallbacks()),
    "registered": [op for op in registered if "2d_aa" in op],
    "close": [bool(torch.allclose(g, w, rtol=0, atol=1e-5)) for g, w in zip(got, want)]}}))
"""


@pytest.mark.parametrize("table, lacks", [("2.3.1", True), ("2.3.1.post2", False)])
def test_interpolate_on_the_simulated_npu(table, lacks):
    done = run_python(ON_TABLE.format(table=table))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["after"] == {} and result["close"] == [True] * 4
    if lacks:
        assert result["before"] == {  # structured: the functionals fall back through these
            f"aten::_upsample_{mode}2d_aa{suffix}": 1
            for mode in ("bilinear", "bicubic")
            for suffix in (".out", "_backward.grad_input")
        }
        assert sorted(result["registered"]) == sorted(upsample_aa.KERNELS)
    else:
        assert result["before"] == {} and result["registered"] == []
