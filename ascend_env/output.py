"""Writing command results: ``--json`` or plain text, never decoration off a TTY."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Optional, TextIO

__all__ = ["bold", "continued", "seal_stdout_after_json", "verdict_line", "write_json", "write_text"]

# Whether stdout is closed to everything else once the --json document is on it (the CLI's own
# process only: never under a test that calls main() in its own process).
_seal = False


def seal_stdout_after_json(on: bool = True) -> None:
    """From now on, once :func:`write_json` has written the document to stdout, send whatever
    else this process writes there (an ``atexit`` handler of a ``.pth`` or of torch_npu, a
    library's last words) to ``/dev/null``: stdout holds the document alone."""
    global _seal
    _seal = on


def _seal_stdout() -> None:
    try:
        sys.stdout.flush()
        devnull = os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError):
        return
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    finally:
        os.close(devnull)


def _is_tty(stream: TextIO) -> bool:
    """Whether ``stream`` is an interactive terminal."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # closed stream
        return False


def bold(text: str, stream: TextIO) -> str:
    """``text`` in bold on a terminal, unchanged anywhere else."""
    return f"\033[1m{text}\033[0m" if _is_tty(stream) else text


def write_json(data: Any, stream: Optional[TextIO] = None) -> None:
    """Write ``data`` as one JSON document with a trailing newline (to stdout by default); on
    stdout, the last thing written there where :func:`seal_stdout_after_json` asked."""
    to_stdout = stream is None or stream is sys.stdout
    stream = sys.stdout if stream is None else stream
    json.dump(data, stream, indent=2, sort_keys=False, default=str)
    stream.write("\n")
    if to_stdout and _seal:
        _seal_stdout()


def write_text(text: str, stream: Optional[TextIO] = None) -> None:
    """Write ``text`` (to stdout by default), making sure it ends with one newline.

    Paths that are not valid in the file system's encoding reach here with their undecodable
    bytes as lone surrogates (PEP 383); they are written as ``\\xNN`` escapes, and any character
    the stream cannot encode as a backslash escape, instead of failing with UnicodeEncodeError.
    """
    stream = sys.stdout if stream is None else stream
    stream.write(_encodable(text if text.endswith("\n") else text + "\n", stream))


def _encodable(text: str, stream: TextIO) -> str:
    encoding = getattr(stream, "encoding", None) or "utf-8"
    escaped = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return escaped.encode(encoding, "backslashreplace").decode(encoding)


def verdict_line(command: str, verdict: str, cause: str) -> str:
    """The last line of a command's text report: its verdict and why, as ``<command>: <verdict>:
    <cause>`` (the same words as its first line and its ``--json``)."""
    return f"{command}: {verdict}: {cause}"


def continued(text: str, indent: str = "    ") -> str:
    """``text`` with every line after the first indented by ``indent`` (blank lines dropped).

    A multi-line message (torch_npu's ImportError, a traceback) inside an indented report would
    otherwise start its later lines at column 0, where they read as lines of the report itself.
    """
    lines = [line.rstrip() for line in str(text).splitlines() if line.strip()]
    return ("\n" + indent).join(lines)
