"""The kernels of ``repeat_interleave.Tensor``, the bit shifts, ``sort(stable=...)``, ``bucketize``
and ``_assert_async`` against the CPU's native ops, on PyTorch's own OpInfo samples where they
exist (``op_db``'s ``sort``, ``bucketize``, ``bitwise_left_shift``, ``bitwise_right_shift`` and
``repeat_interleave`` entries, every dtype they declare) and on the edge cases of the CPU kernels
(ties, NaN, -0.0, empty, 0-dim, zero and negative repeats, out-of-range shifts), with the CPU's
exceptions and messages where it refuses. The kernels run on the CPU here; on the simulated NPU
in ``tests/torch/test_fixes.py``.
"""

from __future__ import annotations

import sys
import types
import unittest
from typing import Any, Callable, Dict, List

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ascend_env.kernels import assert_async, bitwise_shift, bucketize, repeat_interleave, sort_stable
from ascend_env.sim import optables


def _op_db() -> Dict[str, Any]:
    # common_utils imports expecttest (a helper for writing expected outputs) at import; the
    # samples do not use it.
    sys.modules.setdefault("expecttest", types.SimpleNamespace(TestCase=unittest.TestCase, ACCEPT=False))
    from torch.testing._internal.common_methods_invocations import op_db

    return {op.name: op for op in op_db if op.variant_test_name == ""}


OPS = _op_db()


def samples(name: str, reference: bool = False) -> List[Any]:
    info = OPS[name]
    found = []
    for dtype in sorted(info.dtypes, key=str):
        found += list(info.sample_inputs("cpu", dtype))
        if reference:
            found += list(info.reference_inputs("cpu", dtype))
    return found


def same(got: Any, want: Any) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def raises_like(ours: Callable[[], Any], native: Callable[[], Any]) -> None:
    """Both raise, the same exception type and first line of message."""
    with pytest.raises(Exception) as theirs:
        native()
    with pytest.raises(Exception) as mine:
        ours()
    assert type(mine.value) is type(theirs.value)
    assert str(mine.value).splitlines()[0] == str(theirs.value).splitlines()[0]


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::", 1)[1]
        overload = func._overloadname
        self.seen.add(name if overload == "default" else f"{name}.{overload}")
        return func(*args, **(kwargs or {}))


# -- bit shifts --------------------------------------------------------------------------------------

SHIFTS = [
    pytest.param(name, sample, id=f"{name}-{index}")
    for name in ("bitwise_left_shift", "bitwise_right_shift")
    for index, sample in enumerate(samples(name, reference=True))
]


@pytest.mark.parametrize("name, sample", SHIFTS)
def test_shift_opinfo_sample(name, sample):
    native = getattr(torch, name)
    mine = getattr(bitwise_shift, name)
    # A Python int reaches the Tensor kernels through PyTorch's composite Tensor_Scalar and
    # Scalar_Tensor overloads, wrapped as a tensor; the kernel is checked on the tensor.
    self, other = (
        value if isinstance(value, torch.Tensor) else torch.tensor(value)
        for value in (sample.input, sample.args[0])
    )
    want = native(self, other)
    same(mine(self, other), want)
    out = torch.empty(0, dtype=want.dtype)
    assert getattr(bitwise_shift, f"{name}_out")(self, other, out=out) is out
    same(out, want)
    if want.shape == self.shape and want.dtype == self.dtype:
        target = self.clone()
        assert getattr(bitwise_shift, f"{name}_")(target, other) is target
        same(target, want)


def test_shifts_by_the_width_or_more_and_by_negative_amounts_are_the_cpus():
    for dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64):
        values = torch.tensor([1, 3, 100, 127], dtype=dtype)
        if dtype != torch.uint8:
            values = torch.cat((values, torch.tensor([-1, -128], dtype=dtype)))
        for amount in (-1, 0, 1, 7, 8, 15, 16, 31, 32, 63, 64, 200):
            shift = torch.full(values.shape, amount, dtype=torch.int64)
            same(bitwise_shift.bitwise_left_shift(values, shift), torch.bitwise_left_shift(values, shift))
            same(bitwise_shift.bitwise_right_shift(values, shift), torch.bitwise_right_shift(values, shift))


