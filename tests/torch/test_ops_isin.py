"""``ascend_env.kernels.isin.isin`` against native ``torch.isin`` and a set-based reference.

Hypothesis settings: the ``ASCEND_ENV_HYPOTHESIS`` environment variable picks a profile
(``default``, or ``big`` for ten times the examples). No example database: a failure hypothesis
finds is fixed and kept as an ``@example`` of its test, which every run replays on every torch.
"""

from __future__ import annotations

import math
import os
import warnings
import weakref
from contextlib import contextmanager
from typing import Iterator, List, Optional, Tuple, Union
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from packaging.version import Version
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ascend_env.kernels import strategies
from ascend_env.kernels.isin import ATEN_KERNELS, NATIVE_OPS, STRATEGIES, isin

_COMMON = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("isin-default", max_examples=1500, **_COMMON)
settings.register_profile("isin-big", max_examples=15000, **_COMMON)
# CI's old torches (tox envs torch-2.x): 2/5 of the examples; the README's run on torch 2.13 takes all.
settings.register_profile("isin-sample", max_examples=600, **_COMMON)
_PROFILE = settings.get_profile("isin-" + os.environ.get("ASCEND_ENV_HYPOTHESIS", "default"))


def _examples(share: float) -> settings:
    """The active profile with ``share`` of its examples."""
    return settings(_PROFILE, max_examples=max(50, int(_PROFILE.max_examples * share)))


TORCH = Version(torch.__version__).release[:2]
Scalar = Union[int, float]
Operand = Union[torch.Tensor, Scalar]

ALL_DTYPES = [
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
]

REFUSED = "Unsupported input type encountered for isin(): "


def _refused(dtype: torch.dtype) -> bool:
    try:
        torch.isin(torch.zeros(1, dtype=dtype), 0)
    except RuntimeError as exc:
        return str(exc).startswith(REFUSED)
    return False


# The dtypes the running torch compares; it refuses bfloat16 up to torch 2.3, which
# test_matches_native and test_bfloat16_as_the_running_torch_does cover.
DTYPES = [dtype for dtype in ALL_DTYPES if not _refused(dtype)]
# Values chosen to collide after casts: wrap-around (300, -129), int->float rounding (2**24 + 1,
# 2**53 + 1), signed zeros, NaN, infinities and overflow to inf in 16-bit floats.
INTS = [0, 1, -1, 2, 3, 5, 7, 127, 128, 255, 256, 300, -128, -129, 2**15, 2**16 + 2, 2**24, 2**24 + 1]
INTS += [2**31 - 1, -(2**31), 2**53, 2**53 + 1, 2**62]
FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, 300.0, 1e10, 65504.0, 65520.0, 2.0**24 + 1]
FLOATS += [math.inf, -math.inf, math.nan]


@st.composite
def tensors(
    draw, max_numel: int = 64, dtype: Optional[torch.dtype] = None, dtypes: Optional[List[torch.dtype]] = None
) -> torch.Tensor:
    """A tensor of one of ``dtypes`` (default :data:`DTYPES`), of any shape (0-dim, empty,
    multi-dim, non-contiguous)."""
    dtype = dtype or draw(st.sampled_from(dtypes or DTYPES))
    ndim = draw(st.integers(0, 3))
    shape = draw(st.lists(st.integers(0, 6), min_size=ndim, max_size=ndim))
    while math.prod(shape) > max_numel:
        shape[shape.index(max(shape))] //= 2
    pool = INTS if not dtype.is_floating_point else FLOATS + INTS[:8]
    numel = math.prod(shape)
    values = draw(st.lists(st.sampled_from(pool) | st.integers(-4, 4), min_size=numel, max_size=numel))
    layout = draw(st.sampled_from(["contiguous", "transposed", "strided"]))
    source = torch.tensor(values, dtype=torch.float64 if dtype.is_floating_point else torch.int64)
    if layout == "transposed" and ndim >= 2:
        tensor = source.to(dtype).view(*shape[:-2], shape[-1], shape[-2]).transpose(-1, -2)
    elif layout == "strided" and ndim >= 1:
        tensor = torch.empty(*shape[:-1], 2 * shape[-1], dtype=dtype)[..., ::2]
        tensor.copy_(source.view(shape).to(dtype))
    else:
        tensor = source.to(dtype).view(shape)
    return tensor


scalars = st.sampled_from(INTS[:12] + [x for x in FLOATS if not math.isnan(x)] + [math.nan])


@st.composite
def operands(draw, dtypes: Optional[List[torch.dtype]] = None) -> Tuple[Operand, Operand]:
    """``(elements, test_elements)`` for one of the three overloads."""
    form = draw(st.sampled_from(["tensor-tensor"] * 4 + ["tensor-scalar", "scalar-tensor"]))
    if form == "tensor-scalar":
        return draw(tensors(dtypes=dtypes)), draw(scalars)
    if form == "scalar-tensor":
        return draw(scalars), draw(tensors(dtypes=dtypes))
    return draw(tensors(dtypes=dtypes)), draw(tensors(dtypes=dtypes))


# -- the reference ------------------------------------------------------------------------------


def scalar_dtype(value: Scalar) -> torch.dtype:
    return torch.int64 if isinstance(value, int) else torch.float64


def comparison_dtype(elements: Operand, test: torch.Tensor) -> torch.dtype:
    """The dtype native isin compares in: result_type on its brute-force path, else promote_types."""
    n = elements.numel() if isinstance(elements, torch.Tensor) else 1
    if test.numel() < int(10.0 * n**0.145) or n == 0:
        return torch.result_type(elements, test)
    edtype = elements.dtype if isinstance(elements, torch.Tensor) else scalar_dtype(elements)
    return torch.promote_types(edtype, test.dtype)


def as_tensor(value: Operand) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    return torch.tensor(value, dtype=scalar_dtype(value))


def python_values(tensor: torch.Tensor) -> list:
    wide = torch.float64 if tensor.dtype.is_floating_point else torch.int64
    return tensor.to(wide).reshape(-1).tolist()


def reference(elements: Operand, test: Operand, invert: bool) -> torch.Tensor:
    """Membership after native's promotion, by Python set (NaN is in no set)."""
    if not isinstance(test, torch.Tensor):  # Tensor_Scalar: native compares with eq/ne.
        return torch.ne(elements, test) if invert else torch.eq(elements, test)
    dtype = comparison_dtype(elements, test)
    cast = as_tensor(elements).to(dtype)
    pool = {value for value in python_values(test.to(dtype)) if value == value}
    found = [(value in pool) != invert for value in python_values(cast)]
    return torch.tensor(found, dtype=torch.bool).reshape(cast.shape)


