"""The fixes of torchvision's ops (nms, roi_align): registered once torchvision's extension has loaded."""

from __future__ import annotations

from typing import Tuple

from ascend_env.kernels.registry.fix import Fix

__all__ = ["FIXES"]

FIXES: Tuple[Fix, ...] = ()
