"""The kernels of ``scatter_reduce.two`` (functional, in place, ``out=``) against the CPU's native
op on PyTorch's OpInfo samples (``op_db``'s five ``scatter_reduce`` entries, every dtype they
declare), with the CPU's refusals; a floating-point ``prod`` with many values per position within
rounding (its scan multiplies in another order than the CPU's loop; OpInfo's samples are exact);
the ops dispatched on the device are exactly ``NATIVE_OPS``; and the gradients on the simulated
NPU (autograd's formula above the registered kernel) equal to the CPU's.
"""

from __future__ import annotations

import json
import sys
import types
import unittest
from typing import Any, List

import pytest
import torch
from conftest import run_python
from torch.utils._python_dispatch import TorchDispatchMode

from ascend_env.kernels import scatter_reduce
from ascend_env.sim import optables

pytestmark = pytest.mark.skipif(not hasattr(torch.Tensor, "scatter_reduce"), reason="no scatter_reduce")


def _samples() -> List[Any]:
    sys.modules.setdefault("expecttest", types.SimpleNamespace(TestCase=unittest.TestCase, ACCEPT=False))
    from torch.testing._internal.common_methods_invocations import op_db

    found = []
    for info in op_db:
        if info.name == "scatter_reduce":
            for dtype in sorted(info.dtypes, key=str):
                found += [(info.variant_test_name, dtype, s) for s in info.sample_inputs("cpu", dtype)]
    return found


SAMPLES = [
    pytest.param(sample, id=f"{name}-{str(dtype)[6:]}-{i}")
    for i, (name, dtype, sample) in enumerate(_samples())
]


def same(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("sample", SAMPLES)
def test_opinfo_sample(sample):
    self, args, kwargs = sample.input, sample.args, sample.kwargs
    try:
        want = torch.scatter_reduce(self, *args, **kwargs)
    except Exception as native:
        with pytest.raises(type(native)) as mine:
            scatter_reduce.scatter_reduce_two(self, *args, **kwargs)
        assert str(mine.value).splitlines()[0] == str(native).splitlines()[0]
        return
    same(scatter_reduce.scatter_reduce_two(self, *args, **kwargs), want)
    out = torch.empty(0, dtype=want.dtype)
    assert scatter_reduce.scatter_reduce_two_out(self, *args, **kwargs, out=out) is out
    same(out, want)
    target = self.clone()
    assert scatter_reduce.scatter_reduce_two_(target, *args, **kwargs) is target
    same(target, want)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_many_values_per_position(reduce, include_self):
    generator = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64, torch.int64, torch.int32):
        self = (torch.rand(5, 40, generator=generator) * 4 - 2).to(dtype)
        src = (torch.rand(5, 300, generator=generator) * 4 - 2).to(dtype)
        if reduce == "prod" and dtype.is_floating_point:
            self, src = torch.exp(self / 8), torch.exp(src / 64)  # products of order 1
        index = torch.randint(0, 40, (5, 300), generator=generator)
        index[:, :7] = 3  # one position many times
        want = torch.scatter_reduce(self, 1, index, src, reduce, include_self=include_self)
        got = scatter_reduce.scatter_reduce_two(self, 1, index, src, reduce, include_self=include_self)
        if reduce == "prod" and dtype.is_floating_point:
            torch.testing.assert_close(got, want)  # another order of multiplication
        else:
            same(got, want)
    values = torch.tensor([1.0, float("nan"), 3.0, -0.5])
    index = torch.tensor([0, 0, 1, 1])
    for start in (torch.zeros(3), torch.tensor([0.0, float("nan"), 2.0])):
        same(
            scatter_reduce.scatter_reduce_two(start, 0, index, values, reduce, include_self=include_self),
            torch.scatter_reduce(start, 0, index, values, reduce, include_self=include_self),
        )


class _DeviceOps(TorchDispatchMode):
    """The ops dispatched on tensors not on the meta device (the checks run on meta tensors)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        tensors = [a for a in list(args) + list((kwargs or {}).values()) if isinstance(a, torch.Tensor)]
        device = (kwargs or {}).get("device")
        on_meta = any(t.device.type == "meta" for t in tensors) or str(device) == "meta"
        if not on_meta:
            name = func._schema.name.split("::", 1)[1]
            overload = func._overloadname
            self.seen.add(name if overload == "default" else f"{name}.{overload}")
        return func(*args, **(kwargs or {}))


def test_native_ops_is_exactly_what_is_dispatched():
    self = torch.rand(3, 4)
    index = torch.tensor([[0, 1, 1], [3, 3, 0]])
    src = torch.rand(2, 3)
    ints, int_src, target, corner, out = self.long(), src.long(), self.clone(), index[:1, :1], torch.empty(0)
    with _DeviceOps() as ops:
        for reduce in ("sum", "prod", "mean", "amax", "amin"):
            for include_self in (True, False):
                scatter_reduce.scatter_reduce_two(self, 1, index, src, reduce, include_self=include_self)
        scatter_reduce.scatter_reduce_two(ints, 1, index, int_src, "mean")
        scatter_reduce.scatter_reduce_two_(target, 1, index, src, "sum")
        scatter_reduce.scatter_reduce_two_out(self, 0, corner, src, "sum", out=out)
    assert ops.seen == scatter_reduce.NATIVE_OPS
    for release in optables.releases():
        if "scatter_reduce.two" not in optables.load(release):
            missing = scatter_reduce.NATIVE_OPS - optables.load(release)
            assert not missing, f"torch_npu {release} lacks {sorted(missing)}"


GRADIENTS = """
import json, torch
from ascend_env import sim
from ascend_env.hook import runtime
sim.enable("2.1.0.post6")
runtime.activate("torch_npu")
found = {}
for reduce in ("sum", "prod", "mean", "amax", "amin"):
    for include_self in (True, False):
        grads = []
        for device in ("cpu", "npu"):
            torch.manual_seed(0)
            self = torch.rand(3, 5, dtype=torch.float64)
            src = torch.rand(3, 6, dtype=torch.float64)
            src[0, 1] = src[0, 0]  # a tie for amax/amin
            index = torch.tensor([[0, 0, 2, 4, 4, 1], [1, 1, 1, 3, 0, 0], [2, 3, 2, 3, 2, 3]])
            s, x = self.to(device).requires_grad_(), src.to(device).requires_grad_()
            y = torch.scatter_reduce(s, 1, index.to(device), x, reduce, include_self=include_self)
            (y * torch.arange(15.0, dtype=torch.float64).view(3, 5).to(device)).sum().backward()
            grads.append([s.grad.cpu().tolist(), x.grad.cpu().tolist(), y.detach().cpu().tolist()])
        found[f"{reduce}-{include_self}"] = grads
print(json.dumps({"found": found, "fell_back": dict(sim.fallbacks())}))
"""


def test_gradients_on_the_simulated_npu_are_the_cpus():
    done = run_python(GRADIENTS)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["fell_back"] == {}, result["fell_back"]
    for case, (cpu, npu) in result["found"].items():
        for mine, theirs in zip(npu, cpu):
            torch.testing.assert_close(torch.tensor(mine), torch.tensor(theirs), msg=case)
