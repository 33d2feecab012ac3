"""``isin`` built only from ops that every torch_npu release runs natively.

``isin`` takes the same call as :func:`torch.isin`; :data:`ATEN_KERNELS` holds one function per
``aten::isin`` overload, with the calling convention of ``torch.library.Library.impl``, so that the
startup hook and the simulated NPU can register them for ``PrivateUse1``. None of them calls
``isin`` (a kernel registered for ``isin`` would call itself), reads a tensor's values on the host
(no ``.item()``, ``.tolist()``, ``nonzero()``), or branches on them: the strategy is chosen from
shapes, dtypes and devices only. :data:`NATIVE_OPS` lists every aten op the kernels dispatch.

Strategies (:data:`STRATEGIES`), picked by size as ``torch.isin`` does (:func:`choose_strategy`):

* ``brute``: one ``eq`` (``ne`` for ``invert``) for one test element; else a broadcast ``eq`` +
  ``any`` (``ne`` + ``all``), in chunks so that the ``N x T`` intermediate stays within
  :data:`CHUNK_BYTES`. For few pairs (end-of-sequence ids): two or three ops;
* ``scan``: a handful of test elements against many elements: one ``eq`` + ``logical_or_`` per
  test element, over cache-sized chunks;
* ``table``: 8-bit integers (16-bit ones in bulk): a bool table over the dtype's whole value
  range, built with ``scatter_`` and read with ``index_select``; 32 and 64-bit integers too when
  the caller of :func:`isin` gives ``value_bound``, over ``range(value_bound)``;
* ``search``: sort the test elements once, then per chunk ``searchsorted`` (int32 positions),
  ``index_select`` and ``eq``: ``O((N + T) log T)``, no ``unique``;
* ``sort-both``: each chunk of elements sorted too (by a 16-bit key: the value shifted right and
  offset so that the range of a trimmed sample fits), searched in that order, and the answers
  scattered back: ``searchsorted`` then stays in cache, which makes it faster for many integer
  elements in random order.

Positions are int32 wherever the op allows (``searchsorted``, ``index_select``); only
``sort`` indices and ``scatter_`` indices are int64, as those ops require.

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

__all__ = ["ATEN_KERNELS", "CHUNK_BYTES", "NATIVE_OPS", "STRATEGIES", "choose_strategy", "isin"]

Scalar = Union[bool, int, float, complex]

#: Most bytes of the per-chunk intermediates (the broadcast ``N x T`` booleans, the int32
#: positions and the gathered values); inputs larger than this are processed in chunks.
CHUNK_BYTES = 1 << 22

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
                refused[dtype] = message[len(_REFUSED):].split()[0]
    return refused


_UNSUPPORTED = _refused_dtypes()
# Native's brute-force kernel has no loop for these; every other dtype goes through any strategy.
# torch < 2.3 has no such dtypes.
_BRUTE_ONLY = frozenset(
    getattr(torch, name) for name in ("uint16", "uint32", "uint64") if hasattr(torch, name)
)
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
# dtype -> (lowest value, table size) for the dense lookup table.
_TABLES: Dict[torch.dtype, Tuple[int, int]] = {
    torch.uint8: (0, 1 << 8),
    torch.int8: (-(1 << 7), 1 << 8),
    torch.int16: (-(1 << 15), 1 << 16),
}
# The fast path of isin_tensor_tensor: same dtype (so no promotion rule applies) and fewer than
# _SMALL_T test elements (native's brute-force path for any number of elements).
_SMALL_DTYPES = frozenset(_PROMOTABLE).difference(_UNSUPPORTED)
_SMALL_T = 10
# Below this many elements plus test elements a 16-bit table costs more than sort and search.
_TABLE16_MIN = 1 << 14
# Up to this many element x test pairs, one broadcast eq + any, for fewer than _SCAN_MIN_N elements:
# from there on a pass per test element (scan) costs less, as any() over a short last dimension is
# slow.
_BROADCAST_MAX = 1 << 16
_SCAN_MIN_N = 1 << 13
# Up to this many test elements (and more pairs), one pass over the elements per test element.
_SCAN_MAX_T = 16
# From this many elements on, integer elements are sorted before the search, once there are at
# least _SORT_BOTH_MIN_T test elements: below that, searching costs less than sorting, and scan
# (up to _SCAN_MAX_T_MANY test elements) less than either when the elements come in random order.
_SORT_BOTH_MIN_N = 1 << 18
_SORT_BOTH_MIN_T = 100
_SCAN_MAX_T_MANY = 32
# A caller's value_bound makes a table of bound + 2 slots (int32 positions): at most this bound.
_BOUND_MAX = (1 << 31) - 3
# With a value_bound, the table is used from this many test elements on (below, scan costs less)
# while it holds at most this many slots per element and test element (filling a larger one costs
# more than it saves; at int64, the table is then at most 8 times the inputs' bytes).
_BOUND_MIN_T = 4
_BOUND_SLOTS_PER_VALUE = 64
# sort-both's chunks hold this many times CHUNK_BYTES (sort keys, their order, the values in that
# order, positions): each chunk searches the whole sorted test, so fewer chunks search less.
_SORT_CHUNKS = 4
# The integer dtypes that sort-both sorts by a 16-bit key (:func:`_sort_key`); the key spans the
# range of a sample of _KEY_SAMPLE elements less _KEY_TRIM at each end.
_KEY_DTYPES = frozenset({torch.int32, torch.int64})
_KEY_SAMPLE = 1024
_KEY_TRIM = 2
# torch 2.1's CPU sort corrupts the heap on large int16 tensors whose largest value is near 2**15
# (measured: 262,144 keys drawn from [0, 32700) abort with "free(): invalid size", from [0, 32512)
# sort fine; torch 2.2 and later sort both). There the key is halved after the cast, to at most
# 2**14 - 1, which costs it one bit of resolution.
# TorchVersion compares with tuples at run time; its stub declares a plain str.
_KEY_HALVED = torch.__version__ < (2, 2)  # type: ignore[operator]


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
    if value_bound is not None and (elements.numel() >= _SCAN_MIN_N or test_elements.numel() >= _SMALL_T):
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
        or (n := elements.numel()) >= _SCAN_MIN_N
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
    return _membership(*_scalar_operand(element, test_elements), invert, None)


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
    return _write_out(out, lambda dst: _membership(*operands, invert, dst))


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
    ``value_bound``): native's dtype and ``out`` checks and promotion, then :func:`_membership`."""
    dtype = elements.dtype
    if dtype in _UNSUPPORTED or test_elements.dtype in _UNSUPPORTED:
        _check_dtype(dtype)
        _check_dtype(test_elements.dtype)
    if out is not None:
        _prepare_out(out, elements.shape, elements.device)
    if test_elements.dtype != dtype:
        dtype = _common_dtype(elements, test_elements)
    if out is None:
        return _membership(elements, test_elements, dtype, invert, None, bound=bound)
    return _write_out(
        out, lambda dst: _membership(elements, test_elements, dtype, invert, dst, bound=bound)
    )


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


