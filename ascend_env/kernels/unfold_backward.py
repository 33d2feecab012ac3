"""``unfold_backward`` built only from ops that every torch_npu release runs natively.

``aten::unfold_backward(grad_in, input_sizes, dim, size, step)`` is the gradient of
``Tensor.unfold(dim, size, step)``: window ``w``'s element ``k`` adds into position
``w * step + k`` of ``dim`` of a zero tensor of ``input_sizes``. ``torch.istft`` calls it for its
overlap-add (``aten/src/ATen/native/SpectralOps.cpp``, ``istft``), so does the backward of every
``unfold`` (``torch.stft``'s framing included). torch_npu 2.1.0.post3 to 2.1.0.post13 and 2.2.0 to
2.6.0 (18 of the op tables) have no kernel for it.

Here an overlap-add: the windows are cut in chunks of ``step`` elements; chunk ``j`` of window
``w`` lands on block ``w + j`` of ``step`` positions, so the windows' chunks ``j`` are disjoint and
one strided ``add_`` (``as_strided`` views of both tensors) adds them all into a ``zeros`` of
``input_sizes``: ``ceil(size / step)`` adds (4 for an STFT with a hop of a quarter frame), no
scatter, no atomics, deterministic. The chunks go last first, so each position gets its windows in
increasing order, in the result's dtype, from zero, as the CPU kernel adds them
(``aten/src/ATen/native/cpu/UnfoldBackwardKernel.cpp``): the same values bit for bit, float16 and
bfloat16 included. No value is read back. Arguments the CPU kernel refuses are asked of it on an
expanded one-element tensor of ``grad_in``'s shape, which raises its exception and message; a step
below 1, which torch 2.1's CPU kernel divides by (a floating point exception), raises torch 2.13's
``ValueError`` without asking it. ``unfold_backward.out`` is a composite of this functional
(``CompositeExplicitAutograd``), so it needs no kernel of its own.
"""

from __future__ import annotations

from typing import Callable, Dict, FrozenSet, List, Sequence

import torch
from torch import Tensor

__all__ = ["KERNELS", "NATIVE_OPS", "unfold_backward"]

#: Every aten op the kernel dispatches; each is in the ``supported:`` op lists of every torch_npu
#: release from 2.1 on.
NATIVE_OPS: FrozenSet[str] = frozenset({"add_.Tensor", "as_strided", "clone", "view", "zeros"})


def _valid(grad_in: Tensor, input_sizes: Sequence[int], dim: int, size: int, step: int) -> bool:
    rank = len(input_sizes)
    if rank == 0 or not -rank <= dim < rank or size < 1 or step < 1 or grad_in.dim() != rank + 1:
        return False
    at = dim % rank
    windows = grad_in.shape[at]
    expected = [*input_sizes[:at], windows, *input_sizes[at + 1 :], size]
    return list(grad_in.shape) == expected and (
        windows == 0 or (windows - 1) * step + size <= input_sizes[at]
    )


def _refuse(grad_in: Tensor, input_sizes: Sequence[int], dim: int, size: int, step: int) -> None:
    proxy = torch.zeros((1,) * grad_in.dim(), dtype=grad_in.dtype).expand(tuple(grad_in.shape))
    torch.ops.aten.unfold_backward(proxy, input_sizes, dim, size, step)


def unfold_backward(grad_in: Tensor, input_sizes: List[int], dim: int, size: int, step: int) -> Tensor:
    """``aten::unfold_backward``."""
    if len(input_sizes) == 0 and grad_in.dim() == 1 and size == 1 and step >= 1 and dim in (0, -1):
        # unfold of a 0-d tensor: one window of its one element
        return torch.clone(grad_in.view(()))
    if step < 1:  # torch 2.1's CPU kernel divides by it (SIGFPE): torch 2.13's check and message
        raise ValueError(f"step is {step} but must be > 0")
    if not _valid(grad_in, input_sizes, dim, size, step):
        _refuse(grad_in, input_sizes, dim, size, step)
        raise RuntimeError(
            f"unfold_backward: grad_in of shape {tuple(grad_in.shape)} does not fit {input_sizes}"
        )
    at = dim % len(input_sizes)
    windows = grad_in.shape[at]
    result = torch.zeros(list(input_sizes), dtype=grad_in.dtype, device=grad_in.device)
    into, source = list(result.stride()), list(grad_in.stride())
    # Chunk j (elements j*step to (j+1)*step of every window) of window w lands in block w + j of
    # step positions: one strided add_ per chunk, the windows of a chunk disjoint; the last chunk
    # first, so each position gets its windows in increasing order, as the CPU kernel adds them.
    for chunk in reversed(range(-(-size // step))):
        length = min(step, size - chunk * step)
        sizes = [*input_sizes[:at], windows, *input_sizes[at + 1 :], length]
        target = torch.as_strided(
            result, sizes, [*into[:at], step * into[at], *into[at + 1 :], into[at]], chunk * step * into[at]
        )
        target.add_(
            torch.as_strided(grad_in, sizes, source, grad_in.storage_offset() + chunk * step * source[-1])
        )
    return result


#: The kernel by overload, callable as the dispatcher calls one registered with
#: ``torch.library.Library("aten", "IMPL").impl``.
KERNELS: Dict[str, Callable[..., Tensor]] = {"unfold_backward": unfold_backward}
