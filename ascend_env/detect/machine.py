"""This machine's NPUs, from files and one bounded call of ``npu-smi``: the SoC, the devices, the
binary kernels. Imports nothing but the standard library and :mod:`ascend_env.detect.socs`.

The SoC, cheapest source first (the compile-mode guard asks in every process that imports
torch_npu): ``$ASCEND_ENV_SOC`` (set by the user, or exported by a parent process that asked
``npu-smi``), ``$ASCEND_ENV_SOC_UNKNOWN`` (a parent asked and got no answer: children do not pay
again), then ``npu-smi info``. ``npu-smi`` runs in a session of its own, for at most
:data:`NPU_SMI_TIMEOUT` seconds and :data:`NPU_SMI_MAX_BYTES` of output; on a timeout its whole
process group is killed; its answer counts once it has exited, even where a process it started
keeps the pipe open; bytes that are not UTF-8 are replaced.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Mapping, MutableMapping, Optional, Tuple

from ascend_env.detect import socs
from ascend_env.detect.cann import shown

__all__ = [
    "DEVICE_GLOB",
    "KERNELS_SUBDIR",
    "NPU_SMI_MAX_BYTES",
    "NPU_SMI_TIMEOUT",
    "SOC_UNKNOWN_VARIABLE",
    "SOC_VARIABLE",
    "Kernels",
    "NpuSmiError",
    "export_soc",
    "find_kernels",
    "has_npu",
    "machine_soc",
    "npu_smi",
    "parse_npu_smi",
]

SOC_VARIABLE = "ASCEND_ENV_SOC"
#: Set by a process whose ``npu-smi info`` gave no SoC, to the reason; its children read it.
SOC_UNKNOWN_VARIABLE = "ASCEND_ENV_SOC_UNKNOWN"
KERNELS_SUBDIR = Path("opp", "built-in", "op_impl", "ai_core", "tbe", "kernel")
NPU_SMI_TIMEOUT = 5.0
NPU_SMI_MAX_BYTES = 256 * 1024  # npu-smi info prints about 2 KB per device
DEVICE_GLOB = "davinci[0-9]*"


class NpuSmiError(OSError):
    """``npu-smi info`` gave no answer: missing, failed, too slow or too talkative."""


@dataclass
class Kernels:
    """The binary kernels package: installed (``None``: cannot be told), where, for which SoCs."""

    installed: Optional[bool] = None
    path: Optional[str] = None
    socs: List[str] = field(default_factory=list)
    reason: str = ""


def parse_npu_smi(text: str) -> Optional[str]:
    """The SoC of the first NPU in ``npu-smi info`` output (its ``Name`` column), or None."""
    for line in text.splitlines():
        cells = [cell.split() for cell in line.split("|")[1:2]]
        if cells and len(cells[0]) == 2 and cells[0][0].isdigit():
            found = socs.lookup(cells[0][1])
            if found is not None:
                return found
    return None


def npu_smi(timeout: float = NPU_SMI_TIMEOUT, max_bytes: int = NPU_SMI_MAX_BYTES) -> str:
    """The output of ``npu-smi info``, bounded in time and size; raises :class:`NpuSmiError`."""
    try:
        child = subprocess.Popen(
            ["npu-smi", "info"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        raise NpuSmiError(f"npu-smi cannot run ({exc.strerror or exc})") from None
    assert child.stdout is not None
    try:
        data, why = _read_until_exit(child, time.monotonic() + timeout, max_bytes)
    finally:
        child.stdout.close()
        if child.poll() is None:
            _kill_group(child)
    if why:
        raise NpuSmiError(why)
    if child.returncode != 0:
        raise NpuSmiError(f"npu-smi info exited {child.returncode}")
    return data.decode("utf-8", "replace")


def _read_until_exit(child: subprocess.Popen[bytes], deadline: float, max_bytes: int) -> Tuple[bytes, str]:
    """What ``child`` printed until it exited (then what is left in the pipe, without waiting
    for its end: a process it started may hold it) and why it was cut short, if it was."""
    assert child.stdout is not None
    chunks: List[bytes] = []
    size = 0
    with selectors.DefaultSelector() as selector:
        selector.register(child.stdout, selectors.EVENT_READ)
        while True:
            exited = child.poll() is not None
            left = deadline - time.monotonic()
            if left <= 0:
                return b"".join(chunks), f"npu-smi info did not answer within {NPU_SMI_TIMEOUT:g} s"
            ready = selector.select(0 if exited else min(left, 0.05))
            if not ready:
                if exited:
                    return b"".join(chunks), ""
                continue
            chunk = os.read(child.stdout.fileno(), 65536)
            if not chunk:
                child.wait(max(deadline - time.monotonic(), 0.01))
                return b"".join(chunks), ""
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                return b"", f"npu-smi info printed more than {max_bytes // 1024} KB"


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except OSError:
        child.kill()
    try:
        child.wait(1.0)
    except subprocess.TimeoutExpired:
        pass


def machine_soc(
    environ: Mapping[str, str], run: Optional[Callable[[], str]] = None
) -> Tuple[Optional[str], str]:
    """The machine's SoC and where it came from (see the module docstring for the order).

    ``run`` returns npu-smi's output (default :func:`npu_smi`). Without an answer the SoC is
    unknown (a Docker build step, a machine without the driver); the second item says why.
    """
    chosen = environ.get(SOC_VARIABLE, "").strip()
    if chosen:
        found = socs.lookup(chosen)
        if found is None:
            return None, f"${SOC_VARIABLE}={shown(chosen)} names no known SoC"
        return found, f"${SOC_VARIABLE}"
    unknown = environ.get(SOC_UNKNOWN_VARIABLE, "").strip()
    if unknown:
        return None, f"{shown(unknown, 120)[1:-1]} (in a parent process: ${SOC_UNKNOWN_VARIABLE})"
    try:
        text = (run or npu_smi)()
    except (OSError, subprocess.SubprocessError) as exc:
        if isinstance(exc, NpuSmiError):
            return None, str(exc)
        return None, f"npu-smi info did not answer ({type(exc).__name__})"
    found = parse_npu_smi(text)
    return (found, "npu-smi info") if found else (None, "npu-smi info names no known SoC")


def export_soc(environ: MutableMapping[str, str], soc: Optional[str], source: str) -> None:
    """Pass what ``npu-smi info`` said on to child processes, so that they do not run it again."""
    if source == "npu-smi info" and soc is not None:
        environ[SOC_VARIABLE] = soc
    elif source.startswith("npu-smi"):
        environ[SOC_UNKNOWN_VARIABLE] = source


def has_npu(dev: Path = Path("/dev"), run: Optional[Callable[[], str]] = None) -> Tuple[bool, str]:
    """Whether this machine has an NPU: ``/dev/davinci<N>`` devices, or ``npu-smi info`` lists one;
    and the evidence (or why not)."""
    try:
        devices = sorted(p.name for p in dev.glob(DEVICE_GLOB))
    except OSError:
        devices = []
    if devices:
        return True, f"{dev / devices[0]} exists"
    try:
        text = (run or npu_smi)()
    except (OSError, subprocess.SubprocessError):
        return False, f"no {dev}/davinci* devices, and npu-smi info does not answer"
    soc = parse_npu_smi(text)
    if soc is not None:
        return True, f"npu-smi info lists an {soc}"
    return False, f"no {dev}/davinci* devices, and npu-smi info lists no NPU"


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
