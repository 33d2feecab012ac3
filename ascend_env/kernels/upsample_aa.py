"""``_upsample_bilinear2d_aa``, ``_upsample_bicubic2d_aa`` and their backwards built only from ops
that every torch_npu release runs natively.

``F.interpolate(..., mode="bilinear" or "bicubic", antialias=True)`` (image processors that resize
as Pillow does) reaches ``aten::_upsample_bilinear2d_aa`` / ``_upsample_bicubic2d_aa``; torch_npu
2.1.0.post3, 2.1.0.post6, 2.2.0, 2.2.0.post2 and 2.3.1 have no kernel for them, their ``out=``
forms or their backwards.

The anti-aliased resize is separable: per axis, an (output x input) weights matrix that depends on
sizes, scales and ``align_corners`` only, computed on the host exactly as ATen's CPU kernel does
(``aten/src/ATen/native/cpu/UpSampleKernel.cpp`` at v2.1.0, ``_compute_index_ranges_weights`` and
``_compute_indices_min_size_weights_aa``: ``scale`` from ``area_pixel_compute_scale``, support
``interp_size / 2`` times the scale when downsampling, the triangle or Keys cubic (a = -0.5)
filter, the float/double promotions term by term, each row normalized), uploaded once per shape
(``empty`` + ``copy_``) and kept. The forward is the CPU's two passes in its order: horizontal
(one ``mm`` over rows), then vertical (one ``bmm`` with the matrix broadcast by stride 0), an
axis whose size is unchanged skipped as the CPU skips it; the intermediate rounds to the dtype as
the CPU's buffer does. uint8 uses the CPU's int16 fixed-point weights (``_compute_index_ranges_
int16_weights``) in float32, rounded half up and clamped after each pass: within 1 of the CPU
where the float sum lands on a half. The backward is the transposed matrices (``mm`` then
``bmm``), all axes (the CPU's backward skips none). Float sums are associated otherwise than the
CPU's loops: within a few ulps of the largest term. Dtypes and sizes the CPU refuses (float16,
bfloat16; uint8 gradients) are asked of it on an expanded one-element tensor of the same shape,
which raises its exception and message. A channels-last input gives a channels-last result.
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
    "upsample_bicubic2d_aa",
    "upsample_bicubic2d_aa_backward",
    "upsample_bicubic2d_aa_backward_grad_input",
    "upsample_bicubic2d_aa_out",
    "upsample_bilinear2d_aa",
    "upsample_bilinear2d_aa_backward",
    "upsample_bilinear2d_aa_backward_grad_input",
    "upsample_bilinear2d_aa_out",
]

#: Every aten op the kernels dispatch; each is in the ``supported:`` op lists of every torch_npu
#: release from 2.1 on.
NATIVE_OPS: FrozenSet[str] = frozenset(
    {
        "add.Tensor",
        "as_strided",
        "bmm",
        "clamp",
        "clone",
        "copy_",
        "empty.memory_format",
        "floor",
        "mm",
        "resize_",
        "view",
    }
)

_FORWARD = (torch.float32, torch.float64, torch.uint8)
_BACKWARD = (torch.float32, torch.float64)
_MATRICES: Dict[Tuple[object, ...], Tensor] = {}
_KEPT = 32
_Filter = Callable[[float, Callable[[float], float]], float]


def _float(value: float) -> float:
    """``value`` rounded to a C float."""
    return float(struct.unpack("f", struct.pack("f", value))[0])


def _same(value: float) -> float:
    return value


def _linear(x: float, r: Callable[[float], float]) -> float:
    """``HelperInterpLinear::aa_filter``."""
    x = abs(x)
    return r(1.0 - x) if x < 1.0 else 0.0


def _cubic(x: float, r: Callable[[float], float]) -> float:
    """``HelperInterpCubic::aa_filter``: Keys' cubic convolution, a = -0.5, in ``r``'s precision."""
    a = -0.5
    x = abs(x)
    if x < 1.0:
        return r(r(r(r(r((a + 2.0) * x) - (a + 3.0)) * x) * x) + 1.0)
    if x < 2.0:
        return r(r(r(r(r(r(a * x) - 5.0 * a) * x) + 8.0 * a) * x) - 4.0 * a)
    return 0.0


_INTERP = {"bilinear": (2, _linear), "bicubic": (4, _cubic)}


def _scale(
    input_size: int,
    output_size: int,
    align_corners: bool,
    scale: Optional[float],
    r: Callable[[float], float],
) -> float:
    """``area_pixel_compute_scale`` (``aten/src/ATen/native/UpSample.h``) in ``r``'s precision."""
    if align_corners:
        return r((input_size - 1) / (output_size - 1)) if output_size > 1 else 0.0
    if scale is not None and scale > 0.0:
        return r(1.0 / scale)
    return r(r(float(input_size)) / output_size)


