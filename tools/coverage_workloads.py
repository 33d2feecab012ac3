"""The coverage matrix's second child: workloads beyond text generation, on the CPU, then on the NPU.

Run by ``tools/coverage_matrix.py run --suite workloads`` under ``ascend-env audit`` (which enables
the simulated NPU in this process), or by hand on the CPU alone::

    python tools/coverage_workloads.py --out result.json [--archs faster_rcnn,vit]

Each workload builds its model or inputs seeded (the same every run; no weights are loaded from
anywhere: torchvision models with ``weights=None, weights_backbone=None``, transformers models from
a tiny config), runs one step on the CPU, then the same on ``npu`` with the simulator's fallback
counts reset, and compares every output tensor with the CPU's (integers and shapes equal, floats
within a tolerance). The JSON written to ``--out`` has the shape of ``tools/coverage_models.py``'s
(one "strategy" per workload, its step), so the driver summarizes both alike: a strategy's ``cpu``
is the list of its outputs (name, shape, dtype), ``npu`` the same list when every output is close,
else that list with what differs; an error on a device is ``{"error"}``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

# Tolerances of a float output against the CPU's (the simulated device runs CPU kernels, so most
# outputs are equal; a kernel of ours may sum in another order).
ATOL = 1e-4
RTOL = 1e-4


def _tensor(device: str, seed: int, *shape: int) -> Any:
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator).to(device)


def _detection(builder: str) -> Callable[[str], Dict[str, Any]]:
    """A torchvision detection model with no weights, 64-pixel images, 3 classes: its eval forward
    on two images (the region proposals' and the detections' nms, roi_align of the box and mask
    heads)."""

    def run(device: str) -> Dict[str, Any]:
        import torch
        import torchvision

        torch.manual_seed(0)
        model = getattr(torchvision.models.detection, builder)(
            weights=None, weights_backbone=None, num_classes=3, min_size=64, max_size=64
        )
        model = model.eval().to(device)
        images = [_tensor(device, 1, 3, 64, 64).sigmoid(), _tensor(device, 2, 3, 64, 48).sigmoid()]
        with torch.no_grad():
            detections = model(images)
        outputs: Dict[str, Any] = {}
        for i, found in enumerate(detections):
            for name, value in found.items():
                outputs[f"{i}.{name}"] = value
        return outputs

    run.__doc__ = (
        f"torchvision's `{builder}` with no weights, 3 classes, 64-pixel images, eval: a detection of "
        "two images (nms of the proposals and detections, roi_align of the heads)."
    )
    return run


def vit(device: str) -> Dict[str, Any]:
    """torchvision's VisionTransformer, tiny, eval + no_grad: nn.MultiheadAttention's fast path."""
    import torch
    from torchvision.models import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=32, mlp_dim=64, num_classes=10
    )
    model = model.eval().to(device)
    with torch.no_grad():
        return {"logits": model(_tensor(device, 1, 2, 3, 32, 32))}


def transformer_encoder(device: str) -> Dict[str, Any]:
    """``nn.TransformerEncoder`` in eval + no_grad: the fused encoder layer's fast path."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval().to(device)
    with torch.no_grad():
        return {"hidden": model(_tensor(device, 1, 2, 10, 32))}


def whisper_features(device: str) -> Dict[str, Any]:
    """transformers' WhisperFeatureExtractor computing log-mel features on the device (torch.stft)."""
    import numpy as np
    from transformers import WhisperFeatureExtractor

    extractor = WhisperFeatureExtractor(feature_size=80, chunk_length=2)
    audio = np.random.RandomState(0).randn(16000).astype(np.float32)
    extracted = extractor(audio, sampling_rate=16000, return_tensors="pt", device=device)
    return {"input_features": extracted["input_features"]}


def _stft_loss(prediction: Any, target: Any) -> Any:
    """A multi-resolution STFT loss (spectral convergence plus log-magnitude L1, as vocoders train)."""
    import torch

    total = prediction.new_zeros(())
    for n_fft, hop in ((64, 16), (128, 32), (32, 8)):
        window = torch.hann_window(n_fft, device=prediction.device)
        spectra = [
            torch.stft(x, n_fft, hop, window=window, return_complex=True).abs().clamp(min=1e-7)
            for x in (prediction, target)
        ]
        convergence = torch.linalg.norm(spectra[1] - spectra[0]) / torch.linalg.norm(spectra[1])
        total = total + convergence + (spectra[1].log() - spectra[0].log()).abs().mean()
    return total


