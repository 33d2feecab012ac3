"""One ascend-env run at a time per site-packages directory (``fcntl.flock``).

The lock file lives in ``.ascend-env/``, which ``restore`` removes while holding the
lock; a waiter that then gets the lock on the removed file sees that its inode is no
longer the one at the path, and tries again.
"""

from __future__ import annotations

import errno
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ascend_env.exceptions import EnvironmentProblem
from ascend_env.patching.owners import make_dir, match_owner

__all__ = ["locked"]

LOCK_FILE = "lock"


def _cannot_create(directory: Path, exc: OSError) -> EnvironmentProblem:
    """The problem and fix for an OSError while creating ``directory`` or its lock file."""
    where = directory.parent
    if exc.errno == errno.EROFS:
        return EnvironmentProblem(
            f"cannot write in {where}: its file system is mounted read-only, so nothing was changed.",
            "run ascend-env where that file system is writable (in a Dockerfile: a RUN step of the "
            "image build), or use a virtual environment on a writable one.",
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return EnvironmentProblem(
            f"cannot write in {where} ({exc.strerror}): site-packages is read-only for this user.",
            "run as the user that owns the environment, or use a writable virtual environment.",
        )
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return EnvironmentProblem(
            f"cannot create {directory} ({exc.strerror}): its file system has no free space or inodes "
            "left, or the user's quota is used up, so nothing was changed.",
            f"free space and inodes there (df -h {where}; df -i {where}), then run the command again.",
        )
    return EnvironmentProblem(
        f"cannot create {directory} or its lock file ({exc.strerror}), so nothing was changed.",
        f"check {where} (permissions, free space: df -h {where}), then run the command again.",
    )


@contextmanager
def locked(directory: Path, timeout: float = 120.0) -> Iterator[Path]:
    """Hold an exclusive lock on ``directory/lock``, creating ``directory`` if needed."""
    import fcntl

    path = directory / LOCK_FILE
    if directory.is_symlink():
        raise EnvironmentProblem(
            f"{directory} is a symbolic link (to {os.readlink(directory)}): ascend-env keeps its state "
            "only in a real directory inside site-packages, so nothing was changed.",
            f"remove the link (rm {directory}) and run the command again.",
        )
    deadline = time.monotonic() + timeout
    while True:
        try:
            make_dir(directory)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            match_owner(path, directory)
        except FileNotFoundError:
            continue  # removed between mkdir and open: try again
        except FileExistsError:
            if directory.exists() and not directory.is_dir():
                raise EnvironmentProblem(
                    f"{directory} is a file, not ascend-env's state directory, so nothing was changed.",
                    f"move it away (mv {directory} {directory}.bak) and run the command again.",
                ) from None
            continue  # another run removed the directory while mkdir looked at it: try again
        except OSError as exc:
            raise _cannot_create(directory, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if time.monotonic() > deadline:
                raise EnvironmentProblem(
                    f"another ascend-env run has held {path} for over {timeout:.0f} s.",
                    "wait for it to finish; if no ascend-env process is running, run the command again.",
                ) from None
            time.sleep(0.05)
            continue
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        yield path
    finally:
        os.close(fd)
