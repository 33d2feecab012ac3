"""``isin`` built only from ops that every torch_npu release runs natively.

``isin`` takes the same call as :func:`torch.isin`; :data:`ATEN_KERNELS` holds one function per
``aten::isin`` overload, with the calling convention of ``torch.library.Library.impl``, so that the
startup hook and the simulated NPU can register them for ``PrivateUse1``. None of them calls
``isin`` (a kernel registered for ``isin`` would call itself), reads a tensor's values on the host
(no ``.item()``, ``.tolist()``, ``nonzero()``), or branches on them: the strategy is chosen from
shapes, dtypes and devices only. :data:`NATIVE_OPS` lists every aten op the kernels dispatch.

The strategies and their choice by size live in :mod:`ascend_env.kernels.strategies`.


Results equal ``torch.isin`` bit for bit, type promotion included: like native, the comparison runs
in ``torch.result_type(elements, test_elements)`` (0-dim tensors and Python scalars rank low) when
``test_elements.numel() < 10 * elements.numel() ** 0.145``, and in
``torch.promote_types(elements.dtype, test_elements.dtype)`` otherwise (native flattens both
operands on that path). In these cases native ``torch.isin`` is wrong or fails, and the answer here
is the mathematically correct one, membership after that promotion:

* distinct elements that collide after a lossy promotion (``int32`` -> ``float32``): native's
  sorting path marks all but the last of them found (all but the first under torch 2.1), e.g.
  ``isin(tensor([2**24, 2**24 + 1], dtype=int32), arange(20.))`` gives ``[True, False]``
  (``[False, True]`` under torch 2.1); here ``[False, False]``;
* ``assume_unique=True`` with duplicated elements (undefined natively, where the same false
  positives occur): ``assume_unique`` is accepted and ignored, since no strategy needs it;
* a non-contiguous multi-dimensional ``test_elements`` that the brute-force path cannot ``view``
  (native raises);
* ``uint16``/``uint32``/``uint64``, which native's brute-force path does not implement (native
  raises; on torch 2.3 its sorting path too, as ``unique`` has no loop for them): they are
  compared by broadcast ``eq`` at every size;
* ``float16`` on native's brute-force path up to torch 2.3, which has no CPU loop for it
  (``"isin_default_cpu" not implemented for 'Half'``; torch_npu's CPU fallback fails the same way);
* NaN elements on native's sorting path under torch 2.1, whose ``unique`` gives NaN the inverse
  index of another value: ``isin(tensor([nan, 1.]), arange(30.))`` gives ``[True, True]``; here
  ``[False, True]``.

As natively, ``bool`` and complex inputs raise ``RuntimeError``, and so does ``bfloat16`` where
the running torch refuses it (up to torch 2.3): the refused dtypes are asked of ``torch.isin``
once, at import. Promotions that the running torch refuses (``uint16`` with a float, up to torch
2.3) raise its own error, since the comparison dtype comes from ``torch.result_type`` and
``torch.promote_types``.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, FrozenSet, Optional, Tuple, Union

import torch
from torch import Tensor

from ascend_env.kernels.outputs import resize_output
from ascend_env.kernels.strategies import CHUNK_BYTES, SCAN_MIN_N, STRATEGIES, choose_strategy, membership

__all__ = [
    "ATEN_KERNELS",
    "KERNELS",
    "CHUNK_BYTES",
    "NATIVE_OPS",
    "STRATEGIES",
    "Scalar",
    "choose_strategy",
    "isin",
    "isin_scalar_tensor",
    "isin_scalar_tensor_out",
    "isin_tensor_scalar",
    "isin_tensor_scalar_out",
    "isin_tensor_tensor",
    "isin_tensor_tensor_out",
]

Scalar = Union[bool, int, float, complex]

#: Every aten op (``name.overload``, ``name`` for the default overload) that the kernels in
#: :data:`ATEN_KERNELS` dispatch, for every strategy. Each one is in the ``supported:`` op lists
#: of every torch_npu release from 2.1 on.
NATIVE_OPS: FrozenSet[str] = frozenset(
    {
        "all.dim",
        "__rshift__.Scalar",
        "__rshift__.Tensor",
        "arange.start",
        "logical_and_",
        "logical_or_",
        "where.self",
        "clamp_min_",
        "add_.Tensor",
        "neg_",
        "sum",
        "isnan",
        "all.out",
        "any.dim",
        "any.out",
        "as_strided",
        "clamp",
        "clamp.out",
        "clamp_max_",
        "clone",
        "copy_",
        "empty.memory_format",
        "eq.Tensor",
        "eq.Tensor_out",
        "fill_.Scalar",
        "full",
        "index_select",
        "index_select.out",
        "ne.Tensor",
        "ne.Tensor_out",
        "eq.Scalar",
        "eq.Scalar_out",
        "ne.Scalar",
        "ne.Scalar_out",
        "resize_",
        "scatter_.src",
        "scatter_.value",
        "searchsorted.Tensor",
        "sort",
        "sub_.Tensor",
        "unsqueeze",
        "view",
    }
)

_REFUSED = "Unsupported input type encountered for isin(): "


def _refused_dtypes() -> Dict[torch.dtype, str]:
    """The dtypes that this torch's ``isin`` refuses by name, each with the name its message gives:
    ``bool`` and complex ones always, ``bfloat16`` too up to torch 2.3. Asked of ``torch.isin``
    itself, once, on one-element CPU tensors, so that the answer is the running torch's."""
    refused = {}
    for dtype in (torch.bool, torch.complex64, torch.complex128, torch.bfloat16, torch.float16):
        try:
            torch.isin(torch.zeros(1, dtype=dtype), torch.zeros(1, dtype=dtype))
        except RuntimeError as exc:  # a missing CPU loop ("not implemented for") is no refusal
            message = str(exc)
            if message.startswith(_REFUSED):
                refused[dtype] = message[len(_REFUSED) :].split()[0]
    return refused


