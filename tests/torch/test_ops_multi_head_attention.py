"""The kernel of ``_native_multi_head_attention`` against the CPU's native op: every dtype the CPU
runs, self-attention, shared key/value and three inputs, need_weights and average_attn_weights,
the three mask types (bool and additive float masks, rows with every key masked), an empty batch,
a non-contiguous query, and what nn.MultiheadAttention and nn.TransformerEncoderLayer pass in eval
mode under no_grad. Without a mask the kernel calls the ops the CPU kernel calls, so the results
are equal bit for bit. With a mask the CPU's ``_masked_softmax`` is a scalar loop (``std::exp``)
where ``_softmax`` is vectorised: within OpInfo's default tolerance for float32/float64 and a few
ulp of the output's magnitude for bfloat16/float16. The CPU's refusals come back with its
exception type and message; the ops dispatched are exactly ``NATIVE_OPS``; on the simulated NPU in
``tests/torch/test_fixes.py``.
"""

from __future__ import annotations

import itertools
from typing import Any, Dict, Tuple

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ascend_env.kernels import multi_head_attention
from ascend_env.sim import optables

pytestmark = pytest.mark.skipif(
    not hasattr(torch, "_native_multi_head_attention"),
    reason="this torch has no _native_multi_head_attention",
)


def _cpu_runs(dtype: torch.dtype) -> bool:
    x = torch.ones(1, 1, 2, dtype=dtype)
    try:
        torch._native_multi_head_attention(
            x,
            x,
            x,
            2,
            1,
            torch.ones(6, 2, dtype=dtype),
            torch.ones(6, dtype=dtype),
            torch.ones(2, 2, dtype=dtype),
            torch.ones(2, dtype=dtype),
        )
    except RuntimeError:  # torch 2.1: "addmm_impl_cpu_" not implemented for 'Half'
        return False
    return True


DTYPES = [
    dtype for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16) if _cpu_runs(dtype)
]
# With a mask: the CPU's _masked_softmax against _softmax (see the module docstring).
MASKED_TOLERANCE = {torch.bfloat16: (2e-2, 2e-2), torch.float16: (2e-3, 2e-3)}


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::", 1)[1]
        overload = func._overloadname
        self.seen.add(name if overload == "default" else f"{name}.{overload}")
        return func(*args, **(kwargs or {}))


def _case(
    dtype: torch.dtype, shape: Tuple[int, int, int, int], inputs: str, mask_type: Any, seed: int
) -> Tuple[Any, ...]:
    generator = torch.Generator().manual_seed(seed)
    B, T, D, H = shape

    def rand(*size: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*size, generator=generator) * scale).to(dtype)

    query = rand(B, T, D)
    key = value = query
    if inputs == "kv":
        key = value = rand(B, T, D)
    elif inputs == "three":
        key, value = rand(B, T, D), rand(B, T, D)
    weights = (rand(3 * D, D, scale=D**-0.5), rand(3 * D), rand(D, D, scale=D**-0.5), rand(D))
    mask = None
    if mask_type == 1:
        mask = torch.rand(B, T, generator=generator) > 0.5
        mask[0] = True  # every key of the first sequence masked: NaN rows on the CPU
    elif mask_type == 2:
        mask = torch.rand(B, H, T, T, generator=generator) > 0.6
    elif mask_type == 0:
        mask = torch.rand(T, T, generator=generator) > 0.6
    elif mask_type == "float":  # an additive mask: the kernels take "not 0" as masked
        mask = torch.where(torch.rand(B, T, generator=generator) > 0.5, float("-inf"), 0.0).to(dtype)
        mask_type = 1
    return (query, key, value, D, H, *weights, mask), mask_type


SHAPES = [(2, 5, 16, 4), (1, 7, 24, 2), (3, 1, 8, 8), (2, 3, 20, 1)]
CASES = [
    pytest.param(
        dtype,
        shape,
        inputs,
        mask_type,
        need,
        average,
        id=f"{str(dtype)[6:]}-{shape}-{inputs}-{mask_type}-{need}-{average}",
    )
    for dtype, shape, inputs, mask_type, (need, average) in itertools.product(
        DTYPES,
        SHAPES,
        ("self", "kv", "three"),
        (None, 1, 2, 0, "float"),
        ((True, True), (True, False), (False, True)),
    )
]