@functools.lru_cache(maxsize=64)
def _host_matrix(
    mode: str,
    input_size: int,
    output_size: int,
    align_corners: bool,
    scale_given: Optional[float],
    double: bool,
    int16: bool,
) -> Tensor:
    """The (output, input) weights of one axis, float64 on the host (see the module docstring)."""
    interp_size, filter_fn = _INTERP[mode]
    r: Callable[[float], float] = _same if double or int16 else _float
    scale = _scale(input_size, output_size, align_corners, scale_given, r)
    support = r(interp_size * 0.5 * scale) if scale >= 1.0 else interp_size * 0.5
    max_interp = int(math.ceil(support)) * 2 + 1
    invscale = r(1.0 / scale) if scale >= 1.0 else 1.0
    rows: List[List[float]] = []
    for i in range(output_size):
        center = r(scale * (i + 0.5))
        xmin = max(int(r(center - support) + 0.5), 0)
        xsize = min(int(r(center + support) + 0.5), input_size) - xmin
        xsize = min(max(xsize, 0), max_interp)
        weights = [filter_fn(r((r(r(j + xmin) - center) + 0.5) * invscale), r) for j in range(xsize)]
        total = 0.0
        for w in weights:
            total = r(total + w)
        if total != 0.0:
            weights = [r(w / total) for w in weights]
        row = [0.0] * input_size
        for j, w in enumerate(weights):
            row[xmin + j] = w
        rows.append(row)
    matrix = torch.tensor(rows, dtype=torch.float64).reshape(output_size, input_size)
    if int16:  # _compute_index_ranges_int16_weights: the largest precision its largest weight allows
        wt_max = float(matrix.max()) if matrix.numel() else 0.0
        precision = 0
        while precision < 22 and int(0.5 + wt_max * (1 << (precision + 1))) < (1 << 15):
            precision += 1
        scaled = matrix * (1 << precision)
        quantized = torch.where(scaled < 0, torch.trunc(scaled - 0.5), torch.trunc(scaled + 0.5))
        matrix = quantized / (1 << precision)
    return matrix


@functools.lru_cache(maxsize=64)
def _host_upload(
    mode: str,
    input_size: int,
    output_size: int,
    align_corners: bool,
    scale: Optional[float],
    dtype: torch.dtype,
    transposed: bool,
) -> Tensor:
    """:func:`_host_matrix` in the compute dtype, ``transposed`` as (input, output), contiguous."""
    work = torch.float64 if dtype == torch.float64 else torch.float32
    host = _host_matrix(
        mode, input_size, output_size, align_corners, scale, dtype == torch.float64, dtype == torch.uint8
    )
    return (host.t() if transposed else host).contiguous().to(work)


def _matrix(
    mode: str,
    input_size: int,
    output_size: int,
    align_corners: bool,
    scale: Optional[float],
    dtype: torch.dtype,
    transposed: bool,
    like: Tensor,
) -> Tensor:
    """The weights on ``like``'s device in the compute dtype, ``transposed`` as (input, output)."""
    key = (mode, input_size, output_size, align_corners, scale, dtype, transposed, like.device)
    found = _MATRICES.get(key)
    if found is None:
        host = _host_upload(mode, input_size, output_size, align_corners, scale, dtype, transposed)
        found = torch.empty(tuple(host.shape), dtype=host.dtype, device=like.device).copy_(host)
        if len(_MATRICES) >= _KEPT:
            del _MATRICES[next(iter(_MATRICES))]
        _MATRICES[key] = found
    return found


