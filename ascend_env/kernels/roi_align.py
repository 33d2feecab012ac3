"""``torchvision::roi_align`` and ``torchvision::_roi_align_backward`` built only from ops that
every torch_npu release runs natively.

torchvision's CPU kernels (``torchvision/csrc/ops/cpu/roi_align_kernel.cpp`` and
``roi_align_common.h``, pytorch/vision 0b23e88) average, per output bin, a grid of bilinear
samples: ``sampling_ratio`` per side, or (``sampling_ratio <= 0``) ``ceil(roi side / pooled
side)``, different for each roi. Here every roi's samples are taken at once, one grid position
``(iy, ix)`` after another, in the CPU kernel's order and operations, so that float32 and float64
give the CPU's bits (a roi whose grid is smaller adds nothing past it). The four corners of a
sample are rows of the input laid out ``(batch * height * width, channels)`` (``index_select``);
the backward adds ``grad * w / count`` into those rows (``index_put_`` with ``accumulate``), in
another order than the CPU's loop: equal up to rounding. float16 is computed in float32 and
rounded once (the CPU rounds at each assignment): equal within torchvision's tolerance for it.

Host reads: with ``sampling_ratio <= 0`` only, the largest grid over the rois (two values, one
read): the number of grid positions to walk. With ``sampling_ratio > 0``, none. Dtype checks and
messages are the CPU kernels'.
"""

from __future__ import annotations

from typing import Callable, Dict, FrozenSet, Tuple

import torch
from torch import Tensor

from ascend_env.kernels.outputs import dtype_name, not_implemented

__all__ = ["KERNELS", "NATIVE_OPS", "roi_align", "roi_align_backward"]

#: Every aten op the kernels dispatch; each is native in every known torch_npu release.
NATIVE_OPS: FrozenSet[str] = frozenset(
    {
        "add.Tensor",
        "arange.start",
        "as_strided",
        "bitwise_and.Tensor",
        "cat",
        "ceil",
        "clamp_min",
        "copy_",
        "div.Tensor",
        "empty.memory_format",
        "full",
        "ge.Scalar",
        "index_put_",
        "index_select",
        "le.Scalar",
        "logical_and",
        "logical_not",
        "logical_or",
        "masked_fill_.Scalar",
        "max",
        "mul.Tensor",
        "rsub.Scalar",
        "sub.Tensor",
        "view",
        "where.self",
        "zeros",
    }
)

_FLOATS = (torch.float16, torch.float32, torch.float64)


def _check(tensor: Tensor, rois: Tensor, what: str, kernel: str) -> None:
    if rois.dim() < 2 or rois.size(1) != 5:
        raise RuntimeError("rois must have shape as Tensor[K, 5]")
    if tensor.dtype != rois.dtype:
        raise RuntimeError(  # torchvision 0.16's at::checkAllSameType (later: "should have the same type")
            f"Expected tensor for argument #1 '{what}' to have the same type as tensor for argument #2 "
            f"'rois'; but type {tensor.type()} does not equal {rois.type()} (while checking arguments "
            f"for {kernel})"
        )
    if tensor.dtype not in _FLOATS:
        raise not_implemented(kernel, dtype_name(tensor.dtype))


def _column(rois: Tensor, index: int) -> Tensor:
    """Column ``index`` of the contiguous ``(k, 5)`` ``rois``, as a ``(k, 1)`` view."""
    return rois.as_strided((rois.size(0), 1), (5, 1), rois.storage_offset() + index)


def _as(tensor: Tensor, dtype: torch.dtype) -> Tensor:
    """``tensor`` converted to ``dtype`` (``copy_``: every release's; ``_to_copy`` is not), truncating
    toward zero to an integer as C++'s ``(int)`` does."""
    return torch.empty(tensor.shape, dtype=dtype, device=tensor.device).copy_(tensor)


