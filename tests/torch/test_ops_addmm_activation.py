"""The kernels of ``_addmm_activation`` (and ``.out``) against the CPU's native op on PyTorch's
OpInfo samples for ``addmm`` (every dtype it declares, broadcast bias, beta and alpha), with relu
and with gelu, and the CPU's refusals. With relu the kernels call the CPU kernel's ops: bit for
bit. With gelu, ATen's vectorised GeLU is not reproduced bit for bit by
``x * 0.5 * (1 + erf(x / sqrt 2))`` from separate ops (``gelu`` itself is missing from half the
releases' tables): within OpInfo's default tolerance. The ops dispatched on the device are exactly
``NATIVE_OPS``.
"""

from __future__ import annotations

import sys
import types
import unittest
from typing import Any, List

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ascend_env.kernels import addmm_activation
from ascend_env.sim import optables


def _samples() -> List[Any]:
    sys.modules.setdefault("expecttest", types.SimpleNamespace(TestCase=unittest.TestCase, ACCEPT=False))
    from torch.testing._internal.common_methods_invocations import op_db

    info = next(op for op in op_db if op.name == "addmm" and op.variant_test_name == "")
    return [(dtype, s) for dtype in sorted(info.dtypes, key=str) for s in info.sample_inputs("cpu", dtype)]


SAMPLES = [
    pytest.param(sample, use_gelu, id=f"{str(dtype)[6:]}-{index}-{'gelu' if use_gelu else 'relu'}")
    for index, (dtype, sample) in enumerate(_samples())
    for use_gelu in (False, True)
]


@pytest.mark.parametrize("sample, use_gelu", SAMPLES)
def test_opinfo_sample(sample, use_gelu):
    kwargs = dict(sample.kwargs, use_gelu=use_gelu)
    try:
        want = torch._addmm_activation(sample.input, *sample.args, **kwargs)
    except Exception as native:
        with pytest.raises(type(native)) as mine:
            addmm_activation.addmm_activation(sample.input, *sample.args, **kwargs)
        assert str(mine.value).splitlines()[0] == str(native).splitlines()[0]
        return
    out = torch.empty(0, dtype=want.dtype)
    assert addmm_activation.addmm_activation_out(sample.input, *sample.args, **kwargs, out=out) is out
    for got in (addmm_activation.addmm_activation(sample.input, *sample.args, **kwargs), out):
        assert got.dtype == want.dtype and got.shape == want.shape
        if use_gelu:
            torch.testing.assert_close(got, want, equal_nan=True)
        else:
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def test_the_out_dtype_and_shape_checks_are_the_cpus():
    bias, mat1, mat2 = torch.randn(3), torch.randn(2, 4), torch.randn(4, 3)
    for make in (
        lambda: dict(out=torch.empty(0, dtype=torch.float64)),
        lambda: dict(out=torch.empty(0), use_gelu=True, mat2=torch.randn(5, 3)),
    ):
        kwargs = make()
        second = kwargs.pop("mat2", mat2)
        with pytest.raises(RuntimeError) as theirs:
            torch._addmm_activation(bias, mat1, second, **kwargs)
        with pytest.raises(RuntimeError) as mine:
            addmm_activation.addmm_activation_out(bias, mat1, second, **kwargs)
        assert str(mine.value).splitlines()[0] == str(theirs.value).splitlines()[0]


class _DeviceOps(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        tensors = [a for a in list(args) + list((kwargs or {}).values()) if isinstance(a, torch.Tensor)]
        if not any(t.device.type == "meta" for t in tensors) and str((kwargs or {}).get("device")) != "meta":
            name = func._schema.name.split("::", 1)[1]
            overload = func._overloadname
            self.seen.add(name if overload == "default" else f"{name}.{overload}")
        return func(*args, **(kwargs or {}))


def test_native_ops_is_exactly_what_is_dispatched():
    bias, mat1, mat2 = torch.randn(3), torch.randn(2, 4), torch.randn(4, 3)
    halves = [x.bfloat16() for x in (bias, mat1, mat2)]
    out = torch.empty(0)
    with _DeviceOps() as ops:
        addmm_activation.addmm_activation(bias, mat1, mat2)
        addmm_activation.addmm_activation(*halves, use_gelu=True)
        addmm_activation.addmm_activation_out(bias, mat1, mat2, use_gelu=True, out=out)
    assert ops.seen == addmm_activation.NATIVE_OPS
    for release in optables.releases():
        missing = addmm_activation.NATIVE_OPS - optables.load(release)
        assert not missing, f"torch_npu {release} lacks {sorted(missing)}"
