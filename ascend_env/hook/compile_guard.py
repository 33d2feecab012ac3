"""The compile-mode guard: no online compilation during generation where it can be avoided.

On the 910A family and on 310P torch_npu starts with JIT compile on, so op-plugin runs every op
through ``acl_op``, which compiles each new input shape online; decoding changes shapes at every
step (``ascend_env.detect.socs``). Where the binary kernels are installed
(``<toolkit>/opp/built-in/op_impl/ai_core/tbe/kernel``, the ``Ascend-cann-kernels-<soc>``
package), the startup hook calls ``torch_npu.npu.set_compile_mode(jit_compile=False)`` and sets
``torch.npu.config.allow_internal_format = False`` once torch_npu is imported, before the
script's first op, as LLaMA-Factory (``hparams/parser.py``) and vllm-ascend's 310P worker do.

What those calls do at that moment, read in Ascend/pytorch (v2.1.0-5.0.0, v2.2.0-6.0.0,
v2.3.1-6.0.0, ``torch_npu/npu/utils.py`` and ``torch_npu/csrc/framework/interface/EnvVariables.cpp``):
``set_compile_mode`` sets the ``jitCompile`` option, whose hook calls ``AclSetCompileopt`` and
synchronises the device only once it is initialised; the device's start
(``GetAndSetDefaultJitCompileByAcl``) keeps a ``jitCompile`` already set. ``allow_internal_format``
is a plain option. Neither starts the device, and a later call by the script wins.

This module imports neither torch nor torch_npu; :func:`apply` is handed the API to call.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, TypedDict

from ascend_env.detect import socs
from ascend_env.detect.machine import (
    KERNELS_SUBDIR,
    NPU_SMI_TIMEOUT,
    SOC_VARIABLE,
    Kernels,
    export_soc,
    find_kernels,
    machine_soc,
    parse_npu_smi,
)

__all__ = [
    "KERNELS_SUBDIR",
    "NPU_SMI_TIMEOUT",
    "OFF_VARIABLE",
    "SOC_VARIABLE",
    "Decision",
    "Kernels",
    "apply",
    "decide",
    "find_kernels",
    "from_environment",
    "machine_soc",
    "parse_npu_smi",
    "switched_off",
]

OFF_VARIABLE = "ASCEND_ENV_COMPILE_GUARD"


@dataclass
class Decision:
    """What the guard does in a process, and why."""

    apply: bool
    reason: str
    soc: Optional[str] = None
    soc_source: Optional[str] = None
    kernels: Optional[str] = None
    applied: bool = False
    error: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def switched_off(environ: Mapping[str, str]) -> bool:
    """Whether ``$ASCEND_ENV_COMPILE_GUARD`` turns the guard off (``0``, ``false``, ``no``, ``off``)."""
    return environ.get(OFF_VARIABLE, "").strip().lower() in ("0", "false", "no", "off")


class _Where(TypedDict):
    """Where a :class:`Decision` looked: its ``soc``, ``soc_source`` and ``kernels`` fields."""

    soc: Optional[str]
    soc_source: Optional[str]
    kernels: Optional[str]


def decide(soc: Optional[str], soc_source: str, kernels: Kernels, enabled: bool = True) -> Decision:
    """Whether to turn JIT compile off: only where torch_npu would compile online and need not."""
    where: _Where = {"soc": soc, "soc_source": soc_source, "kernels": kernels.path}
    if not enabled:
        why = "turned off (install --no-compile-guard or $ASCEND_ENV_COMPILE_GUARD=0)"
        return Decision(False, why, **where)
    if soc is None:
        why = f"the SoC is unknown ({soc_source}); torch_npu's default is left alone"
        return Decision(False, why, **where)
    if not socs.jit_compile_default(soc):
        return Decision(False, f"not needed: torch_npu runs {soc} with JIT compile off", **where)
    if not kernels.installed:
        return Decision(
            False,
            f"no binary kernels ({kernels.reason}): with JIT compile off, ops would fail with 'Cannot find "
            f"bin of op'; install Ascend-cann-kernels-{socs.family(soc).lower()} to enable the guard",
            **where,
        )
    return Decision(True, f"{soc} starts with JIT compile on and binary kernels are installed", **where)


def apply(decision: Decision, set_compile_mode: Callable[..., Any], config: Any) -> Decision:
    """Carry out ``decision`` with torch_npu's API (``set_compile_mode``, ``torch.npu.config``).

    Never raises: an error is kept in the decision, and JIT compile stays as torch_npu set it.
    """
    if not decision.apply:
        return decision
    try:
        set_compile_mode(jit_compile=False)
        config.allow_internal_format = False
        decision.applied = True
    except Exception as exc:  # a failed guard must not break the import of torch_npu
        decision.error = f"{type(exc).__name__}: {exc}"
    return decision


def from_environment(
    environ: Optional[Mapping[str, str]] = None,
    enabled: bool = True,
    soc: Optional[Tuple[Optional[str], str]] = None,
) -> Decision:
    """:func:`decide` for this process: the toolkit from CANN's variables or default path, the SoC
    from ``soc`` (the simulator's) or :func:`~ascend_env.detect.machine.machine_soc`. What npu-smi
    said, an answer or none, is exported (``$ASCEND_ENV_SOC``, ``$ASCEND_ENV_SOC_UNKNOWN``) so that
    child processes do not ask again."""
    from ascend_env.detect import cann

    environ = os.environ if environ is None else environ
    enabled = enabled and not switched_off(environ)
    if not enabled:
        return decide(None, "not asked", Kernels(), enabled=False)
    toolkit = cann.find_toolkit(environ)
    name, source = soc if soc is not None else machine_soc(environ)
    if environ is os.environ:
        export_soc(os.environ, name, source)
    return decide(name, source, find_kernels(toolkit.root), enabled)
