"""``torchvision::nms``'s kernel against torchvision's CPU op, on the cases of torchvision's own
``test/test_ops.py`` (TestNMS): random boxes at several thresholds, a pair exactly at the
threshold, thresholds 0 and 1, empty inputs, ties, the input errors, and ``batched_nms`` both ways."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

torchvision = pytest.importorskip("torchvision")

from ascend_env.kernels import nms  # noqa: E402
from ascend_env.sim import optables  # noqa: E402

CPU = torch.ops.torchvision.nms


def _boxes(n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    boxes = torch.rand(n, 4, dtype=dtype) * 100
    boxes[:, 2:] += boxes[:, :2]
    return boxes


def _with_iou(n: int, iou: float):
    """torchvision's _create_tensors_with_iou: the last box overlaps the first by exactly ``iou``."""
    boxes = _boxes(n)
    boxes[-1, :] = boxes[0, :]
    x0, y0, x1, y1 = boxes[-1].tolist()
    boxes[-1, 2] += (x1 - x0) * (1 / iou - 1)
    return boxes, torch.rand(n)


@pytest.mark.parametrize("iou", [0.0, 0.2, 0.5, 0.8, 1.0])
@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_equal_to_the_cpu(iou, seed, dtype):
    torch.manual_seed(seed)
    for n in (1, 2, 30, 300):
        boxes, scores = _boxes(n, dtype), torch.rand(n, dtype=dtype)
        assert torch.equal(nms.nms(boxes, scores, iou), CPU(boxes, scores, iou))


@pytest.mark.parametrize("iou", [0.2, 0.5, 0.8])
def test_a_pair_exactly_at_the_threshold_as_the_cpu(iou):
    torch.manual_seed(0)
    boxes, scores = _with_iou(1000, iou)
    assert torch.equal(nms.nms(boxes, scores, iou), CPU(boxes, scores, iou))


def test_a_threshold_that_float32_rounds_up_is_compared_as_a_double():
    boxes = torch.tensor([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0]])
    scores = torch.tensor([0.9, 0.8])
    ovr = 1.0  # equal boxes; a threshold just under 1 that float32 rounds to 1.0
    threshold = 1.0 - 2.0**-30
    assert float(torch.tensor(threshold, dtype=torch.float32)) == ovr
    assert nms.nms(boxes, scores, threshold).tolist() == CPU(boxes, scores, threshold).tolist() == [0]


def test_empty():
    empty, none = torch.empty(0, 4), torch.empty(0)
    got = nms.nms(empty, none, 0.5)
    assert got.dtype == torch.int64 and got.shape == (0,) and torch.equal(got, CPU(empty, none, 0.5))


@pytest.mark.parametrize("seed", range(3))
def test_ties_and_nans_in_the_cpus_order(seed):
    """The CPU sorts the scores stably (equal scores by index, NaN first): so ties keep its indices."""
    torch.manual_seed(seed)
    boxes, scores = _boxes(200), torch.randint(0, 5, (200,)).float()
    scores[torch.randint(0, 200, (20,))] = float("nan")
    expected = CPU(boxes, scores, 0.3)
    assert torch.equal(nms.nms(boxes, scores, 0.3), expected)
    # An unstable order gives other boxes here: the case has ties that matter.
    order = torch.sort(scores, 0, True)[1]
    untied = torch.empty(200).index_put_((order,), torch.arange(200, 0, -1).float())
    assert not torch.equal(CPU(boxes, untied, 0.3), expected)


@pytest.mark.parametrize(
    "boxes, scores",
    [
        (torch.rand(4), torch.rand(3)),
        (torch.rand(3, 5), torch.rand(3)),
        (torch.rand(3, 4), torch.rand(3, 2)),
        (torch.rand(3, 4), torch.rand(4)),
        (torch.rand(3, 4), torch.rand(3, dtype=torch.float64)),
        (torch.rand(3, 4).half(), torch.rand(3).half()),
        (torch.ones(3, 4, dtype=torch.int64), torch.ones(3, dtype=torch.int64)),
    ],
    ids=["1d-boxes", "5-columns", "2d-scores", "lengths", "dtypes", "half", "int64"],
)
def test_refuses_what_the_cpu_refuses(boxes, scores):
    with pytest.raises(Exception) as expected:
        CPU(boxes, scores, 0.5)
    with pytest.raises(type(expected.value)) as got:
        nms.nms(boxes, scores, 0.5)
    assert str(got.value).splitlines()[0] == str(expected.value).splitlines()[0]


@pytest.mark.parametrize("seed", range(3))
def test_batched_nms_both_ways(monkeypatch, seed):
    from torchvision.ops import boxes as box_ops

    torch.manual_seed(seed)
    boxes, scores, idxs = _boxes(500), torch.rand(500), torch.randint(0, 4, (500,))
    expected = box_ops.batched_nms(boxes, scores, idxs, 0.5)
    monkeypatch.setattr(box_ops, "nms", nms.nms)
    for way in (box_ops._batched_nms_coordinate_trick, box_ops._batched_nms_vanilla):
        assert torch.equal(way(boxes, scores, idxs, 0.5), expected)


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name, overload = func._schema.name.split("::", 1)[1], func._overloadname
        self.seen.add(name if overload == "default" else f"{name}.{overload}")
        return func(*args, **(kwargs or {}))


def test_native_ops_is_exactly_what_is_dispatched_and_native_everywhere():
    torch.manual_seed(0)
    boxes, scores = _boxes(20), torch.rand(20)
    with _Ops() as ops:
        nms.nms(boxes, scores, 0.3)
        nms.nms(torch.empty(0, 4), torch.empty(0), 0.3)
    assert ops.seen == nms.NATIVE_OPS
    for release in optables.releases():
        assert not nms.NATIVE_OPS - optables.load(release), release