_UNSUPPORTED = _refused_dtypes()
_PROMOTABLE = (
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
)
# torch.promote_types dispatches an op; look the answers up instead (computed once, from torch).
_PROMOTE: Dict[Tuple[torch.dtype, torch.dtype], torch.dtype] = {
    (a, b): torch.promote_types(a, b) for a in _PROMOTABLE for b in _PROMOTABLE
}
# The fast path of isin_tensor_tensor: same dtype (so no promotion rule applies) and fewer than
# _SMALL_T test elements (native's brute-force path for any number of elements).
_SMALL_DTYPES = frozenset(_PROMOTABLE).difference(_UNSUPPORTED)
_SMALL_T = 10
# A caller's value_bound makes a table of bound + 2 slots (int32 positions): at most this bound.
_BOUND_MAX = (1 << 31) - 3


def isin(
    elements: Union[Tensor, Scalar],
    test_elements: Union[Tensor, Scalar],
    *,
    assume_unique: bool = False,
    invert: bool = False,
    out: Optional[Tensor] = None,
    value_bound: Optional[int] = None,
) -> Tensor:
    """Whether each of ``elements`` is in ``test_elements``, like :func:`torch.isin`.

    Either argument may be a Python scalar, not both. See the module docstring for the strategies
    and for the cases where native ``torch.isin`` is wrong.

    ``value_bound``, an extension: a promise that every value of both operands, in the dtype they
    are compared in, lies in ``range(value_bound)`` (token ids below the vocabulary size). Integer
    operands only. 32 and 64-bit integers may then be looked up in a bool table of
    ``value_bound`` entries instead of being sorted or scanned (8 and 16-bit ones have a table
    anyway). The promise is not checked, as that would read the device: an element outside the
    range gets either the answer it would get without the promise or "not in" (``True`` with
    ``invert``), and nothing outside the table is read. Elements in the range are always exact.
    """
    if value_bound is not None:
        _check_bound(value_bound, elements, test_elements)
    if not isinstance(elements, Tensor):
        return _scalar_elements(elements, test_elements, assume_unique, invert, out)
    if not isinstance(test_elements, Tensor):
        return _scalar_test_elements(elements, test_elements, assume_unique, invert, out)
    # The fast path's sizes (few pairs) leave the bound out: a table seldom pays there.
    if value_bound is not None and (elements.numel() >= SCAN_MIN_N or test_elements.numel() >= _SMALL_T):
        return _tensor_tensor(elements, test_elements, invert, out, value_bound)
    if out is None:
        return isin_tensor_tensor(elements, test_elements, invert=invert)
    return isin_tensor_tensor_out(
        elements, test_elements, assume_unique=assume_unique, invert=invert, out=out
    )


