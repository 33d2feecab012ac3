"""``_fused_adamw_`` built only from ops that every torch_npu release runs natively.

``torch.optim.AdamW(fused=True)`` (and transformers' ``optim="adamw_torch_fused"``) calls
``torch._fused_adamw_`` once per optimizer step with every parameter, gradient and state tensor
of a parameter group; torch_npu 2.3.1, 2.3.1.post2 and 2.4.0 register no kernel for it, so each
step copies all of them to the host and back (and on torch 2.3.1, whose CPU has no fused Adam
kernel, the fallback fails outright).

The update is ATen's CPU kernel (``adam_math`` of ``aten/src/ATen/native/cpu/FusedAdamKernel.cpp``,
ADAMW mode, PyTorch v2.4.0; ``_fused_adamw_kernel_cpu_`` of ``aten/src/ATen/native/FusedAdam.cpp``
around it), tensor by tensor: computed in float32 for float16/bfloat16 tensors (ATen's opmath),
rounded once on store; the gradient divided by ``grad_scale`` and written back; ``maximize``
negates it; the weight decay scales the parameter by ``1 - lr * weight_decay``; ``exp_avg``
lerps to the gradient by ``1 - beta1``; ``exp_avg_sq`` is ``exp_avg_sq * beta2 + grad**2 *
(1 - beta2)``; with ``amsgrad`` the running maximum of it; ``param -= lr / (1 - beta1**step) *
exp_avg / (sqrt(v) / sqrt(1 - beta2**step) + eps)``. The step count is read from ``state_steps``
(the optimizer increments it in Python), on the device: the bias corrections are float32 tensors
there, where ATen computes them in double on the host (a relative difference of a few float32
ulp). Where ``found_inf`` is 1 ATen returns before touching anything; here every tensor keeps
its old value through ``torch.where``, so nothing is read back to the host.
"""

from __future__ import annotations

from typing import Callable, Dict, FrozenSet, List, Optional, Sequence

import torch
from torch import Tensor

from ascend_env.kernels.outputs import dtype_name, not_implemented

__all__ = ["KERNELS", "NATIVE_OPS", "fused_adamw_", "unfused_reference"]

#: Every aten op the kernel dispatches on the device; each is in the ``supported:`` op lists of
#: every torch_npu release.
NATIVE_OPS: FrozenSet[str] = frozenset(
    {
        "add.Tensor",
        "addcmul",
        "copy_",
        "div.Tensor",
        "empty.memory_format",
        "eq.Scalar",
        "lerp.Scalar",
        "maximum",
        "mul.Tensor",
        "neg",
        "pow.Scalar",
        "rsub.Scalar",
        "sqrt",
        "sub.Tensor",
        "where.self",
    }
)

_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _opmath(x: Tensor) -> Tensor:
    """``x`` as ATen's opmath type computes it: float32 for float16/bfloat16, else ``x`` itself."""
    if x.dtype in (torch.float16, torch.bfloat16):
        return torch.empty(x.shape, dtype=torch.float32, device=x.device).copy_(x)
    return x


def _expect(condition: bool, text: str) -> None:
    """ATen's TORCH_CHECK without a message."""
    if not condition:
        raise RuntimeError(
            f"Expected {text} to be true, but got false.  (Could this error message be improved?  "
            "If so, please report an enhancement request to PyTorch.)"
        )


def _check(
    params: Sequence[Tensor],
    grads: Sequence[Tensor],
    exp_avgs: Sequence[Tensor],
    exp_avg_sqs: Sequence[Tensor],
    max_exp_avg_sqs: Sequence[Tensor],
    state_steps: Sequence[Tensor],
    amsgrad: bool,
) -> None:
    """``_fused_adamw_kernel_cpu_``'s checks and messages (``FusedAdam.cpp``'s TORCH_CHECKs)."""
    n = len(params)
    for name, tensors in (("grads", grads), ("exp_avgs", exp_avgs), ("exp_avg_sqs", exp_avg_sqs)):
        _expect(len(tensors) == n, f"{name}.size() == n_tensors")
    if amsgrad:
        _expect(len(max_exp_avg_sqs) == n, "max_exp_avg_sqs.size() == n_tensors")
    else:
        _expect(not max_exp_avg_sqs, "max_exp_avg_sqs.empty()")
    _expect(len(state_steps) == n, "state_steps.size() == n_tensors")
    for param in params:
        if param.dtype not in _FLOATS:
            raise not_implemented("fused_adam_kernel", dtype_name(param.dtype))


