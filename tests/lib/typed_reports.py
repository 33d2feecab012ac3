"""Check a report built by hand (or read back from JSON) against its TypedDict: every key it has
is one the type declares, in every nested report. Missing keys are allowed (the reports' keys
are optional); the values' scalar types are left to mypy."""

from __future__ import annotations

import typing
from typing import Any, Dict, List, Optional


def _is_typed_dict(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, dict) and hasattr(kind, "__total__")


def unknown_keys(
    value: Any, kind: Any, localns: Optional[Dict[str, Any]] = None, where: str = ""
) -> List[str]:
    """The paths (``installation.patches.stauts``) of the keys in ``value`` that ``kind`` lacks."""
    if _is_typed_dict(kind):
        if not isinstance(value, dict):
            return []
        hints = typing.get_type_hints(kind, localns=localns)
        wrong = [f"{where}{key}" for key in value if key not in hints]
        for key, item in value.items():
            if key in hints:
                wrong += unknown_keys(item, hints[key], localns, f"{where}{key}.")
        return wrong
    origin, args = getattr(kind, "__origin__", None), getattr(kind, "__args__", ())
    if origin is dict and isinstance(value, dict):
        return [
            wrong
            for key, item in value.items()
            for wrong in unknown_keys(item, args[1], localns, f"{where}{key}.")
        ]
    if origin is list and isinstance(value, list):
        return [w for item in value for w in unknown_keys(item, args[0], localns, where)]
    if origin is typing.Union:
        return min((unknown_keys(value, arg, localns, where) for arg in args), key=len)
    return []
