"""The one owner of ``<site-packages>/.ascend-env/``: its layout, its stored bytes and its writes.

Everything lives in ``.ascend-env/``: ``state.json`` (:mod:`~ascend_env.patching.state`),
``journal.json`` (:mod:`~ascend_env.patching.journal`: only while a change is in flight or was
interrupted), ``originals/<sha256>`` (the bytes ``restore`` puts back), ``tmp/`` and ``lock``
(:mod:`~ascend_env.patching.locking`). Other modules ask this one for those paths; none builds a
path inside it. Every file is written by :func:`write_atomic` (temp file, fsync, ``os.replace``).
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
from pathlib import Path
from typing import Iterable, List, Optional, Tuple

from ascend_env.exceptions import EnvironmentProblem
from ascend_env.patching.faults import crash_point
from ascend_env.patching.owners import give_fd, make_dir, owner_for
from ascend_env.patching.problems import start_over
from ascend_env.utils import atomic

__all__ = [
    "DIRECTORY",
    "JOURNAL_FILE",
    "LOCK_FILE",
    "ORIGINALS",
    "STATE_FILE",
    "TMP",
    "clean",
    "file_sha256",
    "holds_ours",
    "read_blob",
    "read_file",
    "remove_directory",
    "remove_empty",
    "state_dir",
    "write_atomic",
]

DIRECTORY = ".ascend-env"
STATE_FILE = "state.json"
JOURNAL_FILE = "journal.json"
ORIGINALS = "originals"
TMP = "tmp"
LOCK_FILE = "lock"
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def state_dir(site_packages: Path) -> Path:
    """``<site-packages>/.ascend-env``."""
    return Path(site_packages) / DIRECTORY


def read_file(path: Path) -> Optional[bytes]:
    """The bytes of the file at ``path``, or None when there is no such file.

    One read, no separate existence check: another run may remove the file at any moment.
    """
    try:
        return path.read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def file_sha256(path: Path) -> Optional[str]:
    """The sha256 hex of the file at ``path``, or None when there is no such file."""
    data = read_file(path)
    return None if data is None else hashlib.sha256(data).hexdigest()


def write_atomic(path: Path, data: bytes, tmp_dir: Path, label: Optional[str] = None) -> None:
    """Replace ``path`` with ``data`` via a temp file in ``tmp_dir``, fsynced, keeping the file's mode."""
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    owner = owner_for(path)
    make_dir(tmp_dir)
    try:
        _write_through(path, data, tmp_dir, mode, owner, label)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        # tmp_dir is on another file system: stage next to the target instead.
        _write_through(path, data, path.parent, mode, owner, label)


def _write_through(
    path: Path, data: bytes, staging: Path, mode: int, owner: Optional[Tuple[int, int]], label: Optional[str]
) -> None:
    with atomic.replacing(path, staging=staging, durable=True) as temporary:
        with open(temporary, "wb") as handle:
            handle.write(data)
            os.fchmod(handle.fileno(), mode)
            give_fd(handle.fileno(), owner)  # root writing another user's environment: keep it theirs
        if label:
            crash_point(label + "-temp")


def read_blob(site_packages: Path, digest: str) -> bytes:
    """The bytes stored under ``digest``; raises when missing or corrupt."""
    path = state_dir(site_packages) / ORIGINALS / digest
    try:
        data = path.read_bytes()
    except OSError:
        data = None
    if data is None or hashlib.sha256(data).hexdigest() != digest:
        raise EnvironmentProblem(
            f"the recorded bytes {path} are missing or damaged.",
            start_over(path.parent.parent),
        )
    return data


def _ours(path: Path) -> bool:
    """Whether ascend-env wrote ``path`` (inside ``.ascend-env``): its state, journal and lock,
    stored bytes (named by their sha256) and temporary files (named ``.<random>``)."""
    parent = path.parent.name
    if parent == ORIGINALS:
        return bool(_DIGEST.match(path.name))
    if parent == TMP:
        return path.name.startswith(".")
    return path.name in (STATE_FILE, JOURNAL_FILE, LOCK_FILE) or path.name.startswith(".")


def clean(directory: Path, keep: Iterable[str]) -> None:
    """Remove stored bytes no state names and temporary files; what ascend-env did not write stays."""
    keep = set(keep)
    for sub in (ORIGINALS, TMP):
        for path in _files(directory / sub):
            if _ours(path) and path.name not in keep:
                path.unlink()
    remove_empty(directory / TMP)


def _files(directory: Path) -> List[Path]:
    """The plain files in ``directory`` (none where it is not a directory)."""
    try:
        return [path for path in directory.iterdir() if path.is_file() and not path.is_symlink()]
    except (FileNotFoundError, NotADirectoryError):
        return []


def remove_empty(directory: Path) -> None:
    """Remove ``directory`` where it is empty; leave it where it is not, or is gone."""
    try:
        directory.rmdir()
    except OSError:  # not empty (a file ascend-env did not write), or gone
        pass


def remove_directory(site_packages: Path) -> None:
    """Remove what ascend-env wrote in ``.ascend-env/``, the lock file last (so waiters notice
    it went), and the directory once empty. A file ascend-env did not write stays, and with it
    the directory."""
    directory = state_dir(site_packages)
    for sub in (ORIGINALS, TMP):
        for path in _files(directory / sub):
            if _ours(path):
                path.unlink()
        remove_empty(directory / sub)
    lock = directory / LOCK_FILE
    for path in _files(directory):
        if _ours(path) and path != lock:
            path.unlink()
    try:
        lock.unlink()
    except FileNotFoundError:
        pass
    remove_empty(directory)


def holds_ours(site_packages: Path) -> bool:
    """Whether ``.ascend-env/`` holds a file ascend-env wrote; an empty one is removed (a run
    refused for want of an inode left it in older releases)."""
    directory = state_dir(site_packages)
    places = (directory, directory / ORIGINALS, directory / TMP)
    found = any(_ours(path) for place in places for path in _files(place))
    if not found:
        remove_empty(directory)
    return found
