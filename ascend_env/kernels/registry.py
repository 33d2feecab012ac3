"""The registry of NPU fixes: the one description of each op that some torch_npu releases run on
the CPU, and of what ascend-env registers for it.

A :class:`Fix` is one module of kernels (:mod:`ascend_env.kernels.isin`, ...) and everything the
rest of ascend-env needs to know of it, so that adding a fixed op is one module and one entry
here (CONTRIBUTING.md, "Adding a fixed op"); modelled on PyTorch's ``torch/_decomp`` registry,
where each decomposition declares the overloads it serves:

- ``name``: the fix's own name (a smoke step, a row of ``detect`` and ``verify``); not derived
  from an op's name;
- ``module``: whose ``KERNELS`` maps each overload (``"isin.Tensor_Tensor"``) to its kernel;
- ``overloads``: each :class:`Overload` with the releases that lack it (PEP 440 specifiers,
  checked against the op tables by ``tests/unit/test_registry.py``) and the overload its
  composite kernel calls (the ``out=`` form), which must be missing too for it to fall back;
- ``reason`` and ``upstream`` (where the missing kernel, or the behaviour modelled, is recorded);
- ``namespace`` and ``dispatch_key``: ``aten`` / ``torchvision`` and ``PrivateUse1``;
- ``requires``: the module whose import defines the op (``torchvision``; None for torch's own
  ops): the startup hook registers the fix once that module has been imported;
- ``registered_by``: packages that register the op themselves (``torchvision_npu``): where one
  is installed, the fix is left to it;
- ``host_reads``: every value a kernel reads back to the host, and why (none for most);
- ``smoke``: the :class:`Sample` calls the smoke test runs on the device against the CPU;
- ``generation``: whether transformers' text generation reaches the op (``audit --torch-npu
  affected`` runs the releases that lack one of those);
- ``host_copy``: releases whose registered kernel copies to the host and back (left alone).

The startup hook (:mod:`ascend_env.hook.runtime`) registers an overload only where neither it
nor the overload it calls has a kernel for the key; a native kernel is never overridden, and an
op that PyTorch decomposes (``CompositeImplicitAutograd``) is never registered. This module
imports neither torch nor the kernel modules.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

__all__ = [
    "ASSERT_ASYNC",
    "BITWISE_SHIFT",
    "BUCKETIZE",
    "FIXES",
    "ISIN",
    "POLAR",
    "REPEAT_INTERLEAVE",
    "SORT_STABLE",
    "OVERLOADS",
    "Fix",
    "Op",
    "Overload",
    "Sample",
    "T",
    "by_name",
    "fixes_needed_by",
    "kernels",
]


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
    ``out=`` tensors where they must not be empty (default: empty, so the kernel must resize)."""

    overload: str
    args: Tuple[Any, ...]
    kwargs: Tuple[Tuple[str, Any], ...] = ()
    out: Optional[str] = None
    atol: float = 0.0
    rtol: float = 0.0
    outs: Tuple[Tuple[str, str], ...] = ()
    out_shape: Optional[Tuple[int, ...]] = None

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


def _pair(name: str, out: str, releases: Tuple[str, ...]) -> Tuple[Overload, Overload]:
    """A functional overload and its ``out=`` form, which its composite kernel calls."""
    return Overload(name, releases, out), Overload(out, releases)


# -- isin ------------------------------------------------------------------------------------------
# torch_npu 2.1.0.post3 to 2.1.0.post6, every 2.2.x, and 2.3.1 lack aten::isin.Tensor_Tensor(_out);
# 2.1.0.post8, 2.3.1.post2 and 2.4.0 on have it. The Tensor_Scalar and Scalar_Tensor overloads are
# native in every known release (isin.Scalar_Tensor itself is in none, but its composite kernel
# calls the native isin.Scalar_Tensor_out): registered only for a build that lacks them.
_ISIN_MISSING = ("<2.1.0.post8", ">=2.2.0,<2.3.1.post2")
_NO_KNOWN_RELEASE: Tuple[str, ...] = ()
_ELEMENTS = T([[1, 2, 3], [4, 5, 6]], "int64")
_TEST = T([2, 6, 9, 95], "int64")

