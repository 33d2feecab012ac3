"""``torch.npu.Stream``, ``Event`` and the current stream on the simulated NPU (torch_npu's
``torch_npu/npu/streams.py``). Kernels run synchronously on the CPU, so every stream is always idle
and an event's ``elapsed_time`` is host time between its two ``record()`` calls.
"""

from __future__ import annotations

import time
import types
from typing import Any, List, Optional, Tuple

from ascend_env.sim.device_index import set_device

__all__ = ["Event", "Stream", "current_stream", "default_stream", "set_stream", "stream"]


def _torch() -> types.ModuleType:
    import torch

    return torch


def _stream_bases() -> Tuple[type, type]:
    """The classes torch's dynamo wants device streams and events to derive from, where it checks
    (torch 2.2 to 2.4: the abstract ``torch._streambase._StreamBase`` / ``_EventBase``, asserted when
    ``torch._dynamo`` imports once ``transfer_to_npu`` made ``torch.cuda.Stream`` this class); newer
    torch keeps those names only as deprecated aliases of ``torch.Stream`` / ``torch.Event``."""
    try:
        from torch import _streambase
    except ImportError:  # torch 2.1
        return object, object
    torch = _torch()
    stream_base, event_base = _streambase._StreamBase, _streambase._EventBase
    if hasattr(torch, "Stream") and issubclass(stream_base, torch.Stream):
        return object, object
    return stream_base, event_base


_STREAM_BASE, _EVENT_BASE = _stream_bases()


class Stream(_STREAM_BASE):  # type: ignore[misc, valid-type]
    """An NPU stream. Kernels run synchronously, so every stream is always idle."""

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __init__(self, device: Optional[Any] = None, priority: int = 0, **kwargs: Any) -> None:
        set_device(device)
        self.priority = priority

    @property
    def device(self) -> Any:
        return _torch().device("npu", 0)

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        """Nothing to wait for."""

    def wait_event(self, event: Event) -> None:
        """Nothing to wait for."""

    def wait_stream(self, stream: Stream) -> None:
        """Nothing to wait for."""

    def record_event(self, event: Optional[Event] = None) -> Event:
        event = Event() if event is None else event
        event.record(self)
        return event

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class Event(_EVENT_BASE):  # type: ignore[misc, valid-type]
    """An NPU event; ``elapsed_time`` measures host time between two ``record()`` calls."""

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> None:
        self.enable_timing = enable_timing
        self._recorded: Optional[float] = None

    def record(self, stream: Optional[Stream] = None) -> None:
        self._recorded = time.perf_counter()

    def wait(self, stream: Optional[Stream] = None) -> None:
        """Nothing to wait for."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        """Nothing to wait for."""

    def elapsed_time(self, end_event: Event) -> float:
        if self._recorded is None or end_event._recorded is None:
            raise RuntimeError("both events must be recorded before calculating elapsed time.")
        return (end_event._recorded - self._recorded) * 1000.0


_DEFAULT_STREAM = Stream()
_stream_now: List[Stream] = [_DEFAULT_STREAM]


def current_stream(device: Optional[Any] = None) -> Stream:
    return _stream_now[-1]


def default_stream(device: Optional[Any] = None) -> Stream:
    return _DEFAULT_STREAM


def set_stream(stream: Optional[Stream]) -> None:
    if stream is not None:
        _stream_now[-1] = stream


class stream:  # noqa: N801 - torch.cuda.stream's name
    """``with torch.npu.stream(s):`` makes ``s`` the current stream inside."""

    def __init__(self, stream: Optional[Stream]) -> None:
        self._stream = stream

    def __enter__(self) -> Optional[Stream]:
        _stream_now.append(self._stream or _stream_now[-1])
        return self._stream

    def __exit__(self, *exc: object) -> None:
        _stream_now.pop()
