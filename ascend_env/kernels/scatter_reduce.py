"""``scatter_reduce.two`` (functional, in place, ``out=``) built only from ops that every
torch_npu release it serves runs natively.

``Tensor.scatter_reduce(dim, index, src, reduce, include_self=True)`` reduces each ``src`` value
into ``self`` at ``index`` along ``dim`` (PyTorch Geometric's aggregations, ``torch_scatter``
replacements); 45 of the 52 torch_npu releases register no kernel for it. ATen's CPU kernel
(``aten/src/ATen/native/TensorAdvancedIndexing.cpp``, ``scatter_reduce_two`` and
``scatter_impl``) copies ``self``, fills the positions scattered to with the reduction's identity
unless ``include_self``, and reduces in index order; ``mean`` divides by the count (floor
division for integers). Here every index is turned into a position in the flat result
(``index * stride[dim]`` plus the other coordinates times their strides):

- ``sum`` and ``mean``: ``scatter_add_`` along ``dim``, as the CPU kernel adds, in index order:
  bit for bit; the count as ATen's (``scatter_add_`` of ones, zeros set to 1, ``div_``).
- ``amax``, ``amin`` and ``prod``: the values (and ``self``'s, with ``include_self``) sorted by
  position (``sort`` of unique keys), a segmented inclusive scan in ``ceil(log2(n))`` doubling
  steps (``maximum``, ``minimum``, ``mul``), and the last value of each segment written with
  ``scatter_``. Max and min are exact, NaN propagating as on the CPU; a floating-point product
  is taken in another order than the CPU's serial loop, so it is equal within rounding
  (integers are exact).

The shape, dtype and ``reduce`` checks are the CPU's own: the op's meta kernel runs on meta
tensors of the same shapes (no device work, its exception and message). Index values out of
range are not checked (that would read the device): as on CUDA, the caller promises them.
No value is read back to the host. Gradients come from autograd's formula for the op, above
the kernel.
"""

from __future__ import annotations

from typing import Callable, Dict, FrozenSet

import torch
from torch import Tensor

from ascend_env.kernels.outputs import resize_output

__all__ = ["KERNELS", "NATIVE_OPS", "scatter_reduce_two", "scatter_reduce_two_", "scatter_reduce_two_out"]

#: Every aten op the kernels dispatch on the device; each is in the ``supported:`` op lists of
#: every torch_npu release that lacks ``scatter_reduce.two``.
NATIVE_OPS: FrozenSet[str] = frozenset(
    {
        "add.Tensor",
        "arange.start",
        "as_strided",
        "cat",
        "clone",
        "copy_",
        "div_.Tensor",
        "div_.Tensor_mode",
        "eq.Scalar",
        "eq.Tensor",
        "full",
        "index_select",
        "masked_fill_.Scalar",
        "maximum",
        "minimum",
        "mul.Tensor",
        "ne.Tensor",
        "ones",
        "ones_like",
        "resize_",
        "scatter_.src",
        "scatter_.value",
        "scatter_add_",
        "sort",
        "view",
        "where.self",
        "zeros",
    }
)


def _meta_check(self: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool) -> None:
    """The CPU kernel's checks and messages: its meta kernel on meta tensors of the same shapes."""

    def meta(x: Tensor) -> Tensor:
        return torch.empty(x.shape, dtype=x.dtype, device="meta")

    torch.ops.aten.scatter_reduce.two(
        meta(self), dim, meta(index), meta(src), reduce, include_self=include_self
    )


def _positions(result: Tensor, dim: int, index: Tensor) -> Tensor:
    """The flat position in the contiguous ``result`` of every element of ``index``."""
    strides = result.stride()
    positions = torch.mul(index, strides[dim])
    for axis in range(index.dim()):
        if axis == dim or index.shape[axis] == 1:
            continue
        shape = [1] * index.dim()
        shape[axis] = index.shape[axis]
        coordinate = torch.arange(0, index.shape[axis], dtype=torch.int64, device=index.device).view(shape)
        positions = torch.add(positions, torch.mul(coordinate, strides[axis]))
    if tuple(positions.shape) != tuple(index.shape):  # an index of size 1 along every axis but dim
        positions = torch.add(positions, torch.zeros(index.shape, dtype=torch.int64, device=index.device))
    return torch.clone(positions, memory_format=torch.contiguous_format).view(-1)


