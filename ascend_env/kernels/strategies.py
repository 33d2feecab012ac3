"""How :func:`ascend_env.kernels.isin.isin` finds elements: membership of contiguous 1-d elements
in test elements of one dtype, built only from ops that every torch_npu release runs natively.

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
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple

import torch
from torch import Tensor

__all__ = ["CHUNK_BYTES", "SCAN_MIN_N", "STRATEGIES", "choose_strategy", "membership"]

#: Most bytes of the per-chunk intermediates (the broadcast ``N x T`` booleans, the int32
#: positions and the gathered values); inputs larger than this are processed in chunks.
CHUNK_BYTES = 1 << 22

# Native's brute-force kernel has no loop for these; every other dtype goes through any strategy.
# torch < 2.3 has no such dtypes.
_BRUTE_ONLY = frozenset(
    getattr(torch, name) for name in ("uint16", "uint32", "uint64") if hasattr(torch, name)
)
# dtype -> (lowest value, table size) for the dense lookup table.
_TABLES: Dict[torch.dtype, Tuple[int, int]] = {
    torch.uint8: (0, 1 << 8),
    torch.int8: (-(1 << 7), 1 << 8),
    torch.int16: (-(1 << 15), 1 << 16),
}
# Below this many elements plus test elements a 16-bit table costs more than sort and search.
_TABLE16_MIN = 1 << 14
# Up to this many element x test pairs, one broadcast eq + any, for fewer than SCAN_MIN_N elements:
# from there on a pass per test element (scan) costs less, as any() over a short last dimension is
# slow.
_BROADCAST_MAX = 1 << 16
SCAN_MIN_N = 1 << 13
# Up to this many test elements (and more pairs), one pass over the elements per test element.
_SCAN_MAX_T = 16
# From this many elements on, integer elements are sorted before the search, once there are at
# least _SORT_BOTH_MIN_T test elements: below that, searching costs less than sorting, and scan
# (up to _SCAN_MAX_T_MANY test elements) less than either when the elements come in random order.
_SORT_BOTH_MIN_N = 1 << 18
_SORT_BOTH_MIN_T = 100
_SCAN_MAX_T_MANY = 32
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


def membership(
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
    """:func:`membership` when ``n`` (the number of elements) or the number of test elements is 0:
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
    if t == 1 or dtype in _BRUTE_ONLY or (n * t <= _BROADCAST_MAX and n < SCAN_MIN_N):
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
