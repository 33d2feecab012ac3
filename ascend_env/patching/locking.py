"""One ascend-env run at a time per site-packages directory: ``fcntl.flock`` on ``.ascend-env/lock``.

``restore`` removes the directory while holding the lock; a waiter that then gets the lock on
the removed file sees that its inode is no longer the one at the path, and tries again.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from ascend_env.patching.owners import make_dir, match_owner
from ascend_env.patching.problems import cannot_create, held_too_long, not_a_directory, symlinked
from ascend_env.patching.store import LOCK_FILE, remove_empty

__all__ = ["locked"]


def _open_lock_file(directory: Path, path: Path) -> Optional[int]:
    """A descriptor of the lock file, creating ``directory``; None when a concurrent run removed it.

    Where the lock file cannot be created (no inode left, say), a directory this call made is
    removed again: a refused run leaves nothing behind."""
    made = not directory.is_dir()
    try:
        make_dir(directory)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except FileNotFoundError:
        return None  # removed between mkdir and open
    except FileExistsError:
        if directory.exists() and not directory.is_dir():
            raise not_a_directory(directory) from None
        return None  # another run removed the directory while mkdir looked at it
    except OSError as exc:
        if made:
            remove_empty(directory)
        raise cannot_create(directory, exc) from None
    match_owner(path, directory)  # never raises: where chown is refused, the file stays as it is
    return fd


def _try_flock(fd: int, path: Path, deadline: float, timeout: float) -> bool:
    """Lock ``fd`` without waiting; when another run holds it, close ``fd`` and say False.

    Raises :class:`~ascend_env.exceptions.EnvironmentProblem` once ``deadline`` (a
    ``time.monotonic()``) has passed.
    """
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        if time.monotonic() > deadline:
            raise held_too_long(path, timeout) from None
        return False
    return True


def _still_linked(path: Path, fd: int) -> bool:
    """Whether ``fd`` is still the file at ``path`` (a finishing restore removes the directory)."""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _acquire(directory: Path, path: Path, timeout: float) -> int:
    """An open descriptor of ``path``, exclusively locked, that is still the file at ``path``."""
    deadline = time.monotonic() + timeout
    while True:
        fd = _open_lock_file(directory, path)
        if fd is None:
            continue
        if not _try_flock(fd, path, deadline, timeout):
            time.sleep(0.05)
            continue
        if _still_linked(path, fd):
            return fd
        os.close(fd)  # locked a file another run has unlinked: a new one may be locked meanwhile


@contextmanager
def locked(directory: Path, timeout: float = 120.0) -> Iterator[Path]:
    """Hold an exclusive lock on ``directory/lock``, creating ``directory`` if needed."""
    if directory.is_symlink():
        raise symlinked(directory)
    path = directory / LOCK_FILE
    fd = _acquire(directory, path, timeout)
    try:
        yield path
    finally:
        os.close(fd)
