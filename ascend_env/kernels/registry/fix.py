"""The shape of a fix: :class:`Fix` (one fixed op and everything about it), its
:class:`Overload` s, the :class:`Sample` calls of its smoke test and their :class:`T` tensors, and
:class:`Op`, one overload of one fix as the startup hook registers it. The fields are described in
:mod:`ascend_env.kernels.registry`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

__all__ = ["Fix", "Op", "Overload", "Sample", "T", "pair"]


@dataclass(frozen=True)
class Overload:
    """One overload a fix registers: ``name`` as in ``aten::name`` (``"isin.Tensor_Tensor"``,
    ``"polar"`` for the default overload), the releases that lack it, and ``via``, the overload
    its composite kernel calls (the ``out=`` form): it falls back only when that one does too."""

    name: str
    releases: Tuple[str, ...]
    via: Optional[str] = None


@dataclass(frozen=True)
class T:
    """A tensor of a smoke :class:`Sample`: ``torch.tensor(values, dtype=torch.<dtype>)``."""

    values: Any
    dtype: str


@dataclass(frozen=True)
class Sample:
    """One smoke-test call of ``overload``: ``args`` (a :class:`T` becomes a tensor on the device,
    anything else is passed as is) and ``kwargs``; ``out``, the dtype of an empty ``out=``
    tensor; ``outs``, ``(keyword, dtype)`` of several (``values=``, ``indices=``);
    ``atol``/``rtol``, the tolerance against the CPU (0: equal); ``out_shape``, the shape of the
    ``out=`` tensors where they must not be empty (default: empty, so the kernel must resize);
    ``reference``, ``"module:function"`` that answers for the CPU where this torch's CPU has no
    kernel for the op (called as the op, on the CPU's copies of the arguments)."""

    overload: str
    args: Tuple[Any, ...]
    kwargs: Tuple[Tuple[str, Any], ...] = ()
    out: Optional[str] = None
    atol: float = 0.0
    rtol: float = 0.0
    outs: Tuple[Tuple[str, str], ...] = ()
    out_shape: Optional[Tuple[int, ...]] = None
    reference: Optional[str] = None

    @property
    def out_keywords(self) -> Tuple[Tuple[str, str], ...]:
        """``(keyword, dtype)`` of every ``out=`` tensor the call takes."""
        return (("out", self.out),) if self.out is not None else self.outs


@dataclass(frozen=True, eq=False)  # one object per fix: compared and hashed by identity
class Fix:
    """One fixed op: its kernels' module and everything about them (see the module docstring)."""

    name: str
    module: str
    overloads: Tuple[Overload, ...]
    reason: str
    upstream: str
    namespace: str
    dispatch_key: str
    requires: Optional[str]
    registered_by: Tuple[str, ...]
    host_reads: Tuple[str, ...]
    smoke: Tuple[Sample, ...]
    generation: bool
    host_copy: Tuple[str, ...] = ()

    @property
    def ops(self) -> Tuple[Op, ...]:
        return tuple(Op(self, overload) for overload in self.overloads)

    def needed_by(self, release: Optional[str]) -> Optional[bool]:
        """Whether any overload falls back on torch_npu ``release`` (None when unknown)."""
        found = [op.needed_by(release) for op in self.ops]
        return None if None in found else any(found)

    def copies_to_host(self, release: Optional[str]) -> bool:
        """Whether torch_npu ``release`` registers the op with a kernel that runs it on the CPU."""
        try:
            return release is not None and _matches(Version(release), self.host_copy)
        except InvalidVersion:
            return False


@dataclass(frozen=True)
class Op:
    """One overload of one fix, as the hook registers it."""

    fix: Fix
    overload: Overload

    @property
    def op(self) -> str:
        """``"isin.Tensor_Tensor"``: the key of the module's ``KERNELS``."""
        return self.overload.name

    @property
    def qualified_name(self) -> str:
        return f"{self.fix.namespace}::{self.overload.name}"

    @property
    def when_missing(self) -> Tuple[str, ...]:
        """The overloads (``name``, then ``via``) none of which may have a kernel for it to fall back."""
        via = self.overload.via
        return (self.overload.name,) if via is None else (self.overload.name, via)

    @property
    def family(self) -> str:
        """The fix's name (not the text before the dot)."""
        return self.fix.name

    @property
    def module(self) -> str:
        return self.fix.module

    @property
    def reason(self) -> str:
        return self.fix.reason

    def needed_by(self, release: Optional[str]) -> Optional[bool]:
        """Whether the overload falls back on torch_npu ``release`` (None when unknown)."""
        if release is None:
            return None
        try:
            version = Version(release)
        except InvalidVersion:
            return None
        return _matches(version, self.overload.releases)

    def copies_to_host(self, release: Optional[str]) -> bool:
        return self.fix.copies_to_host(release)


def _matches(version: Version, specifiers: Tuple[str, ...]) -> bool:
    return any(version in SpecifierSet(spec, prereleases=True) for spec in specifiers)


def pair(name: str, out: str, releases: Tuple[str, ...]) -> Tuple[Overload, Overload]:
    """A functional overload and its ``out=`` form, which its composite kernel calls."""
    return Overload(name, releases, out), Overload(out, releases)
