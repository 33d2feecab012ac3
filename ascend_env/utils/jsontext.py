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

import json
import re
from typing import Any

__all__ = ["MAX_DEPTH", "loads"]

MAX_DEPTH = 100

# A whole string (so that brackets inside strings are not counted), or one bracket.
_TOKENS = re.compile(r'"(?:\\.|[^"\\])*"|[\[\]{}]')


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
