"""``torchvision::nms`` built only from ops that every torch_npu release runs natively.

torchvision's CPU kernel (``torchvision/csrc/ops/cpu/nms_kernel.cpp``, pytorch/vision 01d5d10)
sorts the scores in descending order and walks the boxes: a box is kept unless a box kept before
it overlaps it by an IoU strictly above ``iou_threshold``; the IoU of two boxes is
``inter / (area_i + area_j - inter)`` in the boxes' dtype. Here the IoU of every pair is computed
at once, in the same order of operations and dtype (so the same bits), and the greedy walk is the
fixed point of ``keep[j] = no kept i before j overlaps j``: iterated from "every box kept", after
round ``t`` the first ``t`` boxes are right, and a round that changes nothing has reached the one
fixed point, the greedy answer. Each round is one matrix product.

Host reads: one per round, of two values (whether the round changed anything, and how many boxes
are kept: the output's length, which any nms must read); the rounds are the longest chain of boxes
each suppressing the next, plus one (a few on detection models' proposals). torchvision's CUDA
kernel instead copies its whole ``N x N / 64`` bit mask to the host once and walks it there.

Ties: the CPU kernel sorts the scores stably (equal scores in index order, NaN first); so does
this one, by ranks (``sort.stable`` is not native in every release), so ties give the CPU's indices.
The threshold is compared as the CPU compares it (a double): against the largest value of
the boxes' dtype not above it. Dtype checks and messages are the CPU kernel's.
"""

from __future__ import annotations

import struct
from typing import Callable, Dict, FrozenSet

import torch
from torch import Tensor

from ascend_env.kernels.outputs import not_implemented

__all__ = ["KERNELS", "NATIVE_OPS", "nms"]

#: Every aten op the kernel dispatches; each is native in every known torch_npu release.
NATIVE_OPS: FrozenSet[str] = frozenset(
    {
        "add.Tensor",
        "arange.start",
        "as_strided",
        "cat",
        "clamp_min",
        "copy_",
        "div.Tensor",
        "empty.memory_format",
        "eq.Scalar",
        "gt.Scalar",
        "gt.Tensor",
        "index_select",
        "logical_and",
        "masked_fill_.Scalar",
        "maximum",
        "minimum",
        "mm",
        "mul.Tensor",
        "ne.Tensor",
        "ones",
        "sort",
        "bitwise_and.Tensor",
        "bitwise_not",
        "bitwise_or.Tensor",
        "eq.Tensor",
        "lt.Tensor",
        "sum.dim_IntList",
        "rsub.Scalar",
        "sub.Tensor",
        "sum",
        "view",
        "zeros",
    }
)

_NAMES = {
    torch.bool: "Bool",
    torch.uint8: "Byte",
    torch.int8: "Char",
    torch.int16: "Short",
    torch.int32: "Int",
    torch.int64: "Long",
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
}  # ATen's names of the dtypes in its messages (c10::toString)


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
        name = _NAMES.get(dets.dtype, str(dets.dtype).replace("torch.", ""))
        raise not_implemented("nms_kernel", name)
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
    suppresses = _as_float(torch.logical_and(overlaps, later))  # [i, j]: i, if kept, suppresses j
    keep = torch.ones((1, n), dtype=torch.float32, device=device)
    for _ in range(n):  # n rounds always reach the fixed point; it is heard of at once
        settled = _as_float(torch.eq(torch.mm(keep, suppresses), 0))
        read = torch.empty((2,), dtype=torch.float32).copy_(  # one host read a round
            torch.cat((torch.sum(torch.ne(settled, keep)).view(1), torch.sum(settled).view(1)))
        )
        changed, kept = (int(value) for value in read.tolist())
        keep = settled
        if not changed:
            break
    # The kept positions, in order, first: a sort of "position, or position + n if dropped"
    # (float32 keys: exact below 2**24 boxes). A scatter would be ScatterElements, which torch_npu
    # 2.1.0.post6 compiles online (aclop), not an aclnn kernel.
    positions_f = torch.arange(0, n, dtype=torch.float32, device=device)
    keys = positions_f + (1.0 - keep.view(n)) * float(n)
    first = torch.sort(keys, 0, False)[1]
    return torch.index_select(order, 0, first.as_strided((kept,), (1,), 0))


#: The kernel by overload, callable as the dispatcher calls one registered with
#: ``torch.library.Library("torchvision", "IMPL").impl``.
KERNELS: Dict[str, Callable[..., Tensor]] = {"nms": nms}
