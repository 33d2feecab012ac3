"""``ascend_env.runtime.status()``, kept at its first path: see :mod:`ascend_env.hook.runtime`."""

from __future__ import annotations

from ascend_env.hook.runtime import status

__all__ = ["status"]
