"""``polar`` built only from ops that every torch_npu release runs on the device.

``polar(abs, angle)`` is ``abs * cos(angle) + i * abs * sin(angle)``: the formula of PyTorch's own
reference decomposition (``torch/_refs/_conversions.py``, ``polar``) and of its CPU kernel
(``aten/src/ATen/native/cpu/ComplexKernel.cpp``, ``polar_kernel``). The two parts are stacked
along a new last dimension and viewed as complex (``stack`` + ``view_as_complex``), not joined
with ``complex``: op-plugin's ``acl_op`` kernel of ``complex`` copies both parts to the host and
back (``op_plugin/ops/base_ops/aclops/ComplexKernelNpu.cpp``, "is not supported by NPU currently.
Now this kernel is running on CPU", Ascend/op-plugin commit 0200d703b71c, the torch_npu 2.1.0.post3
and 2.2.0 sources, and b761d5824d7b, 2.1.0.post6, 2.2.0.post2 and 2.3.1), while ``stack`` has
device kernels on both paths and ``view_as_complex`` is a view (``ViewAsRealKernelNpu.cpp``).

Nothing reads a tensor's values on the host or branches on them. Dtype checks and their messages
are ATen's (``aten/src/ATen/native/TensorFactories.cpp``, ``complex_check_floating`` and
``complex_check_dtype``): both inputs float or double of one dtype, ``out`` of the matching
complex dtype. ``float16`` raises what the running torch's CPU kernel raises (no CPU loop for
it), as the CPU fallback would. ``out`` is resized to the broadcast shape as ATen's ``out=``
kernels resize (a warning when a non-empty ``out`` had another shape) and written in place
through ``copy_``, whatever its strides.

Values: the result equals ``abs * cos(angle)`` and ``abs * sin(angle)`` computed by the same
device, bit for bit. Against the CPU's ``torch.polar`` it is as close as the device's ``cos`` and
``sin`` are to the C library's ``cos`` and ``sin``, which ATen's CPU polar calls per element: on
the CPU, ``torch.cos`` and ``torch.sin`` (vectorised) differ from those in the last bit for a few
percent of inputs.
"""

from __future__ import annotations

import warnings
from typing import Callable, Dict, FrozenSet

import torch
from torch import Tensor

from ascend_env.kernels.outputs import dtype_name, resize_output

__all__ = ["ATEN_KERNELS", "KERNELS", "NATIVE_OPS", "polar", "polar_out"]

#: Every aten op the kernels dispatch; each is in the ``supported:`` op lists of every torch_npu
#: release from 2.1 on.
NATIVE_OPS: FrozenSet[str] = frozenset(
    {"cos", "sin", "mul.Tensor", "stack", "view_as_complex", "copy_", "resize_"}
)

_FLOATING = (torch.float16, torch.float32, torch.float64)
_COMPLEX = {torch.float16: torch.complex32, torch.float32: torch.complex64, torch.float64: torch.complex128}


def _refuse_half() -> None:
    """Raise what the running torch's CPU ``polar`` raises for ``float16`` (it has no CPU loop for
    it, torch 2.1 to 2.13), asked of it on one-element CPU tensors; nothing if it computes it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "ComplexHalf support is experimental"
        torch.polar(torch.ones(1, dtype=torch.float16), torch.zeros(1, dtype=torch.float16))


def polar(abs: Tensor, angle: Tensor) -> Tensor:
    """``aten::polar``: a complex tensor with absolute value ``abs`` and angle ``angle``."""
    _check_floating(abs, angle)
    return _polar(abs, angle)


def polar_out(abs: Tensor, angle: Tensor, *, out: Tensor) -> Tensor:
    """``aten::polar.out``: resizes ``out`` to the broadcast shape and fills it."""
    _check_floating(abs, angle)
    expected = _COMPLEX[abs.dtype]
    if out.dtype != expected:
        raise RuntimeError(
            f"Expected object of scalar type {dtype_name(expected)} but got scalar type "
            f"{dtype_name(out.dtype)} for argument 'out'"
        )
    for tensor in (abs, angle):
        if tensor.device != out.device and tensor.dim() != 0:
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two devices, "
                f"{out.device} and {tensor.device}!"
            )
    result = _polar(abs, angle)
    resize_output(out, tuple(result.shape))
    return out.copy_(result)


def _polar(abs: Tensor, angle: Tensor) -> Tensor:
    """The value, once the dtypes are checked: two products, stacked and viewed as complex."""
    if abs.dtype == torch.float16:
        _refuse_half()
    real = torch.mul(abs, torch.cos(angle))
    imag = torch.mul(abs, torch.sin(angle))
    return torch.view_as_complex(torch.stack((real, imag), -1))


def _check_floating(abs: Tensor, angle: Tensor) -> None:
    """ATen's ``complex_check_floating``, then the same-dtype half of ``complex_check_dtype``."""
    if abs.dtype not in _FLOATING or angle.dtype not in _FLOATING:
        raise RuntimeError(
            "Expected both inputs to be Half, Float or Double tensors but got "
            f"{dtype_name(abs.dtype)} and {dtype_name(angle.dtype)}"
        )
    if abs.dtype != angle.dtype:
        raise RuntimeError(
            f"Expected object of scalar type {dtype_name(abs.dtype)} but got scalar type "
            f"{dtype_name(angle.dtype)} for second argument"
        )


#: One function per ``aten::polar`` overload, callable as the dispatcher calls a kernel
#: registered with ``torch.library.Library("aten", "IMPL").impl``.
ATEN_KERNELS: Dict[str, Callable[..., Tensor]] = {
    "polar": polar,
    "polar.out": polar_out,
}

#: The registry's name for :data:`ATEN_KERNELS` (``Fix.module``'s ``KERNELS``).
KERNELS = ATEN_KERNELS
