"""``torch.npu``'s memory queries on the simulated NPU: the bytes npu tensors hold now and at
their peak, as the C++ backend counts them, on a card of :data:`TOTAL_MEMORY` bytes. Freed memory
goes back to the host at once, so nothing is cached.
"""

from __future__ import annotations

import types
from typing import Any, Dict, Optional, Tuple

__all__ = [
    "TOTAL_MEMORY",
    "empty_cache",
    "max_memory_allocated",
    "max_memory_cached",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_cached",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_max_memory_allocated",
    "reset_max_memory_cached",
    "reset_peak_memory_stats",
]

# The device memory the simulated card reports (an Ascend910B1's 64 GiB of HBM).
TOTAL_MEMORY = 64 * 1024**3


def _torch() -> types.ModuleType:
    import torch

    return torch


def _counts() -> Tuple[int, int]:
    allocated, peak = _torch().ops.ascend_sim.memory_stats()
    return int(allocated), int(peak)


def memory_allocated(device: Optional[Any] = None) -> int:
    """Bytes held by npu tensors now."""
    return _counts()[0]


def max_memory_allocated(device: Optional[Any] = None) -> int:
    """The most bytes npu tensors held since start or the last ``reset_peak_memory_stats``."""
    return _counts()[1]


# Freed memory goes back to the host at once: nothing is cached, reserved equals allocated.
memory_reserved = memory_cached = memory_allocated
max_memory_reserved = max_memory_cached = max_memory_allocated


def reset_peak_memory_stats(device: Optional[Any] = None) -> None:
    _torch().ops.ascend_sim.reset_peak_memory()


reset_max_memory_allocated = reset_max_memory_cached = reset_peak_memory_stats


def empty_cache() -> None:
    """Memory is host memory, freed when tensors die: no cache to empty."""


def mem_get_info(device: Optional[Any] = None) -> Tuple[int, int]:
    """(free bytes, total bytes) of the simulated card."""
    return TOTAL_MEMORY - memory_allocated(), TOTAL_MEMORY


def memory_stats(device: Optional[Any] = None) -> Dict[str, int]:
    allocated, peak = _counts()
    return {
        "allocated_bytes.all.current": allocated,
        "allocated_bytes.all.peak": peak,
        "reserved_bytes.all.current": allocated,
        "reserved_bytes.all.peak": peak,
    }


def memory_summary(device: Optional[Any] = None, abbreviated: bool = False) -> str:
    allocated, peak = _counts()
    return f"simulated NPU memory: {allocated} bytes allocated, peak {peak} bytes (host memory, no cache)\n"
