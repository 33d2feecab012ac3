"""Compiling and loading the simulator's C++ backend, cached per torch version.

The shared library is built once with the system C++ compiler (one source file, one compiler call,
no Python headers: it talks to Python through ``torch.ops.ascend_sim``) into
``<cache>/sim-<torch version>-<source hash>/``. ``<cache>`` is ``$ASCEND_ENV_CACHE_DIR``, else
``$XDG_CACHE_HOME/ascend-env``, else ``~/.cache/ascend-env``. A lock file serialises concurrent
builders; the library is written under a temporary name and renamed into place, so a reader never
sees a partial file and a crashed build leaves nothing behind that looks finished. Nothing in the
cache is used unless it is the user's own and writable by no one else; a cached library that does
not load is built again.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, List

from ascend_env.exceptions import EnvironmentProblem
from ascend_env.utils import atomic, progress

__all__ = [
    "COMPILER_MEMORY",
    "LIBRARY_NAME",
    "SOURCE",
    "build_dir",
    "cache_root",
    "compile_command",
    "compiler",
    "ensure_built",
    "killed",
    "load",
]

SOURCE = Path(__file__).resolve().parent / "csrc" / "sim_backend.cpp"
LIBRARY_NAME = "libascend_sim.so"


def cache_root() -> Path:
    """The directory under which ascend-env caches builds."""
    explicit = os.environ.get("ASCEND_ENV_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ascend-env"


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

    The cache directories and the library must be this user's own, no symbolic link, and writable
    by no one else (a library planted there would run as this user): else
    :class:`EnvironmentProblem`. The lock file is opened without following a symbolic link.
    """
    target_dir = build_dir()
    library = target_dir / LIBRARY_NAME
    if _exists(library):
        _check_ancestors(cache_root())
        _check_private(cache_root(), target_dir, library)
        return library
    try:
        os.makedirs(target_dir, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot create the build cache {target_dir}: {exc.strerror}.",
            "set ASCEND_ENV_CACHE_DIR to a writable directory",
        ) from None
    _check_ancestors(cache_root())
    _check_private(cache_root(), target_dir)
    with _locked(target_dir / "build.lock"):
        if library.exists():  # another process finished it while we waited
            _check_private(library)
            return library
        import torch

        what = f"building the simulated NPU's C++ backend for torch {torch.__version__}"
        note = f"once, half a minute to a minute; later runs reuse it from {target_dir}"
        with progress.step(what, note=note), atomic.replacing(library, suffix=".so") as partial:
            _compile(partial, target_dir / "build.log")
            os.chmod(partial, 0o755)
    return library


def _exists(library: Path) -> bool:
    """Whether the cached library is there; a cache this user cannot read (another user's, built
    under sudo or through a shared ASCEND_ENV_CACHE_DIR) is an :class:`EnvironmentProblem`."""
    try:
        return library.exists()
    except OSError as exc:
        owner = next((f" (it belongs to uid {p.stat().st_uid})" for p in library.parents if _stats(p)), "")
        raise EnvironmentProblem(
            f"the simulated NPU's build cache {library.parent} cannot be read by this user (uid "
            f"{os.geteuid()}): {exc.strerror}{owner}; another user built it.",
            _PRIVATE_FIX,
        ) from None


def _stats(path: Path) -> bool:
    try:
        path.stat()
    except OSError:
        return False
    return True


def _compile(output: Path, log: Path) -> None:
    command = compile_command(output)
    progress.say(f"compiler command: {shlex.join(command)}", verbose=True)
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        log.write_text(shlex.join(command) + "\n\n" + result.stdout, encoding="utf-8")
        tail = "\n".join(result.stdout.strip().splitlines()[-15:])
        if killed(result.returncode, result.stdout):
            raise EnvironmentProblem(
                f"building the simulated NPU backend failed: the C++ compiler was killed (exit "
                f"{result.returncode}), most likely by the kernel for want of memory; it needs about "
                f"{COMPILER_MEMORY} (full log: {log}):\n{tail}",
                "free memory (close other programs, or give the container more), then run the "
                "command again; the backend is built once and cached",
            )
        raise EnvironmentProblem(
            f"building the simulated NPU backend failed (full log: {log}):\n{tail}",
            "check that the C++ compiler supports C++17 and matches the one torch was built for",
        )


