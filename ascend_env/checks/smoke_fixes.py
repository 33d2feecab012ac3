"""The smoke test's check of one fix of the registry: each of its smoke samples on the device
against the CPU (``python -m ascend_env.checks.smoke`` runs it per fix; ``kernels/registry/``
declares the samples)."""

from __future__ import annotations

import importlib
from typing import Any, Dict, List, Optional, Tuple

from ascend_env.checks.smoke_report import OverloadResult, StepResult
from ascend_env.kernels.registry import Fix, Sample

__all__ = ["check_fix"]


def _tensors(torch: Any, value: Any, device: str) -> Any:
    """A smoke sample's argument: a tensor on ``device`` for a :class:`~ascend_env.kernels.registry.T`."""
    from ascend_env.kernels.registry import T

    if isinstance(value, T):
        return torch.tensor(value.values, dtype=getattr(torch, value.dtype), device=device)
    if isinstance(value, (tuple, list)):  # a Tensor[] argument
        return [_tensors(torch, item, device) for item in value]
    return value


_CPU_KEYS = ("CPU", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


def _call(torch: Any, fix: Fix, sample: Sample, device: str, reference: Any = None) -> Tuple[Any, Any]:
    """Run ``sample`` of ``fix`` on ``device`` (through ``reference`` instead of the op where given):
    the result and the ``out=`` tensor (or None)."""
    name, _, overload = sample.overload.partition(".")
    packet = getattr(getattr(torch.ops, fix.namespace), name)
    call = reference if reference is not None else getattr(packet, overload or "default")
    args = [_tensors(torch, value, device) for value in sample.args]
    kwargs = {key: _tensors(torch, value, device) for key, value in sample.kwargs}
    outs = []
    for keyword, dtype in sample.out_keywords:
        shape = (0,) if sample.out_shape is None else sample.out_shape
        outs.append(torch.empty(shape, dtype=getattr(torch, dtype), device=device))
        kwargs[keyword] = outs[-1]
    got = call(*args, **kwargs)
    if got is None or (
        isinstance(got, tuple) and not got
    ):  # an in-place op that returns nothing (_fused_adamw_): its arguments
        flat = [x for arg in args for x in (arg if isinstance(arg, list) else [arg])]
        got = [x for x in flat if isinstance(x, torch.Tensor)]
    return got, outs


def _results(got: Any) -> List[Any]:
    """A call's tensors: none (``_assert_async``), one, or a tuple's."""
    return [] if got is None else list(got) if isinstance(got, (tuple, list)) else [got]


def _same(torch: Any, got: Any, expected: Any, sample: Sample) -> bool:
    """Whether ``got`` (on the CPU) is ``expected``, tensor by tensor, within the sample's tolerance."""
    got, expected = _results(got), _results(expected)
    return len(got) == len(expected) and all(_same_tensor(torch, a, b, sample) for a, b in zip(got, expected))


def _same_tensor(torch: Any, got: Any, expected: Any, sample: Sample) -> bool:
    if got.dtype != expected.dtype or got.shape != expected.shape:
        return False
    if sample.atol == 0 and sample.rtol == 0:
        return bool(torch.equal(got, expected))
    return bool(torch.allclose(got, expected, sample.rtol, sample.atol, equal_nan=True))


def _reference(path: str) -> Any:
    """The function ``"module:function"`` names."""
    module, _, function = path.partition(":")
    return getattr(importlib.import_module(module), function)


def _import_required(name: str) -> Optional[str]:
    """Import ``name``, the module that defines the fix's op (the hook hears of it); why the fix
    cannot be tried when it does not import, else None."""
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            return f"{name} is not installed: its ops do not exist"
        return f"{name} does not import ({type(exc).__name__}: {exc})"
    except Exception as exc:  # a build for another torch or device (a CUDA torchvision): not ours to judge
        return f"{name} does not import ({type(exc).__name__}: {exc})"
    return None


def check_fix(torch: Any, fix: Fix, device: str) -> StepResult:
    """Each smoke sample of ``fix`` on ``device`` against the CPU: ``{overload: {"ok", "error"}}``.

    An ``out=`` overload must return its ``out`` tensor; the result, brought back to the CPU, must
    equal the CPU's (within the sample's tolerance), or the sample's reference's where this torch's
    CPU has no kernel for the op (without one the fix is skipped). A fix whose op another module defines
    (``requires``: torchvision) is not tried where that module does not import: ``skipped`` says
    why."""
    if fix.requires is not None:
        skipped = _import_required(fix.requires)
        if skipped is not None:  # not tried, and why: never a failure, never a silent pass
            return {"overloads": {}, "skipped": skipped}
    # torch < 2.4 has no CPU kernel for _fused_adamw_: a sample's reference answers for it
    no_cpu = [
        op.qualified_name
        for op in fix.ops
        if not any(
            torch._C._dispatch_has_kernel_for_dispatch_key(op.qualified_name, key) for key in _CPU_KEYS
        )
    ]
    if no_cpu and not all(sample.reference for sample in fix.smoke):
        return {"overloads": {}, "skipped": f"this torch's CPU has no kernel for {no_cpu[0]}"}
    results: Dict[str, OverloadResult] = {}
    for sample in fix.smoke:
        try:
            reference = _reference(sample.reference) if no_cpu and sample.reference else None
            expected, _ = _call(torch, fix, sample, "cpu", reference)
            got, outs = _call(torch, fix, sample, device)
            tensors = _results(got)
            error = None
            if any(tensor.device.type != torch.device(device).type for tensor in tensors):
                error = f"the result is on {[str(tensor.device) for tensor in tensors]}, not {device}"
            elif outs and [t.data_ptr() for t in tensors] != [t.data_ptr() for t in outs]:
                error = "the result is not the out= tensor"
            elif not _same(torch, tuple(tensor.cpu() for tensor in tensors), expected, sample):
                mine = [tensor.cpu().tolist() for tensor in tensors]
                error = f"{mine} differs from the CPU's {[tensor.tolist() for tensor in _results(expected)]}"
        except Exception as exc:  # a fallback refused by TORCH_NPU_FALLBACK_CPU_DISABLE, or a bug
            error = f"{type(exc).__name__}: {exc}"
        results[sample.overload] = {"ok": error is None, "error": error}
    return {"overloads": results}
