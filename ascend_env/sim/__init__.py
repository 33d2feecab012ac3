"""A simulated Ascend NPU that dispatches as torch_npu does, for machines without one.

``enable("2.1.0.post6")`` makes ``npu`` a PyTorch device (``PrivateUse1`` renamed) whose tensors
live in host memory. The ops in that torch_npu release's ``supported:`` lists run silently (their
CPU kernels, on the same memory); every other op reaches a boxed fallback that behaves like
torch_npu's ``npu_cpu_fallback``: it runs the op on the CPU, prints torch_npu's CAUTION line once
per op per process to fd 2 (unless silenced as torch_npu is), and is counted. ``fallbacks()``
returns the counts since the last ``reset()``.

The simulated ``torch_npu`` package (``pkgs/torch_npu``: ``torch_npu.npu``, ``transfer_to_npu``) is
importable once :func:`add_torch_npu_to_path` put it on this process's ``sys.path``. The startup
hook hears of the simulator as it hears of a real torch_npu: when that package is imported (by the
program, or by transformers' and accelerate's availability checks), never by a call from here, so
that a simulated run takes the import path a real one does.

Process-wide state: PyTorch's dispatcher cannot unregister kernels cleanly, so one process holds
at most one table. ``_STATE`` below records it (this module's only global state); the C++ backend
holds the dispatcher registrations, the fallback counts and the set of ops already warned about.
Importing this module does not import torch.
"""

from __future__ import annotations

import atexit
import collections
import importlib
import inspect
import os
import sys
import types
import warnings
from typing import Dict, FrozenSet, List, Optional, cast

from ascend_env.exceptions import EnvironmentProblem, UsageError

__all__ = [
    "DEVICE",
    "add_torch_npu_to_path",
    "enable",
    "enable_ops",
    "enabled_ops",
    "enabled_table",
    "fallbacks",
    "reset",
    "torch_npu_path",
    "unknown_ops",
]

DEVICE = "npu"

# The one table enabled in this process: {"table": label, "ops": frozenset, "unknown": [...]}.
_STATE: Dict[str, object] = {}


def enabled_table() -> Optional[str]:
    """The table the simulator runs in this process (e.g. ``"2.1.0.post6"``), or None."""
    table = _STATE.get("table")
    return str(table) if table is not None else None


def enabled_ops() -> FrozenSet[str]:
    """The ops of the table the simulator runs in this process (empty when it runs none)."""
    return cast(FrozenSet[str], _STATE.get("ops", frozenset()))


def enable(torch_npu: Optional[str] = None) -> None:
    """Make ``npu`` a simulated device with the op table of torch_npu release ``torch_npu``.

    None means the newest known release. Calling it again with the same release does nothing;
    asking for another release in the same process raises ``UsageError``.
    """
    from ascend_env.sim import optables

    version = optables.canonical(torch_npu) if torch_npu is not None else optables.newest()
    if enabled_table() == version:
        return
    enable_ops(version, optables.load(version), optables.has_fallback_disable(version))


def enable_ops(label: str, ops: FrozenSet[str], fallback_disable: bool = False) -> None:
    """Like :func:`enable`, with an explicit op set (e.g. read from an installed torch_npu's YAML).

    ``label`` names the table in ``enabled_table()``; ``fallback_disable`` says whether
    ``TORCH_NPU_FALLBACK_CPU_DISABLE=1`` turns fallbacks into errors.
    """
    current = enabled_table()
    if current == label:
        return
    if current is not None:
        raise UsageError(
            f"the simulated NPU already runs torch_npu {current}'s op table in this process; "
            f"it cannot switch to {label} (PyTorch's dispatcher cannot unregister kernels cleanly).",
            "run each table in its own process (e.g. a subprocess, or 'python -m ascend_env audit')",
        )
    torch = _import_torch()
    _claim_privateuse1(torch)
    from ascend_env.sim import build, device

    build.load(torch)
    torch.ops.ascend_sim.init()
    if torch._C._get_privateuse1_backend_name() != DEVICE:
        torch.utils.rename_privateuse1_backend(DEVICE)
        torch._register_device_module(DEVICE, device)
        _generate_methods(torch)
    unknown = torch.ops.ascend_sim.enable_table(sorted(ops), bool(fallback_disable))
    from ascend_env.sim import references

    references.register(torch)  # after the table: a listed op without a CPU kernel is no decomposition
    _STATE.update(table=label, ops=frozenset(ops), unknown=sorted(unknown))
    from ascend_env.hook import runtime
    from ascend_env.sim import compile_mode

    runtime.register_simulator(compile_mode.HookView())
    _check_autograd_engine(torch)


