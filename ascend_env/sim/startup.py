"""The audited process's simulator: started by :mod:`ascend_env._audited` once torch has executed.

The audit passes its choices in the environment:

- ``ASCEND_ENV_AUDIT_TORCH_NPU``: the torch_npu release whose op table to run, or
- ``ASCEND_ENV_AUDIT_OPLISTS``: a torch_npu package directory whose YAML op lists to run
  (``ASCEND_ENV_AUDIT_LABEL`` names it, ``ASCEND_ENV_AUDIT_FALLBACK_DISABLE=1`` if it honours
  ``TORCH_NPU_FALLBACK_CPU_DISABLE``);
- ``ASCEND_ENV_AUDIT_AUTOLOAD=1``: the simulated release is loaded by ``import torch`` itself;
- ``ASCEND_ENV_AUDIT_PATHS=1``: model torch_npu's dispatch paths (``ascend_env.sim.paths``), with
  the SoC of ``ASCEND_ENV_SOC``; the model's findings join the last report (``"paths"``);
- ``ASCEND_ENV_AUDIT_REPORTS``: where each process writes its report (:mod:`ascend_env._audited`).

**Autoload.** torch >= 2.5 loads every ``torch.backends`` entry point at the end of ``import
torch`` (``_import_device_backends`` in torch/__init__.py, unless
``TORCH_DEVICE_BACKEND_AUTOLOAD=0``), and torch_npu >= 2.5.1 has one (``torch_npu =
torch_npu:_autoload`` in Ascend/pytorch's setup.py, v2.5.1-7.0.0, f1826dc29d23): there ``import
torch`` alone makes the npu device. An older torch_npu must be imported by the program; a script
that only imports torch fails on a real NPU. So where the simulated release autoloads, :func:`start`
imports the simulated torch_npu right after enabling (by ``importlib``, so that the startup hook
hears of it by its import); elsewhere it leaves that to the program, and the process's last report
says whether it used the npu device without torch_npu (the audit's finding).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from ascend_env._audited import (
    AUTOLOAD,
    FALLBACK_DISABLE,
    LABEL,
    OPLISTS,
    POLL_SECONDS,
    REPORTS,
    TORCH_NPU,
    Reporter,
    current,
    install,
)

__all__ = [
    "AUTOLOAD", "FALLBACK_DISABLE", "LABEL", "OPLISTS", "POLL_SECONDS", "REPORTS", "TORCH_NPU", "Reporter",
    "current", "enable", "install", "start",
]


def enable(table: Mapping[str, str]) -> None:
    """Enable the simulated NPU that ``table`` names (the variables that
    :func:`ascend_env.checks.audit.choose_table` picks: a release's table, or an installed
    torch_npu's op lists), and make ``import torch_npu`` find the simulated package."""
    from ascend_env import sim

    if table.get(OPLISTS):
        from ascend_env.detect import npu_oplists as oplists

        ops = oplists.read_torch_npu(Path(table[OPLISTS]))
        sim.enable_ops(table.get(LABEL, table[OPLISTS]), ops, table.get(FALLBACK_DISABLE) == "1")
    else:
        sim.enable(table.get(TORCH_NPU) or None)
    sim.add_torch_npu_to_path()


def start(environ: Mapping[str, str], reporter: Reporter) -> None:
    """Run this process on the simulated NPU as the audit asked, reporting to ``reporter``:
    enable the simulator, start the dispatch-path model if asked, and import the simulated
    torch_npu where the release autoloads (with torch's own mechanism present)."""
    from ascend_env import sim
    from ascend_env.sim import paths

    enable(environ)
    paths.start_from_environment(environ)
    autoload = environ.get(AUTOLOAD) == "1" and _torch_autoloads()
    with reporter.lock:
        reporter.counts = sim.fallbacks
        reporter.table = sim.enabled_table()
        reporter.torch = True
        reporter.facts["autoload"] = autoload
        reporter.extra = _last_facts
    reporter.write(force=True)
    reporter.start_polling()
    if autoload and "torch_npu" not in sys.modules:
        importlib.import_module("torch_npu")


def _torch_autoloads() -> bool:
    """Whether this torch loads ``torch.backends`` entry points at import (torch >= 2.5)."""
    torch = sys.modules.get("torch")
    return torch is not None and hasattr(torch, "_import_device_backends")


def _last_facts() -> Dict[str, Any]:
    """What the last report adds: the dispatch-path model's findings, whether the process used
    the npu device, and how the startup hook heard of torch_npu (where the hook runs)."""
    facts: Dict[str, Any] = {"npu_used": _npu_used()}
    paths = sys.modules.get("ascend_env.sim.paths")
    modelled = None if paths is None else paths.report()
    if modelled is not None:
        facts["paths"] = modelled
    facts["hook_events"] = _hook_events()
    return facts


def _npu_used() -> bool:
    """Whether this process put anything on the npu device (memory, or an op that fell back)."""
    from ascend_env import sim
    from ascend_env.sim import device

    return device.max_memory_allocated() > 0 or device.memory_allocated() > 0 or bool(sim.fallbacks())


def _hook_events() -> Optional[list[str]]:
    """``ascend_env.runtime.status()["events"]`` where the startup hook runs; None where it does not."""
    from ascend_env.hook import files

    if files.running() is None:
        return None
    from ascend_env import runtime

    return list(runtime.status()["events"])


def start_from_environment(environ: Optional[Mapping[str, str]] = None) -> None:
    """The audited process's start-up (:func:`ascend_env._audited.start_from_environment`)."""
    from ascend_env import _audited

    _audited.start_from_environment(environ)
