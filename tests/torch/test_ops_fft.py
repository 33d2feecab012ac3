"""``ascend_env.kernels.fft`` against the CPU's ``_fft_r2c``/``_fft_c2c``/``_fft_c2r``.

Every OpInfo sample of ``op_db``'s ``fft.*`` entries (fft, ifft, rfft, irfft, hfft, ihfft and their
2-d and n-d forms, float32/float64/complex64/complex128, non-contiguous, every ``norm``) runs twice
on the CPU: natively, and with each ``_fft_*`` call sent to these kernels. Tolerance: a DFT as a
matrix product adds each output's ``n`` products in another order than pocketfft's ``O(log n)``
butterflies; each output is within ``2 * sqrt(n) * eps * ||x||`` of the exact value, which by
Parseval is ``2 * eps * ||X||``: the test allows ``8 * eps * ||result||_2`` on the whole result
(several dimensions chain their errors), relative to the largest bin, not each bin.
"""

from __future__ import annotations

import json
import sys
import types
import unittest
from typing import Any, List, Tuple

import pytest
import torch
from conftest import run_python
from torch.utils._python_dispatch import TorchDispatchMode

from ascend_env.kernels import fft
from ascend_env.sim import optables

_OPS = {
    torch.ops.aten._fft_r2c.default: fft.fft_r2c,
    torch.ops.aten._fft_c2c.default: fft.fft_c2c,
    torch.ops.aten._fft_c2r.default: fft.fft_c2r,
    torch.ops.aten._fft_r2c.out: fft.fft_r2c_out,
    torch.ops.aten._fft_c2c.out: fft.fft_c2c_out,
    torch.ops.aten._fft_c2r.out: fft.fft_c2r_out,
}


