"""The fixes of torch.nn's fused paths: multi-head attention and the transformer
encoder layer's eval fast paths, _addmm_activation, the fused AdamW step."""

from __future__ import annotations

from typing import Tuple

from ascend_env.kernels.registry.fix import Fix, Overload, Sample, T

__all__ = [
    "ADDMM_ACTIVATION",
    "FIXES",
    "FUSED_ADAMW",
    "NATIVE_MULTI_HEAD_ATTENTION",
    "TRANSFORMER_ENCODER_LAYER",
]

# -- _native_multi_head_attention --------------------------------------------------------------------
# Missing from 2.1.0.post3 to 2.1.0.post12 and from 2.2.0 to 2.5.1 (with _transform_bias_rescale_qkv
# and _masked_softmax, which its CPU kernel calls); 2.1.0.post13, 2.1.0.post17 and 2.5.1.post1 on
# register it.
_MHA_MISSING = ("<2.1.0.post13", ">=2.2.0,<2.5.1.post1")
_D, _HEADS = 4, 2


def _floats(rows: int, cols: int, scale: float) -> T:
    """A small deterministic float32 matrix (values k/8 - 1, times ``scale``)."""
    return T(
        [[((r * cols + c) * 5 % 17 / 8.0 - 1.0) * scale for c in range(cols)] for r in range(rows)], "float32"
    )


_QUERY = T([[[0.5, -1.0, 0.25, 2.0], [1.5, 0.0, -0.75, 1.0], [-0.5, 0.5, 1.0, -1.5]]], "float32")
_KEY = T([[[1.0, 0.5, -0.5, 0.0], [0.0, -1.0, 1.5, 0.5], [0.25, 0.75, -1.0, 1.0]]], "float32")
_MHA_WEIGHTS = (
    _floats(3 * _D, _D, 0.5),
    T([((i * 3) % 7 - 3) / 8.0 for i in range(3 * _D)], "float32"),
    _floats(_D, _D, 0.25),
    T([0.125, -0.25, 0.0, 0.5], "float32"),
)
# exp in the softmax, and the NPU's matmuls, round differently from the CPU's.
_MHA_ATOL, _MHA_RTOL = 1e-4, 1e-4

NATIVE_MULTI_HEAD_ATTENTION = Fix(
    name="native_multi_head_attention",
    module="ascend_env.kernels.multi_head_attention",
    overloads=(Overload("_native_multi_head_attention", _MHA_MISSING),),
    reason=(
        "nn.MultiheadAttention in eval mode under no_grad (torchvision's ViT, open_clip, DETR, "
        "nn.TransformerEncoderLayer) calls torch._native_multi_head_attention on every forward: "
        "without an NPU kernel each call copies its inputs and weights to the host and back."
    ),
    upstream=(
        "op-plugin's YAML per release (ascend_env/data/optables); PyTorch v2.1.0 "
        "aten/src/ATen/native/transformers/attention.cpp (native_multi_head_attention_cpu)"
    ),
    namespace="aten",
    dispatch_key="PrivateUse1",
    requires=None,
    registered_by=(),
    host_reads=(),
    smoke=(
        Sample(
            "_native_multi_head_attention",
            (_QUERY, _KEY, _KEY, _D, _HEADS, *_MHA_WEIGHTS),
            atol=_MHA_ATOL,
            rtol=_MHA_RTOL,
        ),
    ),
    generation=False,
)

# -- _transformer_encoder_layer_fwd ----------------------------------------------------------------
# In no release's table. The smoke sample: embed_dim 4, 2 heads, a feed-forward width of 6, relu.
_FFN = 6

TRANSFORMER_ENCODER_LAYER = Fix(
    name="transformer_encoder_layer",
    module="ascend_env.kernels.transformer_encoder_layer",
    overloads=(Overload("_transformer_encoder_layer_fwd", (">=0",)),),
    reason=(
        "nn.TransformerEncoderLayer and nn.TransformerEncoder in eval mode under no_grad call "
        "torch._transformer_encoder_layer_fwd once per layer on every forward: without an NPU kernel "
        "each call copies the activations and all the layer's weights to the host and back."
    ),
    upstream=(
        "op-plugin's YAML per release (ascend_env/data/optables); PyTorch v2.1.0 "
        "aten/src/ATen/native/transformers/transformer.cpp (transformer_encoder_layer_forward)"
    ),
    namespace="aten",
    dispatch_key="PrivateUse1",
    requires=None,
    registered_by=(),
    host_reads=(),
    smoke=(
        Sample(
            "_transformer_encoder_layer_fwd",
            (
                _QUERY,
                _D,
                _HEADS,
                *_MHA_WEIGHTS,
                False,
                False,
                1e-5,
                T([1.0, 0.5, 2.0, 1.5], "float32"),
                T([0.0, 0.25, -0.5, 0.125], "float32"),
                T([0.75, 1.0, 1.25, 0.5], "float32"),
                T([0.5, 0.0, 0.25, -0.25], "float32"),
                _floats(_FFN, _D, 0.5),
                T([0.125 * i - 0.25 for i in range(_FFN)], "float32"),
                _floats(_D, _FFN, 0.5),
                T([-0.125, 0.25, 0.0, 0.5], "float32"),
            ),
            atol=_MHA_ATOL,
            rtol=_MHA_RTOL,
        ),
    ),
    generation=False,
)