def _proxy(shape: Sequence[int], dtype: torch.dtype) -> Tensor:
    return torch.zeros((1,) * len(shape), dtype=dtype).expand(tuple(shape))


def _op(mode: str, backward: bool) -> Callable[..., Tensor]:
    name = f"_upsample_{mode}2d_aa" + ("_backward" if backward else "")
    return getattr(torch.ops.aten, name).default  # type: ignore[no-any-return]


def _round_byte(values: Tensor) -> Tensor:
    """uint8: ``(sum + half) >> precision`` clamped to [0, 255], in float."""
    return torch.clamp(torch.floor(values + 0.5), 0.0, 255.0)


def _forward(
    mode: str,
    self: Tensor,
    output_size: Sequence[int],
    align_corners: bool,
    scales_h: Optional[float],
    scales_w: Optional[float],
) -> Tensor:
    shape = tuple(self.shape)
    valid = len(output_size) == 2 and self.dim() == 4 and all(s > 0 for s in (*shape[1:], *output_size))
    if not valid or self.dtype not in _FORWARD:
        _op(mode, False)(_proxy(shape, self.dtype), list(output_size), align_corners, scales_h, scales_w)
        raise RuntimeError(f"_upsample_{mode}2d_aa: input of shape {shape} to {list(output_size)}")
    n, c, height, width = shape
    out_h, out_w = int(output_size[0]), int(output_size[1])
    dtype, device = self.dtype, self.device
    work = torch.float64 if dtype == torch.float64 else torch.float32
    data = self
    if dtype != work:
        data = torch.empty(list(shape), dtype=work, device=device).copy_(self)
    elif not data.is_contiguous():
        data = torch.clone(data, memory_format=torch.contiguous_format)
    batch = n * c
    if out_w != width:  # horizontal: rows times the (input, output) matrix
        columns = _matrix(mode, width, out_w, align_corners, scales_w, dtype, True, self)
        data = torch.mm(data.view(batch * height, width), columns)
        if dtype == torch.uint8:
            data = _round_byte(data)
    if out_h != height:  # vertical: the (output, input) matrix times each image
        rows = _matrix(mode, height, out_h, align_corners, scales_h, dtype, False, self)
        data = torch.bmm(
            torch.as_strided(rows, (batch, out_h, height), (0, height, 1)), data.view(batch, height, out_w)
        )
        if dtype == torch.uint8:
            data = _round_byte(data)
    data = data.view(n, c, out_h, out_w)
    layout = torch.channels_last if suggests_channels_last(self) else torch.contiguous_format
    result = torch.empty([n, c, out_h, out_w], dtype=dtype, device=device, memory_format=layout)
    return result.copy_(data)


def _backward(
    mode: str,
    grad_output: Tensor,
    output_size: Sequence[int],
    input_size: Sequence[int],
    align_corners: bool,
    scales_h: Optional[float],
    scales_w: Optional[float],
) -> Tensor:
    valid = (
        len(output_size) == 2
        and len(input_size) == 4
        and all(s > 0 for s in (*input_size[1:], *output_size))
        and grad_output.dim() == 4
        and list(grad_output.shape) == [*input_size[:2], *output_size]
    )
    if not valid or grad_output.dtype not in _BACKWARD:
        proxy = _proxy(tuple(grad_output.shape), grad_output.dtype)
        _op(mode, True)(proxy, list(output_size), list(input_size), align_corners, scales_h, scales_w)
        raise RuntimeError(f"_upsample_{mode}2d_aa_backward: grad of shape {tuple(grad_output.shape)}")
    n, c, height, width = (int(s) for s in input_size)
    out_h, out_w = int(output_size[0]), int(output_size[1])
    dtype, device = grad_output.dtype, grad_output.device
    grad = grad_output
    if not grad.is_contiguous():
        grad = torch.clone(grad, memory_format=torch.contiguous_format)
    batch = n * c
    columns = _matrix(mode, width, out_w, align_corners, scales_w, dtype, False, grad_output)
    rows = _matrix(mode, height, out_h, align_corners, scales_h, dtype, True, grad_output)
    partial = torch.mm(grad.view(batch * out_h, out_w), columns).view(batch, out_h, width)
    summed = torch.bmm(torch.as_strided(rows, (batch, height, out_h), (0, out_h, 1)), partial)
    layout = torch.channels_last if suggests_channels_last(grad_output) else torch.contiguous_format
    result = torch.empty([n, c, height, width], dtype=dtype, device=device, memory_format=layout)
    return result.copy_(summed.view(n, c, height, width))