def has_equal_twin(elements: Operand, test: torch.Tensor) -> List[bool]:
    """Per element: another element equals it after promotion (what native's sort path trips on)."""
    values = python_values(as_tensor(elements).to(comparison_dtype(elements, test)))
    counts: dict = {}
    for value in values:
        if value == value:
            counts[value] = counts.get(value, 0) + 1
    return [value == value and counts[value] > 1 for value in values]


def native(elements: Operand, test: Operand, **kwargs) -> Union[torch.Tensor, Exception]:
    try:
        return torch.isin(elements, test, **kwargs)
    except (RuntimeError, NotImplementedError) as exc:
        return exc


# torch <= 2.3 has no CPU loop for float16 on isin's brute-force path (ascend_env.kernels.isin docstring).
HALF_GAP = "\"isin_default_cpu\" not implemented for 'Half'"


def native_refusal(elements: Operand, test: Operand) -> Optional[RuntimeError]:
    """The error with which the running torch refuses these operands by dtype (``bool`` and complex
    always, ``bfloat16`` up to torch 2.3), else None."""
    expected = native(elements, test)
    if isinstance(expected, RuntimeError) and str(expected).startswith(REFUSED):
        return expected
    return None


def assert_refused_like_native(refusal: RuntimeError, call) -> None:
    """``call()`` raises ``refusal``'s type with its message."""
    with pytest.raises(RuntimeError) as ours:
        call()
    assert str(ours.value) == str(refusal)


def significant_strides(tensor: torch.Tensor) -> Tuple[int, ...]:
    """The strides that place data in memory: those of the dimensions longer than one (none for
    an empty tensor, whose strides mean nothing)."""
    if tensor.numel() == 0:
        return ()
    return tuple(stride for size, stride in zip(tensor.shape, tensor.stride()) if size > 1)


def check_against_native(
    elements: Operand,
    test: Operand,
    got: torch.Tensor,
    assume_unique: bool,
    invert: bool,
    layout: bool = True,
) -> None:
    """``got`` is the reference answer, and equals native wherever native is not documented wrong.

    With ``layout``, ``got`` is also laid out in memory as native's result is.
    """
    want = reference(elements, test, invert)
    assert got.dtype == torch.bool
    assert got.shape == want.shape
    assert torch.equal(got, want)
    expected = native(elements, test, assume_unique=assume_unique, invert=invert)
    if isinstance(expected, Exception) and str(expected).startswith(HALF_GAP):
        # Documented: torch <= 2.3 fails on float16 on its brute-force path; the answer is exact.
        assert isinstance(test, torch.Tensor) and comparison_dtype(elements, test) == torch.float16
        n = as_tensor(elements).numel()
        assert test.numel() < int(10.0 * n**0.145) and TORCH < (2, 4)
        return
    if isinstance(expected, Exception):
        # Documented: a non-contiguous multi-dim test_elements on the brute-force path.
        assert isinstance(test, torch.Tensor) and "view size is not compatible" in str(expected)
        assert not test.is_contiguous() and test.dim() >= 2
        return
    assert expected.shape == got.shape
    if layout:
        assert significant_strides(got) == significant_strides(expected)
    if torch.equal(expected, got):
        return
    # Documented: native's sort path gives false positives for elements that have an equal twin
    # after promotion (lossy casts, or duplicates passed with assume_unique=True).
    n = as_tensor(elements).numel()
    assert isinstance(test, torch.Tensor) and test.numel() >= int(10.0 * n**0.145)
    twins = has_equal_twin(elements, test)
    # Documented: torch 2.1's unique gives NaN the inverse index of another value, so its sort path
    # can find NaN elements (isin([nan, 1.], arange(30.)) is [True, True]); fixed in torch 2.2.
    values = python_values(as_tensor(elements).to(comparison_dtype(elements, test)))
    nan_found = [TORCH < (2, 2) and value != value for value in values]
    for native_says, correct, twin, nan in zip(
        expected.reshape(-1).tolist(), got.reshape(-1).tolist(), twins, nan_found
    ):
        if native_says != correct:
            assert (twin or nan) and native_says != invert, "native differs outside its documented defects"


# -- exactness ----------------------------------------------------------------------------------


@_examples(1.0)
@given(operands(ALL_DTYPES), st.booleans(), st.booleans())
@example((torch.tensor([2**24, 2**24 + 1], dtype=torch.int32), torch.arange(20.0)), False, False)
@example((torch.tensor([5, 5, 6]), torch.arange(10, 30)), True, False)
@example((torch.tensor([5, 5, 6]), torch.arange(10, 30)), True, True)
@example((torch.tensor([1, 2]), torch.arange(6).view(2, 3).t()), False, False)
@example((torch.tensor([-0.0, 0.0, math.nan]), torch.tensor([0.0, math.nan])), False, False)
@example((torch.tensor([44], dtype=torch.int8), torch.tensor(300)), False, False)
@example((300, torch.tensor([44] * 3, dtype=torch.int8)), False, False)
@example((300, torch.tensor([44] * 30, dtype=torch.int8)), False, False)
@example((torch.tensor(2.5, dtype=torch.float64), torch.arange(12, dtype=torch.float32) / 2), False, False)
@example((torch.tensor([math.nan, 1.0]), torch.arange(30.0)), False, False)
@example((torch.tensor([1.0, 2.0]).half(), torch.tensor([2.0]).half()), False, True)
@example((torch.tensor([1.0, 2.5], dtype=torch.bfloat16), torch.tensor([2.5])), False, False)
def test_matches_native(pair, assume_unique, invert):
    elements, test = pair
    refusal = native_refusal(elements, test)
    if refusal is not None:
        assert_refused_like_native(refusal, lambda: isin(elements, test, invert=invert))
        return
    got = isin(elements, test, assume_unique=assume_unique, invert=invert)
    check_against_native(elements, test, got, assume_unique, invert)


def assert_same_tensor(got: torch.Tensor, want: torch.Tensor) -> None:
    """``got`` equals ``want`` in values, shape, strides and dtype."""
    assert torch.equal(got, want)
    assert (got.shape, got.stride(), got.dtype) == (want.shape, want.stride(), want.dtype)


