"""The command-line flags of this interpreter that change what a child Python imports.

``status`` and ``verify`` check the hook and the backend in a fresh process of the same Python;
run as ``python -s`` or ``python -I``, that process must see the same site directories (no user
site-packages, no ``PYTHON*`` variables), or the two answer for different environments.
"""

from __future__ import annotations

import os
import sys
from typing import List

__all__ = ["child_flags"]


def child_flags(python: str) -> List[str]:
    """``-I``, ``-s``, ``-E``, ``-S`` and ``-P`` as this interpreter runs with them, when
    ``python`` is this interpreter; none for another one."""
    if os.path.realpath(python) != os.path.realpath(sys.executable):
        return []
    flags = sys.flags
    if flags.isolated:
        out = ["-I"]  # implies -E and -s, and -P from Python 3.11
    else:
        out = [flag for flag, on in (("-s", flags.no_user_site), ("-E", flags.ignore_environment)) if on]
        if getattr(flags, "safe_path", False):
            out.append("-P")
    if flags.no_site:
        out.append("-S")
    return out
