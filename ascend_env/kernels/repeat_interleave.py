"""``repeat_interleave.Tensor`` built only from ops that every torch_npu release runs natively.

``aten::repeat_interleave.Tensor(repeats, *, output_size=None)`` gives each index ``i`` of the
1-d ``repeats`` ``repeats[i]`` times: ``[0] * r0 + [1] * r1 + ...`` (Qwen2-VL's vision tower
builds ``cu_seqlens`` with it on every forward with images). ATen's CPU kernel
(``aten/src/ATen/native/Repeat.cpp`` and ``Repeat.h``, ``repeat_interleave_common``) takes the
cumulative sum, reads its last value back as the output length (unless ``output_size`` is given)
and checks that no repeat is negative. Here the output's element ``j`` is the number of ``i``
with ``cumsum[i] <= j``: one ``scatter_add_`` of a 1 at each ``cumsum[i]`` and a ``cumsum`` of
those marks (linear; ``searchsorted`` of every position was 20 times slower on the CPU).

Host reads: the output length and the negative check, when ``output_size`` is not given, in one
read of two values (ATen reads them in two); none with ``output_size``. Then, as on CUDA, the
caller promises that ``output_size`` is the sum: the CPU raises "allocated size does not match
required size" (after writing out of bounds, torch 2.13), while here positions past the sum get
``len(repeats)`` and a shorter ``output_size`` truncates. Dtype checks and messages are ATen's:
``repeats`` 1-d, int32 or int64 (another dtype raises what the CPU kernel raises, "not
implemented for"), the result of ``repeats``' dtype. An integer result has no gradient.
"""

from __future__ import annotations

from typing import Callable, Dict, FrozenSet, Optional

import torch
from torch import Tensor

from ascend_env.kernels.outputs import dtype_name, not_implemented

__all__ = ["KERNELS", "NATIVE_OPS", "repeat_interleave_tensor"]

#: Every aten op the kernel dispatches; each is in the ``supported:`` op lists of every torch_npu
#: release from 2.1 on.
NATIVE_OPS: FrozenSet[str] = frozenset(
    {
        "cumsum",
        "as_strided",
        "lt.Scalar",
        "sum",
        "view",
        "cat",
        "empty.memory_format",
        "copy_",
        "zeros",
        "clamp",
        "ones_like",
        "scatter_add_",
    }
)


def repeat_interleave_tensor(repeats: Tensor, *, output_size: Optional[int] = None) -> Tensor:
    """``aten::repeat_interleave.Tensor``."""
    if repeats.dim() != 1:
        raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
    dtype = repeats.dtype
    if dtype not in (torch.int32, torch.int64):
        name = dtype_name(dtype)
        raise not_implemented("repeat_interleave_cpu", name)
    if repeats.numel() == 0:
        return torch.empty((0,), dtype=dtype, device=repeats.device)
    cumsum = torch.cumsum(repeats, 0, dtype=torch.int64)
    if output_size is None:
        last = cumsum.as_strided((1,), (1,), cumsum.storage_offset() + cumsum.numel() - 1)
        negative = torch.sum(torch.lt(repeats, 0)).view(1)
        read = torch.empty((2,), dtype=torch.int64).copy_(torch.cat((last, negative)))  # one host read
        total, any_negative = read.tolist()
        if any_negative:
            raise RuntimeError("repeats can not be negative")
    else:
        total = output_size
    # marks[j]: how many repeats end at j (zero repeats end where the one before did); their
    # running sum at j is the number of indices i with cumsum[i] <= j, the index j belongs to.
    marks = torch.zeros((total + 1,), dtype=dtype, device=repeats.device)
    ends = torch.clamp(cumsum, 0, total)  # the last ends at total (dropped); so would any past it
    marks.scatter_add_(0, ends, torch.ones_like(ends, dtype=dtype))
    return torch.cumsum(marks.as_strided((total,), (1,), 0), 0, dtype=dtype)


#: The kernel by overload, callable as the dispatcher calls one registered with
#: ``torch.library.Library("aten", "IMPL").impl``.
KERNELS: Dict[str, Callable[..., Tensor]] = {"repeat_interleave.Tensor": repeat_interleave_tensor}
