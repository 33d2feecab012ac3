"""The fixes of signal and image ops: the FFTs, unfold_backward (istft), anti-aliased and
nearest-exact upsampling."""

from __future__ import annotations

from typing import Tuple

from ascend_env.kernels.registry.fix import Fix, Overload, Sample, T, pair

__all__ = ["FFT", "FIXES", "UNFOLD_BACKWARD", "UPSAMPLE_AA", "UPSAMPLE_NEAREST_EXACT"]

# -- the FFTs --------------------------------------------------------------------------------------
# torch_npu 2.1.0.post3, 2.2.0, 2.2.0.post2 and 2.3.1 lack aten::_fft_r2c, _fft_c2c and _fft_c2r and
# their out= forms (2.1.0.post6 and 2.1.0.post8 on have them). The functionals are no composites:
# each has its own CPU kernel (aten/src/ATen/native/mkl/SpectralOps.cpp), so each falls back alone.
_FFT_MISSING = ("==2.1.0.post3", ">=2.2.0,<2.3.1.post2")
_SIGNAL = T(
    [[0.5, -1.0, 2.0, 0.25, 3.0, -0.5, 1.0, 0.0], [1.0, 2.0, -3.0, 4.0, 0.5, 0.5, -2.0, 1.5]], "float32"
)
_SPECTRUM = T(
    [[1 + 2j, -0.5 + 1j, 3 - 1j, 0.25j, 2 + 0j], [-1 + 0j, 0.5 - 0.5j, 1 + 1j, -2 - 1j, 0.5 + 0j]],
    "complex64",
)
# A DFT as matrix products adds in another order than pocketfft's FFT: within 4 * sqrt(n) * eps
# * ||x|| of the CPU (n = 8 here, ||x|| < 10: 3e-5); the CPU's own result is no more exact.
_FFT_ATOL, _FFT_RTOL = 3e-5, 1e-5

FFT = Fix(
    name="fft",
    module="ascend_env.kernels.fft",
    overloads=tuple(
        Overload(name, _FFT_MISSING)
        for name in ("_fft_r2c", "_fft_r2c.out", "_fft_c2c", "_fft_c2c.out", "_fft_c2r", "_fft_c2r.out")
    ),
    reason=(
        "torch.stft/istft and torch.fft call them: HiFiGAN vocoders' STFT and ISTFT (vllm-omni), "
        "Whisper's log-mel features, STFT losses in training; without an NPU kernel each call "
        "copies the signal to the host and back, gradients too."
    ),
    upstream=(
        "op-plugin's YAML per release (ascend_env/data/optables); PyTorch "
        "aten/src/ATen/native/mkl/SpectralOps.cpp (_fft_r2c_mkl, _fft_c2c_mkl, _fft_c2r_mkl)"
    ),
    namespace="aten",
    dispatch_key="PrivateUse1",
    requires=None,
    registered_by=(),
    host_reads=(),
    smoke=(
        Sample("_fft_r2c", (_SIGNAL, [1], 0, True), atol=_FFT_ATOL, rtol=_FFT_RTOL),
        Sample("_fft_r2c.out", (_SIGNAL, [0, 1], 1, False), out="complex64", atol=_FFT_ATOL, rtol=_FFT_RTOL),
        Sample("_fft_c2c", (_SPECTRUM, [1], 0, True), atol=_FFT_ATOL, rtol=_FFT_RTOL),
        Sample(
            "_fft_c2c.out", (_SPECTRUM, [0, 1], 2, False), out="complex64", atol=_FFT_ATOL, rtol=_FFT_RTOL
        ),
        Sample("_fft_c2r", (_SPECTRUM, [1], 2, 8), atol=_FFT_ATOL, rtol=_FFT_RTOL),
        Sample("_fft_c2r.out", (_SPECTRUM, [0, 1], 1, 9), out="float32", atol=_FFT_ATOL, rtol=_FFT_RTOL),
    ),
    generation=False,
)

