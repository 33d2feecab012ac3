"""``_fused_adamw_`` (``ascend_env.kernels.fused_adamw``) against ATen's CPU kernel where this torch
has one (2.4 on), against ``AdamW(foreach=False)`` (the same math, unfused) everywhere; the skipped
step on ``found_inf``; the checks; ``NATIVE_OPS`` as exactly what the kernel dispatches; and
``AdamW(fused=True)`` training on the simulated NPU of a table that lacks the op.

Tolerances: within one ulp of the dtype (the device's bias corrections are float32 tensors,
ATen's are doubles on the host; the moments are exact but in ATen's scalar tail, which computes
with double coefficients): float32/float64 1e-6,
float16 1e-3, bfloat16 8e-3; against ``AdamW(foreach=False)`` (other operation order) 1e-6.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Tuple

import pytest
import torch
from conftest import run_python
from torch.utils._python_dispatch import TorchDispatchMode

from ascend_env.kernels import fused_adamw
from ascend_env.kernels.outputs import not_implemented
from ascend_env.sim import optables

CPU_FUSED = torch._C._dispatch_has_kernel_for_dispatch_key("aten::_fused_adamw_", "CPU")
TOLERANCE = {torch.float32: 1e-6, torch.float64: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}
State = Tuple[List[torch.Tensor], ...]


def _state(dtype: torch.dtype, seed: int = 0) -> State:
    """params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs and steps after a first step."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(7, 5), (3,), ()]
    params = [torch.randn(s, generator=g).to(dtype) for s in shapes]
    grads = [torch.randn(s, generator=g).to(dtype) for s in shapes]
    exp_avgs = [(0.1 * torch.randn(s, generator=g)).to(dtype) for s in shapes]
    exp_avg_sqs = [(0.01 * torch.rand(s, generator=g)).to(dtype) for s in shapes]
    max_exp_avg_sqs = [(v * 1.5).to(dtype) for v in exp_avg_sqs]
    steps = [torch.tensor(2.0), torch.tensor(3.0), torch.tensor(1.0)]
    return params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps


def _clone(state: State) -> State:
    return tuple([t.clone() for t in tensors] for tensors in state)


def _kwargs(amsgrad: bool, maximize: bool, weight_decay: float, **extra: Any) -> Dict[str, Any]:
    return dict(
        lr=1e-2,
        beta1=0.9,
        beta2=0.999,
        weight_decay=weight_decay,
        eps=1e-8,
        amsgrad=amsgrad,
        maximize=maximize,
        **extra,
    )


def _assert_close(mine: State, theirs: State, dtype: torch.dtype) -> None:
    tol = TOLERANCE[dtype]
    for a, b in zip(mine[0], theirs[0]):  # parameters
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)
    for kind in range(1, 5):  # gradients (unscaled in place) and moments
        for a, b in zip(mine[kind], theirs[kind]):
            torch.testing.assert_close(a, b, atol=0.0, rtol=tol)