def _kernels(mode: str) -> Tuple[Callable[..., Tensor], ...]:
    def forward(
        self: Tensor,
        output_size: List[int],
        align_corners: bool,
        scales_h: Optional[float] = None,
        scales_w: Optional[float] = None,
    ) -> Tensor:
        return _forward(mode, self, output_size, align_corners, scales_h, scales_w)

    def forward_out(
        self: Tensor,
        output_size: List[int],
        align_corners: bool,
        scales_h: Optional[float] = None,
        scales_w: Optional[float] = None,
        *,
        out: Tensor,
    ) -> Tensor:
        result = _forward(mode, self, output_size, align_corners, scales_h, scales_w)
        resize_output(out, tuple(result.shape))
        return out.copy_(result)

    def backward(
        grad_output: Tensor,
        output_size: List[int],
        input_size: List[int],
        align_corners: bool,
        scales_h: Optional[float] = None,
        scales_w: Optional[float] = None,
    ) -> Tensor:
        return _backward(mode, grad_output, output_size, input_size, align_corners, scales_h, scales_w)

    def backward_grad_input(
        grad_output: Tensor,
        output_size: List[int],
        input_size: List[int],
        align_corners: bool,
        scales_h: Optional[float] = None,
        scales_w: Optional[float] = None,
        *,
        grad_input: Tensor,
    ) -> Tensor:
        result = _backward(mode, grad_output, output_size, input_size, align_corners, scales_h, scales_w)
        resize_output(grad_input, tuple(result.shape))
        return grad_input.copy_(result)

    name = f"_upsample_{mode}2d_aa"
    forward.__doc__ = f"``aten::{name}``."
    forward_out.__doc__ = f"``aten::{name}.out``."
    backward.__doc__ = f"``aten::{name}_backward``: the transposed weights."
    backward_grad_input.__doc__ = f"``aten::{name}_backward.grad_input``."
    return forward, forward_out, backward, backward_grad_input


(
    upsample_bilinear2d_aa,
    upsample_bilinear2d_aa_out,
    upsample_bilinear2d_aa_backward,
    upsample_bilinear2d_aa_backward_grad_input,
) = _kernels("bilinear")
(
    upsample_bicubic2d_aa,
    upsample_bicubic2d_aa_out,
    upsample_bicubic2d_aa_backward,
    upsample_bicubic2d_aa_backward_grad_input,
) = _kernels("bicubic")

#: The kernel by overload, callable as the dispatcher calls one registered with
#: ``torch.library.Library("aten", "IMPL").impl``.
KERNELS: Dict[str, Callable[..., Tensor]] = {
    "_upsample_bilinear2d_aa": upsample_bilinear2d_aa,
    "_upsample_bilinear2d_aa.out": upsample_bilinear2d_aa_out,
    "_upsample_bilinear2d_aa_backward": upsample_bilinear2d_aa_backward,
    "_upsample_bilinear2d_aa_backward.grad_input": upsample_bilinear2d_aa_backward_grad_input,
    "_upsample_bicubic2d_aa": upsample_bicubic2d_aa,
    "_upsample_bicubic2d_aa.out": upsample_bicubic2d_aa_out,
    "_upsample_bicubic2d_aa_backward": upsample_bicubic2d_aa_backward,
    "_upsample_bicubic2d_aa_backward.grad_input": upsample_bicubic2d_aa_backward_grad_input,
}
