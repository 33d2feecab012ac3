"""``bitwise_left_shift`` and ``bitwise_right_shift`` built only from ops that every torch_npu
release runs natively.

torch_npu 2.1.0.post3 to 2.8.x (45 of the 52 releases) register no ``bitwise_left_shift.Tensor_out``
nor ``bitwise_right_shift.Tensor_out``; their functional, in-place and Scalar overloads all reach
it (``Tensor_Scalar`` and ``Scalar_Tensor`` are composite and call the Tensor form). Every release
registers ``__lshift__.Tensor`` / ``__rshift__.Tensor`` and their in-place forms, which ATen
computes with the same kernels (``aten/src/ATen/native/BinaryOps.cpp``: ``lshift_stub`` and
``rshift_stub`` serve both names; ``aten/src/ATen/native/cpu/BinaryOpsKernel.cpp``: a shift by a
negative amount or by the width or more gives 0, or -1 for a negative value shifted right), so
the kernels here are those ops under the other name. The result is that of
``torch.result_type`` of both operands; ``out`` is resized as ATen's structured kernels resize it
and must be a dtype the result can be cast to ("result type Long can't be cast to the desired
output type Bool"). Floating-point operands raise what the CPU kernel raises ("not implemented
for"). No host read; an integer result has no gradient.
"""

from __future__ import annotations

from typing import Callable, Dict, FrozenSet

import torch
from torch import Tensor

from ascend_env.kernels.outputs import dtype_name, not_implemented, resize_output

__all__ = [
    "KERNELS",
    "NATIVE_OPS",
    "bitwise_left_shift",
    "bitwise_left_shift_",
    "bitwise_left_shift_out",
    "bitwise_right_shift",
    "bitwise_right_shift_",
    "bitwise_right_shift_out",
]

#: Every aten op the kernels dispatch; each is in the ``supported:`` op lists of every torch_npu
#: release from 2.1 on.
NATIVE_OPS: FrozenSet[str] = frozenset(
    {"__lshift__.Tensor", "__rshift__.Tensor", "__ilshift__.Tensor", "__irshift__.Tensor", "copy_", "resize_"}
)


def _check_integral(stub: str, *operands: Tensor) -> None:
    """What the CPU kernel raises for a result that is not an integer (bool included)."""
    dtype = torch.result_type(*operands)
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise not_implemented(f"{stub}_cpu", dtype_name(dtype))


def _can_cast(source: torch.dtype, target: torch.dtype) -> bool:
    """c10's ``canCast`` (``torch.can_cast`` dispatches an op that no release lists)."""
    if source.is_complex and not target.is_complex:
        return False
    if source.is_floating_point and not (target.is_floating_point or target.is_complex):
        return False
    return source == torch.bool or target != torch.bool


def _check_cast(target: Tensor, *operands: Tensor) -> None:
    """ATen's check of an ``out=`` or in-place tensor, made before the kernel's own."""
    dtype = torch.result_type(*operands)
    if not _can_cast(dtype, target.dtype):
        raise RuntimeError(
            f"result type {dtype_name(dtype)} can't be cast to the desired output type "
            f"{dtype_name(target.dtype)}"
        )


def _out(shift: Callable[[Tensor, Tensor], Tensor], self: Tensor, other: Tensor, out: Tensor) -> Tensor:
    _check_cast(out, self, other)
    result = shift(self, other)
    resize_output(out, tuple(result.shape), stacklevel=4)
    return out.copy_(result)


def bitwise_left_shift(self: Tensor, other: Tensor) -> Tensor:
    """``aten::bitwise_left_shift.Tensor``."""
    _check_integral("lshift", self, other)
    return self.__lshift__(other)


def bitwise_left_shift_out(self: Tensor, other: Tensor, *, out: Tensor) -> Tensor:
    """``aten::bitwise_left_shift.Tensor_out``."""
    return _out(bitwise_left_shift, self, other, out)


def bitwise_left_shift_(self: Tensor, other: Tensor) -> Tensor:
    """``aten::bitwise_left_shift_.Tensor``."""
    _check_cast(self, self, other)
    _check_integral("lshift", self, other)
    return self.__ilshift__(other)


def bitwise_right_shift(self: Tensor, other: Tensor) -> Tensor:
    """``aten::bitwise_right_shift.Tensor``."""
    _check_integral("rshift", self, other)
    return self.__rshift__(other)


def bitwise_right_shift_out(self: Tensor, other: Tensor, *, out: Tensor) -> Tensor:
    """``aten::bitwise_right_shift.Tensor_out``."""
    return _out(bitwise_right_shift, self, other, out)


def bitwise_right_shift_(self: Tensor, other: Tensor) -> Tensor:
    """``aten::bitwise_right_shift_.Tensor``."""
    _check_cast(self, self, other)
    _check_integral("rshift", self, other)
    return self.__irshift__(other)


#: One function per overload, callable as the dispatcher calls a kernel registered with
#: ``torch.library.Library("aten", "IMPL").impl``.
KERNELS: Dict[str, Callable[..., Tensor]] = {
    "bitwise_left_shift.Tensor": bitwise_left_shift,
    "bitwise_left_shift.Tensor_out": bitwise_left_shift_out,
    "bitwise_left_shift_.Tensor": bitwise_left_shift_,
    "bitwise_right_shift.Tensor": bitwise_right_shift,
    "bitwise_right_shift.Tensor_out": bitwise_right_shift_out,
    "bitwise_right_shift_.Tensor": bitwise_right_shift_,
}
