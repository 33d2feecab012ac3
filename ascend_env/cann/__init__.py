"""The emulated CANN: host-memory libraries under the real torch_npu binary (``runtime.enable``)."""

from __future__ import annotations

__all__: list[str] = []
