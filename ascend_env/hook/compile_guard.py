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
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, TypedDict

from ascend_env.detect import socs

__all__ = [
    "KERNELS_SUBDIR", "OFF_VARIABLE", "SOC_VARIABLE", "Decision", "Kernels", "apply", "decide",
    "find_kernels", "machine_soc", "parse_npu_smi", "switched_off",
]

OFF_VARIABLE = "ASCEND_ENV_COMPILE_GUARD"
SOC_VARIABLE = "ASCEND_ENV_SOC"
KERNELS_SUBDIR = Path("opp", "built-in", "op_impl", "ai_core", "tbe", "kernel")
NPU_SMI_TIMEOUT = 5.0


@dataclass
class Kernels:
    """The binary kernels package: installed (``None``: cannot be told), where, for which SoCs."""

    installed: Optional[bool] = None
    path: Optional[str] = None
    socs: List[str] = field(default_factory=list)
    reason: str = ""


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


def parse_npu_smi(text: str) -> Optional[str]:
    """The SoC of the first NPU in ``npu-smi info`` output (its ``Name`` column), or None."""
    for line in text.splitlines():
        cells = [cell.split() for cell in line.split("|")[1:2]]
        if cells and len(cells[0]) == 2 and cells[0][0].isdigit():
            found = socs.lookup(cells[0][1])
            if found is not None:
                return found
    return None


def machine_soc(environ: Mapping[str, str],
                run: Optional[Callable[[], str]] = None) -> Tuple[Optional[str], str]:
    """The machine's SoC and where it came from: ``$ASCEND_ENV_SOC``, else ``npu-smi info``.

    ``run`` returns npu-smi's output (default: run it, at most 5 s). Without either the SoC is
    unknown (a Docker build step, a machine without the driver); the second item says why.
    """
    chosen = environ.get(SOC_VARIABLE, "").strip()
    if chosen:
        found = socs.lookup(chosen)
        if found is None:
            return None, f"${SOC_VARIABLE}={chosen!r} names no known SoC"
        return found, f"${SOC_VARIABLE}"
    try:
        text = (run or _npu_smi)()
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"npu-smi info did not answer ({type(exc).__name__})"
    found = parse_npu_smi(text)
    return (found, "npu-smi info") if found else (None, "npu-smi info names no known SoC")


def _npu_smi() -> str:
    done = subprocess.run(["npu-smi", "info"], capture_output=True, text=True, timeout=NPU_SMI_TIMEOUT,
                          stdin=subprocess.DEVNULL, check=True)
    return done.stdout


def find_kernels(toolkit: Optional[Path]) -> Kernels:
    """Whether ``<toolkit>/opp/built-in/op_impl/ai_core/tbe/kernel`` exists, and its SoC folders."""
    if toolkit is None:
        return Kernels(reason="no CANN toolkit was found")
    path = toolkit / KERNELS_SUBDIR
    try:
        if not path.is_dir():
            return Kernels(False, str(path), reason=f"{path} does not exist")
        names = sorted(e.name for e in path.iterdir() if e.is_dir() and e.name.startswith("ascend"))
    except OSError as exc:
        return Kernels(None, str(path), reason=f"{path} cannot be read ({exc.strerror or exc})")
    return Kernels(True, str(path), names)


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


def from_environment(environ: Optional[Mapping[str, str]] = None, enabled: bool = True,
                     soc: Optional[Tuple[Optional[str], str]] = None) -> Decision:
    """:func:`decide` for this process: the toolkit from CANN's variables or default path, the SoC
    from ``soc`` (the simulator's) or :func:`machine_soc`. The SoC npu-smi gave is exported in
    ``$ASCEND_ENV_SOC`` so that child processes do not ask again."""
    from ascend_env.detect import cann

    environ = os.environ if environ is None else environ
    enabled = enabled and not switched_off(environ)
    if not enabled:
        return decide(None, "not asked", Kernels(), enabled=False)
    toolkit = cann.find_toolkit(environ)
    name, source = soc if soc is not None else machine_soc(environ)
    if name is not None and source == "npu-smi info" and environ is os.environ:
        os.environ[SOC_VARIABLE] = name
    return decide(name, source, find_kernels(toolkit.root), enabled)
