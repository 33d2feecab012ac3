"""``torchvision::roi_align`` and ``_roi_align_backward``'s kernels against torchvision's CPU ops,
on the cases of torchvision's own ``test/test_ops.py`` (TestRoIAlign): ``aligned`` both ways,
``sampling_ratio`` adaptive and fixed, several spatial scales and dtypes, empty rois, the input
errors, and gradients through torchvision's autograd kernel against the CPU's."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

torchvision = pytest.importorskip("torchvision")

from ascend_env.kernels import roi_align  # noqa: E402
from ascend_env.sim import optables  # noqa: E402

FORWARD = torch.ops.torchvision.roi_align
BACKWARD = torch.ops.torchvision._roi_align_backward


def _case(dtype: torch.dtype, seed: int):
    """Two images, rois partly off the map (torchvision's tests use rois past the border too)."""
    torch.manual_seed(seed)
    x = torch.rand(2, 3, 10, 12, dtype=torch.float64).to(dtype)
    corners = torch.rand(6, 2, dtype=torch.float64) * 14 - 2
    sizes = torch.rand(6, 2, dtype=torch.float64) * 9
    rois = torch.cat([torch.randint(0, 2, (6, 1)).double(), corners, corners + sizes], 1).to(dtype)
    return x, rois


SETTINGS = pytest.mark.parametrize(
    "scale, sampling_ratio, aligned",
    [(1.0, -1, False), (0.5, 0, True), (1.0, 2, True), (0.25, 3, False), (0.5, -1, True)],
)


@SETTINGS
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed", range(3))
def test_forward_gives_the_cpus_bits(dtype, seed, scale, sampling_ratio, aligned):
    x, rois = _case(dtype, seed)
    args = (scale, 5, 4, sampling_ratio, aligned)
    assert torch.equal(roi_align.roi_align(x, rois, *args), FORWARD(x, rois, *args))


@SETTINGS
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_backward_is_the_cpus(dtype, scale, sampling_ratio, aligned):
    x, rois = _case(dtype, 0)
    grad = torch.rand(6, 3, 5, 4, dtype=dtype)
    args = (scale, 5, 4, 2, 3, 10, 12, sampling_ratio, aligned)
    torch.testing.assert_close(roi_align.roi_align_backward(grad, rois, *args), BACKWARD(grad, rois, *args))


@SETTINGS
def test_half_within_torchvisions_tolerance(scale, sampling_ratio, aligned):
    """The CPU rounds to half at each assignment, the kernel once: torchvision's half tolerance."""
    x, rois = _case(torch.float16, 1)
    args = (scale, 5, 4, sampling_ratio, aligned)
    exact = FORWARD(x.double(), rois.double(), *args)
    got, cpu = roi_align.roi_align(x, rois, *args), FORWARD(x, rois, *args)
    assert got.dtype == torch.float16
    torch.testing.assert_close(got.double(), exact, atol=5e-3, rtol=5e-3)
    assert (got.double() - exact).abs().max() <= (cpu.double() - exact).abs().max() + 1e-3


@pytest.mark.parametrize("aligned", [False, True])
def test_gradients_through_torchvisions_autograd_kernel(monkeypatch, aligned):
    """torchvision's Autograd kernel calls _roi_align_backward: the kernels give the CPU's gradient."""
    x, rois = _case(torch.float64, 2)
    expected = torch.autograd.grad(FORWARD(x.requires_grad_(), rois, 0.5, 3, 3, -1, aligned).sum(), x)[0]
    x = x.detach().requires_grad_()

    class RoIAlign(torch.autograd.Function):  # what the Autograd key does, on the kernels
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(rois)
            return roi_align.roi_align(x, rois, 0.5, 3, 3, -1, aligned)

        @staticmethod
        def backward(ctx, grad):
            return roi_align.roi_align_backward(grad, rois, 0.5, 3, 3, 2, 3, 10, 12, -1, aligned)

    got = torch.autograd.grad(RoIAlign.apply(x).sum(), x)[0]
    torch.testing.assert_close(got, expected)


def test_empty_rois_and_channels():
    x, rois = _case(torch.float32, 0)
    for feats, boxes in ((x, rois[:0]), (x[:, :0], rois)):
        got, cpu = (
            roi_align.roi_align(feats, boxes, 1.0, 2, 2, 2, False),
            FORWARD(feats, boxes, 1.0, 2, 2, 2, False),
        )
        assert got.shape == cpu.shape and torch.equal(got, cpu)
    grad = torch.empty(0, 3, 2, 2)
    assert torch.equal(
        roi_align.roi_align_backward(grad, rois[:0], 1.0, 2, 2, 2, 3, 10, 12, 2, False),
        BACKWARD(grad, rois[:0], 1.0, 2, 2, 2, 3, 10, 12, 2, False),
    )


@pytest.mark.parametrize(
    "x, rois",
    [
        (torch.rand(1, 1, 4, 4), torch.rand(2, 4)),
        (torch.rand(1, 1, 4, 4), torch.rand(2, 5, dtype=torch.float64)),
        (torch.rand(1, 1, 4, 4).bfloat16(), torch.rand(2, 5).bfloat16()),
        (torch.ones(1, 1, 4, 4, dtype=torch.int64), torch.zeros(2, 5, dtype=torch.int64)),
    ],
    ids=["4-columns", "dtypes", "bfloat16", "int64"],
)
def test_refuses_what_the_cpu_refuses(x, rois):
    with pytest.raises(Exception) as expected:
        FORWARD(x, rois, 1.0, 2, 2, 2, False)
    with pytest.raises(type(expected.value)) as got:
        roi_align.roi_align(x, rois, 1.0, 2, 2, 2, False)
    assert str(got.value).splitlines()[0] == str(expected.value).splitlines()[0]


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name, overload = func._schema.name.split("::", 1)[1], func._overloadname
        self.seen.add(name if overload == "default" else f"{name}.{overload}")
        return func(*args, **(kwargs or {}))


def test_native_ops_is_exactly_what_is_dispatched_and_native_everywhere():
    x, rois = _case(torch.float32, 0)
    grad = torch.rand(6, 3, 5, 4)
    with _Ops() as ops:
        roi_align.roi_align(x, rois, 1.0, 5, 4, -1, False)
        roi_align.roi_align(x, rois, 0.5, 5, 4, 2, True)
        roi_align.roi_align_backward(grad, rois, 1.0, 5, 4, 2, 3, 10, 12, -1, False)
        roi_align.roi_align_backward(grad, rois, 1.0, 5, 4, 2, 3, 10, 12, 2, True)
    assert ops.seen == roi_align.NATIVE_OPS
    for release in optables.releases():
        assert not roi_align.NATIVE_OPS - optables.load(release), release
