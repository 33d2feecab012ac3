"""The emulated CANN inside the process that asks for it: load, point torch_npu at it, report.

:func:`enable` (before ``import torch_npu``) builds the libraries once (cached), loads each one
``RTLD_GLOBAL`` from its checked descriptor, so that glibc satisfies torch_npu's ``DT_NEEDED``
entries and its ``dlopen("libopapi.so")`` by soname, without ``LD_LIBRARY_PATH``; it also makes a
toolkit directory (``ascend_toolkit_install.info``, the binary-kernel directory) and points
``ASCEND_HOME_PATH``, ``ASCEND_TOOLKIT_HOME`` and ``ASCEND_OPP_PATH`` at it, in this process only.
Child processes do not inherit the libraries: a child that wants them calls :func:`enable` too.
:func:`report` reads the counters: aclnn calls per op, ``aclopCompileAndExecute`` calls per op type
(online compiles on a real NPU), every ``aclSetCompileopt`` call, unimplemented entry points hit.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import shutil
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Dict, List, Optional

from ascend_env.cann import build
from ascend_env.exceptions import EnvironmentProblem
from ascend_env.utils import buildcache

__all__ = ["DEFAULT_SOC", "TOOLKIT_VERSION", "enable", "enabled", "make_toolkit", "report"]

DEFAULT_SOC = "Ascend910B1"
#: The version the toolkit directory claims (ascend_toolkit_install.info).
TOOLKIT_VERSION = "8.0.RC2"

_core: Optional[ctypes.CDLL] = None
_handles: List[ctypes.CDLL] = []


def enable(soc: str = DEFAULT_SOC) -> None:
    """Make this process's ``import torch_npu`` run on the emulated CANN, SoC ``soc``.

    Raises :class:`EnvironmentProblem` where torch_npu is already imported (its CANN libraries
    were then found, or its import failed), or where the libraries cannot be built."""
    global _core
    if _core is not None:
        if os.environ.get("ASCEND_ENV_SOC") != soc:
            raise EnvironmentProblem(
                f"the emulated CANN is already enabled in this process with SoC "
                f"{os.environ.get('ASCEND_ENV_SOC')}, not {soc}.",
                "enable it once per process, with the SoC you want",
            )
        return
    if "torch_npu" in sys.modules:
        raise EnvironmentProblem(
            "torch_npu is already imported in this process, so the emulated CANN can no longer be "
            "put under it.",
            "enable the emulated CANN before anything imports torch_npu",
        )
    os.environ["ASCEND_ENV_SOC"] = soc
    import torch  # noqa: F401  (the core library links the running torch's libraries)

    core, others = build.build()
    # All descriptors stay open until every library is loaded: glibc knows a loaded library by the
    # name it was opened with, and a reused /proc/self/fd/N would name the library loaded before.
    with ExitStack() as stack:
        for library in (core, *others):
            path = stack.enter_context(buildcache.opened_checked(library, build.OWNER))
            _handles.append(ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL))
    _core = _handles[0]
    _point_at_toolkit(_toolkit())


def enabled() -> bool:
    """Whether :func:`enable` ran in this process."""
    return _core is not None


def report() -> Dict[str, Any]:
    """The counters so far: ``{"soc", "counters": {kind: {name: n}}, "compile_options_set":
    [[option, value], ...]}``; kinds: ``aclnn``, ``aclop``, ``aclSetCompileopt``,
    ``unimplemented``. Empty where the emulated CANN is not enabled."""
    if _core is None:
        return {}
    function: Any = _core.ascend_env_cann_report
    function.restype = ctypes.c_size_t
    function.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    # The counters grow on torch_npu's task-queue thread meanwhile: the report may outgrow the
    # size asked first, and is then not written; ask again with room to spare until it fits.
    size = int(function(None, 0))
    while True:
        buffer = ctypes.create_string_buffer(2 * size + 256)
        needed = int(function(buffer, len(buffer)))
        if needed < len(buffer):
            break
        size = needed
    document: Dict[str, Any] = json.loads(buffer.value.decode("utf-8"))
    return document


def _toolkit() -> Path:
    """A toolkit directory for this process (:func:`make_toolkit`); removed at exit."""
    directory = Path(tempfile.mkdtemp(prefix="ascend-env-cann-"))
    atexit.register(shutil.rmtree, directory, True)
    make_toolkit(directory)
    return directory


def make_toolkit(directory: Path) -> Dict[str, str]:
    """Fill the empty ``directory`` as the emulated CANN's toolkit: the version file and the
    binary-kernel directory torch_npu looks for ("binary kernels installed"); returns the variables
    that point at it, as :func:`enable` sets them."""
    (directory / "ascend_toolkit_install.info").write_text(
        f"package_name=Ascend-cann-toolkit\nversion={TOOLKIT_VERSION}\n"
        f"innerversion=ascend-env emulated CANN\narch={os.uname().machine}\nos=linux\n",
        encoding="utf-8",
    )
    (directory / "opp" / "built-in" / "op_impl" / "ai_core" / "tbe" / "kernel").mkdir(parents=True)
    (directory / "opp" / "version.info").write_text(f"Version={TOOLKIT_VERSION}\n", encoding="utf-8")
    # torch_npu/utils/npu_intercept.py (_cann_package_check) wants these two beside opp.
    (directory / "runtime").mkdir()
    (directory / "compiler").mkdir()
    return _toolkit_variables(directory)


def _toolkit_variables(directory: Path) -> Dict[str, str]:
    return {
        "ASCEND_HOME_PATH": str(directory),
        "ASCEND_TOOLKIT_HOME": str(directory),
        "ASCEND_OPP_PATH": str(directory / "opp"),
    }


def _point_at_toolkit(directory: Path) -> None:
    os.environ.update(_toolkit_variables(directory))
