"""Replace a file in one step: write a temporary file, then ``os.replace`` it over the target.

A reader sees the old file or the new one, never a part. Every file ascend-env writes for others
to read goes through :func:`replacing`: the patched files and the records in ``.ascend-env``
(``durable``: fsynced, as a crash must not leave a renamed but empty file), the reports that
``verify``'s and ``audit``'s child processes write, the simulator's compiled library and the
wheels ``patch-wheel`` makes.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

__all__ = ["fsync_directory", "replacing"]


@contextmanager
def replacing(
    target: Path, *, staging: Optional[Path] = None, suffix: str = "", durable: bool = False
) -> Iterator[Path]:
    """Yield the path of a new empty file; when the block ends, it replaces ``target``.

    The file is made in ``staging`` (default: ``target``'s directory; it must be on the same file
    system, else ``os.replace`` raises ``EXDEV``) with mode 0600 and a name that starts with a
    dot and ends in ``suffix``, so that a reader listing ``*.json`` never sees it. If the block
    raises, or the rename fails, the file is removed and ``target`` is left as it was.
    ``durable``: fsync the file before the rename and its directory after it.
    """
    directory = target.parent if staging is None else staging
    handle, name = tempfile.mkstemp(dir=directory, prefix=".", suffix=suffix)
    os.close(handle)
    temporary = Path(name)
    try:
        yield temporary
        if durable:
            _fsync(temporary)
        os.replace(temporary, target)
    except BaseException:
        _remove(temporary)
        raise
    if durable:
        fsync_directory(target.parent)


def fsync_directory(directory: Path) -> None:
    """Make the entries of ``directory`` (a rename, a removal) survive a crash."""
    _fsync(directory)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
