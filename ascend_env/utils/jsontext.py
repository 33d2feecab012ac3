"""JSON text that ascend-env reads from files others may have written.

:func:`loads` is :func:`json.loads` with one difference: text nested more than :data:`MAX_DEPTH`
levels deep (``[[[[...`` a hundred thousand deep) raises :class:`json.JSONDecodeError`, the error
every other malformed text raises, so that each reader's "is not JSON" message covers it.

The depth is counted before the parser runs, not caught as a RecursionError after it: on Python
3.8 a RecursionError that is caught and swallowed leaves the thread's recursion guard tripped, and
the next deep call then ends the process with "Fatal Python error: Cannot recover from stack
overflow" (CPython 3.8's ``_Py_CheckRecursiveCall``). ascend-env's own files nest a few levels.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from typing import Any, Optional

__all__ = ["MAX_DEPTH", "loads", "read_regular"]

MAX_DEPTH = 100

# A whole string (so that brackets inside strings are not counted), or one bracket.
_TOKENS = re.compile(r'"(?:\\.|[^"\\])*"|[\[\]{}]')


def read_regular(path: os.PathLike[str] | str, limit: Optional[int] = None, follow: bool = False) -> bytes:
    """The bytes of the regular file at ``path`` (at most ``limit``), as a file another process may
    have put there is read: opened without blocking (a FIFO would wait forever for a writer) and,
    unless ``follow``, without following a symbolic link; anything but a regular file (a FIFO, a
    device, a socket) raises ``OSError(EINVAL)``, a missing one FileNotFoundError."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
        chunks = []
        left = -1 if limit is None else limit
        while left != 0:
            chunk = os.read(fd, 1 << 20 if left < 0 else min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left = left if left < 0 else left - len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def loads(text: str) -> Any:
    """The value of JSON ``text``; :class:`json.JSONDecodeError` for anything that is not JSON."""
    depth = 0
    for token in _TOKENS.finditer(text):
        bracket = token.group()
        if bracket in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise json.JSONDecodeError(f"nested more than {MAX_DEPTH} levels deep", text, token.start())
        elif bracket in "]}":
            depth -= 1
    try:
        return json.loads(text)
    except RecursionError:  # a parser with a lower limit than MAX_DEPTH levels
        raise json.JSONDecodeError("nested too deeply", text, 0) from None
