"""Who owns what ascend-env writes into an environment that another user owns.

Run as root on another user's virtual environment (``sudo ascend-env install --target ...``, a
Dockerfile step that prepares a user's home), every file and directory ascend-env creates goes
to the owner and group of what it replaces, or of the directory it is created in, so that the
user can still upgrade, uninstall and restore without root. As any other user nothing changes
hands (only root can give files away).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Tuple

__all__ = ["give_fd", "make_dir", "match_owner", "owner_for"]


def owner_for(path: Path) -> Optional[Tuple[int, int]]:
    """The ``(uid, gid)`` that a file written at ``path`` should get: the existing file's, else
    its directory's; None when this process is not root or root owns it anyway."""
    if os.geteuid() != 0:
        return None
    try:
        info = os.stat(path)
    except FileNotFoundError:
        try:
            info = os.stat(path.parent)
        except OSError:
            return None
    owner = (info.st_uid, info.st_gid)
    return None if owner == (0, 0) else owner


def match_owner(path: Path, reference: Path) -> None:
    """Give ``path`` (just created by this process) the owner and group of ``reference``; where
    the file system refuses (root squashed on NFS, say), it stays as it is."""
    try:
        owner = owner_for(reference)
        if owner is not None:
            os.chown(path, *owner, follow_symlinks=False)
    except OSError:
        pass


def give_fd(fd: int, owner: Optional[Tuple[int, int]]) -> None:
    """Give the open file ``fd`` to ``owner`` (from :func:`owner_for`; None: leave it); where the
    file system refuses, it stays as it is."""
    if owner is None:
        return
    try:
        os.fchown(fd, *owner)
    except OSError:
        pass


def make_dir(directory: Path) -> None:
    """Create ``directory`` (its parent exists) unless it is there, owned like its parent."""
    if not directory.is_dir():
        directory.mkdir(exist_ok=True)
        match_owner(directory, directory.parent)
