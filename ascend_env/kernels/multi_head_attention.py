"""``_native_multi_head_attention`` built only from ops that every torch_npu release runs natively.

``nn.MultiheadAttention`` in eval mode under ``no_grad`` (batch-first, no dropout, the fast-path
conditions of ``torch/nn/modules/activation.py``) calls ``torch._native_multi_head_attention``
for CPU, CUDA and the PrivateUse1 device alike; torch_npu 2.1.0.post3 to 2.5.1 register no kernel
for it, so every such call (torchvision's ViT, open_clip, DETR) copies its inputs to the host.

The kernel follows ATen's CPU kernel step by step (``native_multi_head_attention_cpu`` in
``aten/src/ATen/native/transformers/attention.cpp``, PyTorch v2.1.0): the same checks and
messages, the input projection as ``qkv_projection`` does it (one ``matmul`` for self-attention,
two or three and a ``cat`` otherwise), ``_transform_bias_rescale_qkv`` as ``add`` + ``mul`` by
the same rounded ``1 / sqrt(dim_per_head)`` (that op and ``_masked_softmax`` are missing from the
same releases), ``bmm`` of ``q`` and ``k^T``, ``_softmax`` over the last dimension, ``bmm`` with
``v``, the 0213 transpose and ``linear`` with the output projection, then the head average of the
weights (``sum`` and ``div_``). Without a mask every step is the op the CPU kernel calls, so the
results are bit for bit the CPU's. With a mask the CPU's ``_masked_softmax`` runs a scalar loop
(``std::exp``) where ``_softmax`` is vectorised: here the mask fills ``-inf`` before ``_softmax``
(a row with every key masked gives NaN, as there), equal within a few ulp.
No value is read back to the host.
"""

from __future__ import annotations

import math
import struct
from typing import Callable, Dict, FrozenSet, Optional, Tuple

import torch
from torch import Tensor

__all__ = ["KERNELS", "NATIVE_OPS", "native_multi_head_attention"]

#: Every aten op the kernel dispatches; each is in the ``supported:`` op lists of every torch_npu
#: release from 2.1 on. The transposes, splits and permutes are ``as_strided`` views and the casts
#: ``empty`` + ``copy_``: ``t``, ``permute``, ``split`` and ``_to_copy`` are missing from tables.
NATIVE_OPS: FrozenSet[str] = frozenset(
    {
        "_softmax",
        "add.Tensor",
        "addmm",
        "as_strided",
        "bmm",
        "cat",
        "clone",
        "copy_",
        "div_.Tensor",
        "empty.memory_format",
        "empty_like",
        "masked_fill_.Scalar",
        "mm",
        "mul.Tensor",
        "sum.dim_IntList",
        "view",
    }
)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise RuntimeError(message)


def _inv_sqrt(dim_per_head: int, dtype: torch.dtype) -> float:
    """``1.0 / std::sqrt(static_cast<scalar_t>(dim_per_head))`` cast to ``scalar_t``, as ATen's
    ``transform_bias_rescale_qkv_cpu`` computes it (the square root in float for float, half and
    bfloat16, in double for double), from the shape only."""
    if dtype == torch.float64:
        return 1.0 / math.sqrt(dim_per_head)
    root = _round(math.sqrt(_round(float(dim_per_head), "f")), "f")  # float's sqrt, correctly rounded
    if dtype == torch.float16:
        return _round(1.0 / root, "e")
    if dtype == torch.bfloat16:  # float32's bits, rounded to the upper 16 to nearest even
        bits = struct.unpack("<I", struct.pack("<f", 1.0 / root))[0]
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return float(struct.unpack("<f", struct.pack("<I", bits))[0])
    return _round(1.0 / root, "f")


def _round(value: float, code: str) -> float:
    """``value`` rounded to float32 (``"f"``) or float16 (``"e"``)."""
    return float(struct.unpack(code, struct.pack(code, value))[0])