@pytest.mark.skipif(not CPU_FUSED, reason="this torch's CPU has no fused AdamW kernel (torch < 2.4)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("weight_decay", [0.0, 0.05])
@pytest.mark.parametrize("scaled", [False, True])
def test_equal_to_atens_cpu_kernel(dtype, amsgrad, maximize, weight_decay, scaled):
    state = _state(dtype)
    extra = {"grad_scale": torch.tensor(4.0), "found_inf": torch.tensor(0.0)} if scaled else {}
    if not amsgrad:
        state = (*state[:4], [], state[5])
    mine, theirs = _clone(state), _clone(state)
    fused_adamw.fused_adamw_(*mine, **_kwargs(amsgrad, maximize, weight_decay, **extra))
    torch._fused_adamw_(*theirs, **_kwargs(amsgrad, maximize, weight_decay, **extra))
    _assert_close(mine, theirs, dtype)
    assert not torch.equal(mine[0][0], state[0][0])  # a step was taken


@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("maximize", [False, True])
def test_steps_equal_to_unfused_adamw(amsgrad, maximize):
    """Three steps against torch.optim.AdamW(foreach=False), its step counter included."""
    params = [torch.randn(6, 4, generator=torch.Generator().manual_seed(3)), torch.randn(5)]
    reference = [p.clone().requires_grad_() for p in params]
    opt = torch.optim.AdamW(
        reference, lr=1e-2, weight_decay=0.01, amsgrad=amsgrad, maximize=maximize, foreach=False
    )
    mine = [p.clone() for p in params]
    exp_avgs, exp_avg_sqs = [torch.zeros_like(p) for p in mine], [torch.zeros_like(p) for p in mine]
    max_exp_avg_sqs = [torch.zeros_like(p) for p in mine] if amsgrad else []
    steps = [torch.tensor(0.0) for _ in mine]
    for k in range(3):
        grads = [torch.randn(p.shape, generator=torch.Generator().manual_seed(10 + k)) for p in mine]
        for p, grad in zip(reference, grads):
            p.grad = grad.clone()
        opt.step()
        for step in steps:  # the optimizer increments the steps in Python before the fused call
            step += 1
        fused_adamw.fused_adamw_(
            mine, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, **_kwargs(amsgrad, maximize, 0.01)
        )
    for a, b in zip(mine, reference):
        torch.testing.assert_close(a, b.detach(), atol=1e-6, rtol=1e-6)
    for a, p in zip(exp_avgs, reference):
        torch.testing.assert_close(a, opt.state[p]["exp_avg"], atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_found_inf_skips_the_step_and_grad_scale_unscales(dtype):
    state = _state(dtype)
    skipped = _clone(state)
    fused_adamw.fused_adamw_(
        *skipped, **_kwargs(True, False, 0.1, grad_scale=torch.tensor(8.0), found_inf=torch.tensor(1.0))
    )
    for before, after in zip(state, skipped):  # nothing changes, the gradients neither
        assert all(torch.equal(a, b) for a, b in zip(before, after))
    scaled, plain = _clone(state), _clone(state)
    plain[1][:] = [(g.float() / 8.0).to(dtype) for g in plain[1]]
    fused_adamw.fused_adamw_(
        *scaled, **_kwargs(True, False, 0.1, grad_scale=torch.tensor(8.0), found_inf=torch.tensor(0.0))
    )
    fused_adamw.fused_adamw_(*plain, **_kwargs(True, False, 0.1))
    for kind in range(5):
        assert all(torch.equal(a, b) for a, b in zip(scaled[kind], plain[kind])), kind
    assert not torch.equal(scaled[1][0], state[1][0])  # the gradients were unscaled in place


@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("scaled", [False, True])
def test_unfused_reference_takes_the_kernels_step(amsgrad, scaled):
    """verify's answer where the CPU has no fused kernel: PyTorch's unfused AdamW, the same step."""
    state = _state(torch.float32)
    if not amsgrad:
        state = (*state[:4], [], state[5])
    extra = {"grad_scale": torch.tensor(4.0), "found_inf": torch.tensor(0.0)} if scaled else {}
    mine, theirs = _clone(state), _clone(state)
    fused_adamw.fused_adamw_(*mine, **_kwargs(amsgrad, True, 0.05, **extra))
    fused_adamw.unfused_reference(*theirs, **_kwargs(amsgrad, True, 0.05, **extra))
    _assert_close(mine, theirs, torch.float32)
    assert all(torch.equal(a, b) for a, b in zip(theirs[5], state[5]))  # the steps are the caller's
    assert not torch.equal(theirs[0][0], state[0][0])
    skipped = _clone(state)
    fused_adamw.unfused_reference(
        *skipped, **_kwargs(amsgrad, True, 0.05, grad_scale=torch.tensor(4.0), found_inf=torch.tensor(1.0))
    )
    for before, after in zip(state, skipped):
        assert all(torch.equal(a, b) for a, b in zip(before, after))


def _no_step(*args: Any, **kwargs: Any) -> None:
    """A reference that takes no step."""


def _without_cpu_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """This torch as torch 2.3.1 is: no CPU kernel for _fused_adamw_."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    monkeypatch.setattr(
        torch._C,
        "_dispatch_has_kernel_for_dispatch_key",
        lambda op, key: False if op == "aten::_fused_adamw_" else has(op, key),
    )


@pytest.mark.skipif(not CPU_FUSED, reason="the device side of the sample runs ATen's CPU fused kernel")
def test_verify_compares_with_the_reference_where_the_cpu_has_no_kernel(monkeypatch):
    """On torch < 2.4 verify's smoke sample is answered by the reference, not skipped; a device
    result that differs from it fails (here ATen's fused kernel stands for the device)."""
    import dataclasses

    from ascend_env.checks import smoke_fixes
    from ascend_env.kernels import registry

    fix = registry.by_name()["fused_adamw"]
    _without_cpu_kernel(monkeypatch)
    assert smoke_fixes.check_fix(torch, fix, "cpu") == {
        "overloads": {"_fused_adamw_": {"ok": True, "error": None}}
    }
    wrong = dataclasses.replace(fix.smoke[0], reference=f"{__name__}:_no_step")
    result = smoke_fixes.check_fix(torch, dataclasses.replace(fix, smoke=(wrong,)), "cpu")
    assert result["overloads"]["_fused_adamw_"]["ok"] is False
    assert "differs from the CPU's" in result["overloads"]["_fused_adamw_"]["error"]
    unanswered = dataclasses.replace(fix, smoke=(dataclasses.replace(fix.smoke[0], reference=None),))
    assert smoke_fixes.check_fix(torch, unanswered, "cpu") == {
        "overloads": {},
        "skipped": "this torch's CPU has no kernel for aten::_fused_adamw_",
    }


CHECKS = [
    ("grads.size() == n_tensors", lambda s: (s[0], s[1][:1], *s[2:]), False),
    ("state_steps.size() == n_tensors", lambda s: (*s[:4], [], s[5][:2]), False),
    ("max_exp_avg_sqs.size() == n_tensors", lambda s: (*s[:4], [], s[5]), True),
    ("max_exp_avg_sqs.empty()", lambda s: s, False),
]


@pytest.mark.parametrize("text, args, amsgrad", CHECKS, ids=[c[0] for c in CHECKS])
def test_the_checks_are_atens(text, args, amsgrad):
    state = args(_state(torch.float32))
    with pytest.raises(RuntimeError) as mine:
        fused_adamw.fused_adamw_(*state, **_kwargs(amsgrad, False, 0.0))
    assert str(mine.value).startswith(f"Expected {text} to be true, but got false.")
    if CPU_FUSED:
        with pytest.raises(RuntimeError) as theirs:
            torch._fused_adamw_(*state, **_kwargs(amsgrad, False, 0.0))
        assert str(mine.value) == str(theirs.value).splitlines()[0]


def test_integer_params_are_refused_as_on_the_cpu():
    ints = [torch.ones(3, dtype=torch.int64)]
    with pytest.raises(type(not_implemented("k", "Long")), match="not implemented for 'Long'"):
        fused_adamw.fused_adamw_(
            ints, ints, ints, ints, [], [torch.tensor(1.0)], **_kwargs(False, False, 0.0)
        )


class _DeviceOps(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::", 1)[1]
        overload = func._overloadname
        self.seen.add(name if overload == "default" else f"{name}.{overload}")
        return func(*args, **(kwargs or {}))


def test_native_ops_is_exactly_what_is_dispatched():
    halves = _state(torch.bfloat16)
    params, grads, exp_avgs, exp_avg_sqs, _, steps = _state(torch.float32)
    scale, found_inf = torch.tensor(2.0), torch.tensor(0.0)
    with _DeviceOps() as ops:  # no _local_scalar_dense (item()): no host read
        fused_adamw.fused_adamw_(*halves, **_kwargs(True, True, 0.1, grad_scale=scale, found_inf=found_inf))
        fused_adamw.fused_adamw_(
            params, grads, exp_avgs, exp_avg_sqs, [], steps, **_kwargs(False, False, 0.0)
        )
    assert ops.seen == fused_adamw.NATIVE_OPS
    for release in optables.releases():
        missing = fused_adamw.NATIVE_OPS - optables.load(release)
        assert not missing, f"torch_npu {release} lacks {sorted(missing)}"


TRAIN = """
import json, torch
from ascend_env import sim
from ascend_env.hook import runtime
sim.enable({table!r})
def train(device, fused):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).to(device)
    options = dict(fused=True) if fused else dict(foreach=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01, **options)
    x = torch.linspace(-1, 1, 20).reshape(5, 4).to(device)
    for _ in range(3):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()]
ref = train("cpu", False)
before = None
if {cpu_fused!r}:
    before = train("npu", True)
fell = dict(sim.fallbacks())
sim.reset()
registered = runtime.activate("torch_npu")
after = train("npu", True)
print(json.dumps({{
    "fell": fell, "after_fell": dict(sim.fallbacks()), "registered": "_fused_adamw_" in registered,
    "before": None if before is None else max((a - b).abs().max().item() for a, b in zip(before, ref)),
    "after": max((a - b).abs().max().item() for a, b in zip(after, ref)),
}}))
"""


def _lacking() -> Optional[str]:
    return next((r for r in optables.releases() if "_fused_adamw_" not in optables.load(r)), None)


def test_adamw_fused_training_on_the_simulated_npu():
    """AdamW(fused=True) on a table without the op: the CPU fallback without the hook (where this
    torch's CPU has the kernel), on the device with it; parameters equal to unfused AdamW's."""
    table = _lacking()
    assert table == "2.3.1"
    done = run_python(TRAIN.format(table=table, cpu_fused=CPU_FUSED))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    if CPU_FUSED:
        assert result["fell"] == {"aten::_fused_adamw_": 3}
        assert result["before"] < 1e-6
    assert result["registered"] and result["after_fell"] == {}
    assert result["after"] < 1e-6
