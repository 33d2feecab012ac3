"""The cases of ``bench/kernels.py`` for the kernels of torchvision's ops
(``ascend_env/kernels/registry/vision.py``): label, the kernel's call, the native op's call
(torchvision's own kernel for the device: its CPU op on the CPU). Without torchvision: none."""

from __future__ import annotations

from typing import Any, Callable, List, Tuple

Case = Tuple[str, Callable[[], Any], Callable[[], Any]]


def cases(device: str) -> List[Case]:
    try:
        import torch
        import torchvision  # noqa: F401 - defines torch.ops.torchvision
    except Exception:  # not installed, or a build that does not load beside this torch
        return []
    from ascend_env.kernels import nms, roi_align

    generator = torch.Generator().manual_seed(0)
    found: List[Case] = []
    for n in (100, 1000, 4000):  # proposals per image in a detector's RPN: about 1000 to 4000
        boxes = torch.rand(n, 4, generator=generator) * 800
        boxes[:, 2:] += boxes[:, :2] * 0.1 + 16
        scores = torch.rand(n, generator=generator)
        boxes, scores = boxes.to(device), scores.to(device)
        found.append(
            (
                f"torchvision::nms n={n} iou=0.7",
                lambda b=boxes, s=scores: nms.nms(b, s, 0.7),
                lambda b=boxes, s=scores: torch.ops.torchvision.nms(b, s, 0.7),
            )
        )
    for k, channels, side, ratio in ((64, 256, 50, 2), (512, 256, 50, 2), (512, 256, 50, -1)):
        features = torch.rand(1, channels, side, side, generator=generator).to(device)
        corners = torch.rand(k, 2, generator=generator) * (side - 8)
        sizes = torch.rand(k, 2, generator=generator) * 8 + 1
        rois = torch.cat([torch.zeros(k, 1), corners, corners + sizes], 1).to(device)
        found.append(
            (
                f"torchvision::roi_align k={k} c={channels} {side}x{side} sampling_ratio={ratio}",
                lambda x=features, r=rois, s=ratio: roi_align.roi_align(x, r, 1.0, 7, 7, s, True),
                lambda x=features, r=rois, s=ratio: torch.ops.torchvision.roi_align(x, r, 1.0, 7, 7, s, True),
            )
        )
    return found
