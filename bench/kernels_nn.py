"""The cases of ``bench/kernels.py`` for the kernels of torch.nn's fused paths
(``ascend_env/kernels/registry/nn.py``): label, the kernel's call, the native op's call."""

from __future__ import annotations

from typing import Any, Callable, List, Tuple

import torch

from ascend_env.kernels import (
    addmm_activation,
    fused_adamw,
    multi_head_attention,
    scatter_reduce,
    transformer_encoder_layer,
)

Case = Tuple[str, Callable[[], Any], Callable[[], Any]]


def _attention(device: str, batch: int, length: int, dim: int, heads: int, need: bool) -> Case:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch, length, dim, generator=generator).to(device)
    weights = [
        torch.randn(*size, generator=generator).to(device)
        for size in ((3 * dim, dim), (3 * dim,), (dim, dim), (dim,))
    ]
    args = (x, x, x, dim, heads, *weights, None, need)
    return (
        f"_native_multi_head_attention B={batch} T={length} D={dim} H={heads} need_weights={need}",
        lambda: multi_head_attention.native_multi_head_attention(*args),
        lambda: torch._native_multi_head_attention(*args),
    )


def _encoder_layer(device: str, batch: int, length: int, dim: int, heads: int, activation: str) -> Case:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(dim, heads, 4 * dim, activation=activation, batch_first=True)
    layer = layer.eval().to(device)
    attention = layer.self_attn
    args = (
        torch.randn(batch, length, dim).to(device),
        dim,
        heads,
        attention.in_proj_weight.detach(),
        attention.in_proj_bias.detach(),
        attention.out_proj.weight.detach(),
        attention.out_proj.bias.detach(),
        activation == "gelu",
        False,
        layer.norm1.eps,
        *(p.detach() for p in (layer.norm1.weight, layer.norm1.bias, layer.norm2.weight, layer.norm2.bias)),
        *(
            p.detach()
            for p in (layer.linear1.weight, layer.linear1.bias, layer.linear2.weight, layer.linear2.bias)
        ),
    )
    return (
        f"_transformer_encoder_layer_fwd B={batch} T={length} D={dim} {activation}",
        lambda: transformer_encoder_layer.transformer_encoder_layer_fwd(*args),
        lambda: torch._transformer_encoder_layer_fwd(*args),
    )


def _scatter(device: str, nodes: int, edges: int, features: int, reduce: str) -> Case:
    generator = torch.Generator().manual_seed(0)
    messages = torch.randn(edges, features, generator=generator).to(device)
    index = torch.randint(0, nodes, (edges, 1), generator=generator).expand(edges, features).to(device)
    start = torch.zeros(nodes, features).to(device)
    return (
        f"scatter_reduce {reduce} {edges} edges -> {nodes} nodes x {features}",
        lambda: scatter_reduce.scatter_reduce_two(start, 0, index, messages, reduce, include_self=False),
        lambda: torch.scatter_reduce(start, 0, index, messages, reduce, include_self=False),
    )


def _addmm(device: str, rows: int, inner: int, cols: int, use_gelu: bool) -> Case:
    generator = torch.Generator().manual_seed(0)
    bias, mat1, mat2 = (
        torch.randn(*size, generator=generator).to(device) for size in ((cols,), (rows, inner), (inner, cols))
    )
    return (
        f"_addmm_activation {rows}x{inner} @ {inner}x{cols} {'gelu' if use_gelu else 'relu'}",
        lambda: addmm_activation.addmm_activation(bias, mat1, mat2, use_gelu=use_gelu),
        lambda: torch._addmm_activation(bias, mat1, mat2, use_gelu=use_gelu),
    )


def _adamw(device: str, sizes: List[int]) -> Case:
    generator = torch.Generator().manual_seed(0)
    params = [torch.randn(n, generator=generator).to(device) for n in sizes]
    grads = [torch.randn(n, generator=generator).to(device) for n in sizes]
    moments = [[torch.zeros_like(p) for p in params] for _ in range(2)]
    steps = [torch.tensor(1.0, device=device) for _ in params]
    kwargs = dict(lr=1e-3, beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8, amsgrad=False, maximize=False)
    return (
        f"_fused_adamw_ {len(sizes)} tensors, {sum(sizes)} elements",
        lambda: fused_adamw.fused_adamw_(params, grads, *moments, [], steps, **kwargs),
        lambda: torch._fused_adamw_(params, grads, *moments, [], steps, **kwargs),
    )


def cases(device: str) -> List[Case]:
    return [
        _addmm(device, 8 * 197, 192, 768, True),  # ViT-Tiny's MLP
        _addmm(device, 8 * 197, 192, 768, False),
        _scatter(device, 2708, 10556, 64, "sum"),  # Cora-sized message passing
        _scatter(device, 2708, 10556, 64, "mean"),
        _scatter(device, 2708, 10556, 64, "amax"),
        _encoder_layer(device, 8, 128, 256, 8, "relu"),
        _encoder_layer(device, 8, 128, 256, 8, "gelu"),
        _attention(device, 8, 197, 192, 3, False),  # ViT-Tiny/16 on 224x224
        _attention(device, 2, 50, 768, 12, True),  # CLIP ViT-B/32, weights averaged
        _adamw(device, [768 * 768, 768, 3072 * 768, 3072] * 2),  # two BERT-base FFN blocks
    ]