@pytest.mark.parametrize("shape", [(1,), (8,), (64,), (1, 1), (2, 3), (), (0,), (0, 3), (3, 0)])
@pytest.mark.parametrize("tests", [0, 1, 2, 8])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32])
def test_end_of_sequence_shapes_match_native_layout(shape, tests, dtype):
    """The few-pairs fast paths give native's values, shape, strides and dtype, with no element or
    no test element too."""
    generator = torch.Generator().manual_seed(tests)
    elements = torch.randint(0, 6, shape, generator=generator).to(dtype)
    test = torch.randint(0, 6, (tests,), generator=generator).to(dtype)
    for invert in (False, True):
        assert_same_tensor(isin(elements, test, invert=invert), torch.isin(elements, test, invert=invert))


@pytest.mark.parametrize("batch", [1, 8, 64])
@pytest.mark.parametrize("tests", [1, 2, 8])
def test_last_token_column_takes_the_few_pairs_path(batch, tests):
    """``input_ids[:, -1]``, the strided column that transformers' end-of-sequence check passes,
    gets native's values and contiguous layout from the two or three ops of the fast path: no
    copy, no flattening, no output buffer."""
    generator = torch.Generator().manual_seed(batch + tests)
    input_ids = torch.randint(0, 6, (batch, 5), generator=generator)
    test = torch.randint(0, 6, (tests,), generator=generator)
    for elements in (input_ids[:, -1], input_ids[:1, -1].expand(batch)):
        for invert in (False, True):
            want = torch.isin(elements, test, invert=invert)
            compare = {"ne.Tensor"} if invert else {"eq.Tensor"}
            reduce = set() if tests == 1 else {"all.dim"} if invert else {"any.dim"}
            unsqueeze = set() if tests == 1 or batch == 1 else {"unsqueeze"}
            for bound in (None, 6):  # a vocabulary bound leaves few pairs on the fast path
                with OpAudit() as audit:
                    got = isin(elements, test, invert=invert, value_bound=bound)
                assert_same_tensor(got, want)
                assert audit.seen == compare | reduce | unsqueeze


def test_documented_native_defects_are_fixed():
    collide = torch.tensor([2**24, 2**24 + 1], dtype=torch.int32)
    # All but one of the colliding elements found: all but the last from torch 2.2 on, all but
    # the first under torch 2.1 (its sort leaves equal values in another order).
    want = [False, True] if TORCH < (2, 2) else [True, False]
    assert torch.isin(collide, torch.arange(20.0)).tolist() == want
    assert isin(collide, torch.arange(20.0)).tolist() == [False, False]

    dupes = torch.tensor([5, 5, 6])
    assert torch.isin(dupes, torch.arange(10, 30), assume_unique=True).tolist()[0] is True
    assert isin(dupes, torch.arange(10, 30), assume_unique=True).tolist() == [False, False, False]

    strided = torch.arange(6).view(2, 3).t()
    with pytest.raises(RuntimeError):
        torch.isin(torch.tensor([1, 7]), strided)
    assert isin(torch.tensor([1, 7]), strided).tolist() == [True, False]


UNSIGNED = [getattr(torch, name) for name in ("uint16", "uint32", "uint64") if hasattr(torch, name)]


@pytest.mark.skipif(not UNSIGNED, reason="torch < 2.3 has no uint16, uint32 or uint64")
@pytest.mark.parametrize("dtype", UNSIGNED)
def test_barebones_unsigned_dtypes(dtype):
    """Native's brute-force path has no loop for these (NotImplementedError from torch 2.4 on,
    RuntimeError before; on torch 2.3 its sorting path neither): ours answers at every size."""
    elements = torch.tensor([1, 2, 3, 40000]).to(dtype)
    few, many = torch.tensor([3, 40000]).to(dtype), torch.arange(3, 40).to(dtype)
    with pytest.raises((NotImplementedError, RuntimeError), match="isin_default_cpu.* not implemented"):
        torch.isin(elements, few)
    assert isin(elements, few).tolist() == [False, False, True, True]
    assert isin(elements, many, invert=True).tolist() == [True, True, False, True]
    expected = native(elements, many, invert=True)
    if TORCH < (2, 4):
        assert isinstance(expected, RuntimeError) and '"unique" not implemented' in str(expected)
    else:
        assert expected.tolist() == [True, True, False, True]


@pytest.mark.parametrize(
    "elements, test",
    [
        (torch.tensor([True]), torch.tensor([1])),
        (torch.tensor([1]), torch.tensor([True])),
        (torch.tensor([1j]), torch.tensor([1])),
        (torch.tensor([1.0]), torch.tensor([1j], dtype=torch.complex128)),
        (True, torch.tensor([1])),
        (torch.tensor([1]), True),
    ],
)
def test_unsupported_dtypes_raise_like_native(elements, test):
    with pytest.raises(RuntimeError) as theirs:
        torch.isin(elements, test)
    with pytest.raises(RuntimeError) as ours:
        isin(elements, test)
    assert str(ours.value) == str(theirs.value).splitlines()[0]


@pytest.mark.parametrize(
    "elements, test",
    [
        (torch.tensor([1.0, 2.5], dtype=torch.bfloat16), torch.tensor([2.5])),
        (torch.tensor([1, 2]), torch.tensor([2.0], dtype=torch.bfloat16)),
        (torch.tensor([1.0, 2.5], dtype=torch.bfloat16), 2.5),
        (2.5, torch.tensor([1.0, 2.5], dtype=torch.bfloat16)),
        (torch.tensor([1.0, 2.5], dtype=torch.bfloat16), torch.arange(40, dtype=torch.bfloat16) / 2),
    ],
)
def test_bfloat16_as_the_running_torch_does(elements, test):
    """torch <= 2.3 refuses bfloat16 by name, as it does bool; later ones compare it."""
    expected = native(elements, test)
    if TORCH < (2, 4):
        assert isinstance(expected, RuntimeError) and str(expected).startswith(REFUSED + "BFloat16")
        assert_refused_like_native(expected, lambda: isin(elements, test))
    else:
        assert torch.equal(isin(elements, test), expected)


