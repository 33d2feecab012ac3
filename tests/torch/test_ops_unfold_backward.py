"""``ascend_env.kernels.unfold_backward`` against the CPU's ``unfold_backward``: bit for bit, every
dtype the CPU takes (float16 and bfloat16 included: the same order of additions, from zero), on
PyTorch's OpInfo samples of ``unfold`` (whose backward it is) and ``istft``-sized overlap-adds; the
CPU's refusals; gradients of ``unfold`` and ``istft`` through it."""

from __future__ import annotations

import json
import sys
import types
import unittest
from typing import Any, List, Tuple

import pytest
import torch
from conftest import run_python
from packaging.version import Version
from torch.utils._python_dispatch import TorchDispatchMode

from ascend_env.kernels.unfold_backward import NATIVE_OPS, unfold_backward
from ascend_env.sim import optables

DTYPES = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.uint8,
    torch.complex64,
)


class _Ours(TorchDispatchMode):
    """Sends ``unfold_backward`` to the kernel under test and records every op dispatched."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.seen: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.unfold_backward.default:
            self.calls += 1
            return unfold_backward(*args, **(kwargs or {}))
        name = func._schema.name.split("::", 1)[1]
        overload = func._overloadname
        self.seen.add(name if overload == "default" else f"{name}.{overload}")
        return func(*args, **(kwargs or {}))


def opinfo_samples() -> List[Tuple[Any, ...]]:
    """(input shape, dim, size, step) of every OpInfo sample of ``unfold``."""
    sys.modules.setdefault("expecttest", types.SimpleNamespace(TestCase=unittest.TestCase, ACCEPT=False))
    from torch.testing._internal.common_methods_invocations import op_db

    found = []
    for info in op_db:
        if info.name == "unfold":
            for sample in info.sample_inputs("cpu", torch.float32):
                found.append((tuple(sample.input.shape), *sample.args))
    return found


CASES = [
    *opinfo_samples(),
    ((10,), 0, 4, 2),
    ((9,), 0, 4, 2),
    ((3, 10, 5), 1, 4, 3),
    ((3, 10, 5), -1, 2, 1),
    ((3, 10, 5), 0, 3, 7),
    ((2, 512 * 8), 1, 512, 128),  # istft: a hop of a quarter frame
    ((1, 400 * 4 + 240), 1, 400, 160),  # Whisper's frames
    ((0, 6), 1, 2, 2),
]


def test_the_opinfo_samples_are_there():
    assert len(CASES) > 20 and any(shape == () for shape, *_ in CASES)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_bit_for_bit_the_cpus(case, dtype):
    shape, dim, size, step = case
    torch.manual_seed(0)
    windows = torch.zeros(shape).unfold(dim, size, step).shape
    grad = (torch.randn(windows) * 8).to(dtype)
    want = torch.ops.aten.unfold_backward(grad, list(shape), dim, size, step)
    got = unfold_backward(grad, list(shape), dim, size, step)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got, want)
    if grad.dim() > 1:  # strided gradients
        strided = grad.transpose(0, -1).contiguous().transpose(0, -1)
        assert torch.equal(unfold_backward(strided, list(shape), dim, size, step), want)


@pytest.mark.parametrize(
    "shape, sizes, dim, size, step",
    [
        ((3, 4), [10], 1, 4, 2),
        ((3, 4), [10], 0, 0, 2),
        ((3, 4), [10], -2, 4, 2),
    ],
)
def test_refusals_are_the_cpus(shape, sizes, dim, size, step):
    grad = torch.ones(shape)
    with pytest.raises(Exception) as native:
        torch.ops.aten.unfold_backward(grad, sizes, dim, size, step)
    with pytest.raises(Exception) as ours:
        unfold_backward(grad, sizes, dim, size, step)
    assert type(ours.value) is type(native.value)
    assert str(ours.value).splitlines()[0] == str(native.value).splitlines()[0]


@pytest.mark.parametrize("step", [0, -3])
def test_a_step_below_one_raises_torch_2_13s_error(step):
    """torch 2.13's CPU kernel raises this; torch 2.1's divides by the step (SIGFPE): not asked."""
    with pytest.raises(ValueError, match=f"^step is {step} but must be > 0$"):
        unfold_backward(torch.ones(3, 4), [10], 0, 4, step)
    if Version(torch.__version__.split("+")[0]) >= Version("2.4"):
        with pytest.raises(ValueError, match=f"^step is {step} but must be > 0$"):
            torch.ops.aten.unfold_backward(torch.ones(3, 4), [10], 0, 4, step)


def test_a_gradient_of_no_unfold_is_refused():
    """A ``grad_in`` whose last size is not ``size`` is no unfold's gradient: the CPU kernel reads
    what its strides give; here the shapes are checked and it raises."""
    with pytest.raises(RuntimeError, match="does not fit"):
        unfold_backward(torch.ones(3, 5), [10], 0, 4, 2)


def test_unfold_and_istft_gradients_are_the_cpus():
    torch.manual_seed(0)
    x = torch.randn(2, 3000, dtype=torch.float64)
    window = torch.hann_window(400, dtype=torch.float64)
    spectrum = torch.stft(x, 400, 160, window=window, return_complex=True)

    def run(ours: bool) -> Tuple[torch.Tensor, ...]:
        leaf, frames = spectrum.clone().requires_grad_(), x.clone().requires_grad_()
        mode = _Ours() if ours else None
        if mode is not None:
            mode.__enter__()
        try:
            back = torch.istft(leaf, 400, 160, window=window, length=3000)
            (back * back).sum().backward()
            (frames.unfold(1, 7, 3) ** 2).sum().backward()
        finally:
            if mode is not None:
                mode.__exit__(None, None, None)
                assert mode.calls >= 2
        return back.detach(), leaf.grad, frames.grad

    for got, want in zip(run(True), run(False)):
        assert torch.equal(got, want)


def test_native_ops_is_exactly_what_is_dispatched():
    seen: set = set()
    for grad, sizes, dim, size, step in (
        (torch.randn(3, 4), [10], 0, 4, 2),
        (torch.randn(1), [], 0, 1, 1),
        (torch.randn(2, 3, 4).half(), [2, 9], 1, 4, 2),
    ):
        with _Ours() as ops:
            unfold_backward(grad, sizes, dim, size, step)
        seen |= ops.seen
    assert seen == NATIVE_OPS


def test_native_ops_are_native_in_every_torch_npu_release():
    for release in optables.releases():
        assert not NATIVE_OPS - optables.load(release), release


# On the simulated NPU: istft's overlap-add falls back before the hook and not after, on a table
# that lacks unfold_backward (2.6.0) and has the FFTs; nothing is registered on 2.6.0.post3.
ON_TABLE = """
import json, torch
from ascend_env import sim
from ascend_env.hook import runtime
sim.enable({table!r})
torch.manual_seed(0)
spectrum = torch.randn(2, 257, 40, dtype=torch.complex64)
window = torch.hann_window(512)
def run(device):
    return torch.istft(spectrum.to(device), 512, 128, window=window.to(device)).cpu()
want = run("cpu")
run("npu")
before = dict(sim.fallbacks())
sim.reset()
registered = runtime.activate("torch_npu")
got = run("npu")
print(json.dumps({{"before": before, "after": dict(sim.fallbacks()),
    "registered": [op for op in registered if op.startswith("unfold")],
    "error": float((got - want).abs().max())}}))
"""


@pytest.mark.parametrize("table, lacks", [("2.6.0", True), ("2.6.0.post3", False)])
def test_istft_on_the_simulated_npu(table, lacks):
    done = run_python(ON_TABLE.format(table=table))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["after"] == {} and result["error"] < 1e-5
    if lacks:
        assert result["before"] == {"aten::unfold_backward": 2}  # the frames and the window envelope
        assert result["registered"] == ["unfold_backward"]
    else:
        assert result["before"] == {} and result["registered"] == []
