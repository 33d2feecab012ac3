"""``ascend_env.kernels.polar`` against native ``torch.polar``, on PyTorch's own OpInfo samples.

The samples are those of ``torch.testing._internal.common_methods_invocations`` (``op_db``'s
``polar`` entry, a ``BinaryUfuncInfo``: its ``sample_inputs`` and ``reference_inputs``, float32
and float64, broadcasting, empty, 0-dim, non-contiguous and extremal values). Values are bit for
bit those of PyTorch's reference decomposition (``abs * cos(angle)``, ``abs * sin(angle)``) and
within OpInfo's default tolerance of native ``torch.polar``, whose CPU kernel calls the C
library's ``cos``/``sin`` per element instead of the vectorised ``torch.cos``.
"""

from __future__ import annotations

import json
import sys
import types
import unittest
import warnings
from typing import List, Tuple

import pytest
import torch
from conftest import run_python
from torch.utils._python_dispatch import TorchDispatchMode

from ascend_env.kernels import registry
from ascend_env.kernels.polar import ATEN_KERNELS, NATIVE_OPS, polar, polar_out
from ascend_env.sim import optables


def opinfo_samples() -> List[Tuple[torch.Tensor, torch.Tensor]]:
    """(abs, angle) of every OpInfo sample and reference input of ``polar``, in both dtypes."""
    # common_utils imports expecttest (a helper for writing expected outputs) at import; the
    # samples do not use it.
    sys.modules.setdefault("expecttest", types.SimpleNamespace(TestCase=unittest.TestCase, ACCEPT=False))
    from torch.testing._internal.common_methods_invocations import op_db

    (info,) = [op for op in op_db if op.name == "polar"]
    assert set(info.dtypes) == {torch.float32, torch.float64}
    samples = []
    for dtype in sorted(info.dtypes, key=str):
        for sample in [*info.sample_inputs("cpu", dtype), *info.reference_inputs("cpu", dtype)]:
            samples.append((sample.input, sample.args[0]))
    return samples


SAMPLES = opinfo_samples()