def test_two_scalars_is_a_type_error():
    with pytest.raises(TypeError):
        isin(1, 2)
    # The message names both types, with out= and with a bound (checked first) alike.
    message = r"^isin\(\) needs at least one tensor argument, got {} and {}$"
    with pytest.raises(TypeError, match=message.format("int", "float")):
        isin(1, 2.0, out=torch.empty(0, dtype=torch.bool))
    with pytest.raises(TypeError, match=message.format("bool", "int")):
        isin(True, 2, value_bound=10)


def test_table_of_wide_integers_needs_a_bound():
    elements, test = torch.arange(40, dtype=torch.int32), torch.tensor([1, 3], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^the table strategy needs a value bound for torch.int32$"):
        strategies.membership(elements, test, torch.int32, False, None, strategy="table")
    got = strategies.membership(elements, test, torch.int32, True, None, strategy="table", bound=40)
    assert torch.equal(got, ~torch.isin(elements, test))


@st.composite
def strategy_cases(draw):
    """Two tensors, the comparison dtype, a forced strategy and a chunk size."""
    elements, test = draw(tensors(max_numel=200)), draw(tensors(max_numel=200))
    dtype = comparison_dtype(elements, test)
    names = [name for name in STRATEGIES if name != "table" or dtype in strategies._TABLES]
    chunk = draw(st.sampled_from([1, 7, 64, strategies.CHUNK_BYTES]))
    return elements, test, dtype, draw(st.sampled_from(names)), chunk


@_examples(1.0)
@given(strategy_cases(), st.booleans(), st.booleans())
def test_every_strategy_is_exact(case, invert, into_buffer):
    """Each strategy, at any chunk size, gives the reference answer for any input."""
    elements, test, dtype, strategy, chunk = case
    dst = torch.empty(elements.numel(), dtype=torch.bool) if into_buffer else None
    with mock.patch.object(strategies, "CHUNK_BYTES", chunk):
        got = strategies.membership(elements, test, dtype, invert, dst, strategy=strategy)
    assert got.shape == elements.shape
    assert torch.equal(got, reference(elements, test, invert))
    if into_buffer and elements.numel():
        assert got.data_ptr() == dst.data_ptr()


INT64 = torch.iinfo(torch.int64)
INT32 = torch.iinfo(torch.int32)
_KEY_VALUES = (
    st.integers(INT64.min, INT64.max)
    | st.integers(INT32.min, INT32.max)
    | st.integers(-(2**15), 2**15 - 1)
    | st.integers(-(2**17), 2**17)
)


@_examples(0.3)
@given(
    st.sampled_from([torch.int64, torch.int32]),
    st.lists(_KEY_VALUES, min_size=1, max_size=64),
    st.lists(_KEY_VALUES, min_size=1, max_size=64),
)
@example(torch.int64, [INT64.min, INT64.max, -1, 0, 2**31, -(2**31) - 1], [INT64.max, -(2**31) - 1, 5])
@example(torch.int32, [INT32.min, INT32.max, -1, 0, 2**15, -(2**15) - 1], [INT32.max, -(2**15) - 1, 5])
@example(torch.int64, [-1, 2**15 - 1], [0])
@example(torch.int64, [-(2**15), 2**15 - 1, 2**15], [2**15])
def test_sort_key_orders_within_16_bits(dtype, values, tests):
    """sort-both's key fits int16, never reverses two values of a small part (whose sample is all
    of it), keeps values apart when they span less than 2**14 (2**13 under torch 2.1, where the
    key is halved), and never changes the answer."""
    info = torch.iinfo(dtype)
    values, tests = ([min(max(v, info.min), info.max) for v in vs] for vs in (values, tests))
    elements = torch.tensor(values, dtype=dtype)
    key = strategies._sort_key(elements)
    assert key.dtype == torch.int16 and key.shape == elements.shape
    ordered = elements.sort()[0]
    keys = strategies._sort_key(ordered).tolist()
    assert keys == sorted(keys)
    if max(values) - min(values) < (2**13 if strategies._KEY_HALVED else 2**14):
        assert len(set(keys)) == len(set(values))
    test, members = torch.tensor(tests, dtype=dtype), set(tests)
    for invert in (False, True):
        got = strategies.membership(elements, test, dtype, invert, None, strategy="sort-both")
        assert got.tolist() == [(v in members) != invert for v in values]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_sort_key_ignores_a_few_outliers(dtype):
    """Ids below a vocabulary size keep a fine key when a few values lie far outside: the key's
    range comes from a trimmed sample, not from the extremes (which would put every id in a
    handful of buckets, and leave sort-both's search in random order)."""
    vocab = 152064
    generator = torch.Generator().manual_seed(0)
    elements = torch.randint(0, vocab, (1 << 18,), generator=generator, dtype=dtype)
    far = torch.iinfo(dtype).max // 2
    elements[::100_000] = far
    elements[50_000] = -far
    bulk = elements.abs() < vocab
    key = strategies._sort_key(elements)
    assert torch.unique(key[bulk]).numel() >= vocab // 16
    # In value order, the keys ascend but for at most two wraps: values past the trimmed range
    # at either end come round to the other end of int16, in order among themselves.
    keys = strategies._sort_key(elements[bulk].sort()[0])
    assert int((keys[1:] < keys[:-1]).sum()) <= 2
    test = torch.randint(0, vocab, (1000,), generator=generator, dtype=dtype)
    assert strategies.choose_strategy(elements.numel(), test.numel(), dtype) == "sort-both"
    assert torch.equal(isin(elements, test), torch.isin(elements, test))


@pytest.mark.parametrize("dtype", [torch.int16, torch.uint8, torch.int8])
def test_lookup_table_covers_the_whole_range(dtype):
    info = torch.iinfo(dtype)
    elements = torch.arange(info.min, info.max + 1).to(dtype).repeat(4)
    test = torch.tensor([info.min, info.max, 0, -1, 1, 77]).to(dtype).repeat(20)
    assert strategies.choose_strategy(elements.numel(), test.numel(), dtype) == "table"
    for invert in (False, True):
        # torch 2.1's own isin aborts the process here (its CPU sort of int16 values near 2**15
        # corrupts the heap, see strategies._KEY_HALVED): the reference stands in for it there.
        crashes = TORCH < (2, 2) and dtype == torch.int16
        want = reference(elements, test, invert) if crashes else torch.isin(elements, test, invert=invert)
        assert torch.equal(isin(elements, test, invert=invert), want)


def test_strategy_choice_by_size():
    assert strategies.choose_strategy(64, 8, torch.int64) == "brute"
    assert strategies.choose_strategy(4096, 8, torch.int64) == "brute"
    assert strategies.choose_strategy(10**6, 1, torch.float32) == "brute"
    # From 8192 elements on, a pass per test element beats a broadcast, however few the pairs.
    assert strategies.choose_strategy(8192, 2, torch.int64) == "scan"
    assert strategies.choose_strategy(32000, 2, torch.int64) == "scan"
    assert strategies.choose_strategy(152064, 10, torch.int64) == "scan"
    assert strategies.choose_strategy(152064, 24, torch.int64) == "search"
    assert strategies.choose_strategy(32000, 1000, torch.int64) == "search"
    # Many integer elements: scan up to 32 test elements, search below 100, sort-both from there.
    assert strategies.choose_strategy(64 * 4096, 32, torch.int64) == "scan"
    assert strategies.choose_strategy(64 * 4096, 33, torch.int64) == "search"
    assert strategies.choose_strategy(64 * 4096, 99, torch.int64) == "search"
    assert strategies.choose_strategy(64 * 4096, 24, torch.float32) == "search"
    assert strategies.choose_strategy(64 * 4096, 100, torch.int64) == "sort-both"
    assert strategies.choose_strategy(10**7, 10**5, torch.int64) == "sort-both"
    assert strategies.choose_strategy(10**7, 10**5, torch.float32) == "search"
    assert strategies.choose_strategy(100, 1000, torch.uint8) == "table"
    for dtype in UNSIGNED:
        assert strategies.choose_strategy(100, 1000, dtype) == "brute"


# -- value_bound ----------------------------------------------------------------------------------

INT_DTYPES = [dtype for dtype in DTYPES if not dtype.is_floating_point]
# Outside any bound below: negative, just above, int32's edge, and values that a cast to int32
# before clamping would wrap into the range (2**32 + 5 -> 5).
OUTSIDE = [-1, -2, -129, 2**31 - 1, 2**32 + 5, 2**32, -(2**40), 2**62]


@st.composite
def bounded_operands(draw, max_numel: int = 64) -> Tuple[torch.Tensor, torch.Tensor, int]:
    """Integer ``(elements, test_elements, bound)``, mostly in ``range(bound)``, some not."""
    bound = draw(st.sampled_from([1, 2, 7, 300, 40000]) | st.integers(1, 64))
    outside = draw(st.booleans())
    pool = st.integers(0, bound - 1)
    if outside:
        pool = pool | st.sampled_from(OUTSIDE + [bound, bound + 1])
    pair = []
    for _ in range(2):
        tensor = draw(tensors(max_numel=max_numel, dtype=draw(st.sampled_from(INT_DTYPES))))
        values = draw(st.lists(pool, min_size=tensor.numel(), max_size=tensor.numel()))
        if tensor.numel():
            # Keep the drawn layout; the values are cast as torch casts them (wrapping).
            tensor.copy_(torch.tensor(values, dtype=torch.int64).view(tensor.shape))
        pair.append(tensor)
    return pair[0], pair[1], bound


def check_bounded(
    elements: torch.Tensor, test: torch.Tensor, bound: int, got: torch.Tensor, invert: bool
) -> None:
    """Exact for elements in ``range(bound)`` (in the comparison dtype); for the others, either the
    exact answer or "not in"."""
    want = reference(elements, test, invert)
    assert got.shape == want.shape and got.dtype == torch.bool
    values = python_values(elements.to(comparison_dtype(elements, test)))
    for value, answer, exact in zip(values, got.reshape(-1).tolist(), want.reshape(-1).tolist()):
        if 0 <= value < bound:
            assert answer == exact, (value, answer, exact)
        else:
            assert answer in (exact, invert), (value, answer, exact)


# 2**32 + 5 would wrap to 5, found, if cast to int32 before clamping; -1 and 7 fall just outside.
WRAPS = (torch.tensor([2**32 + 5, 5, -1, 3]), torch.tensor([5, 2**32 + 5, 3, 9]), 10)
INT32_EDGES = (torch.tensor([0, 6, 7], dtype=torch.int32), torch.tensor([-1, 7, 6], dtype=torch.int32), 7)


@_examples(0.5)
@given(bounded_operands(), st.booleans(), st.sampled_from([1, 7, 64, strategies.CHUNK_BYTES]), st.booleans())
@example(WRAPS, False, 1, False)
@example(WRAPS, True, 7, True)
@example(INT32_EDGES, False, 1, True)
def test_bounded_table_is_exact_in_range(case, invert, chunk, into_buffer):
    """The table for a caller's bound, forced at any chunk size, and the public isin with it."""
    elements, test, bound = case
    dtype = comparison_dtype(elements, test)
    dst = torch.empty(elements.numel(), dtype=torch.bool) if into_buffer else None
    with mock.patch.object(strategies, "CHUNK_BYTES", chunk):
        forced = strategies.membership(elements, test, dtype, invert, dst, strategy="table", bound=bound)
        public = isin(elements, test, invert=invert, value_bound=bound)
    check_bounded(elements, test, bound, forced, invert)
    check_bounded(elements, test, bound, public, invert)


@pytest.mark.parametrize(
    "elements, test, bound",
    [
        (torch.arange(32000), torch.arange(17, 32000, 3331), 32000),
        (torch.arange(152064), torch.arange(0, 152064, 13), 152064),
        (torch.arange(64 * 512).remainder_(32000).view(64, 512), torch.arange(0, 32000, 3), 32000),
        (torch.arange(40000, dtype=torch.int32), torch.tensor([7, 39999, 0, 5], dtype=torch.int32), 40000),
        (torch.arange(40000, dtype=torch.int32), torch.tensor([7, 39999, 0, 12345, 5]), 40000),
    ],
)
def test_value_bound_takes_the_table_and_matches_native(elements, test, bound):
    """Vocabulary-sized inputs in the bound: the table, bit for bit native's answer, out= too."""
    dtype = comparison_dtype(elements, test)
    assert strategies.choose_strategy(elements.numel(), test.numel(), dtype, bound) == "table"
    for invert in (False, True):
        want = torch.isin(elements, test, invert=invert)
        with OpAudit() as audit:
            got = isin(elements, test, invert=invert, value_bound=bound)
        assert_same_tensor(got, want)
        assert "clamp" in audit.seen and "sort" not in audit.seen
        assert audit.seen <= NATIVE_OPS, sorted(audit.seen - NATIVE_OPS)
        out = torch.empty(0, dtype=torch.bool)
        assert isin(elements, test, invert=invert, out=out, value_bound=bound) is out
        assert torch.equal(out, want)


def test_value_bound_outside_is_not_found_and_reads_nothing_outside():
    """Promise broken on the table path: out-of-range elements and test elements are "not in",
    however far out (no index outside the table, no wrap-around into it)."""
    inside = torch.arange(9000)
    elements = torch.cat([inside, torch.tensor([-1, 9000, 2**32 + 5, -(2**40), 2**62])])
    test = torch.cat([torch.arange(0, 9000, 2), torch.tensor([-1, 9000, 2**62, 2**32 + 5])])
    assert strategies.choose_strategy(elements.numel(), test.numel(), torch.int64, 9000) == "table"
    got = isin(elements, test, value_bound=9000)
    assert got[:9000].tolist() == (inside % 2 == 0).tolist()
    assert got[9000:].tolist() == [False] * 5
    assert isin(elements, test, value_bound=9000, invert=True)[9000:].tolist() == [True] * 5


def test_value_bound_strategy_choice():
    assert strategies.choose_strategy(152064, 10, torch.int64, 152064) == "table"
    assert strategies.choose_strategy(64 * 4096, 100000, torch.int64, 32000) == "table"
    assert strategies.choose_strategy(64 * 4096, 4, torch.int32, 32000) == "table"
    # Below 4 test elements a pass per test element costs less than the table.
    assert strategies.choose_strategy(152064, 3, torch.int64, 152064) == "scan"
    # Few pairs stay a broadcast; a table far larger than the inputs is not filled.
    assert strategies.choose_strategy(64, 8, torch.int64, 32000) == "brute"
    assert strategies.choose_strategy(10000, 100, torch.int64, 10**9) == "search"
    # 8 and 16-bit integers keep their whole-range table rule.
    assert strategies.choose_strategy(100, 1000, torch.int16, 50) == "search"
    assert strategies.choose_strategy(100, 1000, torch.uint8, 50) == "table"


@pytest.mark.parametrize("bound", [0, -3, 2**31 - 2, True, 2.0, "32000"])
def test_bad_value_bound_is_refused(bound):
    message = r"value_bound must be an int from 1 to 2147483645 .* got .*: pass the vocabulary size"
    with pytest.raises(ValueError, match=message):
        isin(torch.arange(5), torch.tensor([1, 3]), value_bound=bound)
    # The largest bound is accepted.
    assert isin(torch.arange(5), torch.tensor([1, 3]), value_bound=2**31 - 3).tolist() == [0, 1, 0, 1, 0]


@pytest.mark.parametrize(
    "elements, test",
    [
        (torch.arange(5.0), torch.tensor([1, 3])),
        (torch.arange(5), torch.tensor([1.0, 3.0])),
        (torch.arange(5), torch.tensor(1.0)),
        (torch.arange(20000), torch.arange(100, dtype=torch.float16)),
        (torch.arange(5), 1.0),
        (2.0, torch.arange(5)),
    ],
)
def test_value_bound_refuses_floating_point(elements, test):
    """However small or large: floating-point operands are compared as floats."""
    with pytest.raises(ValueError, match="value_bound needs integer operands, got torch.float"):
        isin(elements, test, value_bound=10)


def test_value_bound_with_a_scalar_operand():
    """A scalar operand leaves one element or one test element: the bound is checked, then has no
    use."""
    assert isin(torch.tensor([1, 2, 3]), 2, value_bound=10).tolist() == [False, True, False]
    assert isin(2, torch.tensor([1, 2, 3]), value_bound=10, invert=True).item() is False
    with pytest.raises(ValueError, match="value_bound must be"):
        isin(2, torch.tensor([1, 2, 3]), value_bound=0)


# -- the aten overloads as the dispatcher calls them ---------------------------------------------


@pytest.fixture(scope="module")
def registered():
    """``ATEN_KERNELS`` registered under a test namespace with the exact aten schemas."""
    library = torch.library.Library("ascend_env_isin_test", "DEF")
    for name, kernel in ATEN_KERNELS.items():
        schema = str(getattr(torch.ops.aten.isin, name.split(".")[1])._schema)
        library.define(schema.split("::", 1)[1])
        library.impl(name, kernel, "CPU")
    yield torch.ops.ascend_env_isin_test.isin
    destroy = getattr(library, "_destroy", None)  # torch 2.1 has none: the library dies with it
    if destroy is not None:
        destroy()


def test_kernels_cover_every_aten_overload():
    overloads = {f"isin.{name}" for name in torch.ops.aten.isin.overloads()}
    assert set(ATEN_KERNELS) == overloads


@st.composite
def outs(draw) -> torch.Tensor:
    """An ``out`` tensor: right shape, empty, wrong shape or non-contiguous (filled by resize)."""
    kind = draw(st.sampled_from(["empty", "wrong", "noncontiguous", "match"]))
    if kind == "empty":
        return torch.empty(0, dtype=torch.bool)
    if kind == "wrong":
        return torch.ones(draw(st.integers(1, 5)), 3, dtype=torch.bool)
    return torch.tensor([kind == "match"])  # replaced with the right shape in the test


def out_overload(pair) -> str:
    elements, test = pair
    if not isinstance(test, torch.Tensor):
        return "Tensor_Scalar_out"
    return "Scalar_Tensor_out" if not isinstance(elements, torch.Tensor) else "Tensor_Tensor_out"


@_examples(0.5)
@given(operands(ALL_DTYPES), st.booleans(), st.booleans(), outs())
def test_out_overloads_as_registered(registered, pair, assume_unique, invert, out):
    """Resize, warnings, aliasing and values match the native ``out=`` kernels."""
    elements, test = pair
    overload = out_overload(pair)
    shape = () if overload == "Scalar_Tensor_out" else as_tensor(elements).shape
    if out.numel() == 1 and out.dim() == 1:
        if out.item():
            out = torch.zeros(shape, dtype=torch.bool)
        else:
            out = torch.zeros(*shape, 2, dtype=torch.bool)[..., 0]
    refusal = native_refusal(elements, test)
    if refusal is not None:
        call = getattr(registered, overload)
        assert_refused_like_native(
            refusal, lambda: call(elements, test, assume_unique=assume_unique, invert=invert, out=out)
        )
        return
    theirs = torch.empty_strided(out.shape, out.stride(), dtype=out.dtype).copy_(out)  # clone() packs it
    with warnings.catch_warnings(record=True) as their_warnings:
        warnings.simplefilter("always")
        expected = native_out(elements, test, assume_unique, invert, theirs)
    with warnings.catch_warnings(record=True) as our_warnings:
        warnings.simplefilter("always")
        result = getattr(registered, overload)(
            elements, test, assume_unique=assume_unique, invert=invert, out=out
        )
    assert len(our_warnings) == len(their_warnings)
    assert result.data_ptr() == out.data_ptr() and result.shape == out.shape == tuple(shape)
    assert out.dtype == torch.bool
    check_against_native(elements, test, out, assume_unique, invert, layout=False)
    if not isinstance(expected, Exception):
        assert theirs.shape == out.shape
        assert significant_strides(out) == significant_strides(theirs)


def native_out(elements, test, assume_unique, invert, out):
    """Native ``out=`` through the Python binding, which turns ATen warnings into Python ones."""
    try:
        return torch.isin(elements, test, assume_unique=assume_unique, invert=invert, out=out)
    except (RuntimeError, NotImplementedError) as exc:
        return exc


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32, torch.uint8])
def test_out_with_wrong_dtype_raises(registered, dtype):
    out = torch.empty(3, dtype=dtype)
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype bool"):
        torch.isin(torch.tensor([1, 2, 3]), torch.tensor([2]), out=out)
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype bool"):
        registered.Tensor_Tensor_out(torch.tensor([1, 2, 3]), torch.tensor([2]), out=out)


