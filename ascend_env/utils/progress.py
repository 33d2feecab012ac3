"""Progress lines on stderr, for every step that takes more than a moment.

A long step says what it is doing when it starts and how long it took when it ends::

    with progress.step("building the simulated NPU's C++ backend", note="once; cached in ..."):
        ...

    ascend-env: building the simulated NPU's C++ backend (once; cached in ...) ...
    ascend-env: building the simulated NPU's C++ backend: done in 41.2 s

Progress never goes to stdout (``--json`` stays one document). The lines are plain text wherever
stderr is not a terminal (a Docker build, CI, a pipe); on a terminal they are dimmed, unless
``NO_COLOR`` is set. How much is said is the verbosity, ``$ASCEND_ENV_VERBOSITY``: -1 (``-q``)
nothing, 0 the default, 1 (``-v``) more detail. The CLI sets it from ``-q``/``-v``, so the
processes a command starts (verify's smoke test, audit's command) say as much as it does.

A child whose stderr the parent captures (verify reads torch_npu's fd-2 lines there) writes its
progress to the parent's stderr instead: :func:`forwarded` passes it a duplicate of that stream,
named with its device and inode in ``$ASCEND_ENV_PROGRESS_FD`` so that a grandchild, where the
same number may be another file, does not write there.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from contextlib import contextmanager
from typing import Iterator, Mapping, MutableMapping, Optional, Tuple

__all__ = [
    "FD_VARIABLE",
    "Ending",
    "NORMAL",
    "PREFIX",
    "QUIET",
    "VARIABLE",
    "VERBOSE",
    "forwarded",
    "level",
    "say",
    "set_level",
    "step",
]

VARIABLE = "ASCEND_ENV_VERBOSITY"
FD_VARIABLE = "ASCEND_ENV_PROGRESS_FD"
QUIET, NORMAL, VERBOSE = -1, 0, 1
PREFIX = "ascend-env: "


def level(environ: Optional[Mapping[str, str]] = None) -> int:
    """The verbosity: :data:`QUIET`, :data:`NORMAL` (unset or not a number) or :data:`VERBOSE`."""
    value = (os.environ if environ is None else environ).get(VARIABLE, "").strip()
    try:
        return max(QUIET, min(VERBOSE, int(value)))
    except ValueError:
        return NORMAL


def set_level(value: int, environ: Optional[MutableMapping[str, str]] = None) -> None:
    """Set the verbosity for this process and every process it starts from now on."""
    (os.environ if environ is None else environ)[VARIABLE] = str(max(QUIET, min(VERBOSE, value)))


def say(message: str, *, verbose: bool = False) -> None:
    """Write ``ascend-env: message`` as a line of its own to stderr; nothing with ``-q``, and a
    ``verbose`` line only with ``-v``."""
    if level() >= (VERBOSE if verbose else NORMAL):
        _write(PREFIX + message)


class Ending:
    """How a :func:`step` ended, where the block knows better than "done": set ``outcome`` (``not
    tried: accelerate is not installed``), and the last line says it instead."""

    def __init__(self) -> None:
        self.outcome: Optional[str] = None


@contextmanager
def step(message: str, *, note: str = "", verbose: bool = False) -> Iterator[Ending]:
    """Say ``message (note) ...`` now and ``message: done in N s`` when the block ends (``failed
    after`` when it raises, ``stopped after`` on Ctrl-C; ``message: OUTCOME, after N s`` where the
    block set the :class:`Ending`'s ``outcome``); ``note`` is said once, at the start."""
    say(f"{message} ({note}) ..." if note else f"{message} ...", verbose=verbose)
    started = time.monotonic()
    ending = Ending()
    try:
        yield ending
    except Exception:
        say(f"{message}: failed after {_seconds(time.monotonic() - started)}", verbose=verbose)
        raise
    except BaseException:
        say(f"{message}: stopped after {_seconds(time.monotonic() - started)}", verbose=verbose)
        raise
    took = _seconds(time.monotonic() - started)
    if ending.outcome:
        say(f"{message}: {ending.outcome}, after {took}", verbose=verbose)
    else:
        say(f"{message}: done in {took}", verbose=verbose)


@contextmanager
def forwarded(env: MutableMapping[str, str]) -> Iterator[Tuple[int, ...]]:
    """For a child whose stderr is captured: set ``env`` so that its progress lines reach this
    process's stderr, and yield the ``pass_fds`` to start it with (none where this stderr has no
    file descriptor, as under pytest's capture: the child's lines then stay in its stderr)."""
    try:
        # Never 0, 1 or 2, which the child gets as its own streams: with stdin closed (a Docker
        # RUN step's `exec 0<&-`), a plain dup would return 0, and the child's stdin replaces it.
        fd = fcntl.fcntl(sys.stderr.fileno(), fcntl.F_DUPFD, 3)
        os.set_inheritable(fd, False)  # pass_fds hands it to that child alone
    except (AttributeError, OSError, ValueError):
        env.pop(FD_VARIABLE, None)
        yield ()
        return
    try:
        info = os.fstat(fd)
        env[FD_VARIABLE] = f"{fd}:{info.st_dev}:{info.st_ino}"
        yield (fd,)
    finally:
        os.close(fd)


def _seconds(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 100 else f"{seconds / 60:.1f} min"


def _forward_fd() -> Optional[int]:
    """The parent's stderr that ``$ASCEND_ENV_PROGRESS_FD`` names, if this process has it open."""
    fd_text, _, identity = os.environ.get(FD_VARIABLE, "").partition(":")
    try:
        fd = int(fd_text)
        info = os.fstat(fd)
    except (ValueError, OSError):
        return None
    return fd if identity == f"{info.st_dev}:{info.st_ino}" else None


def _write(line: str) -> None:
    fd = _forward_fd()
    if fd is not None:
        try:
            os.write(fd, (_styled(line, os.isatty(fd)) + "\n").encode("utf-8", "backslashreplace"))
            return
        except OSError:
            pass
    stream = sys.stderr
    if stream is None:  # pythonw, or a daemon that closed it
        return
    try:
        stream.write(_styled(line, _is_tty(stream)) + "\n")
        stream.flush()
    except (OSError, ValueError, UnicodeEncodeError):
        pass  # progress is never worth failing the command for


def _styled(line: str, tty: bool) -> str:
    if not tty or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return line
    return f"\033[2m{line}\033[0m"


def _is_tty(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:
        return False