def reference(abs: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """PyTorch's reference decomposition (torch/_refs/_conversions.py, polar)."""
    return torch.complex(abs * torch.cos(angle), abs * torch.sin(angle))


def test_the_samples_cover_what_generation_and_opinfo_use():
    shapes = {tuple(torch.broadcast_shapes(a.shape, b.shape)) for a, b in SAMPLES}
    assert () in shapes and (0, 10, 3) in shapes and (128, 128) in shapes
    assert any(not a.is_contiguous() or not b.is_contiguous() for a, b in SAMPLES)
    assert any(torch.isnan(b).any() or torch.isinf(b).any() for a, b in SAMPLES)
    assert len(SAMPLES) >= 200


@pytest.mark.parametrize("index", range(len(SAMPLES)))
def test_opinfo_sample(index):
    abs, angle = SAMPLES[index]
    got = polar(abs, angle)
    want = torch.polar(abs, angle)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, reference(abs, angle), rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(got, want, equal_nan=True)
    out = torch.empty(0, dtype=want.dtype)
    assert polar_out(abs, angle, out=out) is out
    torch.testing.assert_close(out, got, rtol=0, atol=0, equal_nan=True)


def test_exact_where_cos_and_sin_agree_with_the_c_library():
    """Angles where the vectorised cos/sin equal the C library's give native's bits exactly."""
    angle = torch.tensor([0.0, 0.5, -1.0, 3.0, float("inf"), float("nan"), -0.0])
    abs = torch.tensor([1.0, 2.0, 0.0, float("inf"), 1.0, 1.0, 3.0])
    got = polar(abs, angle)
    torch.testing.assert_close(got, torch.polar(abs, angle), rtol=0, atol=0, equal_nan=True)


def test_out_of_the_right_shape_keeps_its_strides():
    abs, angle = torch.rand(4, 3), torch.randn(4, 3)
    out = torch.empty(3, 4, dtype=torch.complex64).t()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert polar_out(abs, angle, out=out) is out
    assert out.stride() == (1, 4)
    torch.testing.assert_close(out, reference(abs, angle), rtol=0, atol=0)


def test_out_of_another_shape_is_resized_with_atens_warning():
    abs, angle = torch.rand(2, 3), torch.randn(3)
    out = torch.empty(5, dtype=torch.complex64)
    message = r"had shape \[5\], which does not match the required output shape \[2, 3\]"
    with pytest.warns(UserWarning, match=message):
        polar_out(abs, angle, out=out)
    assert out.shape == (2, 3)
    with pytest.warns(UserWarning, match="had shape"):
        torch.polar(abs, angle, out=torch.empty(5, dtype=torch.complex64))


@pytest.mark.parametrize(
    "abs, angle, out",
    [
        (torch.ones(2), torch.ones(2, dtype=torch.float64), None),
        (torch.ones(2, dtype=torch.int64), torch.ones(2, dtype=torch.int64), None),
        (torch.ones(2, dtype=torch.bfloat16), torch.ones(2, dtype=torch.bfloat16), None),
        (torch.ones(2, dtype=torch.complex64), torch.ones(2, dtype=torch.complex64), None),
        (torch.ones(2, dtype=torch.float16), torch.ones(2, dtype=torch.float16), None),
        (torch.ones(2), torch.ones(2), torch.empty(0)),
        (torch.ones(2), torch.ones(2), torch.empty(0, dtype=torch.complex128)),
        (torch.ones(2, dtype=torch.float16), torch.ones(2), torch.empty(0, dtype=torch.complex64)),
    ],
)
def test_refusals_are_natives(abs, angle, out):
    """Every dtype native refuses is refused here, with native's exception type and message."""
    args = {} if out is None else {"out": out}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ComplexHalf is experimental
        with pytest.raises(Exception) as native:
            torch.polar(abs, angle, **args)
        with pytest.raises(Exception) as ours:
            (polar if out is None else polar_out)(abs, angle, **args)
    assert type(ours.value) is type(native.value)
    assert str(ours.value).splitlines()[0] == str(native.value).splitlines()[0]


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::", 1)[1]
        overload = func._overloadname
        self.seen.add(name if overload == "default" else f"{name}.{overload}")
        return func(*args, **(kwargs or {}))


def test_native_ops_is_exactly_what_is_dispatched():
    seen: set = set()
    for abs, angle in SAMPLES[:20]:
        out = torch.empty(0, dtype=torch.complex128 if abs.dtype == torch.float64 else torch.complex64)
        with _Ops() as ops:
            polar(abs, angle)
            polar_out(abs, angle, out=out)
        seen |= ops.seen
    assert seen == NATIVE_OPS
    assert not any(name.startswith("polar") for name in NATIVE_OPS)


def test_native_ops_are_native_in_every_torch_npu_release():
    for release in optables.releases():
        missing = NATIVE_OPS - optables.load(release)
        assert not missing, f"torch_npu {release} lacks {sorted(missing)}"


def test_kernels_cover_every_aten_overload_with_its_schema():
    tensor_overloads = {  # polar.int, polar.float, ...: TorchScript's scalar forms, no dispatch
        "polar" if name == "default" else f"polar.{name}"
        for name in torch.ops.aten.polar.overloads()
        if "Tensor abs" in str(getattr(torch.ops.aten.polar, name)._schema)
    }
    assert set(ATEN_KERNELS) == tensor_overloads
    library = torch.library.Library("ascend_env_polar_test", "DEF")
    try:
        for name, kernel in ATEN_KERNELS.items():
            overload = name.partition(".")[2] or "default"
            schema = str(getattr(torch.ops.aten.polar, overload)._schema)
            library.define(schema.split("::", 1)[1])
            library.impl(name, kernel, "CPU")
        abs, angle = torch.rand(3), torch.randn(3)
        op = torch.ops.ascend_env_polar_test.polar
        torch.testing.assert_close(op(abs, angle), reference(abs, angle), rtol=0, atol=0)
        out = torch.empty(0, dtype=torch.complex64)
        assert op.out(abs, angle, out=out) is out
        torch.testing.assert_close(out, reference(abs, angle), rtol=0, atol=0)
    finally:
        destroy = getattr(library, "_destroy", None)  # torch 2.1 has none: the library dies with it
        if destroy is not None:
            destroy()


def test_the_registry_needs_polar_exactly_where_the_tables_lack_it():
    by_op = {fix.op: fix for fix in registry.OVERLOADS}
    assert by_op["polar"].when_missing == ("polar", "polar.out")
    for release in ("2.1.0.post3", "2.2.0"):
        assert by_op["polar"].needed_by(release) and by_op["polar.out"].needed_by(release)
    for release in ("2.1.0.post6", "2.2.0.post2", "2.3.1", "2.4.0"):
        assert not by_op["polar"].needed_by(release)


# On the simulated NPU with a table that lacks polar: the fallback before, none after. (No gradient
# check: the simulator drops the conjugate bit of complex tensors, which polar's backward uses.)
ON_TABLE = """
import json, sys, torch
from ascend_env import sim
from ascend_env.hook import runtime
sim.enable({table!r})
torch.manual_seed(0)
abs, angle = torch.rand(2, 5, dtype=torch.float64), torch.randn(5, dtype=torch.float64) * 10
before = torch.polar(abs.to("npu"), angle.to("npu"))
fell_back = dict(sim.fallbacks())
sim.reset()
registered = runtime.activate("torch_npu")
got = torch.polar(abs.to("npu"), angle.to("npu"))
out = torch.empty(0, dtype=torch.complex128, device="npu")
torch.polar(abs.to("npu"), angle.to("npu"), out=out)
print(json.dumps({{
    "before": fell_back, "after": dict(sim.fallbacks()), "registered": registered,
    "device": got.device.type, "close": torch.allclose(got.cpu(), torch.polar(abs, angle)),
    "out": torch.equal(out.cpu(), got.cpu()),
}}))
"""


@pytest.mark.parametrize("table, lacks", [("2.2.0", True), ("2.3.1", False)])
def test_on_the_simulated_npu(table, lacks):
    done = run_python(ON_TABLE.format(table=table))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["after"] == {}
    assert result["device"] == "npu" and result["close"] and result["out"]
    polar_ops = [op for op in result["registered"] if op.startswith("polar")]
    if lacks:
        assert result["before"] == {"aten::polar.out": 1}
        assert polar_ops == ["polar", "polar.out"]
        assert "polar.out" in done.stderr  # the CAUTION line of the run before
    else:  # a native kernel is left alone
        assert result["before"] == {} and polar_ops == []