def _scalar_test_elements(
    elements: Tensor, test_element: Scalar, assume_unique: bool, invert: bool, out: Optional[Tensor]
) -> Tensor:
    """:func:`isin` of a tensor and a Python scalar: the ``Tensor_Scalar`` kernels."""
    if out is None:
        return isin_tensor_scalar(elements, test_element, assume_unique=assume_unique, invert=invert)
    return isin_tensor_scalar_out(elements, test_element, assume_unique=assume_unique, invert=invert, out=out)


def _scalar_elements(
    element: Scalar,
    test_elements: Union[Tensor, Scalar],
    assume_unique: bool,
    invert: bool,
    out: Optional[Tensor],
) -> Tensor:
    """:func:`isin` of a Python scalar and a tensor (the ``Scalar_Tensor`` kernels), or of two scalars,
    which native refuses too."""
    if not isinstance(test_elements, Tensor):
        raise TypeError(
            "isin() needs at least one tensor argument, got "
            f"{type(element).__name__} and {type(test_elements).__name__}"
        )
    if out is None:
        return isin_scalar_tensor(element, test_elements, assume_unique=assume_unique, invert=invert)
    return isin_scalar_tensor_out(element, test_elements, assume_unique=assume_unique, invert=invert, out=out)


# -- the aten overloads ---------------------------------------------------------------------------


def isin_tensor_tensor(
    elements: Tensor, test_elements: Tensor, *, assume_unique: bool = False, invert: bool = False
) -> Tensor:
    """``aten::isin.Tensor_Tensor``."""
    # Few pairs (end-of-sequence ids): one to three ops, no allocation, no flattening. The same
    # dtype means no promotion rule applies; t < 10 is native's brute-force path for any n. A 1-d
    # result is contiguous whatever the elements' stride, as natively: the last tokens transformers
    # passes, input_ids[:, -1], are a strided column. Empty elements or test elements need no branch
    # of their own: eq gives an empty product, which any() (all()) reduces to False (True), as
    # natively. One check at a time, as each is a call and this path runs on every decoding step.
    dtype = elements.dtype
    if (
        dtype is not test_elements.dtype
        or dtype not in _SMALL_DTYPES
        or test_elements.dim() != 1
        or (t := test_elements.numel()) >= _SMALL_T
        or (n := elements.numel()) >= SCAN_MIN_N
        or ((d := elements.dim()) != 1 and not elements.is_contiguous())
    ):
        return _tensor_tensor(elements, test_elements, invert, None, None)
    if t == 1 and d:
        return elements.ne(test_elements) if invert else elements.eq(test_elements)
    if n == 1 and d == 1:  # one sequence: no unsqueeze
        if invert:
            return test_elements.ne(elements).all(-1, keepdim=True)
        return test_elements.eq(elements).any(-1, keepdim=True)
    if invert:
        return elements.unsqueeze(-1).ne(test_elements).all(-1)
    return elements.unsqueeze(-1).eq(test_elements).any(-1)


