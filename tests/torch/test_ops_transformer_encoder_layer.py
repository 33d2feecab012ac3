"""The kernel of ``_transformer_encoder_layer_fwd`` against the CPU's native op, on what
nn.TransformerEncoderLayer passes in eval mode under no_grad: every dtype the CPU runs, relu and
gelu, norm first and last, with and without a key padding mask, an empty batch. With relu and no
mask every step is the op the CPU kernel calls: bit for bit. With a mask, the attention's
``_masked_softmax`` (see ``test_ops_multi_head_attention.py``), and with gelu, ATen's vectorised
GeLU, which ``x * 0.5 * (1 + erf(x / sqrt 2))`` from separate ops does not reproduce bit for bit
(``gelu`` itself is missing from half the releases' tables): within a few ulp, OpInfo's default
tolerance for float32/float64, 2e-2 for bfloat16 and 4e-3 for float16 (values of order 1 after
the layer norm). The ops dispatched are exactly ``NATIVE_OPS``; on the simulated NPU in
``tests/torch/test_fixes.py``.
"""

from __future__ import annotations

import itertools
from typing import Any, List, Tuple

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ascend_env.kernels import transformer_encoder_layer
from ascend_env.sim import optables

pytestmark = pytest.mark.skipif(
    not hasattr(torch, "_transformer_encoder_layer_fwd"),
    reason="this torch has no _transformer_encoder_layer_fwd",
)

NEAR = {torch.bfloat16: (2e-2, 2e-2), torch.float16: (4e-3, 4e-3)}


class _Record(TorchDispatchMode):
    """The arguments of each _transformer_encoder_layer_fwd call, and every op dispatched."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: List[Tuple[Any, ...]] = []
        self.seen: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._schema.name == "aten::_transformer_encoder_layer_fwd":
            self.calls.append(args)
        name = func._schema.name.split("::", 1)[1]
        overload = func._overloadname
        self.seen.add(name if overload == "default" else f"{name}.{overload}")
        return func(*args, **(kwargs or {}))


def _layer_args(
    dtype: torch.dtype, activation: str, norm_first: bool, padded: bool, batch: int = 3
) -> Tuple[Any, ...]:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        32, 4, 64, activation=activation, norm_first=norm_first, batch_first=True
    )
    layer = layer.eval().to(dtype)
    x = torch.randn(batch, 7, 32).to(dtype)
    mask = None
    if padded:
        mask = torch.zeros(batch, 7, dtype=torch.bool)
        mask[1:, 5:] = True
    record = _Record()
    with torch.no_grad(), record:
        layer(x, src_key_padding_mask=mask)
    if not record.calls:
        pytest.skip("this torch's layer takes no fast path here")
    return record.calls[0]


def _cpu_runs(dtype: torch.dtype) -> bool:
    try:
        _layer_args(dtype, "relu", False, False)
    except RuntimeError:  # torch 2.1: "addmm_impl_cpu_" not implemented for 'Half'
        return False
    return True


DTYPES = [
    dtype for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16) if _cpu_runs(dtype)
]
CASES = [
    pytest.param(*case, id="-".join(map(str, case)))
    for case in itertools.product(DTYPES, ("relu", "gelu"), (False, True), (False, True))
]


@pytest.mark.parametrize("dtype, activation, norm_first, padded", CASES)
def test_equal_to_the_cpu(dtype, activation, norm_first, padded):
    args = _layer_args(dtype, activation, norm_first, padded)
    with torch.no_grad():
        want = torch._transformer_encoder_layer_fwd(*args)
        got = transformer_encoder_layer.transformer_encoder_layer_fwd(*args)
    assert got.dtype == want.dtype and got.shape == want.shape
    if activation == "relu" and not padded:
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    else:
        rtol, atol = NEAR.get(dtype, (None, None))
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)


def test_an_empty_batch_comes_back_as_a_copy():
    args = _layer_args(torch.float32, "relu", False, False)
    empty = torch.empty(0, 7, 32)
    got = transformer_encoder_layer.transformer_encoder_layer_fwd(empty, *args[1:])
    want = torch._transformer_encoder_layer_fwd(empty, *args[1:])
    assert got.shape == want.shape == empty.shape and got is not empty


def test_a_two_dimensional_ffn_weight_is_required():
    args = list(_layer_args(torch.float32, "relu", False, False))
    args[14] = args[14][0]
    with pytest.raises(RuntimeError) as theirs:
        torch._transformer_encoder_layer_fwd(*args)
    with pytest.raises(RuntimeError) as mine:
        transformer_encoder_layer.transformer_encoder_layer_fwd(*args)
    assert str(mine.value).splitlines()[0] == str(theirs.value).splitlines()[0]


def test_native_ops_is_exactly_what_is_dispatched():
    seen: set = set()
    for dtype, activation, norm_first, padded in itertools.product(
        DTYPES, ("relu", "gelu"), (False, True), (False, True)
    ):
        args = _layer_args(dtype, activation, norm_first, padded)
        record = _Record()
        with torch.no_grad(), record:
            transformer_encoder_layer.transformer_encoder_layer_fwd(*args)
        seen |= record.seen
    empty = torch.empty(0, 7, 32)
    record = _Record()
    with torch.no_grad(), record:
        transformer_encoder_layer.transformer_encoder_layer_fwd(empty, *args[1:])
    seen |= record.seen
    # the attention's weights (sum, div_), its empty result and its other projections' cat
    not_reached = {"sum.dim_IntList", "div_.Tensor", "empty_like", "cat"}
    if not any(dtype in DTYPES for dtype in (torch.float16, torch.bfloat16)):
        not_reached |= {"empty.memory_format"}
    assert seen | not_reached == transformer_encoder_layer.NATIVE_OPS
    for release in optables.releases():
        missing = transformer_encoder_layer.NATIVE_OPS - optables.load(release)
        assert not missing, f"torch_npu {release} lacks {sorted(missing)}"
