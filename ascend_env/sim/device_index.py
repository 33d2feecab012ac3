"""The simulated NPU's one device, ``npu:0``: a device argument read as torch_npu reads it, and
any other index refused."""

from __future__ import annotations

from typing import Any

__all__ = ["index_of", "set_device"]


def index_of(device: Any) -> int:
    index = getattr(device, "index", device)
    if isinstance(device, str):
        index = int(device.split(":", 1)[1]) if ":" in device else 0
    return 0 if index is None else int(index)


def set_device(device: Any) -> None:
    if index_of(device) != 0:
        raise RuntimeError(f"the simulated NPU has one device, npu:0; got {device!r}")