def isin_tensor_tensor_out(
    elements: Tensor,
    test_elements: Tensor,
    *,
    assume_unique: bool = False,
    invert: bool = False,
    out: Tensor,
) -> Tensor:
    """``aten::isin.Tensor_Tensor_out``: resizes ``out`` to ``elements.shape`` and fills it."""
    return _tensor_tensor(elements, test_elements, invert, out, None)


def isin_tensor_scalar(
    elements: Tensor, test_element: Scalar, *, assume_unique: bool = False, invert: bool = False
) -> Tensor:
    """``aten::isin.Tensor_Scalar``: ``ne`` or ``eq`` against the scalar, as natively.

    Native's result is contiguous; ``eq`` of permuted elements would be permuted too.
    """
    _check_dtype(elements.dtype)
    _check_dtype(_scalar_dtype(test_element))
    found = torch.ne(elements, test_element) if invert else torch.eq(elements, test_element)
    return found.contiguous()


def isin_tensor_scalar_out(
    elements: Tensor,
    test_element: Scalar,
    *,
    assume_unique: bool = False,
    invert: bool = False,
    out: Tensor,
) -> Tensor:
    """``aten::isin.Tensor_Scalar_out``."""
    _check_dtype(elements.dtype)
    _check_dtype(_scalar_dtype(test_element))
    _prepare_out(out, elements.shape, elements.device)
    compare = torch.ne if invert else torch.eq
    return _write_out(out, lambda dst: compare(elements, test_element, out=dst.view(elements.shape)))


def isin_scalar_tensor(
    element: Scalar, test_elements: Tensor, *, assume_unique: bool = False, invert: bool = False
) -> Tensor:
    """``aten::isin.Scalar_Tensor``: a 0-dim result on ``test_elements.device``."""
    _check_dtype(_scalar_dtype(element))
    _check_dtype(test_elements.dtype)
    return membership(*_scalar_operand(element, test_elements), invert, None)


def isin_scalar_tensor_out(
    element: Scalar,
    test_elements: Tensor,
    *,
    assume_unique: bool = False,
    invert: bool = False,
    out: Tensor,
) -> Tensor:
    """``aten::isin.Scalar_Tensor_out``: resizes ``out`` to 0-dim and fills it."""
    _check_dtype(_scalar_dtype(element))
    _check_dtype(test_elements.dtype)
    # Native sizes the output [0] first, then redispatches with a 0-dim element: same warnings.
    _prepare_out(out, (0,), test_elements.device)
    _prepare_out(out, (), test_elements.device)
    operands = _scalar_operand(element, test_elements)
    return _write_out(out, lambda dst: membership(*operands, invert, dst))


#: One function per ``aten::isin`` overload, keyed ``"isin.<overload>"``, callable as the
#: dispatcher calls a kernel registered with ``torch.library.Library("aten", "IMPL").impl``.
ATEN_KERNELS: Dict[str, Callable[..., Tensor]] = {
    "isin.Tensor_Tensor": isin_tensor_tensor,
    "isin.Tensor_Tensor_out": isin_tensor_tensor_out,
    "isin.Tensor_Scalar": isin_tensor_scalar,
    "isin.Tensor_Scalar_out": isin_tensor_scalar_out,
    "isin.Scalar_Tensor": isin_scalar_tensor,
    "isin.Scalar_Tensor_out": isin_scalar_tensor_out,
}


def _tensor_tensor(
    elements: Tensor, test_elements: Tensor, invert: bool, out: Optional[Tensor], bound: Optional[int]
) -> Tensor:
    """Two tensors past the fast path (both ``Tensor_Tensor`` kernels, and :func:`isin` with a
    ``value_bound``): native's dtype and ``out`` checks and promotion, then :func:`membership`."""
    dtype = elements.dtype
    if dtype in _UNSUPPORTED or test_elements.dtype in _UNSUPPORTED:
        _check_dtype(dtype)
        _check_dtype(test_elements.dtype)
    if out is not None:
        _prepare_out(out, elements.shape, elements.device)
    if test_elements.dtype != dtype:
        dtype = _common_dtype(elements, test_elements)
    if out is None:
        return membership(elements, test_elements, dtype, invert, None, bound=bound)
    return _write_out(out, lambda dst: membership(elements, test_elements, dtype, invert, dst, bound=bound))


