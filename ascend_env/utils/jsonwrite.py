"""JSON written without the json module, for the audited processes' reports.

Every Python process of an audited command writes its report: importing ``json`` there costs more
than the report itself, so this writes the few types a report holds (None, bool, int, float, str,
lists and dicts with string keys), ASCII only, as ``json.dumps`` would.
"""

from __future__ import annotations

import os

# No typing at run time: every audited process imports this (mypy takes TYPE_CHECKING as true).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["to_json", "write_json"]


def write_json(path: str, data: Any) -> None:
    """Replace ``path`` by the JSON text of ``data`` in one step (``ascend_env.utils.atomic``'s
    rule, without its imports): a temporary file, then ``os.replace``; never a part."""
    text = to_json(data).encode("ascii")
    directory, name = os.path.split(path)
    partial = os.path.join(directory, f".{name}.{os.urandom(4).hex()}.tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            view = memoryview(text)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(partial, path)
    except BaseException:
        try:
            os.unlink(partial)
        except OSError:
            pass
        raise


def to_json(value: Any) -> str:
    """``json.dumps(value)`` for the types a report holds (None, bool, int, float, str, lists and
    dicts with string keys), ASCII only; the json module's import costs more than a report."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return repr(value) if value == value and value not in (float("inf"), float("-inf")) else "null"
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_string(str(k))}: {to_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(to_json(v) for v in value) + "]"
    return _string(str(value))


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def _string(text: str) -> str:
    out = []
    for char in text:
        code = ord(char)
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif 0x20 <= code < 0x7F:
            out.append(char)
        elif code <= 0xFFFF:  # lone surrogates (undecodable bytes in argv) included, as json does
            out.append(f"\\u{code:04x}")
        else:
            code -= 0x10000
            out.append(f"\\u{0xD800 | (code >> 10):04x}\\u{0xDC00 | (code & 0x3FF):04x}")
    return '"' + "".join(out) + '"'
