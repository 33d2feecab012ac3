"""``sort(stable=...)`` built only from ops that every torch_npu release runs natively.

torch_npu 2.1.0.post3 and 2.2.0 register no ``sort.stable`` nor ``sort.values_stable``:
``torch.sort(x, stable=True)``, ``torch.argsort(x, stable=True)`` and ``torch.sort(x,
stable=False)`` fall back to the CPU there, while the plain ``sort`` is native. ATen's CPU kernel
(``aten/src/ATen/native/cpu/SortingKernel.cpp``, ``sort_kernel``) sorts stably whatever
``stable`` says, NaNs last ascending and first descending; so do these kernels, for any dtype the
plain ``sort`` takes, so that values and indices equal the CPU's, ties included.

How, without a stable sort on the device: sort once (any order of ties), number the runs of equal
values along the sorted dimension (``ne`` with the previous value, NaNs equal to each other, and
``cumsum``), scatter each element's run number back to its place, and sort the unique keys
``run * n + position`` once more: ties come out in their original order. No host read. The values
keep their gradient: autograd's formula for ``sort.stable`` uses the indices returned here.
``values``/``indices`` of ``sort.values_stable`` are resized as ATen's ``out=`` kernels resize
them; ``indices`` must be int64.
"""

from __future__ import annotations

from typing import Callable, Dict, FrozenSet, Optional, Tuple

import torch
from torch import Tensor

from ascend_env.kernels.outputs import resize_output

__all__ = ["KERNELS", "NATIVE_OPS", "sort_stable", "sort_values_stable"]

#: Every aten op the kernels dispatch; each is in the ``supported:`` op lists of every torch_npu
#: release from 2.1 on.
NATIVE_OPS: FrozenSet[str] = frozenset(
    {
        "sort",
        "view",
        "arange.start",
        "index_select",
        "ne.Tensor",
        "isnan",
        "logical_and",
        "logical_not",
        "cumsum",
        "empty.memory_format",
        "scatter_.src",
        "mul.Tensor",
        "clamp_min_",
        "add.Tensor",
        "gather",
        "copy_",
        "resize_",
    }
)


def sort_stable(
    self: Tensor, *, stable: Optional[bool] = None, dim: int = -1, descending: bool = False
) -> Tuple[Tensor, Tensor]:
    """``aten::sort.stable``: values and int64 indices, ties in their original order."""
    if self.dim() == 0:  # one element: sort checks dim (-1 or 0) and gives it back with index 0
        values, indices = torch.sort(self.view(1), dim, descending)
        return values.view(()), indices.view(())
    n = self.size(dim)
    values, order = torch.sort(self, dim, descending)
    if n <= 1:
        return values, order
    shape = [1] * self.dim()
    shape[dim] = n
    positions = torch.arange(0, n, dtype=torch.int64, device=self.device)
    previous = torch.index_select(values, dim, torch.arange(-1, n - 1, device=self.device).clamp_min_(0))
    starts = torch.ne(values, previous)
    if values.is_floating_point():  # NaN != NaN: keep runs of NaNs together
        both_nan = torch.logical_and(torch.isnan(values), torch.isnan(previous))
        starts = torch.logical_and(starts, torch.logical_not(both_nan))
    runs = torch.cumsum(starts, dim)  # int64, ascending along the sorted dimension
    run_of = torch.empty(runs.shape, dtype=torch.int64, device=self.device).scatter_(dim, order, runs)
    keys = torch.add(torch.mul(run_of, n), positions.view(shape))
    order = torch.sort(keys, dim)[1]
    return torch.gather(self, dim, order), order


def sort_values_stable(
    self: Tensor,
    *,
    stable: Optional[bool] = None,
    dim: int = -1,
    descending: bool = False,
    values: Tensor,
    indices: Tensor,
) -> Tuple[Tensor, Tensor]:
    """``aten::sort.values_stable``: fills ``values`` and ``indices``."""
    for out, dtype in ((values, self.dtype), (indices, torch.int64)):  # ATen's structured checks
        if out.dtype != dtype:
            wanted, got = _type_name(dtype), _type_name(out.dtype)
            raise RuntimeError(f"Expected out tensor to have dtype {wanted}, but got {got} instead")
    result, order = sort_stable(self, stable=stable, dim=dim, descending=descending)
    resize_output(values, tuple(result.shape))
    resize_output(indices, tuple(order.shape))
    values.copy_(result)
    indices.copy_(order)
    return values, indices


# c10's names of the C++ types (caffe2::TypeMeta), as ATen's out= checks print them.
_TYPE_NAMES = {
    torch.bool: "bool",
    torch.uint8: "unsigned char",
    torch.int8: "signed char",
    torch.int16: "short int",
    torch.int32: "int",
    torch.int64: "long int",
    torch.float16: "c10::Half",
    torch.bfloat16: "c10::BFloat16",
    torch.float32: "float",
    torch.float64: "double",
}


def _type_name(dtype: torch.dtype) -> str:
    return _TYPE_NAMES.get(dtype, str(dtype))


#: One function per overload, callable as the dispatcher calls a kernel registered with
#: ``torch.library.Library("aten", "IMPL").impl``.
KERNELS: Dict[str, Callable[..., Tuple[Tensor, Tensor]]] = {
    "sort.stable": sort_stable,
    "sort.values_stable": sort_values_stable,
}