class _Grid:
    """What both kernels compute per roi (the CPU kernels' prologue), as ``(k, 1)`` columns."""

    def __init__(
        self,
        rois: Tensor,
        dtype: torch.dtype,
        spatial_scale: float,
        pooled: Tuple[int, int],
        sampling_ratio: int,
        aligned: bool,
    ) -> None:
        rois = _as(rois, dtype) if rois.dtype != dtype else rois.contiguous()
        device = rois.device
        self.batch = _as(_column(rois, 0), torch.int64)
        offset = 0.5 if aligned else 0.0
        start_w, start_h, end_w, end_h = (
            _column(rois, index) * spatial_scale - offset for index in range(1, 5)
        )
        width, height = end_w - start_w, end_h - start_h
        if not aligned:  # malformed rois become 1 x 1
            width, height = torch.clamp_min(width, 1.0), torch.clamp_min(height, 1.0)
        self.start = (start_h, start_w)
        self.bin = (height / float(pooled[0]), width / float(pooled[1]))
        if sampling_ratio > 0:
            self.sides = (torch.full(self.batch.shape, sampling_ratio, dtype=torch.int64, device=device),) * 2
            self.largest = (sampling_ratio, sampling_ratio)
        else:
            self.sides = (
                _as(torch.ceil(self.bin[0]), torch.int64),
                _as(torch.ceil(self.bin[1]), torch.int64),
            )
            read = torch.empty((2,), dtype=torch.int64).copy_(  # the one host read
                torch.cat((torch.max(self.sides[0]).view(1), torch.max(self.sides[1]).view(1)))
            )
            high, wide = read.tolist()
            self.largest = (max(int(high), 0), max(int(wide), 0))
        self.steps = (_as(self.sides[0], dtype), _as(self.sides[1], dtype))
        self.cells = tuple(
            _as(torch.arange(0, size, device=device), dtype).view(1, size) for size in pooled
        )  # ph, pw as the dtype

    def axis(self, axis: int, index: int, size: int) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """Sample ``index`` of every bin along ``axis`` (0: y, 1: x): ``(k, pooled)`` low and high
        positions, their weights and whether the sample lies on the map (``-1 <= y <= size``)."""
        start, step, cells = self.start[axis], self.bin[axis], self.cells[axis]
        at = (start + cells * step) + ((index + 0.5) * step) / self.steps[axis]
        on_map = torch.logical_and(torch.ge(at, -1.0), torch.le(at, float(size)))
        at = at.masked_fill_(torch.le(at, 0), 0.0)
        low = _as(at, torch.int64)
        last = torch.ge(low, size - 1)
        low = low.masked_fill_(last, size - 1)
        high = torch.where(last, low, low + 1)
        at = torch.where(last, _as(low, at.dtype), at)
        fraction = at - _as(low, at.dtype)
        return low, high, 1.0 - fraction, fraction, on_map

    def within(self, iy: int, ix: int) -> Tensor:
        """``(k, 1, 1)``: whether grid position ``(iy, ix)`` is in each roi's grid."""
        outside = torch.logical_or(torch.le(self.sides[0], iy), torch.le(self.sides[1], ix))
        return torch.logical_not(outside).view(-1, 1, 1)

    def samples(
        self, iy: int, ix: int, height: int, width: int
    ) -> Tuple[Tuple[Tensor, ...], Tuple[Tensor, ...], Tensor, Tensor]:
        """The four corners of grid position ``(iy, ix)`` of every bin: their rows of the input laid
        out ``(batch * height * width, channels)`` and weights, ``(k, ph, pw)`` each, and whether the
        sample is in the roi's grid. Off the map: weights 0 at row 0 of the
        roi's image, as the CPU kernel's (``0 * value``, NaN for a NaN there)."""
        y_low, y_high, hy, ly, y_on = self.axis(0, iy, height)
        x_low, x_high, hx, lx, x_on = self.axis(1, ix, width)
        on_map = torch.bitwise_and(y_on.view(y_on.size(0), -1, 1), x_on.view(x_on.size(0), 1, -1))
        base = (self.batch * (height * width)).view(-1, 1, 1)
        rows = []
        for y in (y_low, y_high):
            for x in (x_low, x_high):
                row = base + (y.view(y.size(0), -1, 1) * width + x.view(x.size(0), 1, -1))
                rows.append(torch.where(on_map, row, base))
        weights = []
        for wy in (hy, ly):
            for wx in (hx, lx):
                weight = wy.view(wy.size(0), -1, 1) * wx.view(wx.size(0), 1, -1)
                weights.append(weight.masked_fill_(torch.logical_not(on_map), 0.0))
        return tuple(rows), tuple(weights), self.within(iy, ix), on_map


def _by_rows(tensor: Tensor) -> Tensor:
    """``(n, c, h, w)`` as ``(n * h * w, c)``, contiguous."""
    n, c, h, w = tensor.shape
    strides = tensor.stride()
    view = tensor.as_strided(
        (n, h, w, c), (strides[0], strides[2], strides[3], strides[1]), tensor.storage_offset()
    )
    return torch.empty((n, h, w, c), dtype=tensor.dtype, device=tensor.device).copy_(view).view(n * h * w, c)


