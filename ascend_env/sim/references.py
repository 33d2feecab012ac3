"""CPU kernels for the ops PyTorch gives only a device kernel, so that the simulated NPU runs them.

The simulator runs a listed op's CPU kernel on the npu memory (the pass-through kernel), and an
unlisted one's through the CPU fallback: both need a CPU kernel. Some ops a torch_npu release lists
have none on some torch versions, because PyTorch writes them for CUDA only: the fused RNN cells that
``nn.LSTM``, ``nn.GRU``, ``nn.LSTMCell`` and ``nn.GRUCell`` reach on a PrivateUse1 device (torch 2.13),
the fused Adam and AdamW steps and the gradient scaler's ops (torch 2.1 and 2.2), depthwise convolution,
``_masked_scale``, the ``out_dtype`` matrix products and ``record_stream``. A real NPU runs its own
kernel for each; the simulator would raise. :func:`register` gives each of these ops that has no CPU
kernel on the running torch one here, computed as PyTorch's CUDA kernel computes it
(``aten/src/ATen/native/cuda/RNN.cu``, ``fused_adam_utils.cuh``, ``AmpKernels.cu``), in the simulated
process only. Ops the simulator still cannot run (sparse, nested, float8) are listed in
``UNMODELLED``. Importing this module does not import torch.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

__all__ = ["UNMODELLED", "kernels", "missing_cpu_kernels", "register"]

#: Ops some table lists that have no CPU kernel and no reference here: sparse (``_coalesce``),
#: nested (``to_padded_tensor``), float8 (``_scaled_mm``, ``_scaled_grouped_mm``), SyncBatchNorm's
#: CUDA statistics (``batch_norm_stats`` and its kin: a distributed job's), and torch_npu's own
#: ``matmul_backward``, which PyTorch calls only on nested tensors.
UNMODELLED = (
    "_coalesce",
    "to_padded_tensor",
    "_scaled_mm",
    "_scaled_grouped_mm",
    "_scaled_grouped_mm_v2",
    "batch_norm_stats",
    "batch_norm_elemt",
    "batch_norm_elemt.out",
    "batch_norm_gather_stats_with_counts",
    "batch_norm_backward_reduce",
    "batch_norm_backward_elemt",
    "matmul_backward",
)

_LIBRARIES: List[Any] = []  # the registrations, kept alive for the process


def _torch() -> Any:
    import torch

    return torch


# ------------------------------------------------------------------ fused RNN cells (RNN.cu)


def _lstm_cell(
    input_gates: Any, hidden_gates: Any, cx: Any, input_bias: Any = None, hidden_bias: Any = None
) -> Tuple[Any, Any, Any]:
    """(hy, cy, workspace): the workspace holds the activated gates i, f, g, o."""
    torch = _torch()
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias + hidden_bias
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, g, o], 1)


def _lstm_cell_backward_impl(
    grad_hy: Any, grad_cy: Any, cx: Any, cy: Any, workspace: Any, has_bias: bool
) -> Tuple[Any, Any, Any]:
    """(grad of the gates, grad_cx, grad of the bias)."""
    torch = _torch()
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    grad_c = torch.zeros_like(cy) if grad_cy is None else grad_cy.clone()
    grad_o = torch.zeros_like(cy)
    if grad_hy is not None:
        grad_c = grad_c + grad_hy * o * (1 - tanh_cy * tanh_cy)
        grad_o = grad_hy * tanh_cy * o * (1 - o)
    grad_gates = torch.cat(
        [grad_c * g * i * (1 - i), grad_c * cx * f * (1 - f), grad_c * i * (1 - g * g), grad_o], 1
    )
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, grad_c * f, grad_bias


def _gru_cell(
    input_gates: Any, hidden_gates: Any, hx: Any, input_bias: Any = None, hidden_bias: Any = None
) -> Tuple[Any, Any]:
    """(hy, workspace): the workspace holds r, z, n, hx and the hidden gates' n part."""
    torch = _torch()
    if input_bias is not None:
        input_gates = input_gates + input_bias
        hidden_gates = hidden_gates + hidden_bias
    ir, iz, in_ = input_gates.chunk(3, 1)
    hr, hz, hn = hidden_gates.chunk(3, 1)
    r = (ir + hr).sigmoid()
    z = (iz + hz).sigmoid()
    n = (in_ + r * hn).tanh()
    hy = n + z * (hx - n)
    return hy, torch.cat([r, z, n, hx, hn], 1)


