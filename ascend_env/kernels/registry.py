"""The registry of NPU fixes: aten ops that some torch_npu releases run on the CPU, and what
ascend-env registers for them under ``PrivateUse1``.

Each fix names the op, the module whose ``ATEN_KERNELS`` holds the kernel that replaces the CPU
fallback (:mod:`ascend_env.kernels.isin`, :mod:`ascend_env.kernels.polar`: built only from ops
that every torch_npu release runs natively), why it is needed, and the torch_npu releases that
lack a native kernel. The runtime hook registers a fix only where
``torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1")`` says the kernel is missing,
and only where the op would really reach the fallback: a functional overload such as
``isin.Tensor_Tensor`` has a composite kernel that calls its ``out=`` form, so it falls back
only when that ``out=`` form has no NPU kernel either (``when_missing`` lists both). The
``releases`` field documents the need; a native kernel is never overridden.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

__all__ = ["FIXES", "Fix", "families", "kernels"]

_ISIN_REASON = (
    "transformers calls torch.isin on every decoding step (EosTokenCriteria, logits processors, "
    "assisted decoding); without an NPU kernel each call is a device->host copy, a CPU run and a "
    "copy back."
)
# torch_npu 2.1.0.post3 to 2.1.0.post6, every 2.2.x, and 2.3.1 lack aten::isin.Tensor_Tensor(_out);
# 2.1.0.post8, 2.3.1.post2 and 2.4.0 on have it. Checked against the op tables in ascend_env.sim.optables.
_TENSOR_TENSOR_MISSING: Tuple[str, ...] = ("<2.1.0.post8", ">=2.2.0,<2.3.1.post2")
_NO_KNOWN_RELEASE: Tuple[str, ...] = ()
_POLAR_REASON = (
    "the rotary embeddings of Llama 4 and DeepSeek-V2 (and models that copy them) call torch.polar "
    "on every forward pass, so on every decoding step; without an NPU kernel each call copies to "
    "the host and back."
)
# torch_npu 2.1.0.post3 and 2.2.0 (op-plugin 0200d703b71c, whose YAML has no polar) lack
# aten::polar(.out); 2.1.0.post6, 2.2.0.post2 and 2.3.1 on register one. Checked against the op
# tables in ascend_env.sim.optables.
_POLAR_MISSING: Tuple[str, ...] = ("<2.1.0.post6", ">=2.2.0,<2.2.0.post2")
# The polar those three register copies to the host and back: op-plugin b761d5824d7b (tags
# v6.0.rc2-pytorch2.1.0, -2.2.0 and -2.3.1), op_plugin/ops/base_ops/opapi/PolarKernelNpuOpApi.cpp
# ("kernel [polar] is not supported by NPU currently. Now this kernel is running on CPU"). A
# registered kernel is never overridden, so there the op stays on the CPU.
_POLAR_HOST_COPY: Tuple[str, ...] = ("==2.1.0.post6", "==2.2.0.post2", "==2.3.1")


@dataclass(frozen=True)
class Fix:
    """One aten op overload and the kernel that ascend-env registers for it."""

    op: str  # "isin.Tensor_Tensor_out", as in aten::isin.Tensor_Tensor_out; the key of ATEN_KERNELS
    reason: str
    releases: Tuple[str, ...]  # PEP 440 specifier sets, any of which matches a release that needs it
    when_missing: Tuple[str, ...]  # the op falls back when none of these has an NPU kernel
    module: str = "ascend_env.kernels.isin"  # whose ATEN_KERNELS holds the kernel
    host_copy: Tuple[str, ...] = ()  # releases whose registered kernel copies to the host and back

    @property
    def family(self) -> str:
        """The op's name without its overload (``isin``, ``polar``)."""
        return self.op.split(".", 1)[0]

    @property
    def qualified_name(self) -> str:
        return f"aten::{self.op}"

    def needed_by(self, release: Optional[str]) -> Optional[bool]:
        """Whether the op falls back on torch_npu ``release`` (None when the release is unknown)."""
        if release is None:
            return None
        try:
            version = Version(release)
        except InvalidVersion:
            return None
        return _matches(version, self.releases)

    def copies_to_host(self, release: Optional[str]) -> bool:
        """Whether torch_npu ``release`` registers the op with a kernel that runs it on the CPU."""
        try:
            return release is not None and _matches(Version(release), self.host_copy)
        except InvalidVersion:
            return False


def _matches(version: Version, specifiers: Tuple[str, ...]) -> bool:
    return any(version in SpecifierSet(spec, prereleases=True) for spec in specifiers)


def _fix(
    op: str,
    out: Optional[str],
    releases: Tuple[str, ...],
    reason: str = _ISIN_REASON,
    module: str = "ascend_env.kernels.isin",
    host_copy: Tuple[str, ...] = (),
) -> Fix:
    """A fix for ``op``; a functional ``op`` falls back only when its ``out=`` form does too."""
    return Fix(op, reason, releases, (op,) if out is None else (op, out), module, host_copy)


FIXES: Tuple[Fix, ...] = (
    _fix("isin.Tensor_Tensor", "isin.Tensor_Tensor_out", _TENSOR_TENSOR_MISSING),
    _fix("isin.Tensor_Tensor_out", None, _TENSOR_TENSOR_MISSING),
    # Natively registered by every known release (isin.Scalar_Tensor itself is in none, but its
    # composite kernel calls the native isin.Scalar_Tensor_out); registered only for a build
    # that lacks them.
    _fix("isin.Tensor_Scalar", "isin.Tensor_Scalar_out", _NO_KNOWN_RELEASE),
    _fix("isin.Tensor_Scalar_out", None, _NO_KNOWN_RELEASE),
    _fix("isin.Scalar_Tensor", "isin.Scalar_Tensor_out", _NO_KNOWN_RELEASE),
    _fix("isin.Scalar_Tensor_out", None, _NO_KNOWN_RELEASE),
    # polar is CompositeExplicitAutograd: without an NPU kernel it calls polar.out, which falls back.
    _fix("polar", "polar.out", _POLAR_MISSING, _POLAR_REASON, "ascend_env.kernels.polar", _POLAR_HOST_COPY),
    _fix("polar.out", None, _POLAR_MISSING, _POLAR_REASON, "ascend_env.kernels.polar", _POLAR_HOST_COPY),
)


def families() -> Tuple[str, ...]:
    """The ops with fixes, each once, in registry order (``isin``, ``polar``)."""
    return tuple(dict.fromkeys(fix.family for fix in FIXES))


def kernels() -> Dict[str, Callable[..., Any]]:
    """Every fix's kernel by op (imports torch and the kernel modules)."""
    found: Dict[str, Callable[..., Any]] = {}
    for module in dict.fromkeys(fix.module for fix in FIXES):
        found.update(importlib.import_module(module).ATEN_KERNELS)
    return found
