"""The audited process's simulator: started by :mod:`ascend_env._audited` once torch has executed.

The audit passes its choices in the environment (the names below; ``ASCEND_ENV_AUDIT_REPORTS``,
where each process reports, is :mod:`ascend_env._audited`'s):

- ``ASCEND_ENV_AUDIT_TORCH_NPU``: the torch_npu release whose op table to run, or
- ``ASCEND_ENV_AUDIT_OPLISTS``: a torch_npu package directory whose YAML op lists to run
  (``ASCEND_ENV_AUDIT_LABEL`` names it, ``ASCEND_ENV_AUDIT_FALLBACK_DISABLE=1`` if it honours
  ``TORCH_NPU_FALLBACK_CPU_DISABLE``);
- ``ASCEND_ENV_AUDIT_AUTOLOAD=1``: the simulated release is loaded by ``import torch`` itself;
- ``ASCEND_ENV_AUDIT_PATHS=1``: model torch_npu's dispatch paths (``ascend_env.sim.dispatch_model``), with
  the SoC of ``ASCEND_ENV_SOC``; the model's findings join the last report (``"paths"``);

**Autoload.** torch >= 2.5 loads every ``torch.backends`` entry point at the end of ``import
torch`` (``_import_device_backends`` in torch/__init__.py, unless
``TORCH_DEVICE_BACKEND_AUTOLOAD=0``), and torch_npu >= 2.5.1 has one (``torch_npu =
torch_npu:_autoload`` in Ascend/pytorch's setup.py, v2.5.1-7.0.0, f1826dc29d23): there ``import
torch`` alone makes the npu device. An older torch_npu must be imported by the program; a script
that only imports torch fails on a real NPU. So where the simulated release autoloads,
:func:`autoload` imports the simulated torch_npu once the process's report says the simulator runs
(by ``importlib``, so that the startup hook hears of it by its import); elsewhere it leaves that to
the program, and the process's last report says whether it used the npu device without torch_npu
(the audit's finding, :func:`last_facts`).

This module never imports :mod:`ascend_env._audited`: the reporter there calls :func:`start`,
:func:`counts`, :func:`last_facts` and :func:`autoload`, and writes what they return.
"""

from __future__ import annotations

import collections
import importlib
import sys
from pathlib import Path
from typing import List, Mapping, NamedTuple, Optional

from ascend_env import sim
from ascend_env.sim.reports import LastFacts

__all__ = [
    "AUTOLOAD",
    "FALLBACK_DISABLE",
    "LABEL",
    "OPLISTS",
    "TORCH_NPU",
    "VARIABLES",
    "Started",
    "autoload",
    "counts",
    "enable",
    "last_facts",
    "start",
]

TORCH_NPU = "ASCEND_ENV_AUDIT_TORCH_NPU"
OPLISTS = "ASCEND_ENV_AUDIT_OPLISTS"
LABEL = "ASCEND_ENV_AUDIT_LABEL"
FALLBACK_DISABLE = "ASCEND_ENV_AUDIT_FALLBACK_DISABLE"
#: ``1`` where the simulated release is loaded by ``import torch`` itself, as torch_npu >= 2.5.1
#: is through torch's ``torch.backends`` entry point (unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``).
AUTOLOAD = "ASCEND_ENV_AUDIT_AUTOLOAD"
#: The variables that choose the simulated table (``ascend_env.checks.tables.choose_table``).
VARIABLES = (TORCH_NPU, OPLISTS, LABEL, FALLBACK_DISABLE, AUTOLOAD)


def enable(table: Mapping[str, str]) -> None:
    """Enable the simulated NPU that ``table`` names (the variables that
    :func:`ascend_env.checks.tables.choose_table` picks: a release's table, or an installed
    torch_npu's op lists), and make ``import torch_npu`` find the simulated package."""
    if table.get(OPLISTS):
        from ascend_env.detect import npu_oplists

        ops = npu_oplists.read_torch_npu(Path(table[OPLISTS]))
        sim.enable_ops(table.get(LABEL, table[OPLISTS]), ops, table.get(FALLBACK_DISABLE) == "1")
    else:
        sim.enable(table.get(TORCH_NPU) or None)
    sim.add_torch_npu_to_path()


class Started(NamedTuple):
    """The simulator as :func:`start` left it: the table it runs, and whether the simulated
    torch_npu loads itself with ``import torch`` here (:func:`autoload` then imports it)."""

    table: Optional[str]
    autoload: bool


def start(environ: Mapping[str, str]) -> Started:
    """Run this process on the simulated NPU as the audit asked: enable the simulator and start
    the dispatch-path model if asked."""
    from ascend_env.sim import dispatch_model

    enable(environ)
    dispatch_model.start_from_environment(environ)
    return Started(sim.enabled_table(), environ.get(AUTOLOAD) == "1" and _torch_autoloads())


def autoload(started: Started) -> None:
    """Import the simulated torch_npu where the release autoloads (with torch's own mechanism
    present) and the program has not imported it yet."""
    if started.autoload and "torch_npu" not in sys.modules:
        importlib.import_module("torch_npu")


def counts() -> collections.Counter[str]:
    """The fallbacks counted in this process so far (:func:`ascend_env.sim.fallbacks`)."""
    return sim.fallbacks()


def _torch_autoloads() -> bool:
    """Whether this torch loads ``torch.backends`` entry points at import (torch >= 2.5)."""
    torch = sys.modules.get("torch")
    return torch is not None and hasattr(torch, "_import_device_backends")


def last_facts() -> LastFacts:
    """What the last report adds: whether the process used the npu device, the dispatch-path
    model's findings, and how the startup hook heard of torch_npu (where the hook runs)."""
    facts: LastFacts = {"npu_used": _npu_used()}
    model = sys.modules.get("ascend_env.sim.dispatch_model")
    modelled = None if model is None else model.report()
    if modelled is not None:
        facts["paths"] = modelled
    facts["hook_events"] = _hook_events()
    return facts


def _npu_used() -> bool:
    """Whether this process put anything on the npu device (memory, or an op that fell back)."""
    from ascend_env.sim import device

    return device.max_memory_allocated() > 0 or device.memory_allocated() > 0 or bool(sim.fallbacks())


def _hook_events() -> Optional[List[str]]:
    """``ascend_env.hook.runtime.status()["events"]`` where the startup hook runs; None where it does not."""
    from ascend_env.hook import files

    if files.running() is None:
        return None
    from ascend_env.hook import runtime

    return list(runtime.status()["events"])
