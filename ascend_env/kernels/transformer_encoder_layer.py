"""``_transformer_encoder_layer_fwd`` built only from ops that every torch_npu release runs natively.

``nn.TransformerEncoderLayer`` (and so ``nn.TransformerEncoder``) in eval mode under ``no_grad``
takes its fast path (``torch/nn/modules/transformer.py``: batch-first, relu or gelu, no hooks)
and calls ``torch._transformer_encoder_layer_fwd`` for CPU, CUDA and the PrivateUse1 device; no
torch_npu release registers a kernel for it, so every layer copies its input and weights to the
host and back.

The kernel follows ATen's CPU kernel (``transformer_encoder_layer_forward`` in
``aten/src/ATen/native/transformers/transformer.cpp``, PyTorch v2.1.0): an empty input comes back
as a copy; otherwise layer norm first or last (``native_layer_norm``), self-attention through
:func:`ascend_env.kernels.multi_head_attention.native_multi_head_attention` (called directly, so
that releases without ``_native_multi_head_attention`` need no other fix), the residual
``add_``, then the feed-forward block as ``linear_for_ffn`` computes it: ``addmm`` and the
activation of ``_addmm_activation`` (``relu_``; gelu as ATen's vectorised GeLU kernel computes it,
``x * 0.5 * (1 + erf(x * M_SQRT1_2))``, since ``gelu`` is missing from 26 releases' tables and
``gelu.out`` from the other 26), ``addmm`` again and the second residual. In float32 and float64
the results are bit for bit the CPU's; bfloat16 and float16, whose GeLU kernel rounds once where
the composition rounds per op, within a few ulp. No value is read back to the host.
"""

from __future__ import annotations

from typing import Callable, Dict, FrozenSet, Optional

import torch
from torch import Tensor

from ascend_env.kernels import addmm_activation, multi_head_attention

__all__ = ["KERNELS", "NATIVE_OPS", "transformer_encoder_layer_fwd"]

#: Every aten op the kernel dispatches (the attention's included); each is in the ``supported:``
#: op lists of every torch_npu release from 2.1 on.
NATIVE_OPS: FrozenSet[str] = multi_head_attention.NATIVE_OPS | frozenset(
    {
        "native_layer_norm",
        "add_.Tensor",
        "relu_",
        "erf",
        "clone",
        "copy_",
    }
)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise RuntimeError(message)


def _norm(x: Tensor, embed_dim: int, eps: float, weight: Tensor, bias: Tensor) -> Tensor:
    return torch.native_layer_norm(x, [embed_dim], weight, bias, eps)[0]


def _transposed(weight: Tensor) -> Tensor:
    """``weight.t()`` as an ``as_strided`` view (``t`` is in no release's table)."""
    rows, cols = weight.stride()
    return weight.as_strided((weight.shape[1], weight.shape[0]), (cols, rows), weight.storage_offset())


def _linear_for_ffn(bias: Tensor, mat1: Tensor, mat2: Tensor, use_gelu: Optional[bool]) -> Tensor:
    """ATen's ``linear_for_ffn``: ``addmm`` (``_addmm_activation``: then gelu or relu in place)."""
    batch, length = mat1.shape[0], mat1.shape[1]
    result = torch.addmm(bias, mat1.view(batch * length, mat1.shape[2]), _transposed(mat2))
    if use_gelu is not None:
        result = addmm_activation.gelu_(result) if use_gelu else torch.relu_(result)
    return result.view(batch, length, -1)


def transformer_encoder_layer_fwd(
    src: Tensor,
    embed_dim: int,
    num_heads: int,
    qkv_weight: Tensor,
    qkv_bias: Tensor,
    proj_weight: Tensor,
    proj_bias: Tensor,
    use_gelu: bool,
    norm_first: bool,
    eps: float,
    norm_weight_1: Tensor,
    norm_bias_1: Tensor,
    norm_weight_2: Tensor,
    norm_bias_2: Tensor,
    ffn_weight_1: Tensor,
    ffn_bias_1: Tensor,
    ffn_weight_2: Tensor,
    ffn_bias_2: Tensor,
    mask: Optional[Tensor] = None,
    mask_type: Optional[int] = None,
) -> Tensor:
    """``aten::_transformer_encoder_layer_fwd``."""
    if src.numel() == 0:
        return torch.clone(src)
    x = src
    if norm_first:
        x = _norm(x, embed_dim, eps, norm_weight_1, norm_bias_1)
    x = multi_head_attention.native_multi_head_attention(
        x,
        x,
        x,
        embed_dim,
        num_heads,
        qkv_weight,
        qkv_bias,
        proj_weight,
        proj_bias,
        mask,
        False,
        True,
        mask_type,
    )[0]
    x.add_(src)
    if not norm_first:
        x = _norm(x, embed_dim, eps, norm_weight_1, norm_bias_1)
    residual = x
    if norm_first:
        x = _norm(x, embed_dim, eps, norm_weight_2, norm_bias_2)
    _check(x.dim() == 3, "batched input size should be 3")
    _check(ffn_weight_1.dim() == 2, "2d weights expected")
    _check(ffn_weight_2.dim() == 2, "2d weights expected")
    x = _linear_for_ffn(ffn_bias_1, x, ffn_weight_1, use_gelu)
    x = _linear_for_ffn(ffn_bias_2, x, ffn_weight_2, None)
    x.add_(residual)
    if not norm_first:
        x = _norm(x, embed_dim, eps, norm_weight_2, norm_bias_2)
    return x


#: The kernel by overload, callable as the dispatcher calls one registered with
#: ``torch.library.Library("aten", "IMPL").impl``.
KERNELS: Dict[str, Callable[..., Tensor]] = {"_transformer_encoder_layer_fwd": transformer_encoder_layer_fwd}