def _gru_cell_backward(grad_hy: Any, workspace: Any, has_bias: bool) -> Tuple[Any, ...]:
    """(grad of the input gates, of the hidden gates, grad_hx, of the input bias, of the hidden bias)."""
    torch = _torch()
    r, z, n, hx, hn = workspace.chunk(5, 1)
    grad_n = grad_hy * (1 - z) * (1 - n * n)
    grad_z = grad_hy * (hx - n) * z * (1 - z)
    grad_r = grad_n * hn * r * (1 - r)
    grad_input = torch.cat([grad_r, grad_z, grad_n], 1)
    grad_hidden = torch.cat([grad_r, grad_z, grad_n * r], 1)
    if not has_bias:
        return grad_input, grad_hidden, grad_hy * z, None, None
    return grad_input, grad_hidden, grad_hy * z, grad_input.sum(0), grad_hidden.sum(0)


# ------------------------------------------------------------------ fused Adam and AdamW


def _adam_step(adamw: bool) -> Callable[..., None]:
    def step(
        params: List[Any],
        grads: List[Any],
        exp_avgs: List[Any],
        exp_avg_sqs: List[Any],
        max_exp_avg_sqs: List[Any],
        state_steps: List[Any],
        *,
        lr: Any,
        beta1: float,
        beta2: float,
        weight_decay: float,
        eps: float,
        amsgrad: bool,
        maximize: bool,
        grad_scale: Optional[Any] = None,
        found_inf: Optional[Any] = None,
    ) -> None:
        torch = _torch()
        if found_inf is not None and bool(found_inf.item() == 1):
            return
        lr = float(lr.item()) if isinstance(lr, torch.Tensor) else float(lr)
        for index, param in enumerate(params):
            kind = torch.float64 if param.dtype == torch.float64 else torch.float32
            value = param.to(kind)
            grad = grads[index].to(kind)
            if grad_scale is not None:
                grad = grad / grad_scale.to(kind)
                grads[index].copy_(grad)
            if maximize:
                grad = -grad
            if weight_decay != 0:
                if adamw:
                    value = value - lr * weight_decay * value
                else:
                    grad = grad + value * weight_decay
            exp_avg = beta1 * exp_avgs[index].to(kind) + (1 - beta1) * grad
            exp_avg_sq = beta2 * exp_avg_sqs[index].to(kind) + (1 - beta2) * grad * grad
            step_number = float(state_steps[index].item())
            correction1 = 1 - beta1**step_number
            correction2_sqrt = (1 - beta2**step_number) ** 0.5
            if amsgrad:
                largest = torch.maximum(max_exp_avg_sqs[index].to(kind), exp_avg_sq)
                max_exp_avg_sqs[index].copy_(largest)
                denom = largest.sqrt() / correction2_sqrt + eps
            else:
                denom = exp_avg_sq.sqrt() / correction2_sqrt + eps
            param.copy_(value - (lr / correction1) * exp_avg / denom)
            exp_avgs[index].copy_(exp_avg)
            exp_avg_sqs[index].copy_(exp_avg_sq)

    return step


# ------------------------------------------------------------------ the gradient scaler


def _unscale(tensors: List[Any], found_inf: Any, inv_scale: Any) -> None:
    for tensor in tensors:
        if not bool(tensor.isfinite().all()):
            found_inf.fill_(1.0)
        tensor.mul_(inv_scale)


def _update_scale(
    scale: Any,
    growth_tracker: Any,
    found_inf: Any,
    growth_factor: float,
    backoff_factor: float,
    interval: int,
) -> Any:
    torch = _torch()
    if bool(found_inf.item()):
        scale.mul_(backoff_factor)
        growth_tracker.fill_(0)
        return scale
    successful = int(growth_tracker.item()) + 1
    if successful == interval:
        grown = (scale * growth_factor).to(torch.float32)
        if bool(grown.isfinite().all()):
            scale.copy_(grown)
        growth_tracker.fill_(0)
    else:
        growth_tracker.fill_(successful)
    return scale


