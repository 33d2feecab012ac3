"""The registry of NPU fixes: aten ops that some torch_npu releases run on the CPU, and what
ascend-env registers for them under ``PrivateUse1``.

Each fix names the op, the kernel from :mod:`ascend_env.ops` that replaces the CPU fallback (built
only from ops that every torch_npu release runs natively), why it is needed, and the torch_npu
releases that lack a native kernel. The runtime hook registers a fix only where
``torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1")`` says the kernel is missing,
so ``releases`` documents the need; it never overrides a native kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

_ISIN_REASON = (
    "transformers calls torch.isin on every decoding step (EosTokenCriteria, logits processors, "
    "assisted decoding); without an NPU kernel each call is a device->host copy, a CPU run and a "
    "copy back."
)
_SCALAR_ISIN_REASON = (
    "torch.isin(scalar, tensor) dispatches to this overload, which no torch_npu release registers "
    "(only its out= form), so it always falls back to the CPU."
)
# torch_npu 2.1.0.post3 to 2.1.0.post6, every 2.2.x, and 2.3.1 lack aten::isin.Tensor_Tensor(_out);
# 2.1.0.post8, 2.3.1.post2 and 2.4.0 on have it. Checked against the op tables in ascend_env.optables.
_TENSOR_TENSOR_MISSING: Tuple[str, ...] = ("<2.1.0.post8", ">=2.2.0,<2.3.1.post2")
_EVERY_RELEASE: Tuple[str, ...] = ("",)  # the empty specifier set matches every version
_NO_KNOWN_RELEASE: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Fix:
    """One aten op overload and the kernel that ascend-env registers for it."""

    op: str  # "isin.Tensor_Tensor_out", as in aten::isin.Tensor_Tensor_out
    kernel: str  # key of ascend_env.ops.ATEN_KERNELS
    reason: str
    releases: Tuple[str, ...]  # PEP 440 specifier sets, any of which matches a release that lacks op

    @property
    def qualified_name(self) -> str:
        return f"aten::{self.op}"

    def needed_by(self, release: Optional[str]) -> Optional[bool]:
        """Whether torch_npu ``release`` lacks the op (None when the release is unknown)."""
        if release is None:
            return None
        try:
            version = Version(release)
        except InvalidVersion:
            return None
        return any(version in SpecifierSet(spec, prereleases=True) for spec in self.releases)


FIXES: Tuple[Fix, ...] = (
    Fix("isin.Tensor_Tensor", "isin.Tensor_Tensor", _ISIN_REASON, _TENSOR_TENSOR_MISSING),
    Fix("isin.Tensor_Tensor_out", "isin.Tensor_Tensor_out", _ISIN_REASON, _TENSOR_TENSOR_MISSING),
    Fix("isin.Scalar_Tensor", "isin.Scalar_Tensor", _SCALAR_ISIN_REASON, _EVERY_RELEASE),
    # Natively registered by every known release; registered only for a build that lacks them.
    Fix("isin.Tensor_Scalar", "isin.Tensor_Scalar", _ISIN_REASON, _NO_KNOWN_RELEASE),
    Fix("isin.Tensor_Scalar_out", "isin.Tensor_Scalar_out", _ISIN_REASON, _NO_KNOWN_RELEASE),
    Fix("isin.Scalar_Tensor_out", "isin.Scalar_Tensor_out", _ISIN_REASON, _NO_KNOWN_RELEASE),
)
