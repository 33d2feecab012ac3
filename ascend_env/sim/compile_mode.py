"""The simulated device's SoC and compile settings: which path op-plugin would run an op on.

A process on the simulated NPU has one SoC, from ``$ASCEND_ENV_SOC`` (a full name or an alias, see
``ascend_env.detect.socs``; the variable that names the machine's SoC to ``detect``, ``audit``,
``verify`` and the startup hook's compile-mode guard), else :data:`DEFAULT_SOC`, and the two
settings a script can make
at run time through the simulated ``torch_npu`` API: ``set_compile_mode(jit_compile=...)`` and
``torch.npu.config.allow_internal_format``. Unset, JIT compile is the SoC's default
(``socs.jit_compile_default``), and ``allow_internal_format`` is True, as torch_npu's device start
leaves it before Ascend910_9391 (``torch_npu/npu/config`` / ``SetAllowInternalFormat``).

op-plugin's generated wrappers (``op_plugin/OpInterface.cpp``, per release branch) call
``op_api::`` when ``at_npu::native::env::CheckJitDisable()`` holds and every input is in a base
format, and ``acl_op::`` otherwise; an op with no ``op_api`` implementation always takes
``acl_op``. The simulator's tensors are all in base formats.

This module's state (:data:`_SETTINGS`) is the process's, as the real settings are. Importing it
imports no torch.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Dict, List, MutableMapping, Optional, Tuple

from ascend_env.detect import socs

__all__ = [
    "DEFAULT_SOC",
    "DEPRECATED_SOC_ENV",
    "HookView",
    "SOC_ENV",
    "acl_op",
    "allow_internal_format",
    "chosen_soc",
    "export_soc",
    "jit_compile",
    "jit_compile_set",
    "reset",
    "set_allow_internal_format",
    "set_jit_compile",
    "soc",
    "soc_assumed",
]

SOC_ENV = "ASCEND_ENV_SOC"
#: The simulated SoC's old variable (verify's alone): still read where ``$ASCEND_ENV_SOC`` is unset.
DEPRECATED_SOC_ENV = "ASCEND_ENV_SIM_SOC"
DEFAULT_SOC = "Ascend910B1"
_DEPRECATED = (
    f"${DEPRECATED_SOC_ENV} is deprecated: set ${SOC_ENV} instead (one variable names the SoC "
    "for detect, audit, verify and the startup hook)"
)

# What the process set at run time; a missing key means "as the device starts".
_SETTINGS: Dict[str, bool] = {}
# Whether the deprecated variable was warned about in this process (once is enough).
_WARNED: List[str] = []


def chosen_soc(environ: Optional[MutableMapping[str, str]] = None) -> Optional[str]:
    """The SoC named by ``$ASCEND_ENV_SOC``, else by the deprecated ``$ASCEND_ENV_SIM_SOC`` (with a
    DeprecationWarning), else None."""
    environ = os.environ if environ is None else environ
    chosen = environ.get(SOC_ENV)
    if chosen:
        return chosen
    old = environ.get(DEPRECATED_SOC_ENV)
    if old and not _WARNED:
        _WARNED.append(DEPRECATED_SOC_ENV)
        warnings.warn(_DEPRECATED, DeprecationWarning, stacklevel=3)
    return old or None


def export_soc(environ: MutableMapping[str, str]) -> None:
    """For a command's child processes: where only the deprecated ``$ASCEND_ENV_SIM_SOC`` is set,
    set ``$ASCEND_ENV_SOC`` to it too, saying once on stderr that the old name is deprecated."""
    old = environ.get(DEPRECATED_SOC_ENV)
    if old and not environ.get(SOC_ENV):
        environ[SOC_ENV] = old
        sys.stderr.write(f"ascend-env: warning: {_DEPRECATED}\n")


def soc() -> str:
    """The simulated SoC (torch_npu's name). A bad ``$ASCEND_ENV_SOC`` raises UsageError."""
    chosen = chosen_soc()
    return socs.canonical(chosen, SOC_ENV) if chosen else DEFAULT_SOC


def soc_assumed() -> bool:
    """True when no SoC was chosen and :data:`DEFAULT_SOC` stands in for one."""
    return not chosen_soc()


def jit_compile() -> bool:
    """Whether JIT compile is on now: what the script set, else the SoC's default."""
    explicit = _SETTINGS.get("jit_compile")
    return socs.jit_compile_default(soc()) if explicit is None else explicit


def jit_compile_set() -> Optional[bool]:
    """What ``set_compile_mode`` last set in this process, or None if it was never called."""
    return _SETTINGS.get("jit_compile")


def set_jit_compile(value: bool) -> None:
    """``torch_npu.npu.set_compile_mode(jit_compile=value)``."""
    _SETTINGS["jit_compile"] = bool(value)


def allow_internal_format() -> bool:
    """``torch.npu.config.allow_internal_format`` now."""
    return _SETTINGS.get("allow_internal_format", True)


def set_allow_internal_format(value: bool) -> None:
    """``torch.npu.config.allow_internal_format = value``."""
    _SETTINGS["allow_internal_format"] = bool(value)


def acl_op(has_op_api: bool) -> bool:
    """Whether an op would run on ``acl_op`` now: JIT compile on, or no ``op_api`` for it."""
    return jit_compile() or not has_op_api


def reset() -> None:
    """Forget what the process set (tests)."""
    _SETTINGS.clear()


class HookView:
    """The simulated NPU as the startup hook sees it (:class:`ascend_env.hook.runtime.Simulator`):
    :func:`ascend_env.sim.enable_ops` registers one with the hook, which sits below the simulator and
    never imports it. ``config`` stands for ``torch.npu.config``."""

    def __init__(self) -> None:
        self.config = self

    def table(self) -> Optional[str]:
        """The op table the simulator runs in this process, or None."""
        from ascend_env import sim

        return sim.enabled_table()

    def soc_and_source(self) -> Tuple[Optional[str], str]:
        """The simulated SoC, and where it came from, as the compile-mode guard records them."""
        return soc(), "simulator (assumed)" if soc_assumed() else "simulator"

    def set_compile_mode(self, jit_compile: bool = True) -> None:
        """``torch_npu.npu.set_compile_mode``."""
        set_jit_compile(jit_compile)

    @property
    def allow_internal_format(self) -> bool:
        """``torch.npu.config.allow_internal_format``."""
        return allow_internal_format()

    @allow_internal_format.setter
    def allow_internal_format(self, value: bool) -> None:
        set_allow_internal_format(value)