def _tail(x: Tensor, start: int) -> Tensor:
    return x.as_strided((x.numel() - start,), (1,), x.storage_offset() + start)


def _head(x: Tensor, count: int) -> Tensor:
    return x.as_strided((count,), (1,), x.storage_offset())


def _segmented(flat: Tensor, positions: Tensor, values: Tensor, reduce: str, include_self: bool) -> None:
    """amax, amin, prod: sort by position, scan each run of equal positions, write each run's last."""
    size = flat.numel()
    if include_self:
        positions = torch.cat((positions, torch.arange(0, size, dtype=torch.int64, device=flat.device)))
        values = torch.cat((values, flat))
    count = positions.numel()
    keys = torch.add(
        torch.mul(positions, count), torch.arange(0, count, dtype=torch.int64, device=flat.device)
    )
    order = torch.sort(keys)[1]
    positions = torch.index_select(positions, 0, order)
    scan = torch.index_select(values, 0, order)
    combine = {"amax": torch.maximum, "amin": torch.minimum, "prod": torch.mul}[reduce]
    shift = 1
    while shift < count:
        same = torch.eq(_tail(positions, shift), _head(positions, count - shift))
        earlier, later = _head(scan, count - shift), _tail(scan, shift)
        scan = torch.cat((_head(scan, shift), torch.where(same, combine(earlier, later), later)))
        shift *= 2
    last = torch.cat(
        (
            torch.ne(_head(positions, count - 1), _tail(positions, 1)),
            torch.ones(1, dtype=torch.bool, device=flat.device),
        )
    )
    spare = torch.full((1,), size, dtype=torch.int64, device=flat.device)
    target = torch.where(last, positions, spare)
    extended = torch.cat((flat, torch.zeros(1, dtype=flat.dtype, device=flat.device)))
    extended.scatter_(0, target, scan)
    flat.copy_(_head(extended, size))


def _compute(self: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool) -> Tensor:
    _meta_check(self, dim, index, src, reduce, include_self)
    result = torch.clone(self, memory_format=torch.contiguous_format)
    if index.numel() == 0:
        return result
    if self.dim() == 0:
        result_1d, index, src = result.view(1), index.view(1), src.view(1) if src.dim() == 0 else src
        dim = 0
    else:
        result_1d = result
        dim = dim % self.dim()
    if index.dim() == 0:
        index = index.view(1)
    if src.dim() == 0:
        src = src.view(1)
    if reduce in ("sum", "mean"):  # the CPU kernel's own steps, along dim
        if not include_self:
            result_1d.scatter_(dim, index, 0)
        result_1d.scatter_add_(dim, index, src)
        if reduce == "mean":
            counts = torch.ones if include_self else torch.zeros
            count = counts(result_1d.shape, dtype=result.dtype, device=result.device)
            count.scatter_add_(dim, index, torch.ones_like(src))
            count.masked_fill_(torch.eq(count, 0), 1)
            if result.is_floating_point() or result.is_complex():
                result_1d.div_(count)
            else:
                result_1d.div_(count, rounding_mode="floor")
        return result
    flat = result_1d.view(-1)
    positions = _positions(result_1d, dim, index)
    values = torch.clone(
        src.as_strided(index.shape, src.stride(), src.storage_offset()), memory_format=torch.contiguous_format
    ).view(-1)
    _segmented(flat, positions, values, reduce, include_self)
    return result


def scatter_reduce_two(
    self: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *, include_self: bool = True
) -> Tensor:
    """``aten::scatter_reduce.two``."""
    return _compute(self, dim, index, src, reduce, include_self)


def scatter_reduce_two_(
    self: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *, include_self: bool = True
) -> Tensor:
    """``aten::scatter_reduce_.two``."""
    return self.copy_(_compute(self, dim, index, src, reduce, include_self))


def scatter_reduce_two_out(
    self: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *, include_self: bool = True, out: Tensor
) -> Tensor:
    """``aten::scatter_reduce.two_out``."""
    result = _compute(self, dim, index, src, reduce, include_self)
    resize_output(out, tuple(result.shape))
    return out.copy_(result)


#: The kernels by overload, callable as the dispatcher calls one registered with
#: ``torch.library.Library("aten", "IMPL").impl``.
KERNELS: Dict[str, Callable[..., Tensor]] = {
    "scatter_reduce.two": scatter_reduce_two,
    "scatter_reduce_.two": scatter_reduce_two_,
    "scatter_reduce.two_out": scatter_reduce_two_out,
}