# -- unfold_backward -------------------------------------------------------------------------------
# torch_npu 2.1.0.post3 to 2.1.0.post13 and 2.2.0 to 2.6.0 (18 tables) lack aten::unfold_backward;
# 2.1.0.post17 and 2.6.0.post3 on have it.
# unfold_backward.out is ATen's CompositeExplicitAutograd wrapper of the functional: no kernel.
_UNFOLD_BACKWARD_MISSING = ("<2.1.0.post17", ">=2.2.0,<2.6.0.post3")

UNFOLD_BACKWARD = Fix(
    name="unfold_backward",
    module="ascend_env.kernels.unfold_backward",
    overloads=(Overload("unfold_backward", _UNFOLD_BACKWARD_MISSING),),
    reason=(
        "torch.istft's overlap-add calls it (vocoders' ISTFT), and so does the backward of every "
        "Tensor.unfold (torch.stft's framing, patch extraction); without an NPU kernel each call "
        "copies the frames to the host and back."
    ),
    upstream=(
        "op-plugin's YAML per release (ascend_env/data/optables); PyTorch "
        "aten/src/ATen/native/cpu/UnfoldBackwardKernel.cpp"
    ),
    namespace="aten",
    dispatch_key="PrivateUse1",
    requires=None,
    registered_by=(),
    host_reads=(),
    smoke=(
        # integers in float32: every order of addition gives the same bits
        Sample(
            "unfold_backward",
            (
                T([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [-1.0, 0.5, 2.5, 9.0]], "float32"),
                [10],
                0,
                4,
                2,
            ),
        ),
    ),
    generation=False,
)

# -- _upsample_nearest_exact2d ---------------------------------------------------------------------
# torch_npu 2.1.0.post3 to 2.1.0.post8, 2.2.0, 2.2.0.post2, 2.3.1, 2.3.1.post2 and 2.4.0 lack it, its
# out= form and its backward (both forms); the .vec overload F.interpolate calls is a composite of
# the functional (CompositeImplicitAutograd, torch 2.1 to 2.13).
_NEAREST_EXACT_MISSING = ("<2.1.0.post10", ">=2.2.0,<2.3.1.post4", "==2.4.0")
_IMAGE = T([[[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[-1.0, 0.5, 7.0], [2.5, -3.0, 8.0]]]], "float32")
_IMAGE_GRAD = T(
    [[[[float(i * 5 + j - 7 + 20 * c) for j in range(5)] for i in range(3)] for c in range(2)]], "float32"
)

UPSAMPLE_NEAREST_EXACT = Fix(
    name="upsample_nearest_exact",
    module="ascend_env.kernels.upsample_nearest_exact",
    # structured: torch_npu's functional falls back through its out= form
    overloads=(
        *pair("_upsample_nearest_exact2d", "_upsample_nearest_exact2d.out", _NEAREST_EXACT_MISSING),
        *pair(
            "_upsample_nearest_exact2d_backward",
            "_upsample_nearest_exact2d_backward.grad_input",
            _NEAREST_EXACT_MISSING,
        ),
    ),
    reason=(
        "F.interpolate(mode='nearest-exact') (image processors and vision models that resize as "
        "Pillow does) and its gradient; without an NPU kernel each call copies the image to the "
        "host and back."
    ),
    upstream=(
        "op-plugin's YAML per release (ascend_env/data/optables); PyTorch "
        "aten/src/ATen/native/UpSample.h (nearest_neighbor_exact_compute_source_index)"
    ),
    namespace="aten",
    dispatch_key="PrivateUse1",
    requires=None,
    registered_by=(),
    host_reads=(),
    smoke=(
        Sample("_upsample_nearest_exact2d", (_IMAGE, [3, 5])),
        Sample("_upsample_nearest_exact2d.out", (_IMAGE, [5, 2], 2.5, 0.7), out="float32"),
        # integer gradients: every order of the sums gives the same bits
        Sample("_upsample_nearest_exact2d_backward", (_IMAGE_GRAD, [3, 5], [1, 2, 2, 3])),
        Sample(
            "_upsample_nearest_exact2d_backward.grad_input",
            (_IMAGE_GRAD, [3, 5], [1, 2, 2, 3], 1.5, 1.7),
            outs=(("grad_input", "float32"),),
        ),
    ),
    generation=False,
)


