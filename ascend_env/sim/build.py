"""Compiling and loading the simulator's C++ backend, cached per torch version.

The shared library is built once with the system C++ compiler (one source file, one compiler call,
no Python headers: it talks to Python through ``torch.ops.ascend_sim``) into
``<cache>/sim-<torch version>-<source hash>/``. ``<cache>`` is ``$ASCEND_ENV_CACHE_DIR``, else
``$XDG_CACHE_HOME/ascend-env``, else ``~/.cache/ascend-env``. A lock file serialises concurrent
builders; the library is written under a temporary name and renamed into place, so a reader never
sees a partial file and a crashed build leaves nothing behind that looks finished. Nothing in the
cache is used unless no other user could have changed it (``utils/buildcache.py``); a cached
library that does not load is built again.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any, List

from ascend_env.exceptions import EnvironmentProblem
from ascend_env.utils import buildcache

__all__ = [
    "LIBRARY_NAME",
    "SOURCE",
    "build_dir",
    "cache_root",
    "compile_command",
    "compiler",
    "ensure_built",
    "load",
]

SOURCE = Path(__file__).resolve().parent / "csrc" / "sim_backend.cpp"
LIBRARY_NAME = "libascend_sim.so"


cache_root = buildcache.cache_root


def build_dir() -> Path:
    """Where the library for the running torch and these sources is (or will be) built."""
    import torch

    digest = hashlib.sha256(SOURCE.read_bytes())
    digest.update(f"{torch.__version__}|{torch._C._GLIBCXX_USE_CXX11_ABI}|{sys.platform}".encode())
    return cache_root() / f"sim-{torch.__version__.replace('+', '_')}-{digest.hexdigest()[:12]}"


def compiler() -> str:
    """The C++ compiler to use: ``$CXX``, else ``c++``, ``g++`` or ``clang++`` on PATH."""
    candidates = [os.environ["CXX"]] if os.environ.get("CXX") else ["c++", "g++", "clang++"]
    for candidate in candidates:
        found = shutil.which(shlex.split(candidate)[0]) if candidate.strip() else None
        if found:
            return candidate
    raise EnvironmentProblem(
        "the simulated NPU needs a C++ compiler to build its backend once, and none was found "
        f"(tried {', '.join(candidates)}).",
        "install one (Debian/Ubuntu: apt-get install g++; Fedora: dnf install gcc-c++; macOS: "
        "xcode-select --install), or point CXX at one",
    )


def compile_command(output: Path) -> List[str]:
    """The compiler command that builds the library into ``output``."""
    import torch

    # The directories torch.utils.cpp_extension.include_paths() and library_paths() name, without
    # importing it: on CUDA builds of torch (PyPI's x86_64 wheels before 2.4 are all CUDA builds)
    # its import prints "No CUDA runtime is found" where no GPU is.
    root = Path(torch.__file__).resolve().parent
    command = [
        *shlex.split(compiler()),
        "-shared",
        "-fPIC",
        "-O1",
        "-std=c++17",
        "-w",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
    ]
    for include in (root / "include", root / "include" / "torch" / "csrc" / "api" / "include"):
        command += ["-isystem", str(include)]
    libdir = root / "lib"
    command += [str(SOURCE), "-o", str(output), f"-L{libdir}", f"-Wl,-rpath,{libdir}"]
    return [*command, "-lc10", "-ltorch_cpu", "-ltorch"]


def ensure_built() -> Path:
    """The path of the built library, building it first if no finished build is cached.

    The cache must be safe to load a library from (``utils/buildcache.py``: every directory on
    its way root's or this user's and writable by no one else, the cache's own files this user's,
    no symbolic link): else :class:`EnvironmentProblem`.
    """
    directory = build_dir()  # imports torch
    version = getattr(sys.modules.get("torch"), "__version__", "unknown")
    return buildcache.ensure_built(
        buildcache.Build(
            directory=directory,
            library=LIBRARY_NAME,
            command=lambda output: compile_command(output),  # looked up late: tests replace it
            owner=_OWNER,
            what=f"building the simulated NPU's C++ backend for torch {version}",
            note=f"once, half a minute to a minute; later runs reuse it from {directory}",
        )
    )


_OWNER = "the simulated NPU"


def load(torch: Any) -> Path:
    """Build (if need be) and load the library into ``torch``; a cached library that does not load
    (damaged on disk) is removed and built again, once.

    The library is loaded from the descriptor that was checked (``/proc/self/fd/N``), so that a
    file swapped in at its path after the check is never the one loaded."""
    library = ensure_built()
    try:
        _load_checked(torch, library)
    except OSError as first:
        library.unlink(missing_ok=True)
        library = ensure_built()
        try:
            _load_checked(torch, library)
        except OSError as again:
            raise EnvironmentProblem(
                f"the simulated NPU backend {library} does not load, even rebuilt: {again} "
                f"(the cached one before it: {first}).",
                "check that the C++ compiler matches the one torch was built for",
            ) from None
    return library


def _load_checked(torch: Any, library: Path) -> None:
    """``torch.ops.load_library`` of the file opened and checked here, by descriptor (its own
    ``realpath`` would turn ``/proc/self/fd/N`` back into a path: torch/_ops.py, load_library)."""
    import ctypes

    with buildcache.opened_checked(library, _OWNER) as path:
        guard = getattr(torch._ops, "dl_open_guard", None)
        if guard is None:
            ctypes.CDLL(path)
        else:
            with guard():
                ctypes.CDLL(path)
        torch.ops.loaded_libraries.add(str(library))