def _check_bound(bound: object, *operands: Union[Tensor, Scalar]) -> None:
    """Refuse a ``value_bound`` that is not an int that a table with int32 positions can hold, or
    that comes with a floating-point operand (which makes the comparison floating-point)."""
    if isinstance(bound, bool) or not isinstance(bound, int) or not 1 <= bound <= _BOUND_MAX:
        raise ValueError(
            f"value_bound must be an int from 1 to {_BOUND_MAX} (the values lie in "
            f"range(value_bound), which sizes a lookup table), got {bound!r}: pass the vocabulary "
            "size, or leave value_bound out"
        )
    for operand in operands:
        dtype = operand.dtype if isinstance(operand, Tensor) else _scalar_dtype(operand)
        if dtype.is_floating_point:
            raise ValueError(
                f"value_bound needs integer operands, got {dtype}: "
                "leave value_bound out for floating-point values"
            )


# -- dtypes -------------------------------------------------------------------------------------


def _check_dtype(dtype: torch.dtype) -> None:
    name = _UNSUPPORTED.get(dtype)
    if name is not None:
        raise RuntimeError(f"Unsupported input type encountered for isin(): {name}")


def _scalar_dtype(value: Scalar) -> torch.dtype:
    """The dtype of the tensor that ATen wraps a Python scalar in."""
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int):
        return torch.int64
    if isinstance(value, complex):
        return torch.complex128
    return torch.float64


def _uses_brute_force(n: int, t: int) -> bool:
    """Native's choice of path (numpy's heuristic), which decides its type promotion."""
    return t < int(10.0 * math.pow(n, 0.145))


def _promote(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    if a == b:
        return a
    found = _PROMOTE.get((a, b))
    return found if found is not None else torch.promote_types(a, b)


def _common_dtype(elements: Union[Tensor, Scalar], test_elements: Tensor) -> torch.dtype:
    """The dtype in which native ``isin`` compares: see the module docstring."""
    if isinstance(elements, Tensor):
        n, dtype = elements.numel(), elements.dtype
    else:
        n, dtype = 1, _scalar_dtype(elements)
    if n == 0 or _uses_brute_force(n, test_elements.numel()):
        return torch.result_type(elements, test_elements)
    return _promote(dtype, test_elements.dtype)


def _scalar_operand(element: Scalar, test_elements: Tensor) -> Tuple[Tensor, Tensor, torch.dtype]:
    """The scalar as a 0-dim tensor on the test elements' device, and the comparison dtype."""
    tensor = torch.full((), element, dtype=_scalar_dtype(element), device=test_elements.device)
    return tensor, test_elements, _common_dtype(element, test_elements)


# -- out= -----------------------------------------------------------------------------------------


def _prepare_out(out: Tensor, shape: Tuple[int, ...], device: torch.device) -> None:
    """Check and resize ``out`` as ATen's structured ``out=`` kernels do."""
    if out.dtype != torch.bool:
        raise RuntimeError(f"Expected out tensor to have dtype bool, but got {out.dtype} instead")
    if out.device != device:
        raise RuntimeError(f"Expected out tensor to have device {device}, but got {out.device} instead")
    resize_output(out, shape, stacklevel=4)


def _write_out(out: Tensor, compute: Callable[[Tensor], Tensor]) -> Tensor:
    """Compute straight into ``out`` when it is contiguous, else through a temporary."""
    if out.is_contiguous():
        compute(out.view(-1))
    else:
        out.copy_(compute(torch.empty(out.shape, dtype=torch.bool, device=out.device).view(-1)))
    return out


#: The registry's name for :data:`ATEN_KERNELS` (``Fix.module``'s ``KERNELS``).
KERNELS = ATEN_KERNELS
