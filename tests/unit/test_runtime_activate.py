"""What the runtime hook records when it registers kernels: each failure, and never an exception."""

from __future__ import annotations

from typing import Any, List, Tuple

import pytest

from ascend_env.hook import runtime

pytest.importorskip("torch")

BROKEN = "isin.Tensor_Scalar"  # has_kernel fails for it
NATIVE = "isin.Scalar_Tensor_out"  # has a kernel: its fix and that of isin.Scalar_Tensor stay native
TAKEN = "isin.Tensor_Tensor_out"  # registering it fails


class _Library:
    def __init__(self, events: List[str]) -> None:
        self.events = events
        self.impls: List[Tuple[str, Any, str]] = []

    def impl(self, op: str, kernel: Any, key: str) -> None:
        self.events.append(f"impl {op}")
        if op == TAKEN:
            raise ValueError("taken")
        self.impls.append((op, kernel, key))


@pytest.fixture
def events(monkeypatch, record) -> List[str]:
    events: List[str] = []

    def has_kernel(op: str) -> bool:
        events.append(f"has {op}")
        if op == BROKEN:
            raise RuntimeError("no dispatcher")
        return op == NATIVE or op in record.registered

    def drift(stream: Any) -> List[str]:
        raise OSError("gone")

    def guard(source: str) -> Any:
        events.append("guard")
        raise KeyError("soc")

    monkeypatch.setattr(runtime, "has_kernel", has_kernel)
    monkeypatch.setattr(runtime, "warn_on_drift", drift)
    monkeypatch.setattr(runtime, "guard_compile_mode", guard)
    record.library = _Library(events)
    return events


def test_each_failure_is_recorded_and_the_other_fixes_go_on(record, events):
    from ascend_env.kernels.registry import kernels

    registered = ["isin.Tensor_Tensor", "isin.Tensor_Scalar_out", "polar", "polar.out"]
    assert runtime.activate("ascend_env.sim") == registered
    assert record.registered == registered
    assert record.library.impls == [(op, kernels()[op], "PrivateUse1") for op in record.registered]
    assert record.native == ["isin.Scalar_Tensor", "isin.Scalar_Tensor_out"]
    assert record.errors == [
        "isin.Tensor_Scalar: RuntimeError: no dispatcher",
        "isin.Tensor_Tensor_out: ValueError: taken",
        "drift check: OSError: gone",
    ]
    assert record.compile_guard == {
        "apply": False,
        "applied": False,
        "reason": "failed",
        "error": "KeyError: 'soc'",
    }
    # Every fix is decided before any is registered.
    first_impl = events.index("impl isin.Tensor_Tensor")
    assert all(event.startswith("has ") for event in events[:first_impl])
    assert not any(event.startswith("has ") for event in events[first_impl:])


def test_a_second_backend_registers_only_what_is_still_missing(record, events):
    runtime.activate("ascend_env.sim")
    events.clear()
    record.errors.clear()
    assert runtime.activate("torch_npu") == []
    assert "guard" not in events  # the guard runs once per process
    assert [event for event in events if event.startswith("impl")] == ["impl isin.Tensor_Tensor_out"]
    assert record.registered == ["isin.Tensor_Tensor", "isin.Tensor_Scalar_out", "polar", "polar.out"]
    assert record.native == ["isin.Scalar_Tensor", "isin.Scalar_Tensor_out"]
    assert record.errors == [
        "isin.Tensor_Scalar: RuntimeError: no dispatcher",
        "isin.Tensor_Tensor_out: ValueError: taken",
        "drift check: OSError: gone",
    ]
