"""Patching: the transaction engine (install, restore, status) and what it reads and writes."""

from typing import List

__all__: List[str] = []
