"""``torchvision::nms`` built only from ops that every torch_npu release runs natively.

torchvision's CPU kernel (``torchvision/csrc/ops/cpu/nms_kernel.cpp``, pytorch/vision 01d5d10)
sorts the scores in descending order and walks the boxes: a box is kept unless a box kept before
it overlaps it by an IoU strictly above ``iou_threshold``; the IoU of two boxes is
``inter / (area_i + area_j - inter)`` in the boxes' dtype. Here the IoU of every pair is computed
on the device at once, in the same order of operations and dtype (so the same bits), giving the
mask ``suppresses[i, j]``: box ``i``, if kept, suppresses the later box ``j``.

As torchvision's CUDA kernel does (``torchvision/csrc/ops/cuda/nms_kernel.cu``, same commit: the
``N x N/64`` mask of 64-bit words copied to the host once, then walked there), the mask is packed
to bits on the device, read to the host in one copy, and walked there; the kept positions go back
to the device (a host-to-device copy, not a read) to index the walk order. The packing uses native
ops only: the 0/1 float32 mask, padded to a multiple of 8 columns (``cat``), times 1, 2, ... 128
and summed over each group of 8 (exact: integers below 256), cast to uint8 by ``copy_`` (all in
``NATIVE_OPS``; a bool mask would read 8 times the bytes, and 64-bit words would need sums that
float32 does not hold exactly). Host reads: exactly one, ``N * ceil(N / 8)`` bytes for ``N`` boxes
(torchvision's CUDA kernel reads ``N * ceil(N / 64) * 8``), whatever the chains of suppressions;
the output's length, which any nms must read, comes with it. The walk treats each row's bytes as
one Python integer (little-endian bit ``j`` is column ``j``): the boxes in order, a box kept unless
its bit is set in ``removed``, and a kept box's row OR-ed into ``removed``. The bytes are taken
from the host copy by ``ctypes.string_at`` (no numpy). For N = 2000 (bench-like boxes, 1263 to 2000
kept) the walk took 1.0 to 2.3 ms on one CPU thread; a loop of torch ops over a bool ``removed``
(an OR and a search for the next box per kept box) took 70 to 210 ms.

Ties: the CPU kernel sorts the scores stably (equal scores in index order, NaN first); so does
this one, by ranks (``sort.stable`` is not native in every release), so ties give the CPU's indices.
The threshold is compared as the CPU compares it (a double): against the largest value of
the boxes' dtype not above it; a NaN IoU suppresses nothing, as on the CPU. Dtype checks and
messages are the CPU kernel's.
"""

from __future__ import annotations

import ctypes
import struct
from typing import Callable, Dict, FrozenSet, List

import torch
from torch import Tensor

from ascend_env.kernels.outputs import dtype_name, not_implemented

__all__ = ["KERNELS", "NATIVE_OPS", "nms"]

#: Every aten op the kernel dispatches on the device (the host walk's ops run on CPU tensors); each
#: is native in every known torch_npu release.
NATIVE_OPS: FrozenSet[str] = frozenset(
    {
        "add.Tensor",
        "arange.start",
        "as_strided",
        "bitwise_and.Tensor",
        "bitwise_not",
        "bitwise_or.Tensor",
        "cat",
        "clamp_min",
        "copy_",
        "div.Tensor",
        "empty.memory_format",
        "eq.Tensor",
        "gt.Scalar",
        "gt.Tensor",
        "index_select",
        "logical_and",
        "lt.Tensor",
        "masked_fill_.Scalar",
        "maximum",
        "minimum",
        "mul.Tensor",
        "ne.Tensor",
        "sort",
        "sub.Tensor",
        "sum.dim_IntList",
        "view",
        "zeros",
    }
)


def _column(boxes: Tensor, index: int) -> Tensor:
    """Column ``index`` of the contiguous ``(n, 4)`` ``boxes``, as an ``(n,)`` view."""
    return boxes.as_strided((boxes.size(0),), (4,), boxes.storage_offset() + index)


def _threshold(iou_threshold: float, dtype: torch.dtype) -> float:
    """The largest float32 not above ``iou_threshold`` (itself for float64): ``ovr > it`` in
    ``dtype`` is the CPU's ``ovr > iou_threshold`` in double. Host arithmetic, no device op."""
    if dtype == torch.float64 or not abs(iou_threshold) <= 3.4e38:
        return iou_threshold
    rounded = struct.unpack("<f", struct.pack("<f", iou_threshold))[0]
    if rounded > iou_threshold:  # rounded up: step to the float32 below
        bits = struct.unpack("<I", struct.pack("<f", rounded))[0]
        if rounded > 0:
            bits -= 1
        else:  # toward minus infinity: the magnitude grows (from zero, to the smallest negative)
            bits = 0x80000001 if bits & 0x7FFFFFFF == 0 else bits + 1
        rounded = struct.unpack("<f", struct.pack("<I", bits))[0]
    return float(rounded)


def _as_float(mask: Tensor) -> Tensor:
    """``mask`` as 0/1 float32 (``masked_fill_``: every release's; ``_to_copy`` is not)."""
    return torch.zeros(mask.shape, dtype=torch.float32, device=mask.device).masked_fill_(mask, 1.0)