@pytest.mark.parametrize(
    "self, other, out",
    [
        (torch.tensor([1.0]), torch.tensor([1]), None),
        (torch.tensor([True]), torch.tensor([True]), None),
        (torch.tensor([1]), torch.tensor(2.0), None),
        (torch.tensor([1]), torch.tensor([1]), torch.empty(0, dtype=torch.bool)),
        (torch.tensor([1]), torch.tensor([1.5]), torch.empty(0, dtype=torch.int64)),
    ],
)
@pytest.mark.parametrize("name", ["bitwise_left_shift", "bitwise_right_shift"])
def test_shift_refusals_are_the_cpus(self, other, out, name):
    native, mine = getattr(torch, name), getattr(bitwise_shift, name)
    if out is None:
        raises_like(lambda: mine(self, other), lambda: native(self, other))
        inplace = getattr(bitwise_shift, f"{name}_")
        raises_like(lambda: inplace(self.clone(), other), lambda: getattr(self.clone(), f"{name}_")(other))
    else:
        mine_out = getattr(bitwise_shift, f"{name}_out")
        raises_like(lambda: mine_out(self, other, out=out), lambda: native(self, other, out=out))


def test_shift_out_of_another_shape_warns_as_aten():
    out = torch.empty(3, dtype=torch.int64)
    with pytest.warns(UserWarning, match=r"had shape \[3\]"):
        bitwise_shift.bitwise_left_shift_out(torch.tensor([1, 2]), torch.tensor([1, 1]), out=out)
    assert out.tolist() == [2, 4]


# -- repeat_interleave.Tensor -------------------------------------------------------------------------

REPEATS = [
    sample.kwargs["repeats"]
    for sample in samples("repeat_interleave")
    if isinstance(sample.kwargs.get("repeats"), torch.Tensor)
]
REPEATS += [
    torch.tensor([2, 0, 3, 1]),
    torch.tensor([0, 0, 0]),
    torch.tensor([5]),
    torch.tensor([], dtype=torch.int64),
    torch.tensor([3, 1, 0, 2], dtype=torch.int32),
    torch.tensor([1, 2, 3, 4, 5, 6])[::2],
    torch.randint(0, 9, (257,), generator=torch.Generator().manual_seed(0)),
]


@pytest.mark.parametrize("repeats", REPEATS, ids=lambda r: f"{r.dtype}-{list(r.shape)}")
def test_repeat_interleave(repeats):
    want = torch.repeat_interleave(repeats)
    same(repeat_interleave.repeat_interleave_tensor(repeats), want)
    same(repeat_interleave.repeat_interleave_tensor(repeats, output_size=want.numel()), want)
    assert set(REPEATS[0].tolist()) <= set(range(10))


@pytest.mark.parametrize(
    "repeats",
    [
        torch.tensor([1, -1]),
        torch.tensor([[1, 2]]),
        torch.tensor(3),
        torch.tensor([1.0, 2.0]),
        torch.tensor([1], dtype=torch.int16),
    ],
    ids=["negative", "2-d", "0-dim", "float", "int16"],
)
def test_repeat_interleave_refusals_are_the_cpus(repeats):
    raises_like(
        lambda: repeat_interleave.repeat_interleave_tensor(repeats), lambda: torch.repeat_interleave(repeats)
    )


def test_repeat_interleave_reads_the_host_once_and_not_at_all_with_output_size():
    reads: List[int] = []
    real = torch.Tensor.tolist

    def counted(self):
        reads.append(self.numel())
        return real(self)

    repeats = torch.tensor([2, 0, 3])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.Tensor, "tolist", counted)
        with _Ops() as ops:
            repeat_interleave.repeat_interleave_tensor(repeats, output_size=5)
        assert reads == [] and "_local_scalar_dense" not in ops.seen and "copy_" not in ops.seen
        repeat_interleave.repeat_interleave_tensor(repeats)
        assert reads == [2]


# -- sort(stable=...) ------------------------------------------------------------------------------------


def _sort_arguments(sample: Any) -> Dict[str, Any]:
    args = dict(sample.kwargs)
    for key, value in zip(("dim", "descending"), sample.args):
        args[key] = value
    args.setdefault("stable", False)
    return args