def torch_npu_path() -> str:
    """The directory holding the simulated ``torch_npu`` package (never on ``sys.path`` by itself)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "pkgs")


def add_torch_npu_to_path() -> None:
    """Make ``import torch_npu`` find the simulated torch_npu in this process (after :func:`enable`).

    The directory goes first on ``sys.path``: the simulator holds the NPU backend (PrivateUse1) in
    this process, so a real torch_npu installed here could not start beside it (it fails without
    CANN, as in a Docker build step, and would claim the backend otherwise). The path finder finds
    the simulated package as it would a real one, so the startup hook hears of it by its import.
    Calling it again does nothing; no other process is affected.
    """
    path = torch_npu_path()
    if path in sys.path:
        return
    sys.path.insert(0, path)
    # A real torch_npu looked for earlier (a find_spec probe) left its directory's finder cached.
    importlib.invalidate_caches()


def fallbacks() -> collections.Counter[str]:
    """Each op that reached the CPU fallback since the last ``reset()`` (``"aten::isin.Tensor_Tensor_out"``),
    with how many times, whether or not its warning was printed."""
    if enabled_table() is None:
        return collections.Counter()
    torch = _import_torch()
    names, counts = torch.ops.ascend_sim.fallback_counts()
    return collections.Counter(dict(zip(names, counts)))


def reset() -> None:
    """Forget the fallbacks counted so far (the once-per-process warnings stay printed)."""
    if enabled_table() is not None:
        _import_torch().ops.ascend_sim.reset_counts()


def unknown_ops() -> List[str]:
    """Ops of the enabled table that this torch does not define (so nothing was registered)."""
    return list(cast(List[str], _STATE.get("unknown", [])))


def _generate_methods(torch: types.ModuleType) -> None:
    """``Tensor.npu()``, ``Module.npu()``, ``is_npu`` and the rest, as torch_npu defines them;
    ``PackedSequence`` ones where this torch can generate them (not torch 2.1 to 2.3)."""
    generate = torch.utils.generate_methods_for_privateuse1_backend
    options = {"for_tensor": True, "for_module": True, "for_storage": True}
    if "for_packed_sequence" in inspect.signature(generate).parameters:
        options["for_packed_sequence"] = True
    generate(**options)


def _check_autograd_engine(torch: types.ModuleType) -> None:
    """Warn where npu gradients cannot be computed: PyTorch's autograd engine sizes its per-device
    queues once, at the first backward of the process, so a backward run before the npu device
    was registered leaves none for it (backward on npu then fails an internal assert).

    The check's backward runs on the engine's npu worker thread, and so does every npu backward
    of the program; :func:`_drain_npu_autograd` runs at exit so that none ends the process."""
    try:  # view and its backward are infrastructure kernels: nothing reaches the fallback
        _npu_backward(torch)
    except RuntimeError as exc:
        if "device_ready_queues_" not in str(exc):
            raise
        warnings.warn(
            "this process ran autograd before the simulated NPU was enabled, and PyTorch's autograd "
            "engine cannot add a device afterwards: backward on npu tensors will fail in this process; "
            "enable the simulator before the first backward (ascend_env.sim.enable() right after "
            "'import torch'), or run the script under 'python -m ascend_env audit'",
            RuntimeWarning,
            stacklevel=4,
        )
        return
    atexit.register(_drain_npu_autograd, torch)


def _npu_backward(torch: types.ModuleType) -> None:
    """One backward on the npu worker thread, that leaves no Python object to that thread.

    The worker may drop its last reference to a graph task after the caller has resumed
    (torch/csrc/autograd/engine.cpp, ``Engine::thread_main``: ``local_graph_task`` outlives
    ``mark_as_completed_and_run_post_processing``). A task that holds Python objects (the
    gradients ``autograd.grad`` returns; the ``contextvars`` context that ``autograd.backward``
    stashes in its thread-local state on recent torch, ``torch/autograd/graph.py``) then takes
    the GIL to release them; in a process already finalizing, Python ends that thread inside a
    destructor and ``std::terminate`` aborts the process ("terminate called without an active
    exception"). Measured: 1 simulated process in 20 to 60, under load. The engine's own entry
    point stashes nothing, and ``accumulate_grad`` returns nothing.

    A process that had not used the npu device still has not (its peak memory stays 0: the audit
    reads it as "the process used the npu device")."""
    from ascend_env.sim import device

    untouched = device.max_memory_allocated() == 0
    try:
        _accumulating_backward(torch)
    finally:
        if untouched and device.memory_allocated() == 0:
            device.reset_peak_memory_stats()


def _accumulating_backward(torch: types.ModuleType) -> None:
    leaf = torch.empty(1, device=DEVICE).requires_grad_()
    engine = torch.autograd.Variable._execution_engine
    # (tensors, grad_tensors, keep_graph, create_graph, inputs, allow_unreachable, accumulate_grad),
    # the same on torch 2.1 to 2.13 (torch/autograd/__init__.py, backward).
    engine.run_backward((leaf.view(1),), (torch.empty(1, device=DEVICE),), False, False, (), True, True)


def _drain_npu_autograd(torch: types.ModuleType) -> None:
    """At exit: wait until the npu worker thread has let go of the program's last graph task.

    The worker takes one task at a time, so once this backward has completed there, every task
    before it has been released (with the GIL, which this thread gives up while it waits),
    and this one holds no Python object (:func:`_npu_backward`)."""
    try:
        _npu_backward(torch)
    except Exception:  # noqa: BLE001 - e.g. a forked child, where autograd's threads are gone
        pass


def _import_torch() -> types.ModuleType:
    try:
        import torch
    except ImportError:
        raise EnvironmentProblem(
            "the simulated NPU needs PyTorch, which is not installed in this Python.",
            "pip install torch (any CPU build)",
        ) from None
    return torch


def _claim_privateuse1(torch: types.ModuleType) -> None:
    name = torch._C._get_privateuse1_backend_name()
    already_ours = hasattr(torch.ops, "ascend_sim") and _loaded(torch)
    if name not in ("privateuseone", DEVICE) or (name == DEVICE and not already_ours):
        raise EnvironmentProblem(
            f"PyTorch's PrivateUse1 backend is already taken by {name!r} in this process "
            "(a real torch_npu, or another extension), so the simulated NPU cannot register.",
            "run the simulator in a process that does not import torch_npu",
        )


def _loaded(torch: types.ModuleType) -> bool:
    try:
        torch.ops.ascend_sim.init  # noqa: B018 - raises if the library was not loaded
    except (AttributeError, RuntimeError):
        return False
    return True
