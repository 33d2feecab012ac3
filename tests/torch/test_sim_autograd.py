"""Autograd on the simulated NPU: native, composite and falling-back ops give the CPU's gradients;
conjugate and negative views are resolved; fallback results come back on npu."""

from __future__ import annotations

import json
import os
import textwrap

import pytest
import torch
from conftest import IN_PROCESS_TABLE, run_python
from torch.utils._python_dispatch import TorchDispatchMode

from ascend_env import sim
from ascend_env.sim import optables


def _grads(fn, *inputs, device):
    """fn's outputs and the gradients of ``inputs`` (CPU tensors) with fn run on ``device``."""
    leaves = [t.detach().to(device).requires_grad_(t.is_floating_point() or t.is_complex()) for t in inputs]
    out = fn(*leaves)
    cotangent = torch.ones_like(out)
    grads = torch.autograd.grad(out, [t for t in leaves if t.requires_grad], cotangent, allow_unused=True)
    return out, grads


def _same_as_cpu(fn, *inputs):
    torch.manual_seed(0)
    cpu_out, cpu_grads = _grads(fn, *inputs, device="cpu")
    torch.manual_seed(0)
    npu_out, npu_grads = _grads(fn, *inputs, device="npu")
    assert npu_out.device.type == "npu"
    torch.testing.assert_close(npu_out.cpu(), cpu_out)
    assert [g is None for g in npu_grads] == [g is None for g in cpu_grads]
    for npu_grad, cpu_grad in zip(npu_grads, cpu_grads):
        if cpu_grad is not None:
            assert npu_grad.device.type == "npu"
            torch.testing.assert_close(npu_grad.cpu(), cpu_grad)


# PyTorch builds each of these out of other ops (a CompositeImplicitAutograd kernel, no CPU kernel),
# and the in-process table lists it as native: its npu kernel must keep PyTorch's gradient.
COMPOSITE = {
    "softmax.int": lambda x: torch.softmax(x, -1),
    "log_softmax.int": lambda x: torch.log_softmax(x, -1),
    "matmul": lambda x: x @ x.t(),
    "dropout": lambda x: torch.nn.functional.dropout(x, 0.3, training=True),
    "to.dtype": lambda x: x.to(torch.float64).sum(-1),
    "l1_loss": lambda x: torch.nn.functional.l1_loss(x, torch.zeros_like(x)),
    "cdist": lambda x: torch.cdist(x, x + 1),
    "adaptive_avg_pool1d": lambda x: torch.nn.functional.adaptive_avg_pool1d(x[None], 2),
}