# -- _upsample_bilinear2d_aa, _upsample_bicubic2d_aa -------------------------------------------------
# torch_npu 2.1.0.post3, 2.1.0.post6, 2.2.0, 2.2.0.post2 and 2.3.1 lack them, their out= forms and
# their backwards (both forms); the .vec overloads F.interpolate calls are composites of the
# functionals (CompositeImplicitAutograd, torch 2.1 to 2.13).
_AA_MISSING = ("<2.1.0.post8", ">=2.2.0,<2.3.1.post2")
_AA_IMAGE = T(
    [[[[float((i * 7 + j * 3) % 11) - 4.5 for j in range(6)] for i in range(5)] for c in range(2)]], "float32"
)
_AA_GRAD = T(
    [[[[float((i * 5 + j) % 7) - 3.0 for j in range(4)] for i in range(3)] for c in range(2)]], "float32"
)
# mm/bmm sum the weighted terms in another order than the CPU's loops: within 16 * eps of the
# largest value (|x| <= 6.5 here, measured 8 * eps at most): 1e-5.
_AA_ATOL = 1e-5


def _aa_smoke(mode: str) -> Tuple[Sample, ...]:
    name = f"_upsample_{mode}2d_aa"
    return (
        Sample(name, (_AA_IMAGE, [3, 4], False), atol=_AA_ATOL),
        Sample(f"{name}.out", (_AA_IMAGE, [8, 3], True, 1.6, 0.5), out="float32", atol=_AA_ATOL),
        Sample(f"{name}_backward", (_AA_GRAD, [3, 4], [1, 2, 5, 6], False), atol=_AA_ATOL),
        Sample(
            f"{name}_backward.grad_input",
            (_AA_GRAD, [3, 4], [1, 2, 5, 6], False, 0.6, 0.7),
            outs=(("grad_input", "float32"),),
            atol=_AA_ATOL,
        ),
    )


UPSAMPLE_AA = Fix(
    name="upsample_aa",
    module="ascend_env.kernels.upsample_aa",
    # structured: torch_npu's functionals fall back through their out= forms
    overloads=tuple(
        overload
        for mode in ("bilinear", "bicubic")
        for overload in (
            *pair(f"_upsample_{mode}2d_aa", f"_upsample_{mode}2d_aa.out", _AA_MISSING),
            *pair(
                f"_upsample_{mode}2d_aa_backward", f"_upsample_{mode}2d_aa_backward.grad_input", _AA_MISSING
            ),
        )
    ),
    reason=(
        "F.interpolate(mode='bilinear' or 'bicubic', antialias=True) (image processors and "
        "torchvision's resize, as Pillow resizes) and its gradient; without an NPU kernel each "
        "call copies the image to the host and back."
    ),
    upstream=(
        "op-plugin's YAML per release (ascend_env/data/optables); PyTorch "
        "aten/src/ATen/native/cpu/UpSampleKernel.cpp (_compute_indices_min_size_weights_aa, v2.1.0)"
    ),
    namespace="aten",
    dispatch_key="PrivateUse1",
    requires=None,
    registered_by=(),
    host_reads=(),
    smoke=(*_aa_smoke("bilinear"), *_aa_smoke("bicubic")),
    generation=False,
)

FIXES: Tuple[Fix, ...] = (FFT, UNFOLD_BACKWARD, UPSAMPLE_NEAREST_EXACT, UPSAMPLE_AA)
