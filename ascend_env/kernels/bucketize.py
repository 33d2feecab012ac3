"""``bucketize`` built only from ops that every torch_npu release runs natively.

torch_npu 2.1.0.post3 and 2.2.0 register no ``bucketize`` overload, while every release registers
``searchsorted``. ATen's CPU ``bucketize`` (``aten/src/ATen/native/Bucketization.cpp``) checks
that ``boundaries`` is 1-d and then runs ``searchsorted(boundaries, self, out_int32, right)``
itself; so do these kernels, with ``searchsorted``'s own checks, messages and ``out=`` resizing.
No host read; an integer result has no gradient.
"""

from __future__ import annotations

from typing import Callable, Dict, FrozenSet, Union

import torch
from torch import Tensor

__all__ = ["KERNELS", "NATIVE_OPS", "bucketize_scalar", "bucketize_tensor", "bucketize_tensor_out"]

#: Every aten op the kernels dispatch; each is in the ``supported:`` op lists of every torch_npu
#: release from 2.1 on.
NATIVE_OPS: FrozenSet[str] = frozenset(
    {"searchsorted.Tensor", "searchsorted.Tensor_out", "searchsorted.Scalar"}
)


def _check_boundaries(boundaries: Tensor) -> None:
    if boundaries.dim() != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.dim()})")


def bucketize_tensor(
    self: Tensor, boundaries: Tensor, *, out_int32: bool = False, right: bool = False
) -> Tensor:
    """``aten::bucketize.Tensor``."""
    _check_boundaries(boundaries)
    return torch.searchsorted(boundaries, self, out_int32=out_int32, right=right)


def bucketize_tensor_out(
    self: Tensor, boundaries: Tensor, *, out_int32: bool = False, right: bool = False, out: Tensor
) -> Tensor:
    """``aten::bucketize.Tensor_out``."""
    _check_boundaries(boundaries)
    return torch.searchsorted(boundaries, self, out_int32=out_int32, right=right, out=out)


def bucketize_scalar(
    self: Union[bool, int, float], boundaries: Tensor, *, out_int32: bool = False, right: bool = False
) -> Tensor:
    """``aten::bucketize.Scalar``."""
    _check_boundaries(boundaries)
    return torch.searchsorted(boundaries, self, out_int32=out_int32, right=right)


#: One function per overload, callable as the dispatcher calls a kernel registered with
#: ``torch.library.Library("aten", "IMPL").impl``.
KERNELS: Dict[str, Callable[..., Tensor]] = {
    "bucketize.Tensor": bucketize_tensor,
    "bucketize.Tensor_out": bucketize_tensor_out,
    "bucketize.Scalar": bucketize_scalar,
}