def _reduced_in_float() -> bool:
    """Whether this torch's ``_transform_bias_rescale_qkv`` computes half and bfloat16 in float
    (torch 2.13; torch 2.1 rounds the sum, then the product): asked of the CPU once, at import."""
    qkv = torch.tensor([[[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]], dtype=torch.bfloat16) * 1.0078125
    bias = torch.tensor([0.00390625, 0.0, 0.0, 0.0, 0.0, 0.0], dtype=torch.bfloat16)
    q = torch._transform_bias_rescale_qkv(qkv, bias, 1)[0]
    inv = _inv_sqrt(2, torch.float32)
    wanted = ((qkv[..., :2].float() + bias[:2].float()) * inv).to(torch.bfloat16)
    return bool(torch.equal(q.reshape(-1), wanted.reshape(-1)))


_REDUCED_IN_FLOAT = _reduced_in_float()


def _rows(weight: Tensor, start: int, count: int) -> Tensor:
    """``weight[start:start + count].t()`` as one ``as_strided`` view (``t``, ``split`` and
    ``chunk`` are in no release's table; ``as_strided`` is in all)."""
    rows, cols = weight.stride()
    return weight.as_strided((weight.shape[1], count), (cols, rows), weight.storage_offset() + start * rows)


def _matrix(x: Tensor) -> Tensor:
    """``[B, T, D]`` as ``[B * T, D]``, as ``matmul``'s ``reshape`` folds it."""
    if not x.is_contiguous():
        x = torch.clone(x, memory_format=torch.contiguous_format)
    return x.view(x.shape[0] * x.shape[1], x.shape[2])


def _projection(query: Tensor, key: Tensor, value: Tensor, embed_dim: int, weight: Tensor) -> Tensor:
    """ATen's ``qkv_projection`` (``gemm_nt``: ``matmul`` with the weight transposed), ``[B * T, 3 * D]``."""
    D = embed_dim
    if key is value:
        if query is key:
            return torch.mm(_matrix(query), _rows(weight, 0, 3 * D))
        return torch.cat(
            (torch.mm(_matrix(query), _rows(weight, 0, D)), torch.mm(_matrix(key), _rows(weight, D, 2 * D))),
            1,
        )
    parts = [torch.mm(_matrix(x), _rows(weight, i * D, D)) for i, x in enumerate((query, key, value))]
    return torch.cat(parts, 1)


def _cast(x: Tensor, dtype: torch.dtype) -> Tensor:
    """``x.to(dtype)`` as ``empty`` + ``copy_`` (``_to_copy`` is missing from 2.1.0.post3 to 2.5.1)."""
    return torch.empty(x.shape, dtype=dtype, device=x.device).copy_(x)


def _mask_for(scores: Tensor, mask: Tensor, mask_type: Optional[int]) -> Tensor:
    """The mask as ``_masked_softmax`` (``masked_softmax_cpu``, ``aten/src/ATen/native/SoftMax.cpp``)
    reads it against ``scores`` ``[B, H, T, S]``: checked, then a view that broadcasts."""
    if mask.dim() != 2 or scores.dim() != 4:
        mask_type = 2
    sizes = tuple(scores.shape)
    if mask_type == 2:
        _check(sizes == tuple(mask.shape), "For mask_type == 2 mask shape should match input shape")
        return mask
    if mask_type == 1:
        _check(
            sizes[0] == mask.shape[0] and sizes[2] == mask.shape[1],
            "For mask_type == 1 mask shape should be (B, L)",
        )
        return mask.view(sizes[0], 1, 1, mask.shape[1])
    if mask_type == 0:
        _check(
            sizes[2] == mask.shape[0] and sizes[2] == mask.shape[1],
            "For mask_type == 0 mask shape should be (L, L)",
        )
        return mask
    _check(sizes == tuple(mask.shape), "Mask shape should match input shape")
    return mask


def native_multi_head_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    embed_dim: int,
    num_head: int,
    qkv_weight: Tensor,
    qkv_bias: Tensor,
    proj_weight: Tensor,
    proj_bias: Tensor,
    mask: Optional[Tensor] = None,
    need_weights: bool = True,
    average_attn_weights: bool = True,
    mask_type: Optional[int] = None,
) -> Tuple[Tensor, Optional[Tensor]]:
    """``aten::_native_multi_head_attention``."""
    D = embed_dim
    _check(query.dim() == 3, f"expected 3-D `query`, got {query.dim()}-D tensor")
    _check(query.shape[2] == D, f"passed-in embed_dim {D} didn't match last dim of query {query.shape[2]}")
    _check(key.dim() == 3, f"expected 3-D `key`, got {key.dim()}-D tensor")
    _check(value.dim() == 3, f"expected 3-D `value`, got {value.dim()}-D tensor")
    _check(query.shape == key.shape == value.shape, "expected `query`/`key`/`value` shapes to match")
    _check(qkv_weight.dim() == 2, f"expected 2-D `qkv_weight`, got {qkv_weight.dim()}-D tensor")
    _check(D * 3 == qkv_weight.shape[0], "expected `qkv_weight` first dim to be 3x embed_dim")
    _check(D == qkv_weight.shape[1], "expected `qkv_weight` second dim to be embed_Dim")
    _check(qkv_bias.dim() == 1, f"expected 1-D `qkv_bias`, got {qkv_bias.dim()}-D tensor")
    _check(qkv_bias.shape[0] == 3 * D, "expected `qkv_bias` first dim and first dim of query to be equal")
    _check(D % num_head == 0, "`embed_dim` must divide evenly by `num_heads`")

    if query.numel() == 0:  # the projection is empty too
        return torch.empty_like(query), None
    B, T = query.shape[0], query.shape[1]
    qkv = _projection(query, key, value, D, qkv_weight)
    dim_per_head = D // num_head
    heads = B * num_head
    # _transform_bias_rescale_qkv: q = (q + q_bias) * inv_sqrt, k + k_bias, v + v_bias, each
    # [B, num_head, T, dim_per_head], contiguous slices of one [3, B, num_head, T, dim] buffer.
    dtype = qkv.dtype
    in_float = dtype in (torch.float16, torch.bfloat16) and _REDUCED_IN_FLOAT
    if in_float:
        qkv, bias = _cast(qkv, torch.float32), _cast(qkv_bias, torch.float32)
    else:
        bias = qkv_bias
    biased = torch.add(qkv.view(B, T, 3, num_head, dim_per_head), bias.view(3, num_head, dim_per_head))
    s = biased.stride()  # contiguous: the permute (2, 0, 3, 1, 4), then contiguous()
    packed = torch.clone(
        biased.as_strided((3, B, num_head, T, dim_per_head), (s[2], s[0], s[3], s[1], s[4])),
        memory_format=torch.contiguous_format,
    )
    size = heads * T * dim_per_head
    q, k, v = (
        packed.as_strided((heads, T, dim_per_head), (T * dim_per_head, dim_per_head, 1), i * size)
        for i in range(3)
    )
    q = torch.mul(q, _inv_sqrt(dim_per_head, q.dtype))
    if in_float:
        q, k, v = _cast(q, dtype), _cast(k, dtype), _cast(v, dtype)
    # bmm_nt, the softmax of masked_softmax, bmm_nn
    scores = torch.bmm(
        q, k.as_strided((heads, dim_per_head, T), (T * dim_per_head, 1, dim_per_head), k.storage_offset())
    )
    scores = scores.view(B, num_head, T, T)
    if mask is not None:
        if mask.dtype != torch.bool:
            mask = _cast(mask, torch.bool)
        scores.masked_fill_(_mask_for(scores, mask, mask_type), float("-inf"))
    weights = torch._softmax(scores, -1, False)
    context = torch.bmm(weights.view(heads, T, T), v)
    # transform0213_gemm_nt_bias: [B, H, T, dh] -> [B, T, H, dh], contiguous, then linear (addmm)
    context = torch.clone(
        context.as_strided(
            (B, T, num_head, dim_per_head), (num_head * T * dim_per_head, dim_per_head, T * dim_per_head, 1)
        ),
        memory_format=torch.contiguous_format,
    ).view(B * T, D)
    proj = torch.addmm(proj_bias, context, _rows(proj_weight, 0, proj_weight.shape[0])).view(B, T, -1)
    if not need_weights:
        return proj, None
    if average_attn_weights:
        weights = torch.sum(weights, 1).div_(num_head)
    return proj, weights


#: The kernel by overload, callable as the dispatcher calls one registered with
#: ``torch.library.Library("aten", "IMPL").impl``.
KERNELS: Dict[str, Callable[..., Tuple[Tensor, Optional[Tensor]]]] = {
    "_native_multi_head_attention": native_multi_head_attention
}
