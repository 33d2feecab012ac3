"""``torchvision::nms``'s kernel against torchvision's CPU op, on the cases of torchvision's own
``test/test_ops.py`` (TestNMS): random boxes at several thresholds, a pair exactly at the
threshold, thresholds 0 and 1, empty inputs, ties, the input errors, and ``batched_nms`` both ways;
on the simulated NPU, the ops dispatched there (exactly ``NATIVE_OPS``) and one host read a call,
however long the chains of suppressions."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

torchvision = pytest.importorskip("torchvision")

from ascend_env import sim  # noqa: E402
from ascend_env.kernels import nms  # noqa: E402
from ascend_env.sim import dispatch_model, oppaths, optables  # noqa: E402

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


def _on_device(value) -> bool:
    if isinstance(value, torch.Tensor):
        return value.device.type == sim.DEVICE
    return isinstance(value, torch.device) and value.type == sim.DEVICE


class _Device(TorchDispatchMode):
    """The aten ops dispatched on the simulated NPU (a device tensor or ``device=``), and the host
    reads that the dispatch-path model (``ascend_env.sim.dispatch_model``) counts: copies to the
    host, ``item()``, data-dependent ops."""

    def __init__(self) -> None:
        super().__init__()
        self.model = dispatch_model.Model(oppaths.lookup(sim.enabled_table()), sim.enabled_ops())
        self.seen: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if any(_on_device(value) for value in tree_flatten((args, kwargs))[0]):
            self.seen.add(self.model.name(func))
        self.model.observe(func, args, kwargs)
        return func(*args, **kwargs)

    @property
    def host_reads(self) -> dict:
        return dict(self.model.totals.syncs)


def test_native_ops_is_exactly_what_is_dispatched_and_native_everywhere(npu):
    torch.manual_seed(0)
    boxes, scores = _boxes(20), torch.rand(20)
    inputs = [x.to(npu) for x in (boxes, scores, torch.empty(0, 4), torch.empty(0))]
    sim.reset()
    with _Device() as ops:
        got = nms.nms(inputs[0], inputs[1], 0.3)
        empty = nms.nms(inputs[2], inputs[3], 0.3)
    assert not sim.fallbacks(), dict(sim.fallbacks())
    assert got.device.type == empty.device.type == npu
    assert torch.equal(got.cpu(), CPU(boxes, scores, 0.3)) and empty.shape == (0,)
    assert ops.seen == nms.NATIVE_OPS
    for release in optables.releases():
        assert not nms.NATIVE_OPS - optables.load(release), release


def _chain(length: int):
    """Boxes 10 wide, each 3 right of the one before: box i overlaps box i + 1 by an IoU of 7/13
    (above 0.5) and box i + 2 by 1/4, with scores falling along the chain: each kept box suppresses
    the next, so every other box is kept and each box's fate hangs on all the boxes before it."""
    starts = torch.arange(length, dtype=torch.float32) * 3
    boxes = torch.stack((starts, torch.zeros(length), starts + 10, torch.full((length,), 10.0)), 1)
    return boxes, torch.linspace(1.0, 0.5, length)


@pytest.mark.parametrize("length", [1, 2, 10, 41])
def test_one_host_read_however_long_the_chain_of_suppressions(npu, length):
    """One read, the packed suppression mask, whatever the walk: a fixed-point iteration reads once
    a round, and a chain of 10 takes it 10 (the longest chain of suppressions, 9, plus one)."""
    boxes, scores = _chain(length)
    expected = CPU(boxes, scores, 0.5)
    assert expected.tolist() == list(range(0, length, 2))
    boxes, scores = boxes.to(npu), scores.to(npu)
    with _Device() as ops:
        got = nms.nms(boxes, scores, 0.5)
    assert ops.host_reads == {"copy_": 1}
    assert torch.equal(got.cpu(), expected)


def test_one_host_read_on_random_boxes(npu):
    torch.manual_seed(0)
    boxes, scores = _boxes(300), torch.rand(300)
    expected = CPU(boxes, scores, 0.3)
    boxes, scores = boxes.to(npu), scores.to(npu)
    with _Device() as ops:
        got = nms.nms(boxes, scores, 0.3)
    assert ops.host_reads == {"copy_": 1}
    assert torch.equal(got.cpu(), expected)
