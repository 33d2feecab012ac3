"""The problems, and their fixes, of ascend-env's own directory: damaged, unwritable, locked.

Each returns an :class:`~ascend_env.exceptions.EnvironmentProblem` for the caller to raise; the
modules that read and write ``.ascend-env/`` share these texts, so the same trouble reads the
same wherever it is found.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from ascend_env.exceptions import EnvironmentProblem, reinstall

__all__ = [
    "cannot_create",
    "held_too_long",
    "not_a_directory",
    "not_valid",
    "start_over",
    "symlinked",
    "write_failed",
]


def start_over(directory: Path, then: str = "") -> str:
    """The fix for a damaged or foreign ``.ascend-env``: transformers as its wheel has it, and the
    directory gone (the version pinned: a newer transformers may need other patches)."""
    command = reinstall("transformers", "<version>")
    return f"reinstall transformers ({command}), then delete {directory}{then}."


def not_valid(source: str, what: str, exc: Exception) -> EnvironmentProblem:
    """``state.json`` or ``journal.json`` cannot be read: the way back is a clean reinstall."""
    return EnvironmentProblem(
        f"{source} is not a valid ascend-env {what} ({exc}).",
        start_over(Path(source).parent),
    )


def cannot_create(directory: Path, exc: OSError) -> EnvironmentProblem:
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


def symlinked(directory: Path) -> EnvironmentProblem:
    return EnvironmentProblem(
        f"{directory} is a symbolic link (to {os.readlink(directory)}): ascend-env keeps its state "
        "only in a real directory inside site-packages, so nothing was changed.",
        f"remove the link (rm {directory}) and run the command again.",
    )


def not_a_directory(directory: Path) -> EnvironmentProblem:
    return EnvironmentProblem(
        f"{directory} is a file, not ascend-env's state directory, so nothing was changed.",
        f"move it away (mv {directory} {directory}.bak) and run the command again.",
    )


def held_too_long(path: Path, timeout: float) -> EnvironmentProblem:
    return EnvironmentProblem(
        f"another ascend-env run has held {path} for over {timeout:.0f} s.",
        "wait for it to finish; if no ascend-env process is running, run the command again.",
    )


def write_failed(path: Path, exc: OSError) -> EnvironmentProblem:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = f"free space and inodes on the file system of {path} (df -h, df -i), then run the command again"
    elif exc.errno == errno.EROFS:
        fix = (
            f"remount the file system of {path} writable (or run where it is: in a Dockerfile, a RUN "
            "step of the image build), then run the command again"
        )
    else:
        fix = (
            "make site-packages writable for this user (or use a virtual environment), "
            "then run the command again"
        )
    return EnvironmentProblem(
        f"cannot write {path} ({exc.strerror}).",
        fix + ": it finishes an interrupted change, or starts afresh.",
    )
