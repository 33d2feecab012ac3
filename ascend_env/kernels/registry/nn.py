"""The fixes of torch.nn's fused paths: multi-head attention and the transformer
encoder layer's eval fast paths, _addmm_activation, the fused AdamW step."""

from __future__ import annotations

from typing import Tuple

from ascend_env.kernels.registry.fix import Fix

__all__ = ["FIXES"]

FIXES: Tuple[Fix, ...] = ()
