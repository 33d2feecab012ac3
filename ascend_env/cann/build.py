"""Building the emulated CANN's libraries for the installed torch_npu, cached.

One compiler call builds the core library (soname ``libascendcl.so``: every entry point, the
runtime, the aclnn and aclop ops through ATen, and a generated weak stub for every other entry
point the wheel imports or looks up), then each other CANN library the wheel needs (``libhccl.so``,
``libopapi.so``, ``libaclnn_*.so``, ...) is linked as an empty library that needs the core, so that
``dlsym`` on its handle finds the core's symbols. They are built into the protected build cache
(:mod:`ascend_env.utils.buildcache`) under ``cann-<torch>-<key>/``, the key hashing the sources,
the torch version and ABI, and the wheel's symbol lists.
"""

from __future__ import annotations

import hashlib
import shlex
import sys
from pathlib import Path
from typing import List, Tuple

from ascend_env.cann.symbols import WheelSymbols, stub_source, wheel_symbols
from ascend_env.utils import atomic, buildcache

__all__ = ["CORE", "CSRC", "OWNER", "aliases", "build", "build_dir", "buildcache_compiler", "compile_command"]

CSRC = Path(__file__).resolve().parent / "csrc"
CORE = "libascendcl.so"
OWNER = "the emulated CANN"
_SOURCES = ("runtime.cpp", "ops.cpp")


def build_dir(symbols: WheelSymbols) -> Path:
    """Where the libraries for the running torch, these sources and this wheel are built."""
    import torch

    digest = hashlib.sha256()
    for source in sorted(CSRC.iterdir()):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    digest.update(
        f"{torch.__version__}|{torch._C._GLIBCXX_USE_CXX11_ABI}|{sys.platform}|{symbols.digest()}".encode()
    )
    return buildcache.cache_root() / f"cann-{torch.__version__.replace('+', '_')}-{digest.hexdigest()[:12]}"


def compile_command(output: Path, symbols: WheelSymbols) -> List[str]:
    """The command that builds the core library into ``output`` and links the others beside it.

    The generated stubs are written into the (checked) build directory first."""
    import torch

    stubs = output.parent / "stubs.cpp"
    with atomic.replacing(stubs, suffix=".cpp") as partial:
        partial.write_text(stub_source(symbols), encoding="utf-8")
    root = Path(torch.__file__).resolve().parent
    acl = symbols.package / "include" / "third_party" / "acl" / "inc"
    compiler = shlex.split(buildcache_compiler())
    core = [
        *compiler,
        "-shared",
        "-fPIC",
        "-O1",
        "-std=c++17",
        "-w",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        "-isystem",
        str(root / "include"),
        "-isystem",
        str(acl),
        "-isystem",
        str(acl / "acl"),
        f"-I{CSRC}",
        *[str(CSRC / name) for name in _SOURCES],
        str(stubs),
        "-o",
        str(output),
        f"-Wl,-soname,{CORE}",
        f"-L{root / 'lib'}",
        f"-Wl,-rpath,{root / 'lib'}",
        "-lc10",
        "-ltorch_cpu",
    ]
    script = [shlex.join(core)]
    for name in aliases(symbols):
        partial = output.parent / f".{name}.partial"
        link = [*compiler, "-shared", "-x", "c", "/dev/null", "-o", str(partial), f"-Wl,-soname,{name}"]
        link += ["-x", "none", "-Wl,--no-as-needed", str(output)]
        move = shlex.join(["mv", "-f", str(partial), str(output.parent / name)])
        script.append(f"{shlex.join(link)} && {move}")
    return ["sh", "-c", " && ".join(script)]


def aliases(symbols: WheelSymbols) -> Tuple[str, ...]:
    """The CANN libraries other than the core, built as empty libraries that need it."""
    return tuple(name for name in symbols.libraries if name != CORE)


def build(symbols: WheelSymbols | None = None) -> Tuple[Path, Tuple[Path, ...]]:
    """The core library and the others, built first where no finished build is cached."""
    symbols = symbols or wheel_symbols()
    import torch

    directory = build_dir(symbols)
    spec = buildcache.Build(
        directory=directory,
        library=CORE,
        command=lambda output: compile_command(output, symbols),
        owner=OWNER,
        what=f"building the emulated CANN for torch {torch.__version__} and {symbols.package}",
        note=f"once, about a minute; later runs reuse it from {directory}",
    )
    core = buildcache.ensure_built(spec)
    return core, tuple(directory / name for name in aliases(symbols))


def buildcache_compiler() -> str:
    """The C++ compiler: ``$CXX``, else the first of ``c++``, ``g++``, ``clang++`` on PATH."""
    import os
    import shutil

    candidates = [os.environ["CXX"]] if os.environ.get("CXX") else ["c++", "g++", "clang++"]
    for candidate in candidates:
        if candidate.strip() and shutil.which(shlex.split(candidate)[0]):
            return candidate
    from ascend_env.exceptions import EnvironmentProblem

    raise EnvironmentProblem(
        f"the emulated CANN needs a C++ compiler to build its libraries once, and none was found "
        f"(tried {', '.join(candidates)}).",
        "install one (Debian/Ubuntu: apt-get install g++), or point CXX at one",
    )
