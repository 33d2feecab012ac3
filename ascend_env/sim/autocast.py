"""Autocast on the simulated NPU: the dtypes it supports, its state (PyTorch's own, for the
PrivateUse1 dispatch key, kept by the C++ backend) and ``torch.npu.amp``'s members.
"""

from __future__ import annotations

import types
from typing import Any, Dict, List

__all__ = [
    "amp_members",
    "get_amp_supported_dtype",
    "get_autocast_dtype",
    "is_autocast_enabled",
    "is_bf16_supported",
    "set_autocast_dtype",
    "set_autocast_enabled",
]


def _torch() -> types.ModuleType:
    import torch

    return torch


def get_amp_supported_dtype() -> List[Any]:
    torch = _torch()
    return [torch.float16, torch.bfloat16]


def is_bf16_supported() -> bool:
    return True


# torch 2.1 to 2.3 ask the device module about autocast (torch.autocast(device_type="npu")); the
# state is PyTorch's own, for the PrivateUse1 dispatch key, kept by the simulator's C++ backend.
def is_autocast_enabled() -> bool:
    return bool(_torch().ops.ascend_sim.autocast_enabled())


def set_autocast_enabled(enabled: bool) -> None:
    _torch().ops.ascend_sim.set_autocast_enabled(bool(enabled))


def get_autocast_dtype() -> Any:
    return _torch().ops.ascend_sim.autocast_dtype().dtype


def set_autocast_dtype(dtype: Any) -> None:
    _torch().ops.ascend_sim.set_autocast_dtype(dtype)


def amp_members() -> Dict[str, Any]:
    import torch

    class autocast(torch.amp.autocast):  # noqa: N801 - torch_npu.npu.amp.autocast
        """``torch.npu.amp.autocast(...)``: ``torch.autocast("npu", ...)``."""

        def __init__(
            self, enabled: bool = True, dtype: Any = torch.float16, cache_enabled: bool = True
        ) -> None:
            super().__init__("npu", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)

    members: Dict[str, Any] = {
        "autocast": autocast,
        "custom_fwd": torch.cuda.amp.custom_fwd,
        "custom_bwd": torch.cuda.amp.custom_bwd,
    }
    scaler = getattr(torch.amp, "GradScaler", None)  # device-generic from torch 2.3
    if scaler is not None:

        class GradScaler(scaler):  # type: ignore[misc, valid-type]
            """``torch.npu.amp.GradScaler``: ``torch.amp.GradScaler("npu", ...)``."""

            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__("npu", *args, **kwargs)

        members["GradScaler"] = GradScaler
    return members