def test_functional_overloads_as_registered(registered):
    elements, test = torch.tensor([[1, 5], [7, 2]]), torch.tensor([2, 7, 9])
    assert torch.equal(registered.Tensor_Tensor(elements, test, invert=True), ~torch.isin(elements, test))
    assert torch.equal(registered.Tensor_Scalar(elements, 7), elements == 7)
    assert registered.Scalar_Tensor(7, test).shape == ()
    assert registered.Scalar_Tensor(7, test).item() is True


# -- only native ops, no host sync ----------------------------------------------------------------


def op_name(func) -> str:
    """``aten::eq.Tensor`` -> ``eq.Tensor``; the default overload goes by its bare name."""
    name = func._schema.name.split("::", 1)[1]
    return name if func._overloadname == "default" else f"{name}.{func._overloadname}"


def _host_read(*args, **kwargs):
    raise AssertionError("data-dependent read on the host: tolist() or numpy()")


class OpAudit(TorchDispatchMode):
    """Records every op dispatched; fails at once on an op that reads data on the host.

    ``.tolist()`` and ``.numpy()`` read CPU memory without dispatching: they are patched to fail.
    """

    def __init__(self) -> None:
        super().__init__()
        self.seen: set = set()
        self._patches = [mock.patch.object(torch.Tensor, name, _host_read) for name in ("tolist", "numpy")]

    def __enter__(self):
        for patch in self._patches:
            patch.start()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            for patch in self._patches:
                patch.stop()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        tags = set(func.tags)
        if (
            func in (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.item.default)
            or torch.Tag.data_dependent_output in tags
            or torch.Tag.dynamic_output_shape in tags
        ):
            raise AssertionError(f"data-dependent op dispatched: {op_name(func)}")
        self.seen.add(op_name(func))
        return func(*args, **(kwargs or {}))