#: The compiler's peak memory building the backend, rounded up: g++ 12.2 peaked at 610 MB with torch
#: 2.1.0's headers and 880 MB with torch 2.13.0's (resident set size, measured).
COMPILER_MEMORY = "1 GB"

# What the compiler drivers print when the kernel killed the compiler proper they started: g++
# >= 8 "fatal error: Killed signal terminated program cc1plus", older g++ "internal compiler
# error: Killed (program cc1plus)", clang++ "error: unable to execute command: Killed".
_KILLED = (
    "Killed signal terminated program",
    "internal compiler error: Killed",
    "unable to execute command: Killed",
)


def killed(returncode: int, output: str) -> bool:
    """Whether the compiler (the driver, or the compiler proper it started) died of SIGKILL, as
    the kernel's out-of-memory killer ends it: a negative return code from ``subprocess`` (-9), a
    shell's 137, or the driver's own words for its child's death."""
    return returncode in (-signal.SIGKILL, 128 + signal.SIGKILL) or any(s in output for s in _KILLED)


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

    fd = os.open(library, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        _check_private_file(library, os.fstat(fd))
        by_descriptor = f"/proc/self/fd/{fd}"
        path = by_descriptor if os.path.exists(by_descriptor) else str(library)  # no /proc: the path
        guard = getattr(torch._ops, "dl_open_guard", None)
        if guard is None:
            ctypes.CDLL(path)
        else:
            with guard():
                ctypes.CDLL(path)
        torch.ops.loaded_libraries.add(str(library))
    finally:
        os.close(fd)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        reason = "is a symbolic link" if exc.errno == errno.ELOOP else f"cannot be opened: {exc.strerror}"
        raise EnvironmentProblem(
            f"the simulated NPU's build lock {path} {reason}.",
            f"remove it (rm {shlex.quote(str(path))}), or set ASCEND_ENV_CACHE_DIR to a directory "
            "of your own",
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress.say(
                f"waiting for another process that is building the simulated NPU's backend in {path.parent}"
            )
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _check_private(*paths: Path) -> None:
    """Refuse a cache path that is a symbolic link, another user's, or writable by others."""
    for path in paths:
        _check_private_file(path, os.lstat(path))


def _check_private_file(path: Path, info: os.stat_result) -> None:
    if stat.S_ISLNK(info.st_mode):
        problem = "is a symbolic link"
    elif info.st_uid != os.geteuid():
        problem = f"belongs to another user (uid {info.st_uid})"
    elif info.st_mode & 0o022:
        problem = "is writable by other users"
    else:
        return
    raise EnvironmentProblem(
        f"the simulated NPU's build cache {path} {problem}: a library planted there would run "
        "as you, so it is not used.",
        _PRIVATE_FIX,
    )


_PRIVATE_FIX = (
    "set ASCEND_ENV_CACHE_DIR to a directory of your own that only you can write (mkdir -m 700 DIR)"
)


def _check_ancestors(root: Path) -> None:
    """Refuse a cache root inside a directory where another user could rename it away and put
    their own in its place (sudo without -H: root's cache in another user's home).

    Every directory from the root's parent up to the first one that root owns and no one else
    can write must be root's or this user's, and writable by others only with the sticky bit
    (as ``/tmp`` is), as OpenSSH's ``StrictModes`` walks a path."""
    euid = os.geteuid()
    real = Path(os.path.realpath(root))
    for directory in [real.parent, *real.parent.parents]:
        try:
            info = os.stat(directory)
        except OSError:
            return
        if info.st_uid not in (0, euid):
            problem = f"belongs to another user (uid {info.st_uid})"
        elif info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
            problem = "is writable by other users"
        elif info.st_uid == 0 and not info.st_mode & 0o022:
            return
        else:
            continue
        raise EnvironmentProblem(
            f"the simulated NPU's build cache {root} is inside {directory}, which {problem}: "
            "they could replace the cache with their own, and a library planted there would run "
            "as you, so it is not used.",
            _PRIVATE_FIX,
        )
