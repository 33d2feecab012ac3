"""A pipe whose every byte is copied to this process's fd 2 as it comes, each line also handed to
a reader (standard library only).

A supervised command gets :attr:`Tee.fd` as its standard error: the user still sees everything
it writes there, at once, and the reader sees each complete line (and the last, unterminated one)
as bytes. :attr:`Tee.identity` (device, inode) is the pipe's, so that a process of the command can
tell, from ``os.fstat(2)``, whether its fd 2 still went there.
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Optional, Tuple

__all__ = ["Tee"]

_CHUNK = 65536


class Tee:
    """The pipe, and the thread that copies it; :meth:`finish` once the writers are gone."""

    def __init__(self, on_line: Callable[[bytes], None], out: int = 2) -> None:
        self.on_line = on_line
        self.out = out
        read, write = os.pipe()
        self._read: Optional[int] = read
        self.fd: Optional[int] = write
        info = os.fstat(write)
        self.identity: Tuple[int, int] = (int(info.st_dev), int(info.st_ino))
        self._pending = b""
        self._thread = threading.Thread(target=self._copy, name="ascend-env-tee", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        read = self._read
        while read is not None:
            try:
                chunk = os.read(read, _CHUNK)
            except InterruptedError:
                continue
            except OSError:
                break
            if not chunk:
                break
            self._forward(chunk)
            self._pending += chunk
            *lines, self._pending = self._pending.split(b"\n")
            for line in lines:
                self._hand(line)
        if self._pending:
            self._hand(self._pending)
            self._pending = b""

    def _forward(self, chunk: bytes) -> None:
        view = memoryview(chunk)
        while view:
            try:
                view = view[os.write(self.out, view) :]
            except InterruptedError:
                continue
            except OSError:
                return

    def _hand(self, line: bytes) -> None:
        try:
            self.on_line(line)
        except Exception:  # noqa: BLE001 - a reader's bug must not stop the copy
            pass

    def finish(self, timeout: float = 5.0) -> None:
        """Close this process's write end and wait (at most ``timeout`` seconds) for the copy to
        reach the end: every writer of the command must be gone by then."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        self._thread.join(timeout)
        if self._read is not None and not self._thread.is_alive():
            os.close(self._read)
            self._read = None