def test_audit_catches_host_reads():
    """The audit fails on syncs, so the audits below can fail."""
    for sync in (lambda x: x.item(), lambda x: x.nonzero(), lambda x: x.tolist(), lambda x: bool(x.any())):
        with pytest.raises(AssertionError, match="data-dependent"), OpAudit():
            sync(torch.tensor([1]))


def audited_calls(elements: Operand, test: Operand, invert: bool, strategy: Optional[str], chunk: int) -> set:
    """The ops that the public API, the out= kernels and a forced strategy dispatch."""
    shape = elements.shape if isinstance(elements, torch.Tensor) else ()
    empty = torch.empty(0, dtype=torch.bool)
    strided = torch.zeros(*shape, 2, dtype=torch.bool)[..., 0]
    dtype = None
    if isinstance(elements, torch.Tensor) and isinstance(test, torch.Tensor) and strategy:
        dtype = comparison_dtype(elements, test)
        if strategy == "table" and dtype not in strategies._TABLES:
            dtype = None
    with mock.patch.object(strategies, "CHUNK_BYTES", chunk), warnings.catch_warnings(), OpAudit() as audit:
        warnings.simplefilter("ignore")  # resizing a non-empty out warns, as natively
        isin(elements, test, invert=invert)
        isin(elements, test, invert=invert, out=empty)
        isin(elements, test, invert=invert, out=strided)
        if dtype is not None:
            strategies.membership(elements, test, dtype, invert, None, strategy=strategy)
    return audit.seen


