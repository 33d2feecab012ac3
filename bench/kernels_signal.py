"""The cases of ``bench/kernels.py`` for the kernels of the signal and image ops
(``ascend_env/kernels/registry/signal.py``): label, the kernel's call, the native op's call."""

from __future__ import annotations

from typing import Any, Callable, List, Tuple

Case = Tuple[str, Callable[[], Any], Callable[[], Any]]


def cases(device: str) -> List[Case]:
    return []