class _Ours(TorchDispatchMode):
    """Sends every ``_fft_*`` call to the kernels under test; counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kernel = _OPS.get(func)
        if kernel is None:
            return func(*args, **(kwargs or {}))
        self.calls += 1
        return kernel(*args, **(kwargs or {}))


class _Seen(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::", 1)[1]
        overload = func._overloadname
        self.seen.add(name if overload == "default" else f"{name}.{overload}")
        return func(*args, **(kwargs or {}))


def opinfo_samples() -> List[Tuple[str, Any, Any]]:
    sys.modules.setdefault("expecttest", types.SimpleNamespace(TestCase=unittest.TestCase, ACCEPT=False))
    from torch.testing._internal.common_methods_invocations import op_db

    samples = []
    for info in op_db:
        if not info.name.startswith("fft.") or "fftshift" in info.name:
            continue
        for dtype in (torch.float32, torch.float64, torch.complex64, torch.complex128):
            if dtype not in info.supported_dtypes("cpu"):
                continue
            for sample in info.sample_inputs("cpu", dtype):
                samples.append((info.name, info.op, sample))
    return samples


SAMPLES = opinfo_samples()


def _tolerance(want: torch.Tensor) -> float:
    wide = torch.complex128 if want.is_complex() else torch.float64
    real = want.real if want.is_complex() else want
    return 8 * torch.finfo(real.dtype).eps * float(torch.linalg.vector_norm(want.to(wide))) + 1e-30


def test_the_samples_cover_every_fft_function():
    names = {name for name, _, _ in SAMPLES}
    assert {"fft.fft", "fft.ifft", "fft.rfft", "fft.irfft", "fft.hfft", "fft.fftn", "fft.irfftn"} <= names
    assert len(SAMPLES) >= 150


@pytest.mark.parametrize("index", range(len(SAMPLES)))
def test_opinfo_sample(index):
    name, op, sample = SAMPLES[index]
    want = op(sample.input, *sample.args, **sample.kwargs)
    with _Ours() as ours:
        got = op(sample.input, *sample.args, **sample.kwargs)
    assert ours.calls >= 1, name
    assert got.dtype == want.dtype and got.shape == want.shape
    assert float((got - want).abs().max()) <= _tolerance(want) if want.numel() else True


@pytest.mark.parametrize("length", [400, 512, 2048, 7])
def test_stft_and_istft_frames(length):
    torch.manual_seed(0)
    x = torch.randn(2, length * 8)
    window = torch.hann_window(length)
    want = torch.stft(x, length, length // 4, window=window, return_complex=True)
    with _Ours():
        got = torch.stft(x, length, length // 4, window=window, return_complex=True)
        back = torch.istft(got, length, length // 4, window=window, length=x.shape[-1])
    assert float((got - want).abs().max()) <= _tolerance(want)
    assert float((back - x).abs().max()) <= _tolerance(x) * 4


def test_conjugated_inputs_are_resolved():
    x = torch.randn(4, 6, dtype=torch.complex64)
    for view in (x.conj(), torch.ops.aten._neg_view(x)):
        want = torch.ops.aten._fft_c2c(view, [1], 0, True)
        assert float((fft.fft_c2c(view, [1], 0, True) - want).abs().max()) <= _tolerance(want)


def test_exact_on_integers():
    x = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    got = fft.fft_r2c(x, [1], 0, True)
    assert torch.equal(got, torch.ops.aten._fft_r2c(x, [1], 0, True))


def test_gradients_are_the_cpus():
    torch.manual_seed(0)
    for function in (torch.fft.rfft, torch.fft.fft, torch.fft.irfft, torch.fft.fft2, torch.fft.ihfft):
        complex_input = function in (torch.fft.fft, torch.fft.irfft, torch.fft.fft2)
        x = torch.randn(3, 10, dtype=torch.complex128 if complex_input else torch.float64)
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        weight = torch.randn(function(x).shape, dtype=torch.float64)
        (function(a, norm="ortho").abs() * weight).sum().backward()
        with _Ours() as ours:
            (function(b, norm="ortho").abs() * weight).sum().backward()
        assert ours.calls >= 2, function
        torch.testing.assert_close(b.grad, a.grad)


@pytest.mark.parametrize(
    "call",
    [
        lambda k: k[0](torch.ones(4, dtype=torch.float16), [0], 0, True),
        lambda k: k[0](torch.ones(4, dtype=torch.int64), [0], 0, True),
        lambda k: k[0](torch.ones(4, dtype=torch.complex64), [0], 0, True),
        lambda k: k[1](torch.ones(4), [0], 0, True),
        lambda k: k[2](torch.ones(4), [0], 0, 6),
        lambda k: k[2](torch.ones(3, 7, dtype=torch.complex64), [1], 0, 8),
        lambda k: k[0](torch.ones(3, 8), [-1], 0, True),
    ],
)
def test_refusals_are_the_cpus(call):
    aten = (torch.ops.aten._fft_r2c, torch.ops.aten._fft_c2c, torch.ops.aten._fft_c2r)
    with pytest.raises(Exception) as native:
        call(aten)
    with pytest.raises(Exception) as ours:
        call((fft.fft_r2c, fft.fft_c2c, fft.fft_c2r))
    assert type(ours.value) is type(native.value)
    assert str(ours.value).splitlines()[0] == str(native.value).splitlines()[0]


def test_out_forms_resize_and_fill():
    x = torch.randn(3, 8)
    for kernel, args, dtype in (
        (fft.fft_r2c_out, (x, [1], 1, False), torch.complex64),
        (fft.fft_c2c_out, (x.to(torch.complex64), [0, 1], 2, True), torch.complex64),
        (fft.fft_c2r_out, (torch.fft.rfft(x), [1], 0, 8), torch.float32),
    ):
        out = torch.empty(0, dtype=dtype)
        assert kernel(*args, out=out) is out
        op = {fft.fft_r2c_out: "_fft_r2c", fft.fft_c2c_out: "_fft_c2c", fft.fft_c2r_out: "_fft_c2r"}[kernel]
        want = getattr(torch.ops.aten, op)(*args)
        assert out.shape == want.shape and float((out - want).abs().max()) <= _tolerance(want)


def test_native_ops_is_exactly_what_is_dispatched(monkeypatch):
    x = torch.randn(3, 6, 8).transpose(0, 1)
    conjugated = torch.randn(3, 5, dtype=torch.complex64).conj()

    def calls() -> None:
        spectrum = fft.fft_r2c(x, [0, 2], 1, True)
        fft.fft_c2c(conjugated, [0, 1], 0, False)
        fft.fft_c2r(spectrum, [0, 2], 2, 8)
        fft.fft_r2c_out(x, [2], 0, True, out=torch.empty(0, dtype=torch.complex64))

    # The host computes each table once (CPU ops on CPU tensors, not the device's): recorded
    # first, then handed out while the device ops are counted, uploads included.
    host = {}
    monkeypatch.setattr(fft, "_host", lambda *key, compute=fft._host: host.setdefault(key, compute(*key)))
    fft._TABLES.clear()
    calls()
    monkeypatch.setattr(fft, "_host", lambda *key: host[key])
    fft._TABLES.clear()
    with _Seen() as ops:
        calls()
    assert ops.seen == fft.NATIVE_OPS


def test_native_ops_are_native_in_every_torch_npu_release():
    for release in optables.releases():
        assert not fft.NATIVE_OPS - optables.load(release), release


# On the simulated NPU with a table that lacks the FFTs: stft, istft and their gradients fall back
# before the hook and not after; on a table that has them nothing is registered.
ON_TABLE = """
import json, torch
from ascend_env import sim
from ascend_env.hook import runtime
sim.enable({table!r})
torch.manual_seed(0)
x, window = torch.randn(2, 4000), torch.hann_window(400)
def run(device):
    leaf = x.to(device).detach().requires_grad_()
    spectrum = torch.stft(leaf, 512, 160, 400, window=window.to(device), return_complex=True)
    back = torch.istft(spectrum, 512, 160, 400, window=window.to(device), length=4000)
    (spectrum.abs().sum() + (back * back).sum()).backward()
    return [t.detach().cpu() for t in (spectrum, back, leaf.grad)]
want = run("cpu")
run("npu")
before = {{k: v for k, v in sim.fallbacks().items() if "fft" in k}}
sim.reset()
registered = runtime.activate("torch_npu")
got = run("npu")
print(json.dumps({{
    "before": before, "after": {{k: v for k, v in sim.fallbacks().items() if "fft" in k}},
    "registered": [op for op in registered if op.startswith("_fft")],
    "error": [float((g - w).abs().max() / w.abs().max()) for g, w in zip(got, want)],
}}))
"""


@pytest.mark.parametrize("table, lacks", [("2.3.1", True), ("2.1.0.post6", False)])
def test_stft_on_the_simulated_npu(table, lacks):
    done = run_python(ON_TABLE.format(table=table))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["after"] == {}
    assert max(result["error"]) < 1e-5
    if lacks:
        assert result["before"] == {"aten::_fft_r2c": 1, "aten::_fft_c2r": 1}
        assert result["registered"] == [op for op in fft.KERNELS]
    else:
        assert result["before"] == {} and result["registered"] == []