SORTS = [pytest.param(sample, id=f"sort-{index}") for index, sample in enumerate(samples("sort"))]
TIES = [
    torch.tensor([3.0, 1.0, float("nan"), 1.0, -0.0, 0.0, float("nan"), float("-inf"), 3.0]),
    torch.randint(0, 4, (6, 50), generator=torch.Generator().manual_seed(1)),
    torch.randint(0, 2, (3, 40), generator=torch.Generator().manual_seed(2)).bool(),
    torch.randint(0, 3, (4, 5, 6), generator=torch.Generator().manual_seed(3)).to(torch.float16),
    torch.tensor(2.5),
    torch.empty(0, 3),
]


@pytest.mark.parametrize("sample", SORTS)
def test_sort_opinfo_sample(sample):
    args = _sort_arguments(sample)
    want = torch.sort(sample.input, **{**args, "stable": True})
    got = sort_stable.sort_stable(sample.input, **args)
    same(got[0], want[0])
    same(got[1], want[1])


@pytest.mark.parametrize("values", TIES, ids=lambda v: f"{v.dtype}-{list(v.shape)}")
@pytest.mark.parametrize("descending", [False, True])
def test_sort_ties_keep_their_order_as_on_the_cpu(values, descending):
    for dim in range(-1, max(values.dim(), 1)):
        for stable in (True, False, None):
            want = torch.sort(values, stable=True, dim=dim, descending=descending)
            got = sort_stable.sort_stable(values, stable=stable, dim=dim, descending=descending)
            same(got[0], want[0])
            same(got[1], want[1])
        out = (torch.empty(0, dtype=values.dtype), torch.empty(0, dtype=torch.int64))
        result = sort_stable.sort_values_stable(
            values, stable=True, dim=dim, descending=descending, values=out[0], indices=out[1]
        )
        assert result[0] is out[0] and result[1] is out[1]
        same(out[0], want[0])
        same(out[1], want[1])


def test_sort_gradient_is_the_cpus():
    values = torch.tensor([[2.0, 1.0, 2.0, 0.5], [1.0, 1.0, 3.0, -1.0]], dtype=torch.float64)
    weights = torch.arange(8, dtype=torch.float64).view(2, 4)
    grads = []
    for sort in (
        lambda v: torch.sort(v, stable=True, dim=1),
        lambda v: sort_stable.sort_stable(v, stable=True, dim=1),
    ):
        leaf = values.clone().requires_grad_()
        (sort(leaf)[0] * weights).sum().backward()
        grads.append(leaf.grad)
    same(grads[1], grads[0])


@pytest.mark.parametrize(
    "values_dtype, indices_dtype",
    [(torch.float64, torch.int64), (torch.float32, torch.int32), (torch.int64, torch.int64)],
)
def test_sort_out_refusals_are_the_cpus(values_dtype, indices_dtype):
    values = torch.tensor([2.0, 1.0])
    out = (torch.empty(0, dtype=values_dtype), torch.empty(0, dtype=indices_dtype))
    raises_like(
        lambda: sort_stable.sort_values_stable(values, stable=True, values=out[0], indices=out[1]),
        lambda: torch.sort(values, stable=True, out=out),
    )


def test_sort_dim_out_of_range_is_the_cpus():
    values = torch.tensor([2, 1])
    raises_like(
        lambda: sort_stable.sort_stable(values, stable=True, dim=3),
        lambda: torch.sort(values, stable=True, dim=3),
    )


# -- bucketize ---------------------------------------------------------------------------------------

BUCKETS = [pytest.param(sample, id=f"bucketize-{index}") for index, sample in enumerate(samples("bucketize"))]


@pytest.mark.parametrize("sample", BUCKETS)
def test_bucketize_opinfo_sample(sample):
    boundaries = sample.args[0]
    want = torch.bucketize(sample.input, boundaries, **sample.kwargs)
    same(bucketize.bucketize_tensor(sample.input, boundaries, **sample.kwargs), want)
    out = torch.empty(0, dtype=want.dtype)
    assert bucketize.bucketize_tensor_out(sample.input, boundaries, out=out, **sample.kwargs) is out
    same(out, want)
    if sample.input.dim() == 0:
        scalar = sample.input.item()
        same(
            bucketize.bucketize_scalar(scalar, boundaries, **sample.kwargs),
            torch.bucketize(scalar, boundaries, **sample.kwargs),
        )


