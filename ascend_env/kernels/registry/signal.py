"""The fixes of signal and image ops: the FFTs, unfold_backward (istft), anti-aliased and
nearest-exact upsampling."""

from __future__ import annotations

from typing import Tuple

from ascend_env.kernels.registry.fix import Fix

__all__ = ["FIXES"]

FIXES: Tuple[Fix, ...] = ()