@_examples(0.3)
@given(
    operands(),
    st.booleans(),
    st.sampled_from([None, *STRATEGIES]),
    st.sampled_from([1, 64, strategies.CHUNK_BYTES]),
)
def test_dispatches_only_native_ops(pair, invert, strategy, chunk):
    elements, test = pair
    seen = audited_calls(elements, test, invert, strategy, chunk)
    assert seen <= NATIVE_OPS, sorted(seen - NATIVE_OPS)


def test_native_ops_is_exactly_what_is_dispatched():
    """Every entry of NATIVE_OPS is used: runs that reach each strategy and overload."""
    cases = [
        (torch.arange(10), torch.tensor([3]), None),
        (torch.arange(10).view(2, 5).t(), torch.tensor([3, 4]), None),
        (torch.arange(10), torch.arange(6).view(2, 3).t(), None),
        (torch.arange(10), torch.tensor([], dtype=torch.int64), None),
        (torch.tensor([], dtype=torch.int64), torch.arange(4), None),
        (torch.arange(1000, dtype=torch.int8), torch.arange(100, dtype=torch.int8), None),
        (torch.arange(1000, dtype=torch.int32), torch.arange(100.0), None),
        (torch.arange(10), torch.arange(100), "search"),
        (torch.arange(10), torch.arange(100), "sort-both"),
        (torch.arange(1000), torch.arange(0, 100, 7), "sort-both"),
        (torch.arange(10), torch.arange(100), "brute"),
        (torch.arange(100), torch.arange(5), "scan"),
        (3, torch.arange(100), None),
        (torch.arange(10), 3, None),
    ]
    seen: set = set()
    for elements, test, strategy in cases:
        for invert in (False, True):
            for chunk in (8, strategies.CHUNK_BYTES):
                seen |= audited_calls(elements, test, invert, strategy, chunk)
    elements, test = torch.arange(10000), torch.arange(0, 100, 7)
    with OpAudit() as audit:  # value_bound's table
        isin(elements, test, value_bound=10000)
    assert seen | audit.seen == NATIVE_OPS
    assert "clamp" not in seen


