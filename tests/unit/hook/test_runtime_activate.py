"""What the runtime hook records when it registers kernels: each failure, and never an exception."""

from __future__ import annotations

import sys
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
    from ascend_env.kernels import registry

    monkeypatch.setattr(registry, "FIXES", (registry.ISIN, registry.POLAR))  # the fixes these tests name
    events: List[str] = []

    def has_kernel(op: str, key: str) -> bool:
        namespace, _, op = op.partition("::")
        assert namespace == "aten"
        if key == "CompositeImplicitAutograd":
            return False
        assert key == "PrivateUse1"
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
    record.libraries["aten"] = _Library(events)
    return events


def test_each_failure_is_recorded_and_the_other_fixes_go_on(record, events):
    from ascend_env.kernels.registry import kernels

    registered = ["isin.Tensor_Tensor", "isin.Tensor_Scalar_out", "polar", "polar.out"]
    assert runtime.activate("torch_npu") == registered
    assert record.registered == registered
    assert record.libraries["aten"].impls == [(op, kernels()[op], "PrivateUse1") for op in record.registered]
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
    runtime.activate("torch_npu")
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


def test_only_the_modules_of_the_fixes_needed_are_imported(record, events, monkeypatch):
    from ascend_env.kernels import registry

    asked: List[str] = []
    real = registry.kernels

    def kernels(fixes: Any) -> Any:
        fixes = list(fixes)
        asked.extend(fix.module for fix in fixes)
        return real(fixes)

    monkeypatch.setattr(registry, "kernels", kernels)
    record.registered.extend(["polar", "polar.out"])  # as if native: polar needs nothing
    runtime.activate("torch_npu")
    assert asked == ["ascend_env.kernels.isin"]


def test_an_op_that_pytorch_decomposes_is_never_registered(record, events, monkeypatch):
    real = runtime.has_kernel

    def has_kernel(op: str, key: str) -> bool:
        if key == "CompositeImplicitAutograd":
            return op == "aten::polar"
        return real(op, key)

    monkeypatch.setattr(runtime, "has_kernel", has_kernel)
    registered = runtime.activate("torch_npu")
    assert "polar" not in registered and "polar.out" in registered
    assert (
        "polar: ValueError: aten::polar is decomposed by PyTorch; a kernel would override it" in record.errors
    )


def _vision_fix(registered_by: Tuple[str, ...]) -> Any:
    from ascend_env.kernels import registry

    return registry.Fix(
        name="vision",
        module="ascend_env_test_vision_kernels",
        overloads=(registry.Overload("nms", (">=0",)),),
        reason="test",
        upstream="test",
        namespace="ascend_env_test_vision",
        dispatch_key="PrivateUse1",
        requires="ascend_env_test_vision",
        registered_by=registered_by,
        host_reads=(),
        smoke=(),
        generation=False,
    )


@pytest.fixture
def vision(monkeypatch, record, events):
    """A registry of one fix whose op exists once ``ascend_env_test_vision`` is imported."""
    import types

    from ascend_env.kernels import registry

    kernels = types.ModuleType("ascend_env_test_vision_kernels")
    kernels.KERNELS = {"nms": lambda *args: None}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, kernels.__name__, kernels)
    monkeypatch.delitem(sys.modules, "ascend_env_test_vision", raising=False)
    libraries: List[Tuple[str, List[Tuple[str, Any, str]]]] = []

    def library(namespace: str) -> Any:
        made = record.libraries.setdefault(namespace, _Library(events))
        libraries.append((namespace, made.impls))
        return made

    monkeypatch.setattr(runtime, "_library", library)
    monkeypatch.setattr(runtime, "has_kernel", lambda op, key: False)
    return registry, libraries


def test_a_fix_waits_for_the_import_that_defines_its_op(vision, record, monkeypatch):
    registry, libraries = vision
    monkeypatch.setattr(registry, "FIXES", (_vision_fix(()),))
    assert runtime.activate("torch_npu") == [] and runtime.awaited_imports() == ["ascend_env_test_vision"]
    monkeypatch.setitem(sys.modules, "ascend_env_test_vision", types_module("ascend_env_test_vision"))
    assert runtime.awaited_imports() == []
    assert runtime.activate("ascend_env_test_vision") == ["nms"]
    assert libraries[-1][0] == "ascend_env_test_vision"
    assert libraries[-1][1] == [
        ("nms", sys.modules["ascend_env_test_vision_kernels"].KERNELS["nms"], "PrivateUse1")
    ]


def test_a_fix_is_left_to_a_package_that_registers_the_op(vision, record, monkeypatch):
    registry, libraries = vision
    monkeypatch.setattr(registry, "FIXES", (_vision_fix(("json",)),))  # "json": installed everywhere
    monkeypatch.setitem(sys.modules, "ascend_env_test_vision", types_module("ascend_env_test_vision"))
    assert runtime.activate("ascend_env_test_vision") == []
    assert libraries == [] and record.native == ["nms"]
    monkeypatch.setattr(registry, "FIXES", (_vision_fix(("ascend_env_no_such_package",)),))
    assert runtime.activate("ascend_env_test_vision") == ["nms"]


def types_module(name: str) -> Any:
    import types

    return types.ModuleType(name)
