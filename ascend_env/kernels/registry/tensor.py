"""The fixes of torch's tensor ops: isin (what transformers' generation reaches), polar,
repeat_interleave, the bit shifts, _assert_async, stable sorts and bucketize."""

from __future__ import annotations

from typing import Tuple

from ascend_env.kernels.registry.fix import Fix, Overload, Sample, T, pair

__all__ = [
    "ASSERT_ASYNC",
    "BITWISE_SHIFT",
    "BUCKETIZE",
    "FIXES",
    "ISIN",
    "POLAR",
    "REPEAT_INTERLEAVE",
    "SCATTER_REDUCE",
    "SORT_STABLE",
]


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
        *pair("isin.Tensor_Tensor", "isin.Tensor_Tensor_out", _ISIN_MISSING),
        *pair("isin.Tensor_Scalar", "isin.Tensor_Scalar_out", _NO_KNOWN_RELEASE),
        *pair("isin.Scalar_Tensor", "isin.Scalar_Tensor_out", _NO_KNOWN_RELEASE),
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
    overloads=pair("polar", "polar.out", _POLAR_MISSING),
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
    overloads=pair("sort.stable", "sort.values_stable", _OLD_OPPLUGIN),
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
        *pair("bucketize.Tensor", "bucketize.Tensor_out", _OLD_OPPLUGIN),
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


# -- scatter_reduce.two -------------------------------------------------------------------------------
# The same 45 releases as repeat_interleave.Tensor lack all three overloads; the functional and
# in-place forms are ATen's structured kernel around the out= form.
_SCATTER_REDUCE_MISSING = _REPEAT_INTERLEAVE_MISSING
_SCATTER_SELF = T([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], "float32")
_SCATTER_INDEX = T([[0, 2, 0, 2], [1, 1, 0, 0]], "int64")
_SCATTER_SRC = T([[0.5, -1.0, 2.0, 8.0], [3.0, 0.25, -2.0, 1.5]], "float32")

SCATTER_REDUCE = Fix(
    name="scatter_reduce",
    module="ascend_env.kernels.scatter_reduce",
    overloads=(
        Overload("scatter_reduce.two", _SCATTER_REDUCE_MISSING, "scatter_reduce.two_out"),
        Overload("scatter_reduce_.two", _SCATTER_REDUCE_MISSING, "scatter_reduce.two_out"),
        Overload("scatter_reduce.two_out", _SCATTER_REDUCE_MISSING),
    ),
    reason=(
        "PyTorch Geometric's aggregations (sum, mean, max, min per node) call "
        "Tensor.scatter_reduce on every message-passing layer: each call a host round trip."
    ),
    upstream=(
        "op-plugin's YAML per release (ascend_env/data/optables); PyTorch "
        "aten/src/ATen/native/TensorAdvancedIndexing.cpp (scatter_reduce_two, scatter_impl)"
    ),
    namespace="aten",
    dispatch_key="PrivateUse1",
    requires=None,
    registered_by=(),
    host_reads=(),
    smoke=(
        Sample("scatter_reduce.two", (_SCATTER_SELF, 1, _SCATTER_INDEX, _SCATTER_SRC, "amax")),
        Sample(
            "scatter_reduce_.two",
            (_SCATTER_SELF, 1, _SCATTER_INDEX, _SCATTER_SRC, "sum"),
            (("include_self", False),),
        ),
        Sample(
            "scatter_reduce.two_out", (_SCATTER_SELF, 1, _SCATTER_INDEX, _SCATTER_SRC, "mean"), out="float32"
        ),
    ),
    generation=False,
)


FIXES: Tuple[Fix, ...] = (
    ISIN,
    POLAR,
    REPEAT_INTERLEAVE,
    BITWISE_SHIFT,
    ASSERT_ASYNC,
    SORT_STABLE,
    BUCKETIZE,
    SCATTER_REDUCE,
)
