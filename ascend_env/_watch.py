"""The hook's entry point into ascend_env, kept at this path for every installed hook.

``ascend_env_hook`` (a copy of :mod:`ascend_env.hook.boot`) in site-packages, written by this or
an earlier release, runs ``from ascend_env import _watch`` and calls :func:`find_and_wrap` and
:func:`notify` (and, from this release on, :func:`imported_past`). The code lives in
:mod:`ascend_env.hook.watch`; this name must keep working.
"""

from __future__ import annotations

from ascend_env.hook.watch import find_and_wrap, imported_past, notify

__all__ = ["find_and_wrap", "imported_past", "notify"]
