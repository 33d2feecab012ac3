"""``_assert_async`` built only from ops that every torch_npu release runs natively.

No torch_npu release registers ``aten::_assert_async`` (``torch._assert_async``, and what
``torch.export``-ed and compiled programs call for their runtime checks): each call falls back to
the CPU, a copy of the tensor to the host with torch_npu's warning. ATen's CPU kernel
(``aten/src/ATen/native/TensorCompare.cpp``, ``_assert_async_cpu`` and ``_assert_async_msg_cpu``)
checks ``is_nonzero(self)``: one element (else "Boolean value of Tensor with no values / more than
one value is ambiguous"), not zero (else "Expected Tensor with single nonzero value, but got zero",
or the message given, "Assertion is failed" for an empty one). These kernels call the same
``is_nonzero``, whose one host read of the value (``_local_scalar_dense``) is what the CPU op
implies: CUDA's asynchronous device-side assert has no torch_npu counterpart to build on.
"""

from __future__ import annotations

from typing import Callable, Dict, FrozenSet

from torch import Tensor

__all__ = ["KERNELS", "NATIVE_OPS", "assert_async", "assert_async_msg"]

#: Every aten op the kernels dispatch (``is_nonzero`` is composite: it dispatches ``item`` and
#: ``_local_scalar_dense``); each is in the ``supported:`` op lists of every torch_npu release.
NATIVE_OPS: FrozenSet[str] = frozenset({"_local_scalar_dense"})


def assert_async(self: Tensor) -> None:
    """``aten::_assert_async``."""
    if not self.is_nonzero():
        raise RuntimeError("Expected Tensor with single nonzero value, but got zero")


def assert_async_msg(self: Tensor, assert_msg: str) -> None:
    """``aten::_assert_async.msg``."""
    if not self.is_nonzero():
        raise RuntimeError(assert_msg if assert_msg else "Assertion is failed")


#: One function per overload, callable as the dispatcher calls a kernel registered with
#: ``torch.library.Library("aten", "IMPL").impl``.
KERNELS: Dict[str, Callable[..., None]] = {
    "_assert_async": assert_async,
    "_assert_async.msg": assert_async_msg,
}
