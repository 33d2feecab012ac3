"""The startup hook's files in a site-packages directory.

Three files: ``ascend_env_hook.py``, a copy of :mod:`ascend_env.hook.boot` (standard library only,
it starts itself when imported under that name); ``ascend_env_hook.pth``, whose import line
Python <= 3.14 runs; and the PEP 829 ``ascend_env_hook.start`` entry point, which Python >= 3.15
runs instead (a ``.start`` file turns off the import lines of the ``.pth`` file with the same
name). The module imports nothing of ascend_env until an NPU backend appears (then
:mod:`ascend_env._watch`), so the hook stays silent even when ascend_env itself is gone;
``install`` writes the three together and ``restore`` and ``pip uninstall ascend-env`` remove them
together.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, List, Optional, TypedDict, cast

from ascend_env.detect.hook_site import MODULE_FILE, NAME, PTH_FILE, START_FILE, installed

__all__ = [
    "ANSWER_LIMIT",
    "GUARD_OFF",
    "GUARD_ON",
    "HookProbe",
    "MODULE_FILE",
    "NAME",
    "PTH_FILE",
    "PTH_TEXT",
    "START_FILE",
    "START_TEXT",
    "bytecode",
    "compile_guard_setting",
    "files",
    "installed",
    "is_current",
    "probe",
    "running",
    "written",
]

PTH_TEXT = (
    "# ascend-env startup hook: registers an NPU isin when torch_npu lacks one. "
    "Remove with: python -m ascend_env restore\n"
    f"import {NAME}\n"
)
START_TEXT = f"# ascend-env startup hook (PEP 829). Remove with: python -m ascend_env restore\n{NAME}:main\n"


def running() -> Optional[ModuleType]:
    """The hook module that started in this process, if any."""
    return sys.modules.get(NAME)


GUARD_ON = b"\nCOMPILE_GUARD = True\n"
GUARD_OFF = b"\nCOMPILE_GUARD = False\n"


def files(compile_guard: bool = True) -> Dict[str, bytes]:
    """The hook's files, by name relative to site-packages; ``compile_guard=False`` writes a
    module that leaves torch_npu's compile mode alone (``install --no-compile-guard``)."""
    source = Path(__file__).with_name("boot.py").read_bytes()
    if not compile_guard:
        source = source.replace(GUARD_ON, GUARD_OFF, 1)
    return {MODULE_FILE: source, PTH_FILE: PTH_TEXT.encode(), START_FILE: START_TEXT.encode()}


def written(compile_guard: bool = True) -> Dict[str, bytes]:
    """Every file ``install`` writes for the hook: :func:`files` and the module's :func:`bytecode`."""
    return {**files(compile_guard), **bytecode(compile_guard)}


def compile_guard_setting(site_packages: Path) -> Optional[bool]:
    """What the installed hook module says of the compile-mode guard (None: no such module, or
    one that says neither)."""
    try:
        source = (site_packages / MODULE_FILE).read_bytes()
    except OSError:
        return None
    return True if GUARD_ON in source else False if GUARD_OFF in source else None


def bytecode(compile_guard: bool = True) -> Dict[str, bytes]:
    """The hook module's bytecode for this interpreter, as ``__pycache__/ascend_env_hook.<tag>.pyc``
    (empty where the interpreter has no cache tag).

    Every Python process imports the module; where it cannot write bytecode
    (``PYTHONDONTWRITEBYTECODE=1``, as most images set; a read-only site-packages; another user's
    environment) it would compile the module at every start, about 13 million instructions. So
    install writes it. It is a checked-hash ``.pyc`` (PEP 552): never used for a source that was
    edited since.
    """
    import importlib.util
    import marshal

    tag = sys.implementation.cache_tag
    if tag is None:
        return {}
    source = files(compile_guard)[MODULE_FILE]
    code = compile(source, MODULE_FILE, "exec", dont_inherit=True)
    flags = (0b11).to_bytes(4, "little")  # hash-based, checked against the source
    # marshal format 2 has no back-references, whose use depends on the objects' reference counts
    # in the writing process: the same source then gives the same bytes in any process.
    body = marshal.dumps(code, 2)
    data = importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(source) + body
    return {f"__pycache__/{NAME}.{tag}.pyc": data}


def is_current(site_packages: Path) -> bool:
    """Whether every hook file is present with the content this release writes (with the
    compile-mode guard setting the installed module has)."""
    setting = compile_guard_setting(site_packages)
    if setting is None:
        return False
    try:
        return all((site_packages / name).read_bytes() == data for name, data in files(setting).items())
    except OSError:
        return False


