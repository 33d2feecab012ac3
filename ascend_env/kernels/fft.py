"""``_fft_r2c``, ``_fft_c2c`` and ``_fft_c2r`` built only from ops that every torch_npu release
runs natively: discrete Fourier transforms as real matrix products.

torch_npu 2.1.0.post3, 2.2.0, 2.2.0.post2 and 2.3.1 register none of the three (op-plugin's YAML
of those releases, ``ascend_env/data/optables``), so ``torch.stft``, ``torch.istft`` and every
``torch.fft`` function copy to the host and back. Their tables do have ``mm``, ``view_as_real``
and ``view_as_complex`` but no complex ``mm`` path on the cube unit, so here a complex tensor is
handled through its real view (``view_as_real``: the last axis holds the real and imaginary
parts) and a transform of length ``n`` along one dimension is one real ``mm``:

* r2c: ``(A, n) @ (n, 2m)``, the columns ``cos`` and ``-sin`` interleaved, ``m = n // 2 + 1``
  when one-sided, the product viewed as complex;
* c2c: ``(A, 2n) @ (2n, 2m)``, the 2x2 blocks of a complex product, on the interleaved view;
* c2r: ``(A, 2m) @ (2m, n)``, the rows ``w_k cos`` and ``-w_k sin`` (``w`` 1 at ``k = 0`` and
  at ``n / 2``, 2 between: the Hermitian half that is not stored), as pocketfft's c2r reads the
  ``m = n // 2 + 1`` stored bins and ignores the imaginary parts of bins ``0`` and ``n / 2``.

A transform over several dimensions applies the one-dimensional ones in turn (the real one on the
last dimension of ``dim``, as ATen: ``aten/src/ATen/native/mkl/SpectralOps.cpp``,
``_fft_r2c_mkl`` and ``_fft_c2r_mkl``); the dimension is moved last with ``as_strided`` and
``clone`` and back the same way. The tables are computed once per (kind, length, scale, dtype,
device) on the host in float64, from ``j * k mod n`` (exact ``0``/``±1`` where they are), and
copied to the device (``empty`` + ``copy_``): no value is ever read back. The normalization
(``0`` none, ``1`` ``1/sqrt(n)``, ``2`` ``1/n``, n the product of the signal sizes) is folded into
the last table.

Values: ``O(n)`` multiply-adds per output instead of the FFT's ``O(log n)``, so the result differs
from the CPU's by float accumulation order: within ``2 * sqrt(n) * eps * ||x||`` (tested), exact
where the products are (integers, powers of two). Refusals are the CPU's: a dtype or a size the
CPU kernel refuses is asked of the CPU kernel on an expanded one-element tensor of the same shape,
which raises its exception and message. Gradients: the dispatcher's formulas
(``derivatives.yaml``) call these ops again, which land here.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, FrozenSet, List, Sequence, Tuple

import torch
from torch import Tensor

from ascend_env.kernels.outputs import resize_output

__all__ = [
    "KERNELS",
    "NATIVE_OPS",
    "fft_c2c",
    "fft_c2c_out",
    "fft_c2r",
    "fft_c2r_out",
    "fft_r2c",
    "fft_r2c_out",
]

#: Every aten op the kernels dispatch; each is in the ``supported:`` op lists of every torch_npu
#: release from 2.1 on.
NATIVE_OPS: FrozenSet[str] = frozenset(
    {
        "as_strided",
        "clone",
        "copy_",
        "empty.memory_format",
        "mm",
        "resize_",
        "view",
        "view_as_complex",
        "view_as_real",
    }
)

_REAL = (torch.float32, torch.float64)
_COMPLEX = {torch.complex64: torch.float32, torch.complex128: torch.float64}
_TABLES: Dict[Tuple[object, ...], Tensor] = {}
_KEPT = 16  # tables kept per process: an STFT and its inverse need two or three


def _cos_sin(n: int, rows: int, cols: int) -> Tuple[Tensor, Tensor]:
    """cos and sin of ``2 pi j k / n`` for ``j < rows``, ``k < cols``, float64 on the host."""
    j = torch.arange(rows, dtype=torch.int64).view(rows, 1)
    k = torch.arange(cols, dtype=torch.int64).view(1, cols)
    r = (j * k) % n
    angle = r.to(torch.float64) * (2 * math.pi / n)
    cos, sin = torch.cos(angle), torch.sin(angle)
    cos[(4 * r) % n == 0] = torch.round(cos[(4 * r) % n == 0])  # 0, +-1 exactly on the axes
    sin[(4 * r) % n == 0] = torch.round(sin[(4 * r) % n == 0])
    return cos, sin


def _host(kind: str, n: int, m: int, sign: int, scale: float) -> Tensor:
    """The real matrix of one transform (see the module docstring), float64 on the host."""
    if kind == "r2c":  # (n, 2m): X_k = sum x_j (cos - i sin)
        cos, sin = _cos_sin(n, n, m)
        host = torch.stack((cos, -sin), -1).reshape(n, 2 * m)
    elif kind == "c2c":  # (2n, 2m): (re + i im)(cos + i s sin)
        cos, sin = _cos_sin(n, n, m)
        top = torch.stack((cos, sign * sin), -1).reshape(n, 2 * m)  # from re
        bottom = torch.stack((-sign * sin, cos), -1).reshape(n, 2 * m)  # from im
        host = torch.stack((top, bottom), 1).reshape(2 * n, 2 * m)
    else:  # c2r, (2m, n): x_j = sum_k w_k (re_k cos - im_k sin)
        cos, sin = _cos_sin(n, m, n)
        weight = torch.full((m, 1), 2.0, dtype=torch.float64)
        weight[0] = 1.0
        if n % 2 == 0:
            weight[m - 1] = 1.0
        host = torch.stack((weight * cos, -weight * sin), 1).reshape(2 * m, n)
    return host * scale


def _table(kind: str, n: int, m: int, sign: int, scale: float, like: Tensor) -> Tensor:
    """:func:`_host`'s table on ``like``'s device in its dtype, uploaded once (``empty`` +
    ``copy_``, no read back) and kept."""
    key = (kind, n, m, sign, scale, like.dtype, like.device)
    table = _TABLES.get(key)
    if table is not None:
        return table
    host = _host(kind, n, m, sign, scale)
    table = torch.empty(tuple(host.shape), dtype=like.dtype, device=like.device).copy_(host)
    if len(_TABLES) >= _KEPT:  # the oldest goes
        del _TABLES[next(iter(_TABLES))]
    _TABLES[key] = table
    return table


def _contiguous_strides(sizes: Sequence[int]) -> List[int]:
    strides: List[int] = []
    step = 1
    for size in reversed(sizes):
        strides.insert(0, step)
        step *= max(size, 1)
    return strides


def _apply(x: Tensor, dim: int, table: Tensor, width_in: int, width_out: int, pair: int) -> Tensor:
    """One transform along ``dim`` of the contiguous real tensor ``x``: ``dim`` moved last (before
    the trailing pair axis when ``pair`` is 2), ``width_in`` of it used, times ``table``, and moved
    back, contiguous. ``pair`` is 2 for the real view of a complex tensor, 1 for a real one."""
    logical = list(x.shape) if pair == 1 else list(x.shape[:-1])
    strides = list(x.stride()) if pair == 1 else list(x.stride()[:-1])
    order = [d for d in range(len(logical)) if d != dim] + [dim]
    sizes = [logical[d] for d in order]
    sizes[-1] = width_in
    moved_strides = [strides[d] for d in order]
    if pair == 2:
        sizes, moved_strides = sizes + [2], moved_strides + [1]
    if order != list(range(len(logical))) or width_in != logical[dim]:
        moved = torch.as_strided(x, sizes, moved_strides, x.storage_offset())
        x = torch.clone(moved, memory_format=torch.contiguous_format)
    rows = 1
    for size in sizes[:-1] if pair == 1 else sizes[:-2]:
        rows *= size
    product = torch.mm(x.view(rows, width_in * pair), table)
    pair_out = table.shape[1] // width_out
    out_sizes = sizes[:-1] if pair == 1 else sizes[:-2]
    result_sizes = [*out_sizes, width_out] + ([2] if pair_out == 2 else [])
    result = product.view(result_sizes)
    if order == list(range(len(logical))):
        return result
    back = [0] * len(logical)
    for position, d in enumerate(order):
        back[d] = position
    contiguous = _contiguous_strides(result_sizes)
    final_sizes = [result_sizes[back[d]] for d in range(len(logical))]
    final_strides = [contiguous[back[d]] for d in range(len(logical))]
    if pair_out == 2:
        final_sizes, final_strides = final_sizes + [2], final_strides + [1]
    return torch.clone(
        torch.as_strided(result, final_sizes, final_strides, 0), memory_format=torch.contiguous_format
    )


def _scale(normalization: int, sizes: Sequence[int]) -> float:
    n = 1
    for size in sizes:
        n *= size
    if normalization == 1:
        return 1.0 / math.sqrt(n) if n else 1.0
    if normalization == 2:
        return 1.0 / n if n else 1.0
    return 1.0


def _refuse(op: Callable[..., Tensor], self: Tensor, *args: object) -> None:
    """Ask the CPU kernel on a one-element tensor of ``self``'s dtype, expanded to its shape, and
    let it raise; raise ATen's assertion text where it computes it instead."""
    proxy = torch.zeros((1,) * self.dim(), dtype=self.dtype).expand(tuple(self.shape))
    op(proxy, *args)
    raise RuntimeError(f"{op}: invalid arguments {args} for a tensor of shape {tuple(self.shape)}")