class _Seen(TorchDispatchMode):
    """The ops a dispatch mode sees (as ``audit --paths`` does)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("op", sorted(COMPOSITE))
def test_composite_ops_the_table_lists_keep_their_gradient(npu, op):
    assert op in optables.load(IN_PROCESS_TABLE)
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{op}", "CompositeImplicitAutograd")
    _same_as_cpu(COMPOSITE[op], torch.randn(4, 5))
    # It reaches the npu as one op, as torch_npu registers it (a dispatch mode sees it whole).
    with _Seen() as seen:
        COMPOSITE[op](torch.randn(4, 5).to(npu))
    assert f"aten.{op if '.' in op else op + '.default'}" in seen.names, seen.names


def test_a_linear_layer_without_bias_trains(npu):
    """``matmul``'s backward on the npu (torch_npu's native ``matmul_backward``): every shape
    ``nn.Linear`` and ``@`` take, broadcast batches and 1-d operands included."""
    _same_as_cpu(lambda x, w: torch.nn.functional.linear(x, w), torch.randn(2, 3, 4), torch.randn(5, 4))
    _same_as_cpu(lambda a, b: a @ b, torch.randn(3, 1, 4, 5), torch.randn(2, 5, 6))
    _same_as_cpu(lambda a, b: a @ b, torch.randn(4), torch.randn(2, 4, 3))


def test_the_backward_of_a_falling_back_op_falls_back_and_is_counted(npu):
    assert "logit" not in optables.load(IN_PROCESS_TABLE)
    x = torch.rand(6) * 0.8 + 0.1
    sim.reset()
    _same_as_cpu(torch.logit, x)
    counted = sim.fallbacks()
    assert counted["aten::logit"] == 1  # the npu run; the CPU reference reaches no npu fallback
    assert any(name.startswith("aten::logit_backward") for name in counted), counted


def test_optimizer_steps_loop_over_tensors_instead_of_falling_back(npu):
    """torch_npu registers PyTorch's per-tensor loop for every foreach op it does not implement:
    AdamW's and clip_grad_norm_'s foreach steps do not fall back as a whole."""

    def train(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, foreach=True)
        for _ in range(2):
            model(torch.ones(5, 4).to(device)).square().sum().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, foreach=True)
            optimizer.step()
            optimizer.zero_grad()
        return [p.detach().cpu() for p in model.parameters()]

    expected = train("cpu")
    sim.reset()
    got = train(npu)
    assert not [name for name in sim.fallbacks() if name.startswith("aten::_foreach")], sim.fallbacks()
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)


def test_results_of_falling_back_ops_come_back_on_npu(npu):
    a = torch.randn(4, 4)
    spd = a @ a.t() + 4 * torch.eye(4)
    x = torch.rand(3, 4).to(npu)
    for result in (
        torch.linalg.cholesky(spd.to(npu)),
        torch.logcumsumexp(x, 0),
        torch.logit(x),
        torch.linalg.eigvals(spd.to(npu)),
        torch.mode(x, 0).values,
    ):
        assert result.device.type == "npu", result.device


def test_conjugate_and_negative_views_are_resolved(npu):
    x = torch.randn(3, 4, dtype=torch.complex64)
    y = torch.randn(4, 2, dtype=torch.complex64)
    xn, yn = x.to(npu), y.to(npu)
    assert xn.conj().is_conj()
    assert torch.equal(xn.conj().clone().cpu(), x.conj().resolve_conj())
    assert torch.equal(xn.conj().cpu(), x.conj())
    assert torch.equal(torch._neg_view(xn).clone().cpu(), -x)
    assert torch.equal(xn.conj().resolve_conj().cpu(), x.conj().resolve_conj())
    # matmul gets the lazily conjugated view as on the CPU, where mm folds the conjugation into the
    # product: the same bits, not a rounding of the resolved copy.
    a, b = torch.randn(64, 48, dtype=torch.complex64), torch.randn(48, 32, dtype=torch.complex64)
    assert torch.equal((a.to(npu).conj() @ b.to(npu).conj()).cpu(), a.conj() @ b.conj())
    assert torch.equal((a.to(npu).mH @ a.to(npu)).cpu(), a.mH @ a)
    torch.testing.assert_close((xn.conj() @ yn).cpu(), x.conj() @ y)
    torch.testing.assert_close(torch.fft.ifft(xn).cpu(), torch.fft.ifft(x))
    torch.testing.assert_close(torch.fft.ihfft(xn.real).cpu(), torch.fft.ihfft(x.real))


def test_complex_gradients_equal_the_cpus(npu):
    _same_as_cpu(
        lambda z: (z * z.conj()).real.sum() + torch.polar(z.abs(), z.angle()).abs().sum(),
        torch.randn(5, dtype=torch.complex64),
    )
    _same_as_cpu(
        lambda r, t: torch.view_as_real(torch.polar(r, t)).sum(), torch.rand(5) + 0.5, torch.randn(5)
    )


# One process per table (the dispatcher holds one): the newest release of each line the product's
# users run (2.1, 2.2, 2.3) and the newest release by default, every release with
# ASCEND_ENV_ALL_TABLES=1. The OpInfo suite (tests/opinfo) samples a table of every release line.
def _default_tables():
    newest = {}
    for release in optables.releases():
        newest[".".join(release.split(".")[:2])] = release
    return [newest["2.1"], newest["2.2"], newest["2.3"], optables.newest()]


TABLES = optables.releases() if os.environ.get("ASCEND_ENV_ALL_TABLES") == "1" else _default_tables()

STEP = textwrap.dedent("""
    import json, sys, torch
    from ascend_env import sim
    sim.enable(sys.argv[1])

    def step(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 8, bias=False), torch.nn.LayerNorm(8), torch.nn.GELU(),
                                    torch.nn.Dropout(0.2), torch.nn.Linear(8, 4)).to(device)
        x = torch.randn(5, 6).to(device)
        z = torch.randn(5, 4, dtype=torch.complex64).to(device)
        logits = model(x).double().float() + (z.conj() * z).real.sqrt()
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2, 3, 0]).to(device))
        loss = loss + torch.logit(torch.sigmoid(logits)).mean() + torch.logcumsumexp(logits, 0).mean()
        loss.backward()
        grads = [p.grad for p in model.parameters()]
        return loss, grads

    cpu_loss, cpu_grads = step("cpu")
    loss, grads = step("npu")
    print(json.dumps({
        "loss": [loss.item(), cpu_loss.item()],
        "grads_on_npu": all(g is not None and g.device.type == "npu" for g in grads),
        "same": all(g is not None and torch.allclose(g.cpu(), c, atol=1e-6)
                    for g, c in zip(grads, cpu_grads)),
        "fallbacks": sorted(sim.fallbacks()),
    }))
""")


@pytest.mark.parametrize("table", TABLES)
def test_a_training_step_gives_the_cpus_gradients_per_op_table(table):
    result = run_python(f"import sys; sys.argv = ['step', {table!r}]\n" + STEP)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["loss"][0] == pytest.approx(report["loss"][1], rel=1e-5), report
    assert report["grads_on_npu"] and report["same"], report
    # torch.logit falls back on some tables: its backward then falls back too, and both are counted.
    if "aten::logit" in report["fallbacks"]:
        assert any(name.startswith("aten::logit_backward") for name in report["fallbacks"]), report


def test_enabling_after_autograd_ran_warns_that_npu_backward_cannot_work():
    result = run_python(
        textwrap.dedent("""
        import warnings, torch
        from ascend_env import sim
        x = torch.ones(2, requires_grad=True)
        (x * 2).sum().backward()  # the autograd engine starts, knowing no npu device
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sim.enable("2.1.0.post6")
        print([str(w.message) for w in caught if w.category is RuntimeWarning])
    """)
    )
    assert result.returncode == 0, result.stderr
    assert "ran autograd before the simulated NPU was enabled" in result.stdout
    assert "ascend_env.sim.enable() right after 'import torch'" in result.stdout


def test_the_engine_check_of_enable_leaves_the_npu_unused_and_its_thread_drained_at_exit():
    """enable()'s backward on npu is not a use of the device (the audit reads the peak memory as
    one), and its exit drain is registered: a process whose last statement is an npu backward
    ends without the worker thread touching Python objects during finalization."""
    result = run_python(
        textwrap.dedent("""
        import atexit, torch
        from ascend_env import sim
        sim.enable("2.1.0.post6")
        from ascend_env.sim import device
        print(device.max_memory_allocated(), device.memory_allocated())
        x = torch.ones(3, device="npu", requires_grad=True)
        g, = torch.autograd.grad((x * 2).sum(), x)
        print(g.cpu().tolist())
    """)
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["0 0", "[2.0, 2.0, 2.0]"]
    assert "terminate called" not in result.stderr