# ------------------------------------------------------------------ the rest


def _masked_scale(tensor: Any, mask: Any, scale: float) -> Any:
    return tensor * mask * scale


def _depthwise(
    tensor: Any, weight: Any, kernel_size: Any, bias: Any, stride: Any, padding: Any, dilation: Any
) -> Any:
    torch = _torch()
    groups = tensor.size(1)
    return torch.nn.functional.conv2d(
        tensor, weight, bias, list(stride), list(padding), list(dilation), groups
    )


def _depthwise_out(*args: Any, out: Any) -> Any:
    result = _depthwise(*args)
    out.resize_(result.shape).copy_(result)
    return out


def _record_stream(tensor: Any, stream: Any) -> None:
    """Kernels run synchronously on the simulated NPU: no stream to record memory on."""


def _out_dtype(name: str, with_out: bool) -> Callable[..., Any]:
    """``mm.dtype`` and its kin: the product in ``out_dtype`` (a half-precision product accumulated
    in float32, as the device kernel accumulates)."""

    def kernel(*args: Any, out: Any = None, **scalars: Any) -> Any:
        torch = _torch()
        *tensors, out_dtype = args
        result = getattr(torch, name)(*(t.to(out_dtype) for t in tensors), **scalars)
        if not with_out:
            return result
        out.resize_(result.shape).copy_(result)
        return out

    return kernel


def kernels() -> Dict[str, Callable[..., Any]]:
    """Op name (as the tables write it) -> its CPU kernel."""
    table: Dict[str, Callable[..., Any]] = {
        "_thnn_fused_lstm_cell": _lstm_cell,
        "_thnn_fused_lstm_cell_backward_impl": _lstm_cell_backward_impl,
        "_thnn_fused_gru_cell": _gru_cell,
        "_thnn_fused_gru_cell_backward": _gru_cell_backward,
        "_fused_adam_": _adam_step(adamw=False),
        "_fused_adam_.tensor_lr": _adam_step(adamw=False),
        "_fused_adamw_": _adam_step(adamw=True),
        "_fused_adamw_.tensor_lr": _adam_step(adamw=True),
        "_amp_foreach_non_finite_check_and_unscale_": _unscale,
        "_amp_update_scale_": _update_scale,
        "_masked_scale": _masked_scale,
        "_conv_depthwise2d": _depthwise,
        "_conv_depthwise2d.out": _depthwise_out,
        "record_stream": _record_stream,
    }
    for name in ("mm", "bmm", "addmm", "baddbmm"):
        table[f"{name}.dtype"] = _out_dtype(name, with_out=False)
        table[f"{name}.dtype_out"] = _out_dtype(name, with_out=True)
    return table


def _exists(torch: Any, name: str) -> bool:
    base, _, overload = name.partition(".")
    try:
        torch._C._get_schema(f"aten::{base}", overload)
    except RuntimeError:
        return False
    return True


def missing_cpu_kernels(torch: Any, ops: Any) -> List[str]:
    """The ops among ``ops`` (names as the tables write them) that this torch defines without a CPU
    kernel: neither its own nor one PyTorch builds out of other ops."""
    return sorted(
        name
        for name in ops
        if _exists(torch, name)
        and not torch._C._dispatch_has_computed_kernel_for_dispatch_key(f"aten::{name}", "CPU")
    )


def register(torch: Any) -> List[str]:
    """Give every op of :func:`kernels` that this torch defines without a CPU kernel the one here;
    returns their names. Once per process (the simulator calls it when it enables a table)."""
    if _LIBRARIES:
        return []
    table = kernels()
    missing = missing_cpu_kernels(torch, table)
    library = torch.library.Library("aten", "IMPL")
    for name in missing:
        library.impl(name, table[name], "CPU")
    _LIBRARIES.append(library)
    return missing