def stft_loss_step(device: str) -> Dict[str, Any]:
    """One training step of a small conv generator under a multi-resolution STFT loss."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(1, 4, 5, padding=2), nn.Tanh(), nn.Conv1d(4, 1, 5, padding=2)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    noise, target = _tensor(device, 1, 2, 1, 512), _tensor(device, 2, 2, 512)
    loss = _stft_loss(model(noise).squeeze(1), target)
    loss.backward()
    optimizer.step()
    return {"loss": loss.detach(), **{f"param.{n}": p.detach() for n, p in model.named_parameters()}}


def istft(device: str) -> Dict[str, Any]:
    """torch.istft of a spectrum (overlap-add through unfold_backward), and its gradient."""
    import torch

    window = torch.hann_window(64, device=device)
    signal = _tensor(device, 1, 2, 640)
    spectrum = torch.stft(signal, 64, 16, window=window, return_complex=True).detach().requires_grad_()
    restored = torch.istft(spectrum, 64, 16, window=window, length=640)
    restored.pow(2).sum().backward()
    return {"signal": restored.detach(), "grad": torch.view_as_real(spectrum.grad)}


def qwen2_vl(device: str) -> Dict[str, Any]:
    """transformers' Qwen2VLForConditionalGeneration from a tiny config: a forward with one image
    (its vision tower builds ``cu_seqlens`` with repeat_interleave)."""
    import inspect

    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    text = {
        "vocab_size": 96,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 64,
        "rope_scaling": {"type": "mrope", "mrope_section": [2, 1, 1]},
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
    }
    vision = {"depth": 2, "embed_dim": 32, "hidden_size": 32, "num_heads": 4, "mlp_ratio": 2, "patch_size": 2}
    tokens = {
        "image_token_id": 90,
        "video_token_id": 91,
        "vision_start_token_id": 88,
        "vision_end_token_id": 89,
    }
    # transformers 4.50 on take the text part as a sub-config; 4.45 to 4.49 as the config's own fields.
    if "text_config" in inspect.signature(Qwen2VLConfig.__init__).parameters:
        config = Qwen2VLConfig(text_config=text, vision_config=vision, **tokens)
    else:
        config = Qwen2VLConfig(vision_config=vision, **text, **tokens)
    torch.manual_seed(0)
    model = Qwen2VLForConditionalGeneration(config).eval().to(device)
    grid = torch.tensor([[1, 4, 4]])  # 16 patches of 3 x 2 x 2 x 2 values, 4 tokens after the 2 x 2 merge
    pixels = _tensor(device, 1, 16, 3 * 2 * 2 * 2)
    ids = torch.tensor([[5, 88] + [90] * 4 + [89, 6, 7, 8]], device=device)
    with torch.no_grad():
        out = model(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            pixel_values=pixels,
            image_grid_thw=grid.to(device),
        )
    return {"logits": out.logits}


def unpack_4bit(device: str) -> Dict[str, Any]:
    """4-bit weights packed eight to an int32 and unpacked with `torch.bitwise_left_shift` /
    `torch.bitwise_right_shift` (as GPTQ's packers and dequantizers call them), then dequantized;
    and unpacked with the `>>` operator (`__rshift__`), which other code uses."""
    import torch

    generator = torch.Generator().manual_seed(0)
    nibbles = torch.randint(0, 16, (64, 32, 8), generator=generator, dtype=torch.int32).to(device)
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=device)
    packed = torch.bitwise_left_shift(nibbles, shifts).sum(-1, dtype=torch.int32)
    unpacked = torch.bitwise_and(torch.bitwise_right_shift(packed.unsqueeze(-1), shifts), 15)
    scales = _tensor(device, 1, 64, 1).abs()
    weight = (unpacked.reshape(64, 256).float() - 8) * scales
    return {
        "packed": packed,
        "unpacked": unpacked,
        "operators": (packed.unsqueeze(-1) >> shifts) & 15,
        "matmul": _tensor(device, 2, 4, 256) @ weight.t(),
    }


# name -> (category, the step compared, the package it needs beyond torch, its function).
WORKLOADS: Dict[str, Tuple[str, str, Optional[str], Callable[[str], Dict[str, Any]]]] = {
    "faster_rcnn": ("vision", "detect", "torchvision", _detection("fasterrcnn_resnet50_fpn")),
    "mask_rcnn": ("vision", "detect", "torchvision", _detection("maskrcnn_resnet50_fpn")),
    "vit": ("vision", "forward", "torchvision", vit),
    "transformer_encoder": ("vision", "forward", None, transformer_encoder),
    "whisper_features": ("audio", "features", "transformers", whisper_features),
    "stft_loss": ("audio", "train_step", None, stft_loss_step),
    "istft": ("audio", "istft_backward", None, istft),
    "qwen2_vl": ("vision-language", "forward", "transformers", qwen2_vl),
    "unpack_4bit": ("quantization", "unpack", None, unpack_4bit),
}


def describe(outputs: Dict[str, Any]) -> List[str]:
    """Each output as ``name shape dtype`` (what a strategy's ``cpu`` holds)."""
    return [
        f"{name} {tuple(value.shape)} {str(value.dtype).split('.')[-1]}" for name, value in outputs.items()
    ]


def differences(cpu: Dict[str, Any], npu: Dict[str, Any]) -> List[str]:
    """What differs between the CPU's outputs and the NPU's (nothing: empty)."""
    import torch

    found = []
    for name, expected in cpu.items():
        got = npu[name].cpu()
        if got.shape != expected.shape or got.dtype != expected.dtype:
            found.append(
                f"{name}: {tuple(got.shape)} {got.dtype}, not {tuple(expected.shape)} {expected.dtype}"
            )
        elif expected.is_floating_point() or expected.is_complex():
            if not torch.allclose(got, expected, atol=ATOL, rtol=RTOL, equal_nan=True):
                found.append(f"{name}: max abs difference {float((got - expected).abs().max()):.3g}")
        elif not torch.equal(got, expected):
            found.append(f"{name}: {int((got != expected).sum())} values differ")
    return found


def _error(exc: BaseException) -> Dict[str, str]:
    return {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}


def run_workload(name: str, npu: bool) -> Dict[str, Any]:
    """One workload on the CPU, then (``npu``) on the simulated NPU, compared."""
    import importlib

    category, step, needs, function = WORKLOADS[name]
    result: Dict[str, Any] = {
        "category": category,
        "model_type": name,
        "error": None,
        "strategies": {},
        "fallbacks": {},
    }
    if needs is not None:
        try:
            importlib.import_module(needs)
        except ImportError as exc:
            result["error"] = f"LookupError: {needs} is not installed ({exc})"
            return result
    outcome: Dict[str, Any] = {}
    try:
        cpu = {key: value.detach().cpu() for key, value in function("cpu").items()}
        outcome["cpu"] = describe(cpu)
    except Exception as exc:  # noqa: BLE001 - recorded: "not covered", with the reason
        outcome["cpu"] = _error(exc)
    if npu:
        from ascend_env import sim

        sim.reset()
        try:
            got = function("npu")
            wrong = differences(cpu, got) if "error" not in outcome["cpu"] else []
            outcome["npu"] = describe(got) + wrong
        except Exception as exc:  # noqa: BLE001 - recorded, compared with the CPU's
            outcome["npu"] = _error(exc)
        result["fallbacks"] = dict(sorted(sim.fallbacks().items()))
    result["strategies"][step] = outcome
    return result


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="where to write the JSON result")
    parser.add_argument("--archs", default=",".join(WORKLOADS), help="comma-separated workloads")
    parser.add_argument("--strategies", default="", help="ignored: each workload has its one step")
    args = parser.parse_args(argv)
    import torch

    from ascend_env import sim

    try:
        import transformers

        release = transformers.__version__
    except ImportError:
        release = "none"
    try:
        import torchvision

        vision = torchvision.__version__.split("+")[0]
    except ImportError:
        vision = "none"
    table = sim.enabled_table()
    if table is not None:
        # As a script on Ascend does before it uses "npu" (torch < 2.5 loads no backend itself): the
        # import is what starts the startup hook after install. Without it only a workload that
        # imports transformers (which imports torch_npu) would see the fixes.
        import torch_npu  # noqa: F401
    results: Dict[str, Any] = {
        "transformers": release,
        "torch": torch.__version__,
        "torchvision": vision,
        "table": table,
        "architectures": {},
    }
    for name in [a for a in args.archs.split(",") if a]:
        results["architectures"][name] = run_workload(name, npu=table is not None)
        print(f"coverage: {name} done", file=sys.stderr, flush=True)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(results, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
