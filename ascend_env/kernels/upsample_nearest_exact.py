"""``_upsample_nearest_exact2d`` and its backward built only from ops that every torch_npu release
runs natively.

``F.interpolate(..., mode="nearest-exact")`` (Pillow's and scikit-image's nearest: the pixel
whose centre is nearest) reaches ``aten::_upsample_nearest_exact2d``; torch_npu 2.1.0.post3 to
2.4.0 (8 of the op tables) have no kernel for it, its ``out=`` form or its backward.

Each output row ``oh`` reads input row ``min(floor((oh + 0.5) * scale), H - 1)``, ``scale`` the
float ``1 / scales_h`` when given (and positive), else ``float(H) / OH``, the product taken in
double and rounded to float before the floor, exactly as ATen's CPU kernel
(``aten/src/ATen/native/UpSample.h``, ``compute_scales_value`` and
``nearest_neighbor_exact_compute_source_index``); columns the same. Those indices depend on sizes
and scales only: computed on the host in Python (no value of a tensor is read), uploaded once per
shape (``empty`` + ``copy_``) and kept. The forward is two ``index_select``: a copy, bit for bit
the CPU's. The backward sums each output gradient into its source pixel with two ``index_add``
(columns, then rows; float16 and bfloat16 in float32, rounded once, as the CPU kernel's
accumulator): exact where the sums are (integers), else within float rounding of the CPU's raster-
order sum (another association). A channels-last input gives a channels-last result, as on the CPU.
Sizes and dtypes the CPU kernel refuses (torch 2.1: float16 and bfloat16) are asked of it on an
expanded one-element tensor of the same shape, which raises its exception and message.
"""

from __future__ import annotations

import functools
import math
import struct
from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ascend_env.kernels.outputs import resize_output, suggests_channels_last

__all__ = [
    "KERNELS",
    "NATIVE_OPS",
    "upsample_nearest_exact2d",
    "upsample_nearest_exact2d_backward",
    "upsample_nearest_exact2d_backward_grad_input",
    "upsample_nearest_exact2d_out",
]

#: Every aten op the kernels dispatch; each is in the ``supported:`` op lists of every torch_npu
#: release from 2.1 on.
NATIVE_OPS: FrozenSet[str] = frozenset(
    {"clone", "copy_", "empty.memory_format", "index_add", "index_select", "resize_", "zeros"}
)

_CHECKED = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8)
_WIDENED = (torch.float16, torch.bfloat16)
_INDICES: Dict[Tuple[object, ...], Tensor] = {}
_KEPT = 32


def _float(value: float) -> float:
    """``value`` rounded to a C float."""
    return float(struct.unpack("f", struct.pack("f", value))[0])


@functools.lru_cache(maxsize=64)
def _host_indices(input_size: int, output_size: int, scale: Optional[float]) -> Tensor:
    """ATen's source index of every output position (see the module docstring), on the host."""
    if scale is not None and scale > 0.0:
        factor = _float(1.0 / scale)
    else:
        factor = _float(_float(float(input_size)) / output_size)
    found = [min(int(math.floor(_float((dst + 0.5) * factor))), input_size - 1) for dst in range(output_size)]
    return torch.tensor(found, dtype=torch.int64)


def _indices(input_size: int, output_size: int, scale: Optional[float], like: Tensor) -> Tensor:
    key = (input_size, output_size, scale, like.device)
    found = _INDICES.get(key)
    if found is None:
        host = _host_indices(input_size, output_size, scale)
        found = torch.empty((output_size,), dtype=torch.int64, device=like.device).copy_(host)
        if len(_INDICES) >= _KEPT:
            del _INDICES[next(iter(_INDICES))]
        _INDICES[key] = found
    return found


def _proxy(shape: Sequence[int], dtype: torch.dtype) -> Tensor:
    return torch.zeros((1,) * len(shape), dtype=dtype).expand(tuple(shape))


def _ask_reduced(tensor: Tensor, backward: bool) -> None:
    """float16/bfloat16: torch 2.1's CPU kernels have no loop for them and raise; asked of them on
    a small tensor of the dtype and layout (nothing raised: computed, as torch 2.13's do)."""
    if tensor.dtype not in _WIDENED:
        return
    proxy = torch.zeros((1, 2, 2, 2), dtype=tensor.dtype)
    if suggests_channels_last(tensor):
        proxy = proxy.contiguous(memory_format=torch.channels_last)
    if backward:
        torch.ops.aten._upsample_nearest_exact2d_backward(proxy, [2, 2], [1, 2, 1, 1])
    else:
        torch.ops.aten._upsample_nearest_exact2d(proxy, [1, 1])