def _stable_descending_order(scores: Tensor) -> Tensor:
    """``scores.sort(stable=True, descending=True)``'s indices (NaN first, equal scores in index
    order), as the CPU kernel sorts; ``sort.stable`` is not native in every release (2.1.0.post3,
    2.2.0), so each score's rank is counted (scores before it, then equal ones at lower indices)
    and the distinct ranks sorted."""
    n = scores.size(0)
    column, row = scores.view(n, 1), scores.view(1, n)  # [i, j]: score i against score j
    nan_column, nan_row = torch.ne(column, column), torch.ne(row, row)
    greater = torch.bitwise_or(
        torch.gt(row, column), torch.bitwise_and(nan_row, torch.bitwise_not(nan_column))
    )
    equal = torch.bitwise_or(torch.eq(row, column), torch.bitwise_and(nan_row, nan_column))
    positions = torch.arange(0, n, device=scores.device)
    earlier = torch.lt(positions.view(1, n), positions.view(n, 1))
    ahead = torch.bitwise_or(greater, torch.bitwise_and(equal, earlier))
    ranks = torch.sum(_as_float(ahead), 1)  # float32: exact below 2**24 boxes
    return torch.sort(ranks, 0, False)[1]


def _read_bits(mask: Tensor) -> Tensor:
    """The ``(n, n)`` bool ``mask`` packed to bits on the device and read to the host in one copy:
    an ``(n, ceil(n / 8))`` uint8 CPU tensor, bit ``k`` of byte ``c`` of row ``i`` is
    ``mask[i, 8 * c + k]``."""
    n = mask.size(0)
    width = (n + 7) // 8
    bits = _as_float(mask)
    if width * 8 != n:
        pad = torch.zeros((n, width * 8 - n), dtype=torch.float32, device=mask.device)
        bits = torch.cat((bits, pad), 1)
    powers = torch.tensor([float(1 << k) for k in range(8)], dtype=torch.float32, device="cpu")
    weights = torch.empty((8,), dtype=torch.float32, device=mask.device).copy_(powers)  # to the device
    sums = torch.sum(torch.mul(bits.view(n, width, 8), weights), 2)  # exact: integers below 256
    packed = torch.empty((n, width), dtype=torch.uint8, device=mask.device).copy_(sums)
    return torch.empty((n, width), dtype=torch.uint8, device="cpu").copy_(packed)  # the one host read


def _walk(rows: Tensor) -> List[int]:
    """The greedy walk over the host bit mask ``rows`` (:func:`_read_bits`): the kept positions,
    in order. A Python integer per kept row (its bytes, little-endian) is OR-ed into ``removed``."""
    n, width = rows.shape
    data = ctypes.string_at(rows.data_ptr(), n * width)  # contiguous uint8: its bytes, no numpy
    removed = 0
    kept: List[int] = []
    for i in range(n):
        if not removed >> i & 1:
            kept.append(i)
            removed |= int.from_bytes(data[i * width : (i + 1) * width], "little")
    return kept


def nms(dets: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """``torchvision::nms``."""
    if dets.dim() != 2:
        raise RuntimeError(f"boxes should be a 2d tensor, got {dets.dim()}D")
    if dets.size(1) != 4:
        raise RuntimeError(f"boxes should have 4 elements in dimension 1, got {dets.size(1)}")
    if scores.dim() != 1:
        raise RuntimeError(f"scores should be a 1d tensor, got {scores.dim()}D")
    if dets.size(0) != scores.size(0):
        raise RuntimeError(
            "boxes and scores should have same number of elements in dimension 0, got "
            f"{dets.size(0)} and {scores.size(0)}"
        )
    if dets.dtype not in (torch.float32, torch.float64):
        raise not_implemented("nms_kernel", dtype_name(dets.dtype))
    if dets.dtype != scores.dtype:
        raise RuntimeError("dets should have the same type as scores")
    device = dets.device
    n = dets.size(0)
    if n == 0:
        return torch.empty((0,), dtype=torch.int64, device=device)
    order = _stable_descending_order(scores)
    boxes = torch.index_select(dets, 0, order)  # contiguous, in the order of the walk
    x1, y1, x2, y2 = (_column(boxes, index) for index in range(4))
    areas = (x2 - x1) * (y2 - y1)
    column, row = (n, 1), (1, n)  # [i, j]: box i (earlier in the walk) against box j
    w = torch.clamp_min(
        torch.minimum(x2.view(column), x2.view(row)) - torch.maximum(x1.view(column), x1.view(row)), 0
    )
    h = torch.clamp_min(
        torch.minimum(y2.view(column), y2.view(row)) - torch.maximum(y1.view(column), y1.view(row)), 0
    )
    inter = w * h
    overlaps = torch.gt(
        inter / (areas.view(column) + areas.view(row) - inter), _threshold(iou_threshold, dets.dtype)
    )
    positions = torch.arange(0, n, device=device)
    later = torch.gt(positions.view(row), positions.view(column))
    suppresses = torch.logical_and(overlaps, later)  # [i, j]: i, if kept, suppresses j
    kept = _walk(_read_bits(suppresses))
    # The kept positions go to the device (a host-to-device copy, not a read).
    positions_kept = torch.tensor(kept, dtype=torch.int64, device="cpu")
    on_device = torch.empty((len(kept),), dtype=torch.int64, device=device).copy_(positions_kept)
    return torch.index_select(order, 0, on_device)


#: The kernel by overload, callable as the dispatcher calls one registered with
#: ``torch.library.Library("torchvision", "IMPL").impl``.
KERNELS: Dict[str, Callable[..., Tensor]] = {"nms": nms}