def _compare(got: Any, want: Any, dtype: torch.dtype, masked: bool) -> None:
    assert len(got) == len(want) == 2
    for mine, theirs in zip(got, want):
        if theirs is None:
            assert mine is None
            continue
        assert mine.dtype == theirs.dtype and mine.shape == theirs.shape
        if masked:
            rtol, atol = MASKED_TOLERANCE.get(dtype, (None, None))
            torch.testing.assert_close(mine, theirs, rtol=rtol, atol=atol, equal_nan=True)
        else:
            torch.testing.assert_close(mine, theirs, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype, shape, inputs, mask_type, need, average", CASES)
def test_equal_to_the_cpu(dtype, shape, inputs, mask_type, need, average):
    args, mask_type = _case(dtype, shape, inputs, mask_type, seed=hash((str(dtype), shape, inputs)) % 1000)
    want = torch._native_multi_head_attention(*args, need, average, mask_type)
    got = multi_head_attention.native_multi_head_attention(*args, need, average, mask_type)
    _compare(got, want, dtype, masked=args[-1] is not None)


def test_an_empty_batch_and_a_non_contiguous_query():
    args, _ = _case(torch.float32, (2, 5, 8, 2), "three", None, seed=3)
    empty = torch.empty(0, 5, 8)
    _compare(
        multi_head_attention.native_multi_head_attention(empty, empty, empty, *args[3:]),
        torch._native_multi_head_attention(empty, empty, empty, *args[3:]),
        torch.float32,
        False,
    )
    strided = torch.randn(5, 2, 8).transpose(0, 1)
    both = (strided, strided, strided, *args[3:])
    # A query that matmul cannot fold into a matrix without a copy takes its batched path
    # (torch 2.13's should_fold): here a copy and mm, equal within a few ulp.
    _compare(
        multi_head_attention.native_multi_head_attention(*both),
        torch._native_multi_head_attention(*both),
        torch.float32,
        True,
    )


@pytest.mark.parametrize("mask", [None, "key_padding"])
def test_what_the_modules_pass_in_eval_under_no_grad(mask):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, batch_first=True).eval()
    attention = layer.self_attn
    x = torch.randn(3, 6, 16)
    padding = (
        None if mask is None else torch.tensor([[False] * 6, [False] * 4 + [True] * 2, [False] * 5 + [True]])
    )
    calls: Dict[str, Any] = {}

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func._schema.name == "aten::_native_multi_head_attention":
                calls["args"] = args
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Record():
        attention(x, x, x, key_padding_mask=padding, need_weights=False)
    assert "args" in calls, "the fast path must reach _native_multi_head_attention"
    want = torch._native_multi_head_attention(*calls["args"])
    got = multi_head_attention.native_multi_head_attention(*calls["args"])
    _compare(got, want, torch.float32, masked=padding is not None)


REFUSALS = [
    lambda q, w: (q[0], q, q, 8, 2, *w),  # 2-d query
    lambda q, w: (q, q, q, 6, 2, *w),  # embed_dim off
    lambda q, w: (q, q[0], q, 8, 2, *w),  # 2-d key
    lambda q, w: (q, q, q[0], 8, 2, *w),  # 2-d value
    lambda q, w: (q, q[:, :2], q[:, :2], 8, 2, *w),  # shapes differ
    lambda q, w: (q, q, q, 8, 2, w[0][0], *w[1:]),  # 1-d qkv_weight
    lambda q, w: (q, q, q, 8, 2, w[0][:12], *w[1:]),  # not 3 * D rows
    lambda q, w: (q, q, q, 8, 2, w[0][:, :4].repeat(1, 1), *w[1:]),  # not D columns
    lambda q, w: (q, q, q, 8, 2, w[0], w[0], *w[2:]),  # 2-d bias
    lambda q, w: (q, q, q, 8, 2, w[0], w[1][:12], *w[2:]),  # bias length
    lambda q, w: (q, q, q, 8, 3, *w),  # heads do not divide embed_dim
    lambda q, w: (q, q, q, 8, 2, *w, torch.zeros(2, 2, 3, 4, dtype=torch.bool), True, True, 2),  # mask shape
    lambda q, w: (q, q, q, 8, 2, *w, torch.zeros(2, 4, dtype=torch.bool), True, True, 1),
    lambda q, w: (q, q, q, 8, 2, *w, torch.zeros(4, 3, dtype=torch.bool), True, True, 0),
]


@pytest.mark.parametrize("make", REFUSALS)
def test_the_cpus_refusals(make):
    q = torch.randn(2, 3, 8)
    w = (torch.randn(24, 8), torch.randn(24), torch.randn(8, 8), torch.randn(8))
    args = make(q, w)
    with pytest.raises(Exception) as theirs:
        torch._native_multi_head_attention(*args)
    with pytest.raises(Exception) as mine:
        multi_head_attention.native_multi_head_attention(*args)
    assert type(mine.value) is type(theirs.value)
    assert str(mine.value).splitlines()[0] == str(theirs.value).splitlines()[0]


def test_native_ops_is_exactly_what_is_dispatched():
    seen: set = set()
    for dtype, inputs, mask_type in itertools.product(DTYPES, ("self", "kv", "three"), (None, 1, "float")):
        args, kind = _case(dtype, (2, 3, 8, 2), inputs, mask_type, seed=1)
        with _Ops() as ops:
            multi_head_attention.native_multi_head_attention(*args, True, True, kind)
        seen |= ops.seen
    args, _ = _case(torch.float32, (2, 3, 8, 2), "self", None, seed=1)
    empty = torch.empty(0, 3, 8)
    strided = torch.randn(3, 2, 8).transpose(0, 1)
    with _Ops() as ops:
        multi_head_attention.native_multi_head_attention(empty, empty, empty, *args[3:9])
        multi_head_attention.native_multi_head_attention(strided, strided, strided, *args[3:9])
    seen |= ops.seen
    reduced_in_float = {"copy_", "empty.memory_format"}  # the casts, on torches that compute in float
    assert seen | reduced_in_float == multi_head_attention.NATIVE_OPS
    for release in optables.releases():
        missing = multi_head_attention.NATIVE_OPS - optables.load(release)
        assert not missing, f"torch_npu {release} lacks {sorted(missing)}"
