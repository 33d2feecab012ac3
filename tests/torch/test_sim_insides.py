"""What the simulated NPU must not report that a real one would not: the insides of a listed op as
fallbacks, replaced Parameter objects on ``Module.to("npu")``, and errors from listed ops that
PyTorch gives no CPU kernel. Each on the models' building blocks, against the CPU."""

from __future__ import annotations

import textwrap

import pytest
import torch
from conftest import IN_PROCESS_TABLE, run_python

from ascend_env import sim
from ascend_env.sim import optables, references


def _forward_backward(make, shape, device):
    """``make()``'s module on ``device``: its output and every gradient, as CPU tensors."""
    torch.manual_seed(0)
    module = make().to(device)
    x = torch.randn(*shape).to(device).requires_grad_()
    out = module(x)
    out = out[0] if isinstance(out, tuple) else out
    out.sum().backward()
    grads = [x.grad] + [p.grad for p in module.parameters()]
    return out.detach().cpu(), [g.cpu() for g in grads]


def _same_on_npu_without_fallbacks(make, shape, npu):
    cpu_out, cpu_grads = _forward_backward(make, shape, "cpu")
    sim.reset()
    npu_out, npu_grads = _forward_backward(make, shape, npu)
    fell_back = dict(sim.fallbacks())
    torch.testing.assert_close(npu_out, cpu_out)
    assert len(npu_grads) == len(cpu_grads)
    for npu_grad, cpu_grad in zip(npu_grads, cpu_grads):
        torch.testing.assert_close(npu_grad, cpu_grad)
    return fell_back


def _weight_norm(conv, dim=0):
    return lambda: torch.nn.utils.weight_norm(conv(), dim=dim)


def _parametrized_weight_norm(conv, dim=0):
    return lambda: torch.nn.utils.parametrizations.weight_norm(conv(), dim=dim)


# The weight-normed layers of wav2vec2 (its positional convolution: weight_norm over dim 2), HiFi-GAN /
# VITS (Conv1d and ConvTranspose1d, dim 0) and Encodec (parametrizations.weight_norm).
WEIGHT_NORMED = {
    "wav2vec2_positional_conv": (
        _weight_norm(lambda: torch.nn.Conv1d(8, 8, 5, padding=2, groups=2), dim=2),
        (2, 8, 12),
    ),
    "vits_conv": (_weight_norm(lambda: torch.nn.Conv1d(4, 6, 3)), (2, 4, 10)),
    "hifigan_upsample": (_weight_norm(lambda: torch.nn.ConvTranspose1d(6, 4, 4, stride=2)), (2, 6, 7)),
    "encodec_conv": (_parametrized_weight_norm(lambda: torch.nn.Conv1d(4, 4, 7)), (2, 4, 16)),
}


@pytest.mark.parametrize("block", sorted(WEIGHT_NORMED))
def test_weight_norm_is_one_listed_op_not_a_fallback_of_its_insides(npu, block):
    """``_weight_norm`` is listed; PyTorch's decomposition of it calls ``_weight_norm_interface``,
    which op-plugin's kernel never calls: neither it nor its backward may count."""
    assert "_weight_norm" in optables.load(IN_PROCESS_TABLE)
    assert "_weight_norm_interface" not in optables.load(IN_PROCESS_TABLE)
    make, shape = WEIGHT_NORMED[block]
    assert _same_on_npu_without_fallbacks(make, shape, npu) == {}


def test_the_same_op_called_by_the_program_still_falls_back(npu):
    """Outside a listed kernel, ``_weight_norm_interface`` and its backward are the program's calls,
    before and after the listed op has run (and its backward with them)."""
    v = torch.randn(4, 3, 5, device=npu, requires_grad=True)
    g = torch.randn(4, 1, 1, device=npu, requires_grad=True)
    for _ in range(2):
        sim.reset()
        torch._weight_norm(v, g, 0).sum().backward()
        assert dict(sim.fallbacks()) == {}
        w, _ = torch._weight_norm_interface(v, g, 0)
        w.sum().backward()
        assert dict(sim.fallbacks()) == {
            "aten::_weight_norm_interface": 1,
            "aten::_weight_norm_interface_backward": 1,
        }