ISIN = Fix(
    name="isin",
    module="ascend_env.kernels.isin",
    overloads=(
        *_pair("isin.Tensor_Tensor", "isin.Tensor_Tensor_out", _ISIN_MISSING),
        *_pair("isin.Tensor_Scalar", "isin.Tensor_Scalar_out", _NO_KNOWN_RELEASE),
        *_pair("isin.Scalar_Tensor", "isin.Scalar_Tensor_out", _NO_KNOWN_RELEASE),
    ),
    reason=(
        "transformers calls torch.isin on every decoding step (EosTokenCriteria, logits processors, "
        "assisted decoding); without an NPU kernel each call is a device->host copy, a CPU run and "
        "a copy back."
    ),
    upstream=(
        "op-plugin's YAML per release (ascend_env/data/optables); PyTorch "
        "aten/src/ATen/native/TensorCompare.cpp"
    ),
    namespace="aten",
    dispatch_key="PrivateUse1",
    requires=None,
    registered_by=(),
    host_reads=(),
    smoke=(
        Sample("isin.Tensor_Tensor", (_ELEMENTS, _TEST)),
        Sample("isin.Tensor_Tensor_out", (_ELEMENTS, _TEST), (("invert", True),), out="bool"),
        Sample("isin.Tensor_Scalar", (_ELEMENTS, 5)),
        Sample("isin.Tensor_Scalar_out", (_ELEMENTS, 5), out="bool"),
        Sample("isin.Scalar_Tensor", (6, _TEST)),
        Sample("isin.Scalar_Tensor_out", (6, _TEST), out="bool"),
    ),
    generation=True,
)

# -- polar -----------------------------------------------------------------------------------------
# torch_npu 2.1.0.post3 and 2.2.0 (op-plugin 0200d703b71c, whose YAML has no polar) lack
# aten::polar(.out); 2.1.0.post6, 2.2.0.post2 and 2.3.1 on register one. The polar those three
# register copies to the host and back: op-plugin b761d5824d7b (tags v6.0.rc2-pytorch2.1.0, -2.2.0
# and -2.3.1), op_plugin/ops/base_ops/opapi/PolarKernelNpuOpApi.cpp ("kernel [polar] is not
# supported by NPU currently. Now this kernel is running on CPU"). A registered kernel is never
# overridden, so there the op stays on the CPU.
_POLAR_MISSING = ("<2.1.0.post6", ">=2.2.0,<2.2.0.post2")
_MAGNITUDE = T([[0.5, 1.0, 2.0], [3.0, 0.0, 1.5]], "float32")
_ANGLE = T([0.0, 1.0, -2.5], "float32")
# The CPU kernel calls the C library's cos and sin, which no device op reproduces bit for bit:
# OpInfo's default tolerance for complex64.
_POLAR_ATOL, _POLAR_RTOL = 1e-5, 1.3e-6

POLAR = Fix(
    name="polar",
    module="ascend_env.kernels.polar",
    overloads=_pair("polar", "polar.out", _POLAR_MISSING),
    reason=(
        "the rotary embeddings of Llama 4 and DeepSeek-V2 (and models that copy them) call "
        "torch.polar on every forward pass, so on every decoding step; without an NPU kernel each "
        "call copies to the host and back."
    ),
    upstream="op-plugin 0200d703b71c (no polar in its YAML); b761d5824d7b PolarKernelNpuOpApi.cpp",
    namespace="aten",
    dispatch_key="PrivateUse1",
    requires=None,
    registered_by=(),
    host_reads=(),
    smoke=(
        Sample("polar", (_MAGNITUDE, _ANGLE), atol=_POLAR_ATOL, rtol=_POLAR_RTOL),
        # The polar that torch_npu 2.1.0.post6 to 2.3.1 register computes on the host and copy_()s
        # into out=, which returns at once for an empty destination (op-plugin b761d58,
        # PolarKernelNpuOpApi.cpp; Ascend/pytorch 06cec48, CopyKernel.cpp): on those releases
        # out= must come sized, or it comes back empty.
        Sample(
            "polar.out",
            (_MAGNITUDE, _ANGLE),
            out="complex64",
            atol=_POLAR_ATOL,
            rtol=_POLAR_RTOL,
            out_shape=(2, 3),
        ),
    ),
    generation=True,
    host_copy=("==2.1.0.post6", "==2.2.0.post2", "==2.3.1"),
)

