"""The fixes of torchvision's ops (nms, roi_align): registered once torchvision's extension has loaded."""

from __future__ import annotations

from typing import Tuple

from ascend_env.kernels.registry.fix import Fix, Overload, Sample, T

__all__ = ["FIXES", "NMS", "ROI_ALIGN"]

# No torch_npu release registers torchvision's ops: torchvision_npu (a separate package) does.
_EVERY_RELEASE = (">=0",)
_REGISTERED_BY = ("torchvision_npu",)

# A tie (the CPU sorts stably: equal scores by index) and a threshold that one pair exceeds and
# another does not.
_BOXES = T(
    [[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0], [0.0, 0.0, 10.0, 20.0], [20.0, 20.0, 30.0, 30.0]],
    "float32",
)
_SCORES = T([0.8, 0.9, 0.8, 0.6], "float32")

NMS = Fix(
    name="nms",
    module="ascend_env.kernels.nms",
    overloads=(Overload("nms", _EVERY_RELEASE),),
    reason=(
        "torchvision's detection models (Faster/Mask R-CNN, RetinaNet, SSD) call torchvision.ops.nms "
        "(batched_nms) on every forward: without an NPU kernel each call copies the boxes to the host."
    ),
    upstream="pytorch/vision 01d5d10 torchvision/csrc/ops/cpu/nms_kernel.cpp",
    namespace="torchvision",
    dispatch_key="PrivateUse1",
    requires="torchvision",
    registered_by=_REGISTERED_BY,
    host_reads=(
        "the suppression mask packed to bits, one read of N * ceil(N / 8) bytes for N boxes, walked on "
        "the host (the kept boxes: the output's length)",
    ),
    smoke=(Sample("nms", (_BOXES, _SCORES, 0.5)),),
    generation=False,
)

_FEATURES = T([[[[float(4 * row + column) for column in range(4)] for row in range(4)]]], "float32")
_GRAD = T([[[[1.0, 2.0], [3.0, 4.0]]], [[[0.5, -1.0], [2.0, 0.25]]]], "float32")
_ROIS = T([[0.0, 0.0, 0.0, 3.0, 3.0], [0.0, 0.5, 1.0, 2.5, 3.5]], "float32")

ROI_ALIGN = Fix(
    name="roi_align",
    module="ascend_env.kernels.roi_align",
    overloads=(Overload("roi_align", _EVERY_RELEASE), Overload("_roi_align_backward", _EVERY_RELEASE)),
    reason=(
        "torchvision's two-stage detectors (Faster/Mask R-CNN's MultiScaleRoIAlign) call roi_align on "
        "every forward, and its backward when training: without an NPU kernel each copies the "
        "feature maps to the host."
    ),
    upstream="pytorch/vision 0b23e88 torchvision/csrc/ops/cpu/roi_align_kernel.cpp",
    namespace="torchvision",
    dispatch_key="PrivateUse1",
    requires="torchvision",
    registered_by=_REGISTERED_BY,
    host_reads=(
        "with sampling_ratio <= 0 only, the largest sampling grid over the rois (two values, one "
        "read): how many grid positions to walk",
    ),
    smoke=(
        Sample("roi_align", (_FEATURES, _ROIS, 1.0, 2, 2, -1, False)),
        Sample("_roi_align_backward", (_GRAD, _ROIS, 1.0, 2, 2, 1, 1, 4, 4, 2, True), atol=1e-6, rtol=1e-6),
    ),
    generation=False,
)

FIXES: Tuple[Fix, ...] = (NMS, ROI_ALIGN)