def test_native_ops_are_native_in_every_torch_npu_release():
    from ascend_env.sim import optables

    releases = optables.releases()
    assert "2.1.0.post3" in releases and "2.14.0" in releases
    for release in releases:
        missing = NATIVE_OPS - optables.load(release)
        assert not missing, f"torch_npu {release} lacks {sorted(missing)}"


def test_no_kernel_calls_isin():
    """A kernel registered for aten::isin must not dispatch isin (it would call itself)."""
    assert not any(name.startswith("isin") for name in NATIVE_OPS)


# -- memory -------------------------------------------------------------------------------------


class PeakMemory(TorchDispatchMode):
    """Peak bytes held by tensors that ops create (storages the inputs own are not counted)."""

    def __init__(self, *inputs: torch.Tensor) -> None:
        super().__init__()
        self.owned = {t.untyped_storage().data_ptr() for t in inputs}
        self.refs: dict = {}
        self.live = self.peak = 0

    def _release(self, key: int) -> None:
        count, size = self.refs[key]
        if count == 1:
            del self.refs[key]
            self.live -= size
        else:
            self.refs[key] = (count - 1, size)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(result)[0]:
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            key = storage.data_ptr()
            if key in self.owned or key == 0:
                continue
            count, size = self.refs.get(key, (0, storage.nbytes()))
            if count == 0:
                self.live += size
                self.peak = max(self.peak, self.live)
            self.refs[key] = (count + 1, size)
            weakref.finalize(tensor, self._release, key)
        return result


@contextmanager
def peak_memory(*inputs: torch.Tensor) -> Iterator[PeakMemory]:
    with PeakMemory(*inputs) as meter:
        yield meter


@pytest.mark.parametrize(
    "numel, tests, dtype",
    [(1 << 20, 60, torch.int64), (1 << 20, 5000, torch.int64), (1 << 20, 5000, torch.float32)],
)
def test_peak_memory_is_bounded_by_chunks(numel, tests, dtype):
    """Never N x T bytes: the result, a few chunks and O(T)."""
    elements = torch.randint(0, 1000, (numel,)).to(dtype)
    test = torch.randint(0, 1000, (tests,)).to(dtype)
    out = torch.empty(numel, dtype=torch.bool)
    with peak_memory(elements, test, out) as meter:
        isin(elements, test, out=out)
    assert torch.equal(out, torch.isin(elements, test))
    bound = 3 * strategies.CHUNK_BYTES + 32 * tests
    assert meter.peak <= bound < numel * tests // 4


def test_peak_memory_with_value_bound_is_the_table_and_a_chunk():
    numel, tests, vocab = 1 << 20, 5000, 152064
    elements = torch.randint(0, vocab, (numel,))
    test = torch.randint(0, vocab, (tests,))
    out = torch.empty(numel, dtype=torch.bool)
    with peak_memory(elements, test, out) as meter:
        isin(elements, test, out=out, value_bound=vocab)
    assert torch.equal(out, torch.isin(elements, test))
    assert meter.peak <= strategies.CHUNK_BYTES + vocab + 2 + 16 * tests


# -- on the simulated NPU -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "elements, test",
    [
        (torch.tensor([[5, 7], [9, 2]]), torch.tensor([2, 5])),
        (torch.arange(4000), torch.tensor([3, 70, 3999, -1])),
        (torch.arange(1000, dtype=torch.int8), torch.tensor([1, -3, 7] * 40, dtype=torch.int8)),
        (torch.arange(3000), torch.arange(0, 6000, 7)),
        (torch.arange(1 << 18), torch.arange(0, 6000, 7)),
        (torch.tensor([0.0, -0.0, math.nan, 1.5] * 500), torch.tensor([0.0, math.nan, 2.0] * 40)),
        (torch.tensor([2**24, 2**24 + 1] * 10, dtype=torch.int32), torch.arange(200.0)),
        (3, torch.arange(100)),
    ],
)
def test_runs_natively_on_the_simulated_npu(npu, elements, test):
    """No op reaches the CPU fallback of a torch_npu release that lacks isin."""
    from ascend_env import sim

    on_npu = [x.to(npu) if isinstance(x, torch.Tensor) else x for x in (elements, test)]
    want = reference(elements, test, False)
    sim.reset()
    got = isin(*on_npu)
    inverted = isin(*on_npu, invert=True)
    assert not sim.fallbacks(), dict(sim.fallbacks())
    assert got.device.type == npu and torch.equal(got.cpu(), want)
    assert torch.equal(inverted.cpu(), ~want)


def test_value_bound_runs_natively_on_the_simulated_npu(npu):
    from ascend_env import sim

    elements, test = torch.arange(10000), torch.tensor([3, 70, 9999, -1, 10000, 2**33])
    want = reference(elements, test, False)
    sim.reset()
    got = isin(elements.to(npu), test.to(npu), value_bound=10000)
    assert not sim.fallbacks(), dict(sim.fallbacks())
    assert got.device.type == npu and torch.equal(got.cpu(), want)


def test_simulated_npu_counts_fallbacks(npu):
    """The check above can fail: native isin, missing from the release's table, is counted."""
    from ascend_env import sim
    from ascend_env.sim import optables

    assert "isin.Tensor_Tensor_out" not in optables.load(sim.enabled_table())
    if torch._C._dispatch_has_kernel_for_dispatch_key("aten::isin.Tensor_Tensor_out", "PrivateUse1"):
        pytest.skip("an isin kernel is registered for the NPU in this process")
    sim.reset()
    torch.isin(torch.arange(5).to(npu), torch.tensor([1, 2]).to(npu))
    assert sim.fallbacks()["aten::isin.Tensor_Tensor_out"] == 1
