"""The cases of ``bench/kernels.py`` for the kernels of torch.nn's fused paths
(``ascend_env/kernels/registry/nn.py``): label, the kernel's call, the native op's call."""

from __future__ import annotations

from typing import Any, Callable, List, Tuple

Case = Tuple[str, Callable[[], Any], Callable[[], Any]]


def cases(device: str) -> List[Case]:
    return []