# -- strategies -----------------------------------------------------------------------------------


def _membership(
    elements: Tensor,
    test: Tensor,
    dtype: torch.dtype,
    invert: bool,
    dst: Optional[Tensor],
    strategy: Optional[str] = None,
    bound: Optional[int] = None,
) -> Tensor:
    """``elements`` (cast to ``dtype``) in ``test`` (cast to ``dtype``), shaped like ``elements``.

    ``dst``, when given, is a contiguous 1-d bool tensor of ``elements.numel()`` that receives the
    result. ``strategy`` (a key of :data:`STRATEGIES`) overrides the choice by size. ``bound`` is
    :func:`isin`'s ``value_bound``: the ``table`` strategy then also serves 32 and 64-bit integers.
    """
    n, t = elements.numel(), test.numel()
    if n == 0 or t == 0:
        return _without_pairs(elements, n, invert, dst)
    if elements.dtype != dtype:
        elements = _cast(elements, dtype)
    if test.dtype != dtype:
        test = _cast(test, dtype)
    if strategy is None:
        strategy = choose_strategy(n, t, dtype, bound)
    if (
        strategy == "brute"
        and dst is None
        and n * t <= _BROADCAST_MAX
        and (elements.dim() == 1 or elements.is_contiguous())
    ):
        return _broadcast(elements, test, t, invert)
    if dst is None:
        dst = torch.empty(n, dtype=torch.bool, device=elements.device)
    if strategy == "table":
        _lookup_table(_flat(elements), _flat(test), invert, dst, bound)
    else:
        STRATEGIES[strategy](_flat(elements), _flat(test), invert, dst)
    return dst.view(elements.shape)