# -- repeat_interleave.Tensor ------------------------------------------------------------------------
# Registered by the newest release of each line only (2.7.1.post11, 2.9.0.post9, 2.10.0.post7,
# 2.11.0.post3, 2.12.0.post3) and from 2.13.0 on.
_REPEAT_INTERLEAVE_MISSING = (
    "<2.7.1.post11",
    ">=2.8.0,<2.9.0.post9",
    "==2.9.1",
    ">=2.10.0,<2.10.0.post7",
    ">=2.11.0,<2.11.0.post3",
    ">=2.12.0,<2.12.0.post3",
)

REPEAT_INTERLEAVE = Fix(
    name="repeat_interleave",
    module="ascend_env.kernels.repeat_interleave",
    overloads=(Overload("repeat_interleave.Tensor", _REPEAT_INTERLEAVE_MISSING),),
    reason=(
        "Qwen2-VL's vision tower (and models that copy it) builds cu_seqlens with "
        "torch.repeat_interleave(tensor) on every forward with images: each call a host round trip."
    ),
    upstream="PyTorch aten/src/ATen/native/Repeat.cpp and Repeat.h (repeat_interleave_common)",
    namespace="aten",
    dispatch_key="PrivateUse1",
    requires=None,
    registered_by=(),
    host_reads=("the output length and whether a repeat is negative, one read, unless output_size is given",),
    smoke=(Sample("repeat_interleave.Tensor", (T([2, 0, 3, 1], "int64"),)),),
    generation=False,
)

# -- bitwise_left_shift / bitwise_right_shift --------------------------------------------------------
# The same releases as repeat_interleave.Tensor lack both Tensor_out forms; the functional and
# in-place overloads are in no table: their structured kernels call the Tensor_out form.
_SHIFT_MISSING = _REPEAT_INTERLEAVE_MISSING
_BITS = T([1, 2, -3, 64, 7], "int64")
_SHIFTS = T([1, 0, 3, 2, 70], "int64")


def _shift_overloads(name: str) -> Tuple[Overload, ...]:
    out = f"{name}.Tensor_out"
    return (
        Overload(f"{name}.Tensor", _SHIFT_MISSING, out),
        Overload(out, _SHIFT_MISSING),
        Overload(f"{name}_.Tensor", _SHIFT_MISSING, out),
    )


BITWISE_SHIFT = Fix(
    name="bitwise_shift",
    module="ascend_env.kernels.bitwise_shift",
    overloads=(*_shift_overloads("bitwise_left_shift"), *_shift_overloads("bitwise_right_shift")),
    reason=(
        "4-bit weight unpacking (GPTQ/AWQ-style packed int32) shifts with torch.bitwise_left_shift/"
        "right_shift, at load or per layer per forward: each call a host round trip."
    ),
    upstream="PyTorch aten/src/ATen/native/BinaryOps.cpp (lshift_stub / rshift_stub serve __lshift__ too)",
    namespace="aten",
    dispatch_key="PrivateUse1",
    requires=None,
    registered_by=(),
    host_reads=(),
    smoke=tuple(
        Sample(f"{name}{suffix}", (_BITS, _SHIFTS), out="int64" if suffix == ".Tensor_out" else None)
        for name in ("bitwise_left_shift", "bitwise_right_shift")
        for suffix in (".Tensor", ".Tensor_out", "_.Tensor")
    ),
    generation=False,
)

# -- _assert_async -------------------------------------------------------------------------------------
ASSERT_ASYNC = Fix(
    name="assert_async",
    module="ascend_env.kernels.assert_async",
    overloads=(Overload("_assert_async", (">=0",)), Overload("_assert_async.msg", (">=0",))),
    reason=(
        "torch._assert_async (runtime checks of exported and compiled programs, and of model code "
        "that avoids a Python-level sync) has no kernel in any release: each call falls back."
    ),
    upstream="PyTorch aten/src/ATen/native/TensorCompare.cpp (_assert_async_cpu, _assert_async_msg_cpu)",
    namespace="aten",
    dispatch_key="PrivateUse1",
    requires=None,
    registered_by=(),
    host_reads=("the one value asserted (is_nonzero), as the CPU op reads it",),
    smoke=(
        Sample("_assert_async", (T(1, "int64"),)),
        Sample("_assert_async.msg", (T(0.5, "float32"), "never raised")),
    ),
    generation=False,
)