def fused_adamw_(
    self: List[Tensor],
    grads: List[Tensor],
    exp_avgs: List[Tensor],
    exp_avg_sqs: List[Tensor],
    max_exp_avg_sqs: List[Tensor],
    state_steps: List[Tensor],
    *,
    lr: float,
    beta1: float,
    beta2: float,
    weight_decay: float,
    eps: float,
    amsgrad: bool,
    maximize: bool,
    grad_scale: Optional[Tensor] = None,
    found_inf: Optional[Tensor] = None,
) -> None:
    """``aten::_fused_adamw_``: one AdamW step of every tensor of the lists, in place."""
    _check(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, amsgrad)
    for i, param in enumerate(self):
        grad, exp_avg, exp_avg_sq, step_t = grads[i], exp_avgs[i], exp_avg_sqs[i], state_steps[i]
        p, g = _opmath(param), _opmath(grad)
        m, v = _opmath(exp_avg), _opmath(exp_avg_sq)
        if grad_scale is not None:
            g = torch.div(g, grad_scale)
        new_grad = g
        if maximize:
            g = torch.neg(g)
        if weight_decay != 0:
            p = torch.mul(p, 1 - lr * weight_decay)
        m = torch.lerp(m, g, 1 - beta1)
        v = torch.addcmul(torch.mul(v, beta2), g, g, value=1 - beta2)
        # the bias corrections from the step on the device, in its dtype (float32)
        step = step_t if step_t.dtype in _FLOATS else torch.mul(step_t, 1.0)
        bias_correction1 = torch.rsub(torch.pow(beta1, step), 1)
        bias_correction2_sqrt = torch.sqrt(torch.rsub(torch.pow(beta2, step), 1))
        denominator_of = v
        new_max: Optional[Tensor] = None
        if amsgrad:
            new_max = torch.maximum(_opmath(max_exp_avg_sqs[i]), v)
            denominator_of = new_max
        denom = torch.add(torch.div(torch.sqrt(denominator_of), bias_correction2_sqrt), eps)
        p = torch.sub(p, torch.div(torch.div(torch.mul(m, lr), bias_correction1), denom))
        updates = [(param, p), (exp_avg, m), (exp_avg_sq, v)]
        if grad_scale is not None:
            updates.append((grad, new_grad))
        if new_max is not None:
            updates.append((max_exp_avg_sqs[i], new_max))
        if found_inf is not None:  # ATen skips the step when found_inf == 1: keep the old values
            skip = torch.eq(found_inf, 1.0)
            updates = [(old, torch.where(skip, _opmath(old), new)) for old, new in updates]
        for old, new in updates:
            old.copy_(new)


def unfused_reference(
    self: List[Tensor],
    grads: List[Tensor],
    exp_avgs: List[Tensor],
    exp_avg_sqs: List[Tensor],
    max_exp_avg_sqs: List[Tensor],
    state_steps: List[Tensor],
    *,
    lr: float,
    beta1: float,
    beta2: float,
    weight_decay: float,
    eps: float,
    amsgrad: bool,
    maximize: bool,
    grad_scale: Optional[Tensor] = None,
    found_inf: Optional[Tensor] = None,
) -> None:
    """The step ``_fused_adamw_`` takes, on CPU tensors in place, taken by PyTorch's own unfused
    ``torch.optim.AdamW(foreach=False)``: the smoke test's answer where this torch's CPU has no fused
    kernel (torch < 2.4). ``state_steps`` already count this step (the fused op's contract); the
    optimizer counts it itself, so it starts one step earlier."""
    if found_inf is not None and bool(found_inf.item() == 1):
        return
    if grad_scale is not None:
        for grad in grads:
            grad.copy_(torch.div(grad, grad_scale))
    for i, param in enumerate(self):
        leaf = param.detach().clone().requires_grad_()
        leaf.grad = grads[i].clone()
        optimizer = torch.optim.AdamW(
            [leaf],
            lr=lr,
            betas=(beta1, beta2),
            eps=eps,
            weight_decay=weight_decay,
            amsgrad=amsgrad,
            maximize=maximize,
            foreach=False,
        )
        state = {
            "step": torch.sub(state_steps[i], 1).to(torch.float32),
            "exp_avg": exp_avgs[i].clone(),
            "exp_avg_sq": exp_avg_sqs[i].clone(),
        }
        if amsgrad:
            state["max_exp_avg_sq"] = max_exp_avg_sqs[i].clone()
        optimizer.state[leaf] = state
        optimizer.step()
        param.copy_(leaf.detach())
        exp_avgs[i].copy_(state["exp_avg"])
        exp_avg_sqs[i].copy_(state["exp_avg_sq"])
        if amsgrad:
            max_exp_avg_sqs[i].copy_(state["max_exp_avg_sq"])


#: The kernels by overload, callable as the dispatcher calls one registered with
#: ``torch.library.Library("aten", "IMPL").impl``.
KERNELS: Dict[str, Callable[..., None]] = {"_fused_adamw_": fused_adamw_}
