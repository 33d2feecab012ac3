"""The real torch_npu on the emulated CANN, inside one process: the adapter to ``ascend_env.cann``.

The emulated CANN (``ascend_env/cann/``: host-memory libraries under the real, unchanged
torch_npu binary) has a small contract, and this module is the only place the rest of ascend-env
meets it: :func:`enable` (before ``import torch_npu``: ``ascend_env.cann.runtime.enable(soc)``
loads the libraries so that torch_npu's CANN libraries resolve), :func:`report` (its counters:
``aclnn`` calls per op, ``aclop`` calls per op type, that is the online compiles a real NPU would
make, ``aclSetCompileopt`` calls, and the entry points it does not implement that were hit) and
:func:`available` (whether this ascend-env ships it). Where the contract changes, only this
module changes.

The audit and ``verify --cann emulated`` read what the binary itself says on fd 2: its CAUTION
line once per op per process (``npu_cpu_fallback`` in torch_npu/csrc/aten/VariableFallbackKernel.cpp,
Ascend/pytorch 0697d41da0b82924e3459413cacb291c2534c3e5: ``has_op_name_warned``, then
``TORCH_NPU_WARN``), and the emulated CANN's own line for an entry point it does not implement
(:data:`UNIMPLEMENTED_LINE`). Imports no torch until :func:`enable`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from ascend_env.exceptions import EnvironmentProblem
from ascend_env.sim import cann_steps
from ascend_env.sim.reports import LastFacts

__all__ = [
    "CANN",
    "CANN_EMULATED",
    "CANN_SIM",
    "CANN_VARIABLE",
    "MODULE",
    "PATHS_VARIABLE",
    "SOC_VARIABLE",
    "UNIMPLEMENTED_LINE",
    "available",
    "enable",
    "enabled",
    "last_facts",
    "make_toolkit",
    "report",
    "unimplemented",
    "unimplemented_in",
]

#: The package of the emulated CANN, and its runtime module.
MODULE = "ascend_env.cann.runtime"
CANN_SIM = "sim"
CANN_EMULATED = "emulated"
#: ``--cann``'s choices: the simulator (a model of torch_npu), or the real binary on the emulated CANN.
CANN = (CANN_SIM, CANN_EMULATED)
#: Set to ``emulated`` in each process of a command audited on the emulated CANN.
CANN_VARIABLE = "ASCEND_ENV_AUDIT_CANN"
#: The SoC the emulated CANN answers ``aclrtGetSocName`` with (its own variable, read at enable).
SOC_VARIABLE = "ASCEND_ENV_SOC"
#: What the emulated CANN prints on fd 2, once per entry point, when one it lacks is called.
UNIMPLEMENTED_LINE = re.compile(r"ascend-env emulated CANN: (\w+) is not implemented")

#: Set to ``1`` in each process of a command audited with ``--paths``: the emulated CANN's counters
#: are then taken per decoding step (:mod:`ascend_env.sim.cann_steps`); the simulator's variable.
PATHS_VARIABLE = "ASCEND_ENV_AUDIT_PATHS"

_ENABLED: List[str] = []  # the SoC, once enabled in this process
_STEPS: List[cann_steps.Steps] = []  # the measured steps, where the audit asked for them


def available() -> Optional[str]:
    """None where this ascend-env ships the emulated CANN; else why it cannot run."""
    try:
        found = importlib.util.find_spec(MODULE)
    except (ImportError, ValueError):
        found = None
    if found is None:
        return "this ascend-env has no emulated CANN (ascend_env/cann is missing)"
    return None


def _runtime() -> Any:
    why = available()
    if why is not None:
        raise EnvironmentProblem(
            f"the real torch_npu cannot run on the emulated CANN: {why}.",
            "install an ascend-env that ships it, or use the simulator (--cann sim)",
        )
    return importlib.import_module(MODULE)


def enable(soc: Optional[str] = None) -> None:
    """Put the emulated CANN under this process's ``import torch_npu`` (before it), with SoC
    ``soc`` (default: ``$ASCEND_ENV_SOC``, else the emulated CANN's default). Raises
    :class:`EnvironmentProblem` where it cannot (no C++ compiler, torch_npu already imported)."""
    runtime = _runtime()
    chosen = soc or os.environ.get(SOC_VARIABLE) or str(getattr(runtime, "DEFAULT_SOC", "Ascend910B1"))
    runtime.enable(chosen)
    if not _ENABLED:
        _ENABLED.append(chosen)
    if os.environ.get(PATHS_VARIABLE) == "1" and not _STEPS:
        from ascend_env.sim import steps

        _STEPS.append(cann_steps.Steps(lambda: cann_steps.counters_of(report()), _synchronize))
        steps.listen(_STEPS[0])


def _synchronize() -> None:
    """Wait for the device's queue (aclnn kernels run, and are counted, on torch_npu's task-queue
    thread); nothing where torch_npu is not imported yet."""
    torch = sys.modules.get("torch")
    npu = getattr(torch, "npu", None) if "torch_npu" in sys.modules else None
    if npu is not None:
        npu.synchronize()


def make_toolkit(directory: Path) -> Dict[str, str]:
    """Make the empty ``directory`` the toolkit the emulated CANN shows torch_npu (binary kernels
    installed); returns the variables that point a process at it (``ASCEND_HOME_PATH``, ...), so that
    a run on the simulator sees the machine the emulated CANN shows."""
    found: Dict[str, str] = _runtime().make_toolkit(directory)
    return found


def enabled() -> Optional[str]:
    """The SoC the emulated CANN runs with in this process, or None where it was not enabled."""
    return _ENABLED[0] if _ENABLED else None


def report() -> Dict[str, Any]:
    """The emulated CANN's counters so far: ``{"soc", "counters": {"aclnn": {op: n}, "aclop":
    {op type: n}, "aclSetCompileopt": {...}, "unimplemented": {entry point: n}},
    "compile_options_set": [[option, value], ...]}``; empty where it was not enabled."""
    if not _ENABLED:
        return {}
    document = _runtime().report()
    return dict(document) if isinstance(document, Mapping) else {}


def unimplemented(document: Mapping[str, Any]) -> List[str]:
    """The entry points a :func:`report` says were called and are not implemented, sorted."""
    counters = document.get("counters")
    found = counters.get("unimplemented") if isinstance(counters, Mapping) else None
    return sorted(str(name) for name in found) if isinstance(found, Mapping) else []


def unimplemented_in(text: str) -> List[str]:
    """The entry points the emulated CANN's lines in ``text`` (fd 2) name, in order, once each."""
    found: List[str] = []
    for name in UNIMPLEMENTED_LINE.findall(text):
        if name not in found:
            found.append(name)
    return found


def last_facts() -> LastFacts:
    """What an audited process on the emulated CANN adds to its last report: the emulated CANN's
    counters (``cann``), where its fd 2 went (``fd2``: device and inode, so that the audit can tell
    whether it saw the binary's lines), whether torch_npu's warnings were silenced here
    (``silenced``: its CAUTION lines then never reach fd 2), and how the startup hook heard of
    torch_npu (``hook_events``, where the hook runs)."""
    from ascend_env.sim import silencing

    facts: LastFacts = {"cann": report(), "silenced": silencing.warnings_silenced(os.environ)}
    if _STEPS:
        facts["cann_steps"] = _STEPS[0].report()
    try:
        info = os.fstat(2)
        facts["fd2"] = [int(info.st_dev), int(info.st_ino)]
    except OSError:
        facts["fd2"] = None
    facts["hook_events"] = _hook_events()
    return facts


def _hook_events() -> Optional[List[str]]:
    from ascend_env.hook import files

    if files.running() is None:
        return None
    from ascend_env.hook import runtime

    return list(runtime.status()["events"])
