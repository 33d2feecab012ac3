"""The registry of NPU fixes: the one description of each op that some torch_npu releases run on
the CPU, and of what ascend-env registers for it.

A :class:`Fix` is one module of kernels (:mod:`ascend_env.kernels.isin`, ...) and everything the
rest of ascend-env needs to know of it, so that adding a fixed op is one module and one entry
here (CONTRIBUTING.md, "Adding a fixed op"); modelled on PyTorch's ``torch/_decomp`` registry,
where each decomposition declares the overloads it serves:

- ``name``: the fix's own name (a smoke step, a row of ``detect`` and ``verify``); not derived
  from an op's name;
- ``module``: whose ``KERNELS`` maps each overload (``"isin.Tensor_Tensor"``) to its kernel;
- ``overloads``: each :class:`Overload` with the releases that lack it (PEP 440 specifiers,
  checked against the op tables by ``tests/unit/kernels/test_registry.py``) and the overload its
  composite kernel calls (the ``out=`` form), which must be missing too for it to fall back;
- ``reason`` and ``upstream`` (where the missing kernel, or the behaviour modelled, is recorded);
- ``namespace`` and ``dispatch_key``: ``aten`` / ``torchvision`` and ``PrivateUse1``;
- ``requires``: the module whose import defines the op (``torchvision``; None for torch's own
  ops): the startup hook registers the fix once that module has been imported;
- ``registered_by``: packages that register the op themselves (``torchvision_npu``): where one
  is installed, the fix is left to it;
- ``host_reads``: every value a kernel reads back to the host, and why (none for most);
- ``smoke``: the :class:`Sample` calls the smoke test runs on the device against the CPU;
- ``generation``: whether transformers' text generation reaches the op (``audit --torch-npu
  affected`` runs the releases that lack one of those);
- ``host_copy``: releases whose registered kernel copies to the host and back (left alone).

The types are in :mod:`.fix`; the fixes are declared one module per family of ops
(:mod:`.tensor`, :mod:`.vision`, :mod:`.nn`, :mod:`.signal`) and gathered here in :data:`FIXES`.

The startup hook (:mod:`ascend_env.hook.runtime`) registers an overload only where neither it
nor the overload it calls has a kernel for the key; a native kernel is never overridden, and an
op that PyTorch decomposes (``CompositeImplicitAutograd``) is never registered. This module
imports neither torch nor the kernel modules.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

from ascend_env.kernels.registry import nn, signal, tensor, vision
from ascend_env.kernels.registry.fix import Fix, Op, Overload, Sample, T
from ascend_env.kernels.registry.tensor import (
    ASSERT_ASYNC,
    BITWISE_SHIFT,
    BUCKETIZE,
    ISIN,
    POLAR,
    REPEAT_INTERLEAVE,
    SORT_STABLE,
)

__all__ = [
    "ASSERT_ASYNC",
    "BITWISE_SHIFT",
    "BUCKETIZE",
    "FIXES",
    "ISIN",
    "POLAR",
    "REPEAT_INTERLEAVE",
    "SORT_STABLE",
    "OVERLOADS",
    "Fix",
    "Op",
    "Overload",
    "Sample",
    "T",
    "by_name",
    "fixes_needed_by",
    "kernels",
]

#: Every fix, in registry order: one module of declarations per family of ops.
FIXES: Tuple[Fix, ...] = (*tensor.FIXES, *vision.FIXES, *nn.FIXES, *signal.FIXES)


#: Every overload of every fix, in registry order: what the hook decides and registers.
OVERLOADS: Tuple[Op, ...] = tuple(op for fix in FIXES for op in fix.ops)


def by_name() -> Dict[str, Fix]:
    """The fixes by name, in registry order."""
    return {fix.name: fix for fix in FIXES}


def fixes_needed_by(release: Optional[str]) -> Tuple[Fix, ...]:
    """The fixes with an overload that falls back on torch_npu ``release``."""
    return tuple(fix for fix in FIXES if fix.needed_by(release))


def kernels(fixes: Iterable[Fix] = FIXES) -> Dict[str, Callable[..., Any]]:
    """The kernels of ``fixes`` by overload (imports torch and those fixes' modules only)."""
    found: Dict[str, Callable[..., Any]] = {}
    for fix in fixes:
        table = importlib.import_module(fix.module).KERNELS
        found.update((op.op, table[op.op]) for op in fix.ops)
    return found
