"""Mixed precision on the simulated NPU: torch_npu's autocast policy, and float16 where the CPU
kernels of this torch refuse it."""

from __future__ import annotations

import pytest
import torch


def _linear(device):
    torch.manual_seed(0)
    return torch.nn.Linear(8, 4).to(device)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_casts_as_torch_npu_does(npu, dtype):
    """Matrix products in the autocast dtype, softmax, exp and losses in float32, other ops in the
    dtypes they are given; the float32 default autocast dtype is float16, as torch_npu's."""
    layer, x = _linear(npu), torch.randn(3, 8).to(npu)
    with torch.autocast("npu", dtype=dtype):
        y = layer(x)
        assert y.dtype == dtype and (x @ x.t()).dtype == dtype
        assert torch.softmax(y, -1).dtype == torch.float32 and torch.exp(y).dtype == torch.float32
        assert torch.nn.functional.mse_loss(y, torch.zeros_like(y)).dtype == torch.float32
        assert (y + 1).dtype == dtype and (x + 1).dtype == torch.float32
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            torch.nn.functional.binary_cross_entropy(torch.sigmoid(y), torch.rand(3, 4).to(npu).to(dtype))
    assert layer(x).dtype == torch.float32
    with torch.autocast("npu"):
        assert layer(x).dtype == torch.float16
    with torch.npu.amp.autocast(dtype=torch.bfloat16):
        assert layer(x).dtype == torch.bfloat16


def test_autocast_bfloat16_matches_the_cpus_autocast_for_matrix_products(npu):
    layer, x = _linear("cpu"), torch.randn(3, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = layer(x)
    on_npu = _linear(npu)
    with torch.autocast("npu", dtype=torch.bfloat16):
        got = on_npu(x.to(npu))
    assert got.dtype == expected.dtype == torch.bfloat16
    assert torch.equal(got.cpu(), expected)


def test_float16_runs_where_the_cpu_kernels_refuse_it(npu):
    """torch 2.1 has no CPU float16 mm, softmax or layer_norm (2.2 none for layer_norm, 2.3 none
    for log_softmax); the npu computes them, in float32 rounded to float16."""
    x = torch.randn(3, 8)
    layer = _linear("cpu")
    w, b = layer.weight.half().float(), layer.bias.half().float()
    reference = torch.nn.functional.linear(x.half().float(), w, b)
    half = _linear(npu).half()
    y = half(x.half().to(npu))
    assert y.dtype == torch.float16 and y.device.type == "npu"
    torch.testing.assert_close(y.cpu(), reference.half())
    for op in (
        lambda t: torch.softmax(t, -1),
        lambda t: torch.log_softmax(t, -1),
        lambda t: torch.nn.functional.layer_norm(t, (4,)),
    ):
        torch.testing.assert_close(op(y).cpu(), op(y.cpu().float()).half(), atol=1e-3, rtol=1e-3)
    y.float().sum().backward()
    assert half.weight.grad.dtype == torch.float16 and half.weight.grad.device.type == "npu"
    torch.testing.assert_close(
        half.weight.grad.cpu().float(), x.half().float().sum(0).expand(4, 8), atol=1e-2, rtol=1e-3
    )
    out = torch.empty(0, dtype=torch.float16).to(npu)
    y, w = y.detach(), half.weight.detach()
    torch.mm(y, w, out=out)  # out= resized, in float16
    torch.testing.assert_close(out.cpu(), (y.cpu().float() @ w.cpu().float()).half(), atol=1e-2, rtol=1e-3)
    acc = y.clone()
    acc.addmm_(y, torch.eye(4).half().to(npu))  # in place, in float16
    torch.testing.assert_close(acc.cpu(), (y * 2).cpu())