# -- _addmm_activation ----------------------------------------------------------------------------------
# The out= form is missing from 2.1.0.post3 to 2.7.1.post2 and from 2.8.0, 2.8.0.post2 and 2.9.0;
# the functional form is in no table (ATen's structured kernel around the out= form).
_ADDMM_ACTIVATION_MISSING = ("<2.7.1.post4", ">=2.8.0,<2.8.0.post4", "==2.9.0")
_BIAS = T([0.5, -2.0, 0.25], "float32")
_MAT1 = T([[1.0, -0.5], [2.0, 0.25]], "float32")
_MAT2 = T([[0.5, -1.0, 2.0], [1.5, 0.75, -0.25]], "float32")

ADDMM_ACTIVATION = Fix(
    name="addmm_activation",
    module="ascend_env.kernels.addmm_activation",
    overloads=(
        Overload("_addmm_activation", _ADDMM_ACTIVATION_MISSING, "_addmm_activation.out"),
        Overload("_addmm_activation.out", _ADDMM_ACTIVATION_MISSING),
    ),
    reason=(
        "Linear + relu/gelu fusions (ViT MLP blocks through the transformer fast path and "
        "torch.compile's fused addmm) call torch._addmm_activation per layer: each call a host "
        "round trip."
    ),
    upstream=(
        "op-plugin's YAML per release (ascend_env/data/optables); PyTorch "
        "aten/src/ATen/native/LinearAlgebra.cpp (addmm_activation_out_cpu)"
    ),
    namespace="aten",
    dispatch_key="PrivateUse1",
    requires=None,
    registered_by=(),
    host_reads=(),
    smoke=(
        # inputs and products exact in binary: relu exact; gelu within the device's erf
        Sample("_addmm_activation", (_BIAS, _MAT1, _MAT2), (("use_gelu", True),), atol=1e-5, rtol=1e-5),
        Sample("_addmm_activation.out", (_BIAS, _MAT1, _MAT2), out="float32"),
    ),
    generation=False,
)

# -- _fused_adamw_ ---------------------------------------------------------------------------------------
# Missing from 2.3.1 and 2.3.1.post2 and from 2.4.0 (every other table registers it); the
# tensor_lr overload is in no table and reached only with a Tensor lr.
_FUSED_ADAMW_MISSING = (">=2.3.1,<2.3.1.post4", "==2.4.0")


def _vector(values: Tuple[float, ...]) -> Tuple[T, ...]:
    return (T(list(values), "float32"),)


FUSED_ADAMW = Fix(
    name="fused_adamw",
    module="ascend_env.kernels.fused_adamw",
    overloads=(Overload("_fused_adamw_", _FUSED_ADAMW_MISSING),),
    reason=(
        "AdamW(fused=True) and transformers' optim='adamw_torch_fused' call torch._fused_adamw_ once "
        "per step with every parameter, gradient and optimizer state: each step a host round trip of "
        "all of them (and on torch 2.3.1, whose CPU has no fused Adam kernel, an error)."
    ),
    upstream=(
        "op-plugin's YAML per release (ascend_env/data/optables); PyTorch v2.4.0 "
        "aten/src/ATen/native/FusedAdam.cpp (_fused_adamw_kernel_cpu_) and "
        "aten/src/ATen/native/cpu/FusedAdamKernel.cpp (adam_math, ADAMW mode)"
    ),
    namespace="aten",
    dispatch_key="PrivateUse1",
    requires=None,
    registered_by=(),
    host_reads=(),
    smoke=(
        # the second step of an amsgrad AdamW with weight decay: moments exact, parameters within a
        # float32 ulp (the device's bias corrections are float32, the CPU's double)
        Sample(
            "_fused_adamw_",
            (
                _vector((1.0, -0.5, 0.25, 2.0)),
                _vector((0.5, -1.0, 0.25, 0.125)),
                _vector((0.05, -0.1, 0.025, 0.0125)),
                _vector((0.00025, 0.001, 0.0000625, 0.000015625)),
                _vector((0.0005, 0.001, 0.0000625, 0.0)),
                (T(2.0, "float32"),),
            ),
            (
                ("lr", 0.01),
                ("beta1", 0.9),
                ("beta2", 0.999),
                ("weight_decay", 0.01),
                ("eps", 1e-8),
                ("amsgrad", True),
                ("maximize", False),
            ),
            atol=1e-6,
            rtol=1e-6,
            # torch 2.3.1 (what 2.3.1 and 2.3.1.post2 pin) has no CPU fused kernel: AdamW's unfused step
            reference="ascend_env.kernels.fused_adamw:unfused_reference",
        ),
    ),
    generation=False,
)

FIXES: Tuple[Fix, ...] = (
    NATIVE_MULTI_HEAD_ATTENTION,
    TRANSFORMER_ENCODER_LAYER,
    ADDMM_ACTIVATION,
    FUSED_ADAMW,
)