# -- sort(stable=...) ------------------------------------------------------------------------------------
# torch_npu 2.1.0.post3 and 2.2.0 (op-plugin 0200d703b71c) lack sort.stable and sort.values_stable.
_OLD_OPPLUGIN = ("<2.1.0.post6", ">=2.2.0,<2.2.0.post2")
_TIES = T([[3.0, 1.0, 2.0, 1.0, 3.0], [0.0, -0.0, 5.0, 0.0, -1.0]], "float32")

SORT_STABLE = Fix(
    name="sort_stable",
    module="ascend_env.kernels.sort_stable",
    overloads=_pair("sort.stable", "sort.values_stable", _OLD_OPPLUGIN),
    reason=(
        "torch.sort(stable=...) and torch.argsort(stable=True) (top-p sampling's stable sorts, "
        "MoE token routing) fall back on the two releases without them."
    ),
    upstream=(
        "op-plugin 0200d703b71c (no sort.stable in its YAML); PyTorch "
        "aten/src/ATen/native/cpu/SortingKernel.cpp"
    ),
    namespace="aten",
    dispatch_key="PrivateUse1",
    requires=None,
    registered_by=(),
    host_reads=(),
    smoke=(
        Sample("sort.stable", (_TIES,), (("stable", True), ("descending", True))),
        Sample(
            "sort.values_stable",
            (_TIES,),
            (("stable", True),),
            outs=(("values", "float32"), ("indices", "int64")),
        ),
    ),
    generation=False,
)

# -- bucketize -----------------------------------------------------------------------------------------
_VALUES = T([[1.0, 5.0, 3.0], [-2.0, 4.0, 0.0]], "float32")
_BOUNDARIES = T([0.0, 2.0, 4.0], "float32")

BUCKETIZE = Fix(
    name="bucketize",
    module="ascend_env.kernels.bucketize",
    overloads=(
        *_pair("bucketize.Tensor", "bucketize.Tensor_out", _OLD_OPPLUGIN),
        Overload("bucketize.Scalar", _OLD_OPPLUGIN),
    ),
    reason=(
        "torch.bucketize (relative position buckets of T5-style attention, binning) falls back on "
        "the two releases without it."
    ),
    upstream=(
        "op-plugin 0200d703b71c (no bucketize in its YAML); PyTorch aten/src/ATen/native/Bucketization.cpp"
    ),
    namespace="aten",
    dispatch_key="PrivateUse1",
    requires=None,
    registered_by=(),
    host_reads=(),
    smoke=(
        Sample("bucketize.Tensor", (_VALUES, _BOUNDARIES)),
        Sample("bucketize.Tensor_out", (_VALUES, _BOUNDARIES), (("right", True),), out="int64"),
        Sample("bucketize.Scalar", (3, _BOUNDARIES), (("out_int32", True),)),
    ),
    generation=False,
)

FIXES: Tuple[Fix, ...] = (ISIN, POLAR, REPEAT_INTERLEAVE, BITWISE_SHIFT, ASSERT_ASYNC, SORT_STABLE, BUCKETIZE)


#: Every overload of every fix, in registry order: what the hook decides and registers.
OVERLOADS: Tuple[Op, ...] = tuple(op for fix in FIXES for op in fix.ops)


def by_name() -> Dict[str, Fix]:
    """The fixes by name, in registry order."""
    return {fix.name: fix for fix in FIXES}


def fixes_needed_by(release: Optional[str]) -> Tuple[Fix, ...]:
    """The fixes with an overload that falls back on torch_npu ``release``."""
    return tuple(fix for fix in FIXES if fix.needed_by(release))


def kernels(fixes: Iterable[Fix] = FIXES) -> Dict[str, Callable[..., Any]]:
    """The kernels of ``fixes`` by overload (imports torch and those fixes' modules only)."""
    found: Dict[str, Callable[..., Any]] = {}
    for fix in fixes:
        table = importlib.import_module(fix.module).KERNELS
        found.update((op.op, table[op.op]) for op in fix.ops)
    return found