def _check_forward(
    self: Tensor, output_size: Sequence[int], scales_h: Optional[float], scales_w: Optional[float]
) -> None:
    shape = tuple(self.shape)
    valid = len(output_size) == 2 and self.dim() == 4 and all(s > 0 for s in (*shape[1:], *output_size))
    if not valid or self.dtype not in _CHECKED:
        torch.ops.aten._upsample_nearest_exact2d(_proxy(shape, self.dtype), output_size, scales_h, scales_w)
        if not valid:
            raise RuntimeError(f"_upsample_nearest_exact2d: input of shape {shape} to {list(output_size)}")
    _ask_reduced(self, backward=False)


def upsample_nearest_exact2d(
    self: Tensor, output_size: List[int], scales_h: Optional[float] = None, scales_w: Optional[float] = None
) -> Tensor:
    """``aten::_upsample_nearest_exact2d``."""
    _check_forward(self, output_size, scales_h, scales_w)
    rows = _indices(self.shape[2], output_size[0], scales_h, self)
    columns = _indices(self.shape[3], output_size[1], scales_w, self)
    result = torch.index_select(torch.index_select(self, 2, rows), 3, columns)
    if suggests_channels_last(self):
        return torch.clone(result, memory_format=torch.channels_last)
    return result


def upsample_nearest_exact2d_out(
    self: Tensor,
    output_size: List[int],
    scales_h: Optional[float] = None,
    scales_w: Optional[float] = None,
    *,
    out: Tensor,
) -> Tensor:
    """``aten::_upsample_nearest_exact2d.out``."""
    result = upsample_nearest_exact2d(self, output_size, scales_h, scales_w)
    resize_output(out, tuple(result.shape))
    return out.copy_(result)


def upsample_nearest_exact2d_backward(
    grad_output: Tensor,
    output_size: List[int],
    input_size: List[int],
    scales_h: Optional[float] = None,
    scales_w: Optional[float] = None,
) -> Tensor:
    """``aten::_upsample_nearest_exact2d_backward``: each output gradient summed into its source."""
    valid = (
        len(output_size) == 2
        and len(input_size) == 4
        and all(s > 0 for s in (*input_size[2:], *output_size))
        and grad_output.dim() == 4
        and list(grad_output.shape) == [*input_size[:2], *output_size]
    )
    if not valid or grad_output.dtype not in _CHECKED:
        proxy = _proxy(tuple(grad_output.shape), grad_output.dtype)
        torch.ops.aten._upsample_nearest_exact2d_backward(proxy, output_size, input_size, scales_h, scales_w)
        if not valid:
            raise RuntimeError(
                f"_upsample_nearest_exact2d_backward: grad of shape {tuple(grad_output.shape)}"
            )
    _ask_reduced(grad_output, backward=True)
    rows = _indices(input_size[2], output_size[0], scales_h, grad_output)
    columns = _indices(input_size[3], output_size[1], scales_w, grad_output)
    device, dtype = grad_output.device, grad_output.dtype
    work = torch.float32 if dtype in _WIDENED else dtype
    grad = grad_output
    if work != dtype:
        grad = torch.empty(list(grad_output.shape), dtype=work, device=device).copy_(grad_output)
    partial = torch.index_add(
        torch.zeros([*input_size[:2], output_size[0], input_size[3]], dtype=work, device=device),
        3,
        columns,
        grad,
    )
    result = torch.index_add(torch.zeros(list(input_size), dtype=work, device=device), 2, rows, partial)
    if work != dtype:
        result = torch.empty(list(input_size), dtype=dtype, device=device).copy_(result)
    if suggests_channels_last(grad_output):
        return torch.clone(result, memory_format=torch.channels_last)
    return result


def upsample_nearest_exact2d_backward_grad_input(
    grad_output: Tensor,
    output_size: List[int],
    input_size: List[int],
    scales_h: Optional[float] = None,
    scales_w: Optional[float] = None,
    *,
    grad_input: Tensor,
) -> Tensor:
    """``aten::_upsample_nearest_exact2d_backward.grad_input``."""
    result = upsample_nearest_exact2d_backward(grad_output, output_size, input_size, scales_h, scales_w)
    resize_output(grad_input, tuple(result.shape))
    return grad_input.copy_(result)


#: The kernel by overload, callable as the dispatcher calls one registered with
#: ``torch.library.Library("aten", "IMPL").impl``.
KERNELS: Dict[str, Callable[..., Tensor]] = {
    "_upsample_nearest_exact2d": upsample_nearest_exact2d,
    "_upsample_nearest_exact2d.out": upsample_nearest_exact2d_out,
    "_upsample_nearest_exact2d_backward": upsample_nearest_exact2d_backward,
    "_upsample_nearest_exact2d_backward.grad_input": upsample_nearest_exact2d_backward_grad_input,
}
