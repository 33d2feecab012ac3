"""JSON text that ascend-env reads from files others may have written.

:func:`loads` is :func:`json.loads` with one difference: text nested too deeply for the parser
(``[[[[...`` a hundred thousand deep) raises :class:`json.JSONDecodeError`, the error every other
malformed text raises, instead of :class:`RecursionError`, so that each reader's "is not JSON"
message covers it.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["loads"]


def loads(text: str) -> Any:
    """The value of JSON ``text``; :class:`json.JSONDecodeError` for anything that is not JSON."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", text, 0) from None