def _resolved(self: Tensor) -> Tensor:
    """``self`` without its lazy conjugate or negative bit (a ``clone`` where set), which
    ``view_as_real`` refuses: the backward of ``ihfft`` and ``x.conj()`` hand such tensors."""
    return torch.resolve_neg(torch.resolve_conj(self)) if self.is_conj() or self.is_neg() else self


def _valid_dims(self: Tensor, dim: Sequence[int]) -> bool:
    return len(dim) > 0 and all(0 <= d < self.dim() for d in dim) and len(set(dim)) == len(dim)


def fft_r2c(self: Tensor, dim: List[int], normalization: int, onesided: bool) -> Tensor:
    """``aten::_fft_r2c``: the real-to-complex transform over ``dim`` (the last one-sided)."""
    if self.dtype not in _REAL or not _valid_dims(self, dim):
        _refuse(torch.ops.aten._fft_r2c.default, self, dim, normalization, onesided)
    last = dim[-1]
    n = self.shape[last]
    m = n // 2 + 1 if onesided else n
    others = list(dim[:-1])
    scale = _scale(normalization, [self.shape[d] for d in dim])
    x = self if self.is_contiguous() else torch.clone(self, memory_format=torch.contiguous_format)
    table = _table("r2c", n, m, -1, 1.0 if others else scale, x)
    y = _apply(x, last, table, n, m, 1)
    for position, d in enumerate(others):
        size = self.shape[d]
        step_scale = scale if position == len(others) - 1 else 1.0
        y = _apply(y, d, _table("c2c", size, size, -1, step_scale, y), size, size, 2)
    return torch.view_as_complex(y)