def test_bucketize_edges_nan_and_refusals_are_the_cpus():
    boundaries = torch.tensor([0.0, 1.0, 1.0, 2.0])
    values = torch.tensor([[-1.0, 0.0, 1.0], [1.5, 2.0, float("nan")]])
    for right in (False, True):
        for out_int32 in (False, True):
            want = torch.bucketize(values, boundaries, right=right, out_int32=out_int32)
            same(bucketize.bucketize_tensor(values, boundaries, right=right, out_int32=out_int32), want)
    raises_like(lambda: bucketize.bucketize_tensor(values, values), lambda: torch.bucketize(values, values))
    raises_like(lambda: bucketize.bucketize_scalar(1.0, values), lambda: torch.bucketize(1.0, values))
    wrong = torch.empty(0, dtype=torch.int32)
    raises_like(
        lambda: bucketize.bucketize_tensor_out(values, boundaries, out=wrong),
        lambda: torch.bucketize(values, boundaries, out=wrong),
    )


# -- _assert_async -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        torch.tensor(1),
        torch.tensor([0.5]),
        torch.tensor(True),
        torch.tensor(0),
        torch.tensor([0.0]),
        torch.tensor([]),
        torch.tensor([1, 1]),
    ],
    ids=["one", "half", "true", "zero", "zero-float", "empty", "two"],
)
@pytest.mark.parametrize("message", ["custom message", ""])
def test_assert_async_is_the_cpus(value, message):
    native = value.numel() == 1 and bool(value)
    if native:
        assert assert_async.assert_async(value) is None and torch._assert_async(value) is None
        assert assert_async.assert_async_msg(value, "m") is None
        return
    raises_like(lambda: assert_async.assert_async(value), lambda: torch._assert_async(value))
    raises_like(
        lambda: assert_async.assert_async_msg(value, message),
        lambda: torch.ops.aten._assert_async.msg(value, message),
    )


# -- what the kernels dispatch ---------------------------------------------------------------------------


def _dispatch_everything() -> Dict[Any, set]:
    """Every module's kernels on inputs that take every path; the aten ops each dispatched."""
    seen: Dict[Any, set] = {}
    ints, shifts = torch.tensor([1, 2]), torch.tensor([1, 3])
    floats, edges = torch.tensor([[1.0, float("nan"), 1.0], [0.0, 2.0, 0.0]]), torch.tensor([0.0, 2.0])
    outs = [
        torch.empty(0, dtype=dtype)
        for dtype in (torch.int64, torch.int64, torch.float32, torch.int64, torch.int64)
    ]
    repeats, repeats32 = torch.tensor([1, 0, 2]), torch.tensor([1, 0, 2], dtype=torch.int32)
    one, one_float = torch.tensor(1), torch.tensor(1.0)
    targets = [ints.clone(), ints.clone()]
    with _Ops() as ops:
        for index, name in enumerate(("bitwise_left_shift", "bitwise_right_shift")):
            getattr(bitwise_shift, name)(ints, shifts)
            getattr(bitwise_shift, f"{name}_out")(ints, shifts, out=outs[index])
            getattr(bitwise_shift, f"{name}_")(targets[index], shifts)
    seen[bitwise_shift] = ops.seen
    with _Ops() as ops:
        repeat_interleave.repeat_interleave_tensor(repeats)
        repeat_interleave.repeat_interleave_tensor(repeats32, output_size=3)
    seen[repeat_interleave] = ops.seen
    with _Ops() as ops:
        sort_stable.sort_stable(floats, stable=True, dim=1)
        sort_stable.sort_values_stable(floats, stable=True, values=outs[2], indices=outs[3])
    seen[sort_stable] = ops.seen
    with _Ops() as ops:
        bucketize.bucketize_tensor(one_float, edges)
        bucketize.bucketize_tensor_out(one_float, edges, out=outs[4])
        bucketize.bucketize_scalar(1.0, edges)
    seen[bucketize] = ops.seen
    with _Ops() as ops:
        assert_async.assert_async(one)
        assert_async.assert_async_msg(one_float, "m")
    seen[assert_async] = ops.seen
    return seen


def test_native_ops_is_exactly_what_is_dispatched():
    for module, ops in _dispatch_everything().items():
        assert ops == module.NATIVE_OPS, module.__name__


def test_native_ops_are_native_in_every_torch_npu_release():
    for module in (bitwise_shift, repeat_interleave, sort_stable, bucketize, assert_async):
        for release in optables.releases():
            missing = module.NATIVE_OPS - optables.load(release)
            assert not missing, f"{module.__name__}: torch_npu {release} lacks {sorted(missing)}"
