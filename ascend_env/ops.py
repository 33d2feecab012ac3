"""``ascend_env.ops.isin``, kept at its first path: the kernel lives in :mod:`ascend_env.kernels.isin`."""

from __future__ import annotations

from ascend_env.kernels.isin import ATEN_KERNELS, CHUNK_BYTES, NATIVE_OPS, STRATEGIES, choose_strategy, isin

__all__ = ["ATEN_KERNELS", "CHUNK_BYTES", "NATIVE_OPS", "STRATEGIES", "choose_strategy", "isin"]