def test_insides_run_where_fallbacks_are_disabled():
    """``TORCH_NPU_FALLBACK_CPU_DISABLE=1`` (a release that honours it) refuses the program's call
    of an unlisted op, never the insides of a listed one."""
    code = textwrap.dedent(
        """
        import torch
        from ascend_env import sim
        sim.enable("2.13.0")
        v = torch.randn(4, 3, 5, device="npu", requires_grad=True)
        g = torch.randn(4, 1, 1, device="npu", requires_grad=True)
        torch._weight_norm(v, g, 0).sum().backward()
        print("listed op ran", dict(sim.fallbacks()))
        try:
            torch._weight_norm_interface(v, g, 0)
        except RuntimeError as exc:
            print("refused:", "TORCH_NPU_FALLBACK_CPU_DISABLE" in str(exc))
        """
    )
    result = run_python(code, env={"TORCH_NPU_FALLBACK_CPU_DISABLE": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-2:] == ["listed op ran {}", "refused: True"]


RNNS = {
    "lstm": (lambda: torch.nn.LSTM(4, 5, num_layers=2, batch_first=True), (2, 3, 4)),
    "lstm_bidirectional": (lambda: torch.nn.LSTM(4, 5, bidirectional=True, bias=False), (3, 2, 4)),
    "gru": (lambda: torch.nn.GRU(4, 5, num_layers=2), (3, 2, 4)),
    "lstm_cell": (lambda: torch.nn.LSTMCell(4, 5), (2, 4)),
    "gru_cell": (lambda: torch.nn.GRUCell(4, 5), (2, 4)),
    "gru_cell_no_bias": (lambda: torch.nn.GRUCell(4, 5, bias=False), (2, 4)),
}


@pytest.mark.parametrize("block", sorted(RNNS))
def test_recurrent_layers_run_and_their_listed_ops_count_nothing(npu, block):
    """``lstm.input``, ``gru.input`` and ``lstm_cell`` are listed: what they reach (the fused cells,
    CUDA-only in PyTorch, and their backward) is their insides. ``gru_cell`` is not listed: its
    fused cell falls back where this torch's decomposition reaches it, and still runs."""
    make, shape = RNNS[block]
    fell_back = _same_on_npu_without_fallbacks(make, shape, npu)
    listed = optables.load(IN_PROCESS_TABLE)
    if block.startswith("gru_cell"):
        assert "gru_cell" not in listed
        assert set(fell_back) <= {"aten::_thnn_fused_gru_cell", "aten::_thnn_fused_gru_cell_backward"}
    else:
        assert fell_back == {}


# ------------------------------------------------------------------ Module.to keeps its Parameters


def test_cpu_and_npu_tensors_are_shallow_copy_compatible_as_on_torch_npu(npu):
    cpu, on_npu = torch.zeros(2), torch.zeros(2, device=npu)
    assert torch._has_compatible_shallow_copy_type(cpu, on_npu)
    assert torch._has_compatible_shallow_copy_type(on_npu, cpu)
    assert torch._has_compatible_shallow_copy_type(on_npu, on_npu)
    # Not every pair: a sparse tensor and a dense one stay incompatible, as in PyTorch.
    assert not torch._has_compatible_shallow_copy_type(cpu.to_sparse(), on_npu)
    assert not torch._has_compatible_shallow_copy_type(on_npu, cpu.to_sparse())


def test_module_to_npu_keeps_its_parameters_and_an_earlier_optimizer_trains_them(npu):
    torch.manual_seed(0)
    models = [torch.nn.Linear(3, 2) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    initial = models[0].weight.detach().clone()
    weights = []
    for model, device in zip(models, ("cpu", npu)):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)  # built before the move
        weight = model.weight
        model.to(device)
        assert model.weight is weight and weight.device.type == torch.device(device).type
        model(torch.ones(4, 3, device=device)).pow(2).sum().backward()
        optimizer.step()
        weights.append(model.weight.detach().cpu())
    assert not torch.equal(weights[1], initial)  # the optimizer updated the moved Parameter
    torch.testing.assert_close(weights[1], weights[0])


def test_an_adafactor_built_before_the_move_trains_the_moved_model(npu):
    """transformers' ``test_adafactor_lr_none``: the optimizer is built on the CPU model, and the
    Trainer moves the model to the device before it trains."""
    from transformers.optimization import Adafactor

    trained = []
    for device in ("cpu", npu):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        initial = [p.detach().clone() for p in model.parameters()]
        optimizer = Adafactor(
            model.parameters(), scale_parameter=True, relative_step=True, warmup_init=True, lr=None
        )
        model.to(device)
        x = torch.arange(8.0).reshape(2, 4).to(device)
        for _ in range(3):
            optimizer.zero_grad()
            model(x).pow(2).mean().backward()
            optimizer.step()
        params = [p.detach().cpu() for p in model.parameters()]
        assert all(not torch.equal(p, q) for p, q in zip(params, initial)), device
        trained.append(params)
    for npu_param, cpu_param in zip(trained[1], trained[0]):
        torch.testing.assert_close(npu_param, cpu_param)


def test_a_lazy_module_moved_before_its_first_forward_materializes_on_npu(npu):
    model = torch.nn.LazyLinear(3).to(npu)
    out = model(torch.randn(2, 4, device=npu))
    assert out.shape == (2, 3) and out.device.type == "npu"
    assert model.weight.shape == (3, 4) and model.weight.device.type == "npu"


def test_param_data_takes_an_npu_tensor_and_back(npu):
    param = torch.nn.Parameter(torch.randn(3))
    param.data = torch.arange(3.0, device=npu)
    assert isinstance(param, torch.nn.Parameter) and param.device.type == "npu"
    assert torch.equal((param * 2).cpu(), torch.tensor([0.0, 2.0, 4.0]))
    param.data = torch.ones(3)
    assert param.device.type == "cpu"
    with pytest.raises(RuntimeError, match="incompatible tensor type"):
        param.data = torch.ones(3).to_sparse()


# ------------------------------------------------------------------ listed ops without a CPU kernel


def test_every_op_the_table_lists_runs_but_those_not_modelled(npu):
    """A listed op with no CPU kernel of its own (PyTorch writes some for CUDA only) gets one from
    ``sim/references.py``: none is left but the sparse, nested, float8 and SyncBatchNorm ones."""
    left = set(references.missing_cpu_kernels(torch, optables.load(IN_PROCESS_TABLE)))
    left -= {"_copy_from", "_copy_from_and_resize", "_pin_memory"}  # the simulator's own npu kernels
    assert left <= set(references.UNMODELLED), left - set(references.UNMODELLED)


@pytest.mark.parametrize("adamw", [False, True])
@pytest.mark.parametrize("options", [{}, {"amsgrad": True, "weight_decay": 0.1}, {"maximize": True}])
def test_fused_adam_steps_as_the_unfused_one_on_the_cpu(npu, adamw, options):
    optimizer_class = torch.optim.AdamW if adamw else torch.optim.Adam
    results = []
    for device, fused in (("cpu", False), (npu, True)):
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2).to(device)
        kwargs = {"fused": True} if fused else {"foreach": False}
        optimizer = optimizer_class(model.parameters(), lr=0.1, **options, **kwargs)
        for _ in range(3):
            optimizer.zero_grad()
            model(torch.arange(6.0, device=device).reshape(2, 3)).pow(2).sum().backward()
            optimizer.step()
        results.append([p.detach().cpu() for p in model.parameters()])
    for npu_param, cpu_param in zip(results[1], results[0]):
        torch.testing.assert_close(npu_param, cpu_param)


