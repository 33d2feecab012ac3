"""The cases of ``bench/kernels.py`` for the kernels of torch.nn's fused paths
(``ascend_env/kernels/registry/nn.py``): label, the kernel's call, the native op's call."""

from __future__ import annotations

from typing import Any, Callable, List, Tuple

import torch

from ascend_env.kernels import multi_head_attention

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


def cases(device: str) -> List[Case]:
    return [
        _attention(device, 8, 197, 192, 3, False),  # ViT-Tiny/16 on 224x224
        _attention(device, 2, 50, 768, 12, True),  # CLIP ViT-B/32, weights averaged
    ]