def _without_pairs(elements: Tensor, n: int, invert: bool, dst: Optional[Tensor]) -> Tensor:
    """:func:`_membership` when ``n`` (the number of elements) or the number of test elements is 0:
    an empty result, else ``invert`` everywhere (in ``dst`` when given)."""
    if n == 0:
        return torch.empty(elements.shape, dtype=torch.bool, device=elements.device)
    if dst is None:
        return torch.full(elements.shape, invert, dtype=torch.bool, device=elements.device)
    return dst.fill_(invert).view(elements.shape)


def _broadcast(elements: Tensor, test: Tensor, t: int, invert: bool) -> Tensor:
    """The ``brute`` strategy for small inputs (``t`` test elements), elements contiguous or 1-d:
    no allocation, no flattening of the elements (a 1-d result is contiguous)."""
    if test.dim() != 1:
        test = _flat(test)
    if t == 1:
        test = test.view(())
        return torch.ne(elements, test) if invert else torch.eq(elements, test)
    if invert:
        return torch.all(torch.ne(elements.unsqueeze(-1), test), -1)
    return torch.any(torch.eq(elements.unsqueeze(-1), test), -1)


def choose_strategy(n: int, t: int, dtype: torch.dtype, bound: Optional[int] = None) -> str:
    """The strategy for ``n`` elements and ``t`` test elements of ``dtype`` (both non-zero), all
    in ``range(bound)`` when ``bound`` is given.

    Chosen by size, like native's brute force vs sorting, with the costs measured on the CPU
    (``bench/isin.py``): few pairs -> ``brute`` (fewest ops); 8-bit integers, or 16-bit ones in
    bulk -> ``table``; a handful of test elements (up to 32 against many integer elements) ->
    ``scan``; many integer elements against 100 test elements or more -> ``sort-both``; else
    ``search``. ``search`` is fastest when the elements come sorted (a vocabulary ``arange``),
    ``sort-both`` when many come in random order. With a ``bound`` (32 and 64-bit integers), a
    ``table`` of ``bound`` slots replaces all but ``brute`` from :data:`_BOUND_MIN_T` test elements
    on, while it has at most :data:`_BOUND_SLOTS_PER_VALUE` slots per element and test element.
    """
    if t == 1 or dtype in _BRUTE_ONLY or (n * t <= _BROADCAST_MAX and n < _SCAN_MIN_N):
        return "brute"
    if dtype in _TABLES:
        if dtype.itemsize == 1 or n + t >= _TABLE16_MIN:
            return "table"
    elif bound is not None and t >= _BOUND_MIN_T and bound <= _BOUND_SLOTS_PER_VALUE * (n + t):
        return "table"
    if t <= _SCAN_MAX_T:
        return "scan"
    if n >= _SORT_BOTH_MIN_N and not dtype.is_floating_point:
        if t <= _SCAN_MAX_T_MANY:
            return "scan"
        if t >= _SORT_BOTH_MIN_T:
            return "sort-both"
    return "search"