def _by_channels(rows: Tensor, shape: Tuple[int, int, int, int]) -> Tensor:
    """``(n * h * w, c)`` rows back to a contiguous ``(n, c, h, w)``."""
    n, c, h, w = shape
    view = rows.as_strided((n, c, h, w), (h * w * c, 1, w * c, c), rows.storage_offset())
    return torch.empty(shape, dtype=rows.dtype, device=rows.device).copy_(view)


def roi_align(
    input: Tensor,
    rois: Tensor,
    spatial_scale: float,
    pooled_height: int,
    pooled_width: int,
    sampling_ratio: int,
    aligned: bool,
) -> Tensor:
    """``torchvision::roi_align``."""
    _check(input, rois, "input", "roi_align_forward_kernel")
    k, channels, height, width = rois.size(0), input.size(1), input.size(2), input.size(3)
    shape = (k, channels, pooled_height, pooled_width)
    if k * channels * pooled_height * pooled_width == 0:
        return torch.zeros(shape, dtype=input.dtype, device=input.device)
    dtype = torch.float32 if input.dtype == torch.float16 else input.dtype
    grid = _Grid(rois, dtype, spatial_scale, (pooled_height, pooled_width), sampling_ratio, aligned)
    table = _by_rows(input if input.dtype == dtype else _as(input, dtype))
    total = torch.zeros((k * pooled_height * pooled_width, channels), dtype=dtype, device=input.device)
    zero = torch.zeros((), dtype=dtype, device=input.device)
    for iy in range(grid.largest[0]):
        for ix in range(grid.largest[1]):
            rows, weights, within, _ = grid.samples(iy, ix, height, width)
            term = None
            for row, weight in zip(rows, weights):
                part = weight.view(-1, 1) * torch.index_select(table, 0, row.view(-1))
                term = part if term is None else term + part
            assert term is not None
            total = total + torch.where(within, term.view(k, -1, channels), zero).view(-1, channels)
    count = torch.clamp_min(grid.steps[0] * grid.steps[1], 1.0).view(-1, 1, 1)
    pooled = total.view(k, pooled_height * pooled_width, channels) / count
    out = _by_channels(
        pooled.view(k * pooled_height * pooled_width, channels), (k, channels, pooled_height, pooled_width)
    )
    return out if out.dtype == input.dtype else _as(out, input.dtype)


def roi_align_backward(
    grad: Tensor,
    rois: Tensor,
    spatial_scale: float,
    pooled_height: int,
    pooled_width: int,
    batch_size: int,
    channels: int,
    height: int,
    width: int,
    sampling_ratio: int,
    aligned: bool,
) -> Tensor:
    """``torchvision::_roi_align_backward``: the gradient of the input."""
    _check(grad, rois, "grad", "roi_align_backward_kernel")
    shape = (batch_size, channels, height, width)
    if grad.numel() == 0:
        return torch.zeros(shape, dtype=grad.dtype, device=grad.device)
    dtype = torch.float32 if grad.dtype == torch.float16 else grad.dtype
    k = rois.size(0)
    grid = _Grid(rois, dtype, spatial_scale, (pooled_height, pooled_width), sampling_ratio, aligned)
    count = (grid.steps[0] * grid.steps[1]).view(-1, 1, 1)  # not at least 1: no sample then
    bins = _by_rows(grad if grad.dtype == dtype else _as(grad, dtype))  # (k * ph * pw, c)
    total = torch.zeros((batch_size * height * width, channels), dtype=dtype, device=grad.device)
    zero = torch.zeros((), dtype=dtype, device=grad.device)
    for iy in range(grid.largest[0]):
        for ix in range(grid.largest[1]):
            rows, weights, within, on_map = grid.samples(iy, ix, height, width)
            used = torch.bitwise_and(within, on_map).view(k, -1, 1)  # the CPU adds nothing off the map
            for row, weight in zip(rows, weights):
                share = (bins * weight.view(-1, 1)).view(k, -1, channels) / count
                share = torch.where(used, share, zero).view(-1, channels)
                total.index_put_((row.view(-1),), share, True)
    out = _by_channels(total, shape)
    return out if out.dtype == grad.dtype else _as(out, grad.dtype)


#: The kernels by overload, callable as the dispatcher calls those registered with
#: ``torch.library.Library("torchvision", "IMPL").impl``.
KERNELS: Dict[str, Callable[..., Tensor]] = {
    "roi_align": roi_align,
    "_roi_align_backward": roi_align_backward,
}
