"""``out=`` tensors as ATen's kernels treat them (resized to the result's shape, with its warning),
ATen's "not implemented for" dispatch error as the running torch raises it, dtypes as ATen's
messages name them, and the memory format ATen suggests for a result."""

from __future__ import annotations

import warnings
from typing import Tuple, Type

import torch
from torch import Tensor

__all__ = ["dtype_name", "not_implemented", "resize_output", "suggests_channels_last"]

# c10::toString of each ScalarType (c10/core/ScalarType.h, AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS):
# the names ATen's messages give dtypes; those this torch lacks are left out.
_C10_NAMES = {
    getattr(torch, attribute): name
    for attribute, name in (
        ("bool", "Bool"),
        ("uint8", "Byte"),
        ("int8", "Char"),
        ("int16", "Short"),
        ("int32", "Int"),
        ("int64", "Long"),
        ("float16", "Half"),
        ("bfloat16", "BFloat16"),
        ("float32", "Float"),
        ("float64", "Double"),
        ("complex32", "ComplexHalf"),
        ("complex64", "ComplexFloat"),
        ("complex128", "ComplexDouble"),
        ("uint16", "UInt16"),
        ("uint32", "UInt32"),
        ("uint64", "UInt64"),
        ("float8_e5m2", "Float8_e5m2"),
        ("float8_e4m3fn", "Float8_e4m3fn"),
    )
    if hasattr(torch, attribute)
}


def _dispatch_error() -> Type[Exception]:
    """The type ATen's ``AT_DISPATCH`` error has in this torch: RuntimeError up to torch 2.1,
    NotImplementedError later (asked of the CPU once, at import)."""
    try:
        torch.repeat_interleave(torch.ones(1))
    except Exception as exc:  # float repeats: "repeat_interleave_cpu" not implemented for 'Float'
        return type(exc)
    return RuntimeError


_DISPATCH_ERROR = _dispatch_error()


def dtype_name(dtype: torch.dtype) -> str:
    """``dtype`` as ATen's messages name it (c10::toString): ``Long``, ``Half``, ``ComplexFloat``."""
    return _C10_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def not_implemented(kernel: str, dtype_name: str) -> Exception:
    """What the CPU kernel ``kernel`` raises for a dtype it has no loop for."""
    return _DISPATCH_ERROR(f"\"{kernel}\" not implemented for '{dtype_name}'")


def resize_output(out: Tensor, shape: Tuple[int, ...], stacklevel: int = 3) -> None:
    """Resize ``out`` to ``shape`` as ATen's ``at::native::resize_output`` does: a non-empty
    ``out`` of another shape is resized with a deprecation warning (``stacklevel`` points it at
    the caller of the kernel); one of the right shape keeps its strides."""
    if tuple(out.shape) == tuple(shape):
        return
    if out.numel() != 0:
        warnings.warn(
            "An output with one or more elements was resized since it had shape "
            f"{list(out.shape)}, which does not match the required output shape {list(shape)}. "
            "This behavior is deprecated, and in a future PyTorch release outputs will not be "
            "resized unless they have zero elements. You can explicitly reuse an out tensor t by "
            "resizing it, inplace, to zero elements with t.resize_(0).",
            UserWarning,
            stacklevel=stacklevel,
        )
    out.resize_(shape)


def suggests_channels_last(tensor: Tensor) -> bool:
    """Whether ATen's ``suggest_memory_format`` says channels-last for a 4-D ``tensor``: c10's
    ``is_channels_last_strides_2d_s4`` on the sizes and strides (``c10/core/MemoryFormat.h``)."""
    if tensor.dim() != 4:
        return False
    sizes, strides = tensor.shape, tensor.stride()
    if strides[1] == 0:
        return False
    smallest = 0
    for d in (1, 3, 2, 0):
        if sizes[d] == 0 or strides[d] < smallest:
            return False
        if d == 0 and smallest == strides[1]:
            return False
        smallest = strides[d] * (sizes[d] if sizes[d] > 1 else 1)
    return True