# Run in a fresh interpreter by :func:`probe`: did the hook start, and what did it register once
# torch_npu (when installed) was imported? The answer goes to the file named by sys.argv[1]
# (written whole, then renamed), never to stdout: torch_npu's atexit messages, a sitecustomize or
# a .pth may print there at any time.
# torch_npu is looked for with PathFinder alone: importlib.util.find_spec would ask the hook's
# finder, which steps aside once asked, and the import after it would then go unseen.
_PROBE = """
import importlib.machinery, json, os, sys
boot = sys.modules.get("ascend_env_hook")
report = {"ran": bool(boot and boot.STATE.started), "disabled": bool(boot and boot.STATE.disabled)}
if report["ran"] and not report["disabled"]:
    if importlib.machinery.PathFinder.find_spec("torch_npu") is None:
        report["backend"] = None
    else:
        report["backend"] = "torch_npu"
        try:
            import torch_npu  # noqa: F401
        except Exception as exc:
            report["backend_error"] = f"{type(exc).__name__}: {exc}"
    from ascend_env.hook import runtime
    status = runtime.status()
    report.update(registered=status["registered"], native=status["native"], errors=status["errors"],
                  compile_guard=status["compile_guard"])
with open(sys.argv[1] + ".part", "w", encoding="utf-8") as answer:
    answer.write(json.dumps(report))
os.replace(sys.argv[1] + ".part", sys.argv[1])
"""


class HookProbe(TypedDict, total=False):
    """:func:`probe`'s answer: whether the hook ``ran`` in a fresh process (None: not asked) or was
    ``disabled``; the ``backend`` it waited for (None: torch_npu is not installed) and why it did
    not import (``backend_error``); what the hook registered, left ``native``, its ``errors`` and
    the compile-mode guard's record; or why there is no answer (``error``)."""

    ran: Optional[bool]
    disabled: bool
    backend: Optional[str]
    backend_error: str
    registered: List[str]
    native: List[str]
    errors: List[str]
    compile_guard: Optional[Dict[str, Any]]
    error: str


#: The most of the probe's answer and of its stderr that :func:`probe` reads.
ANSWER_LIMIT = 1 << 20
_STDERR_TAIL = 1 << 16


def probe(python: str, timeout: float = 60) -> HookProbe:
    """Start ``python`` afresh and report whether the hook ran there, and what it registered once
    torch_npu was imported; a process that takes longer than ``timeout`` seconds is stopped.

    The answer comes back in a file of its own; what the process prints to stdout is dropped and
    its stderr goes to a file (no pipe that a process it leaves behind could hold open).
    """
    import subprocess
    import tempfile

    from ascend_env.utils.pyflags import child_flags

    with tempfile.TemporaryDirectory(prefix="ascend-env-probe-") as scratch:
        answer, errors = Path(scratch, "answer.json"), Path(scratch, "stderr")
        try:
            with open(errors, "wb") as stderr:
                done = subprocess.run(
                    [python, *child_flags(python), "-c", _PROBE, str(answer)],
                    timeout=timeout,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                )
        except subprocess.TimeoutExpired:
            error = f"{python} did not finish within {timeout:.0f} s (importing torch_npu)"
            return {"ran": False, "error": error}
        except OSError as exc:
            return {"ran": False, "error": f"could not run {python}: {exc}"}
        return _answer(python, answer, errors, done.returncode)


def _answer(python: str, answer: Path, errors: Path, code: int) -> HookProbe:
    """The probe's answer from its file; where there is none, why, from its exit code and stderr."""
    import json

    from ascend_env.utils import jsontext

    try:
        # Only a regular file, never blocking: the process may leave a FIFO at the answer's path.
        text = jsontext.read_regular(answer, ANSWER_LIMIT + 1)
    except FileNotFoundError:
        return {"ran": False, "error": f"{python} exited {code}: {_last_line(errors)}"}
    except OSError as exc:
        why = exc.strerror or exc
        return {"ran": False, "error": f"{python} left an answer that cannot be read ({why}; exit {code})"}
    try:
        found = jsontext.loads(text.decode("utf-8")) if len(text) <= ANSWER_LIMIT else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        found = None
    if not isinstance(found, dict):
        return {"ran": False, "error": f"{python} wrote an answer that is not the probe's (exit {code})"}
    return cast(HookProbe, found)


def _last_line(errors: Path) -> str:
    """The last line of the probe's stderr, or "no output"."""
    try:
        fd = os.open(errors, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return "no output"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # replaced by a FIFO: never wait for a writer
            return "no output"
        os.lseek(fd, max(0, info.st_size - _STDERR_TAIL), os.SEEK_SET)
        text = os.read(fd, _STDERR_TAIL).decode("utf-8", "replace")
    except OSError:
        text = ""
    finally:
        os.close(fd)
    return (text.strip().splitlines() or ["no output"])[-1]
