"""Detection: what is installed (torch, torch_npu, transformers, CANN, driver) and whether it fits.

:func:`detect` (in :mod:`ascend_env.detect.report`) builds the report behind ``ascend-env detect``;
it stays importable as ``ascend_env.detect.detect``. Loaded on first use: the startup hook imports
:mod:`ascend_env.detect.socs` and must not pay for the report's imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ascend_env.detect.report import Report, detect

__all__ = ["Report", "detect"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from ascend_env.detect import report

        return getattr(report, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