def test_the_gradient_scalers_ops_run_on_npu(npu):
    grads = [torch.tensor([2.0, 4.0], device=npu), torch.tensor([1.0, float("inf")], device=npu)]
    found_inf = torch.zeros(1, device=npu)
    torch._amp_foreach_non_finite_check_and_unscale_(grads[:1], found_inf, torch.full((1,), 0.5, device=npu))
    assert torch.equal(grads[0].cpu(), torch.tensor([1.0, 2.0])) and found_inf.item() == 0
    torch._amp_foreach_non_finite_check_and_unscale_(grads[1:], found_inf, torch.full((1,), 0.5, device=npu))
    assert found_inf.item() == 1
    scale, tracker = torch.full((1,), 8.0, device=npu), torch.zeros(1, dtype=torch.int32, device=npu)
    torch._amp_update_scale_(scale, tracker, found_inf, 2.0, 0.5, 2)
    assert (scale.item(), tracker.item()) == (4.0, 0)
    no_inf = torch.zeros(1, device=npu)
    torch._amp_update_scale_(scale, tracker, no_inf, 2.0, 0.5, 2)
    assert (scale.item(), tracker.item()) == (4.0, 1)
    torch._amp_update_scale_(scale, tracker, no_inf, 2.0, 0.5, 2)
    assert (scale.item(), tracker.item()) == (8.0, 0)


def test_depthwise_convolution_and_masked_scale_equal_their_cpu_forms(npu):
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 4, 7, 7), torch.randn(4, 1, 3, 3), torch.randn(4)
    expected = torch.nn.functional.conv2d(x, w, b, 2, 1, 1, 4)
    got = torch.ops.aten._conv_depthwise2d(x.to(npu), w.to(npu), [3, 3], b.to(npu), [2, 2], [1, 1], [1, 1])
    torch.testing.assert_close(got.cpu(), expected)
    mask = torch.rand(5) > 0.5
    got = torch.ops.aten._masked_scale(torch.ones(5, device=npu), mask.to(npu), 2.0)
    assert torch.equal(got.cpu(), mask.float() * 2.0)


def test_a_newer_table_runs_its_fused_cells_as_native_ops():
    """On a table that lists the fused cells (2.13.0), they run as its pass-through kernels: the
    references give them a CPU kernel where this torch has none; nothing falls back under the
    listed LSTM and GRU, their backward included."""
    code = textwrap.dedent(
        """
        import json, torch
        from ascend_env import sim
        sim.enable("2.13.0")
        out = {}
        for name, make, shape in (("lstm", lambda: torch.nn.LSTM(4, 5), (3, 2, 4)),
                                  ("gru", lambda: torch.nn.GRU(4, 5), (3, 2, 4)),
                                  ("lstm_cell", lambda: torch.nn.LSTMCell(4, 5), (2, 4))):
            results = []
            for device in ("cpu", "npu"):
                torch.manual_seed(0)
                module = make().to(device)
                y = module(torch.randn(*shape).to(device))
                y = y[0] if isinstance(y, tuple) else y
                y.sum().backward()
                results.append([y.detach().cpu()] + [p.grad.cpu() for p in module.parameters()])
                if device == "cpu":
                    sim.reset()
            same = all(torch.allclose(a, b, atol=1e-6) for a, b in zip(*results))
            out[name] = [same, dict(sim.fallbacks())]
        print(json.dumps(out))
        """
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == (
        '{"lstm": [true, {}], "gru": [true, {}], "lstm_cell": [true, {}]}'
    )