def fft_c2c(self: Tensor, dim: List[int], normalization: int, forward: bool) -> Tensor:
    """``aten::_fft_c2c``: the complex transform over ``dim``, forward (``e^-i``) or backward."""
    if self.dtype not in _COMPLEX or not _valid_dims(self, dim):
        _refuse(torch.ops.aten._fft_c2c.default, self, dim, normalization, forward)
    sign = -1 if forward else 1
    scale = _scale(normalization, [self.shape[d] for d in dim])
    y = torch.view_as_real(_resolved(self))
    if not y.is_contiguous():
        y = torch.clone(y, memory_format=torch.contiguous_format)
    for position, d in enumerate(reversed(dim)):
        size = self.shape[d]
        step_scale = scale if position == len(dim) - 1 else 1.0
        y = _apply(y, d, _table("c2c", size, size, sign, step_scale, y), size, size, 2)
    if not dim:
        y = torch.clone(y, memory_format=torch.contiguous_format)
    return torch.view_as_complex(y)


def fft_c2r(self: Tensor, dim: List[int], normalization: int, last_dim_size: int) -> Tensor:
    """``aten::_fft_c2r``: the inverse of a one-sided r2c over ``dim``, ``last_dim_size`` long
    on the last one."""
    ok = self.dtype in _COMPLEX and _valid_dims(self, dim) and last_dim_size >= 1
    if not ok or self.shape[dim[-1]] != last_dim_size // 2 + 1:
        _refuse(torch.ops.aten._fft_c2r.default, self, dim, normalization, last_dim_size)
    last = dim[-1]
    m = self.shape[last]
    sizes = [self.shape[d] for d in dim[:-1]] + [last_dim_size]
    scale = _scale(normalization, sizes)
    y = torch.view_as_real(_resolved(self))
    if not y.is_contiguous():
        y = torch.clone(y, memory_format=torch.contiguous_format)
    for d in reversed(dim[:-1]):
        size = self.shape[d]
        y = _apply(y, d, _table("c2c", size, size, 1, 1.0, y), size, size, 2)
    return _apply(y, last, _table("c2r", last_dim_size, m, 1, scale, y), m, last_dim_size, 2)


def fft_r2c_out(self: Tensor, dim: List[int], normalization: int, onesided: bool, *, out: Tensor) -> Tensor:
    """``aten::_fft_r2c.out``: resizes ``out`` as ATen's ``out=`` kernels do and fills it."""
    result = fft_r2c(self, dim, normalization, onesided)
    resize_output(out, tuple(result.shape))
    return out.copy_(result)


def fft_c2c_out(self: Tensor, dim: List[int], normalization: int, forward: bool, *, out: Tensor) -> Tensor:
    """``aten::_fft_c2c.out``."""
    result = fft_c2c(self, dim, normalization, forward)
    resize_output(out, tuple(result.shape))
    return out.copy_(result)


def fft_c2r_out(
    self: Tensor, dim: List[int], normalization: int, last_dim_size: int, *, out: Tensor
) -> Tensor:
    """``aten::_fft_c2r.out``."""
    result = fft_c2r(self, dim, normalization, last_dim_size)
    resize_output(out, tuple(result.shape))
    return out.copy_(result)


#: The kernel by overload, callable as the dispatcher calls one registered with
#: ``torch.library.Library("aten", "IMPL").impl``.
KERNELS: Dict[str, Callable[..., Tensor]] = {
    "_fft_r2c": fft_r2c,
    "_fft_r2c.out": fft_r2c_out,
    "_fft_c2c": fft_c2c,
    "_fft_c2c.out": fft_c2c_out,
    "_fft_c2r": fft_c2r,
    "_fft_c2r.out": fft_c2r_out,
}