def _brute_force(elements: Tensor, test: Tensor, invert: bool, dst: Tensor) -> None:
    """Broadcast ``eq`` + ``any`` (``ne`` + ``all``), chunked along the elements."""
    compare, reduce = (torch.ne, torch.all) if invert else (torch.eq, torch.any)
    n, t = elements.numel(), test.numel()
    if t == 1:
        compare(elements, test.view(()), out=dst)
        return
    step = max(1, CHUNK_BYTES // t)
    for start in range(0, n, step):
        part = _part(elements, start, min(step, n - start))
        reduce(compare(part.unsqueeze(-1), test), -1, out=_part(dst, start, part.numel()))


def _scan(elements: Tensor, test: Tensor, invert: bool, dst: Tensor) -> None:
    """One ``eq`` and ``logical_or_`` (``ne``, ``logical_and_``) per test element, over chunks small
    enough to stay in cache across the passes."""
    compare, combine = (torch.ne, Tensor.logical_and_) if invert else (torch.eq, Tensor.logical_or_)
    n, t = elements.numel(), test.numel()
    step = max(1, CHUNK_BYTES // 64)
    scratch = torch.empty(min(step, n), dtype=torch.bool, device=elements.device)
    for start in range(0, n, step):
        length = min(step, n - start)
        part, out = _part(elements, start, length), _part(dst, start, length)
        compare(part, _part(test, 0, 1), out=out)
        for index in range(1, t):
            combine(out, compare(part, _part(test, index, 1), out=_part(scratch, 0, length)))


def _search(elements: Tensor, test: Tensor, invert: bool, dst: Tensor) -> None:
    """Sort the test elements once, then find each element with ``searchsorted``."""
    compare = torch.ne if invert else torch.eq
    ordered = _sorted(test)
    n = elements.numel()
    step = max(1, CHUNK_BYTES // (4 + elements.element_size()))
    for start in range(0, n, step):
        length = min(step, n - start)
        _found(ordered, _part(elements, start, length), compare, out=_part(dst, start, length))


def _found(
    ordered: Tensor, values: Tensor, compare: Callable[..., Tensor], out: Optional[Tensor] = None
) -> Tensor:
    """``compare`` of each of ``values`` with the element ``searchsorted`` finds for it in
    ``ordered`` (sorted, non-empty): ``eq`` gives membership, ``ne`` its inverse."""
    position = torch.searchsorted(ordered, values, out_int32=True).clamp_max_(ordered.numel() - 1)
    return compare(ordered.index_select(0, position), values, out=out)


def _sort_both(elements: Tensor, test: Tensor, invert: bool, dst: Tensor) -> None:
    """Sort each chunk of elements too, search them in sorted order, and scatter the answers back.

    Searching elements in ascending order keeps ``searchsorted`` in cache; the order only speeds
    the search up, so 32 and 64-bit elements are sorted by a 16-bit key (:func:`_sort_key`), which
    sorts two to four times as fast. Chunks hold :data:`_SORT_CHUNKS` times :data:`CHUNK_BYTES`.
    """
    compare = torch.ne if invert else torch.eq
    ordered = _sorted(test)
    n = elements.numel()
    step = max(1, _SORT_CHUNKS * CHUNK_BYTES // (30 + 2 * elements.element_size()))
    for start in range(0, n, step):
        length = min(step, n - start)
        _search_in_order(_part(elements, start, length), ordered, compare, _part(dst, start, length))


def _search_in_order(part: Tensor, ordered: Tensor, compare: Callable[..., Tensor], dst: Tensor) -> None:
    """One chunk of :func:`_sort_both` (a function, so that its intermediates die with it)."""
    order = torch.sort(_sort_key(part))[1]
    values = part.index_select(0, order)
    dst.scatter_(0, order, _found(ordered, values, compare))


def _sort_key(part: Tensor) -> Tensor:
    """A 16-bit key that sorts ``part`` (32 or 64-bit integers) in nearly ascending order, others
    as they are.

    CPU ``sort`` of integers is a radix sort with a pass per key byte, so the narrowest key sorts
    fastest, and the search only needs nearby values next to each other: the order never affects
    the result. The key is ``(value >> shift) - base``, with ``shift`` and ``base`` such that the
    range of a strided sample of :data:`_KEY_SAMPLE` elements, less its :data:`_KEY_TRIM`
    smallest and largest, fits int16: within that range the key never reverses two values (and
    keeps them apart when the range is narrower than ``2**14``), so a few outliers do not coarsen
    it for the rest; values outside the range may land anywhere, which only slows their own
    search. All of it is computed on the device (no host read). Under torch 2.1 the key is
    halved (:data:`_KEY_HALVED`).
    """
    if part.dtype not in _KEY_DTYPES:
        return part
    n = part.numel()
    size = min(n, _KEY_SAMPLE)
    trim = size * _KEY_TRIM // _KEY_SAMPLE
    sample = torch.sort(part.as_strided((size,), (n // size,), part.storage_offset()))[0]
    low, high = _part(sample, trim, 1), _part(sample, size - 1 - trim, 1)
    half_width = (high >> 1).sub_(low >> 1)  # halves: no overflow
    bits = torch.iinfo(part.dtype).bits - 1  # value bits, less the sign
    shift = (half_width >> torch.arange(14, bits, device=part.device)).ne(0).sum()
    base = (low >> shift).add_(1 << 15)
    key = _cast((part >> shift).sub_(base), torch.int16)
    return key >> 1 if _KEY_HALVED else key


def _lookup_table(
    elements: Tensor, test: Tensor, invert: bool, dst: Tensor, bound: Optional[int] = None
) -> None:
    """A bool table indexed by value: over the dtype's whole range (8 and 16-bit integers), else
    over ``range(bound)`` (:func:`isin`'s ``value_bound``).

    For a bound, values are clamped to ``-1 .. bound`` and shifted by one: slots ``1 .. bound``
    hold the values in range, slots ``0`` and ``bound + 1`` everything below and above, and those
    two are reset after the test elements are marked, so that no element outside the range is
    found. Clamping comes before the cast to int32 positions, so that the cast keeps values.
    """
    if elements.dtype in _TABLES:
        low, size = _TABLES[elements.dtype]
        bound = None
    elif bound is None:
        raise ValueError(f"the table strategy needs a value bound for {elements.dtype}")
    else:
        low, size = -1, bound + 2
    table = _marked_table(test, invert, low, size, bound, elements.device)
    _read_table(table, elements, low, bound, dst)


def _marked_table(
    test: Tensor, invert: bool, low: int, size: int, bound: Optional[int], device: torch.device
) -> Tensor:
    """:func:`_lookup_table`'s table of ``size`` slots on ``device``, slot ``value - low``: ``not
    invert`` where a test element lies, ``invert`` elsewhere and at the two slots beyond a bound."""
    slots = test if bound is None else test.clamp(-1, bound)
    if slots is test or slots.dtype != torch.int64:  # scatter_ takes int64 positions only
        slots = _cast(slots, torch.int64)
    if low:
        slots.sub_(low)
    table = torch.full((size,), invert, dtype=torch.bool, device=device)
    table.scatter_(0, slots, not invert)
    if bound is not None:
        _part(table, 0, 1).fill_(invert)
        _part(table, bound + 1, 1).fill_(invert)
    return table


def _read_table(table: Tensor, elements: Tensor, low: int, bound: Optional[int], dst: Tensor) -> None:
    """Fill ``dst`` with ``table``'s slot of each element (clamped to ``-1 .. bound`` for a bound),
    chunk by chunk through int32 positions."""
    n = elements.numel()
    # Per chunk: the int32 positions, and for a bound the clamped values (in place when int32).
    wide = bound is not None and elements.dtype != torch.int32
    step = max(1, CHUNK_BYTES // (4 + (elements.element_size() if wide else 0)))
    positions = torch.empty(min(step, n), dtype=torch.int32, device=elements.device)
    clamped = torch.empty(min(step, n), dtype=elements.dtype, device=elements.device) if wide else None
    for start in range(0, n, step):
        length = min(step, n - start)
        part, index = _part(elements, start, length), _part(positions, 0, length)
        if bound is not None:
            part = torch.clamp(part, -1, bound, out=index if clamped is None else _part(clamped, 0, length))
        if part is not index:
            index.copy_(part)
        if low:
            index.sub_(low)
        torch.index_select(table, 0, index, out=_part(dst, start, length))


def _sorted(test: Tensor) -> Tensor:
    """The test elements in ascending order, NaNs replaced by the largest other value.

    ``searchsorted`` takes a NaN (sorted last) for smaller than any value and so loses its way;
    repeating the largest value instead keeps the order and adds nothing. When every test element
    is NaN they stay NaN: searches then go astray, but no element can match anyway.
    """
    ordered = torch.sort(test)[0]
    if ordered.is_floating_point():
        missing = torch.isnan(ordered)
        last_real = missing.sum().neg_().add_(ordered.numel() - 1).clamp_min_(0)
        ordered = torch.where(missing, ordered.index_select(0, last_real.view(1)), ordered)
    return ordered


#: The strategies by name: each fills ``dst`` from contiguous 1-d elements and test elements of
#: one dtype (``"table"`` only for the dtypes in ``_TABLES``).
STRATEGIES: Dict[str, Callable[[Tensor, Tensor, bool, Tensor], None]] = {
    "brute": _brute_force,
    "scan": _scan,
    "table": _lookup_table,
    "search": _search,
    "sort-both": _sort_both,
}


# -- layout helpers -------------------------------------------------------------------------------


def _cast(tensor: Tensor, dtype: torch.dtype) -> Tensor:
    """A contiguous copy in ``dtype`` (``empty`` + ``copy_``: ``_to_copy`` is not native everywhere)."""
    return torch.empty(tensor.shape, dtype=dtype, device=tensor.device).copy_(tensor)


def _flat(tensor: Tensor) -> Tensor:
    """A contiguous 1-d view of ``tensor``, copying only when it is not contiguous."""
    if not tensor.is_contiguous():
        tensor = tensor.clone(memory_format=torch.contiguous_format)
    return tensor.view(-1)


def _part(flat: Tensor, start: int, length: int) -> Tensor:
    """``flat[start:start + length]`` of a contiguous 1-d tensor (``slice`` is not native everywhere)."""
    if start == 0 and length == flat.numel():
        return flat
    return flat.as_strided((length,), (1,), flat.storage_offset() + start)
