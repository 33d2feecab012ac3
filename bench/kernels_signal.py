"""The cases of ``bench/kernels.py`` for the kernels of the signal and image ops
(``ascend_env/kernels/registry/signal.py``): label, the kernel's call, the native op's call."""

from __future__ import annotations

from typing import Any, Callable, List, Tuple

import torch

from ascend_env.kernels import fft, unfold_backward, upsample_aa, upsample_nearest_exact

Case = Tuple[str, Callable[[], Any], Callable[[], Any]]


def cases(device: str) -> List[Case]:
    generator = torch.Generator().manual_seed(0)
    found: List[Case] = []
    aten = torch.ops.aten
    # STFT frames: Whisper's 400 (30 s at 16 kHz, hop 160: 3000 frames), a vocoder's 512 and 2048.
    for frames, size in ((3000, 400), (3000, 512), (500, 2048)):
        signal = torch.randn(frames, size, generator=generator).to(device)
        spectrum = aten._fft_r2c(signal, [1], 0, True)
        found.append(
            (
                f"_fft_r2c {frames}x{size}",
                lambda x=signal: fft.fft_r2c(x, [1], 0, True),
                lambda x=signal: aten._fft_r2c(x, [1], 0, True),
            )
        )
        found.append(
            (
                f"_fft_c2r {frames}x{size // 2 + 1} -> {size}",
                lambda x=spectrum, n=size: fft.fft_c2r(x, [1], 2, n),
                lambda x=spectrum, n=size: aten._fft_c2r(x, [1], 2, n),
            )
        )
    image = torch.randn(8, 64, 64, generator=generator).to(device).to(torch.complex64)
    found.append(
        (
            "_fft_c2c 8x64x64 dims (1, 2)",
            lambda x=image: fft.fft_c2c(x, [1, 2], 0, True),
            lambda x=image: aten._fft_c2c(x, [1, 2], 0, True),
        )
    )
    # istft's overlap-add: frames of 512 at a hop of 128, Whisper's 400 at 160; a step-1 unfold.
    for frames, size, step in ((3000, 512, 128), (3000, 400, 160), (64, 64, 1)):
        length = (frames - 1) * step + size
        grad = torch.randn(4, frames, size, generator=generator).to(device)
        found.append(
            (
                f"unfold_backward 4x{frames}x{size} step {step}",
                lambda g=grad, n=length, s=size, h=step: unfold_backward.unfold_backward(g, [4, n], 1, s, h),
                lambda g=grad, n=length, s=size, h=step: aten.unfold_backward(g, [4, n], 1, s, h),
            )
        )
    # nearest-exact resizing: an image processor's 224 -> 336, a feature map x2, and its gradient.
    for shape, size in (((1, 3, 224, 224), [336, 336]), ((8, 256, 32, 32), [64, 64])):
        image = torch.randn(*shape, generator=generator).to(device)
        grad = torch.randn(*shape[:2], *size, generator=generator).to(device)
        label = "x".join(map(str, shape))
        found.append(
            (
                f"_upsample_nearest_exact2d {label} -> {size[0]}",
                lambda x=image, s=size: upsample_nearest_exact.upsample_nearest_exact2d(x, s),
                lambda x=image, s=size: aten._upsample_nearest_exact2d(x, s),
            )
        )
        found.append(
            (
                f"_upsample_nearest_exact2d_backward {label}",
                lambda g=grad, s=size, i=list(shape): (
                    upsample_nearest_exact.upsample_nearest_exact2d_backward(g, s, i)
                ),
                lambda g=grad, s=size, i=list(shape): aten._upsample_nearest_exact2d_backward(g, s, i),
            )
        )
    # anti-aliased resizing: an image processor's 1024 -> 224 (bicubic, as CLIP/SigLIP resize) and a
    # 512 -> 384 bilinear, with the gradient of the bilinear.
    for mode, shape, size in (
        ("bicubic", (1, 3, 1024, 1024), [224, 224]),
        ("bilinear", (4, 3, 512, 512), [384, 384]),
    ):
        image = torch.randn(*shape, generator=generator).to(device)
        grad = torch.randn(*shape[:2], *size, generator=generator).to(device)
        label = "x".join(map(str, shape))
        name = f"_upsample_{mode}2d_aa"
        found.append(
            (
                f"{name} {label} -> {size[0]}",
                lambda x=image, s=size, n=name: upsample_aa.KERNELS[n](x, s, False),
                lambda x=image, s=size, n=name: getattr(aten, n)(x, s, False),
            )
        )
        if mode == "bilinear":
            found.append(
                (
                    f"{name}_backward {label}",
                    lambda g=grad, s=size, i=list(shape), n=name: upsample_aa.KERNELS[f"{n}_backward"](
                        g, s, i, False
                    ),
                    lambda g=grad, s=size, i=list(shape), n=name: getattr(aten, f"{n}_backward")(
                        g, s, i, False
                    ),
                )
            )
    return found
