"""PyTorch's OpInfo samples on the simulated NPU against the CPU, forward and backward.

Run in a process of its own (one op table per process)::

    python tests/opinfo/opinfo_sweep.py --table 2.1.0.post6 [--dtype complex64] [--ops a,b]
        [--shard I/N] [--samples 3]

For every OpInfo of ``torch.testing._internal.common_methods_invocations.op_db`` that supports
autograd and the dtype on the CPU (or the ``--ops`` named), up to ``--samples`` sample inputs: the
op on the CPU and on ``npu`` (the sample's tensors copied to each, the same random seed), outputs compared
with ``torch.testing.assert_close`` at its default tolerances for the dtype; then the gradients of
the inputs for a fixed random cotangent, compared the same way. A sample the CPU itself cannot run
(forward or backward) is left out. Each op's outcome is printed as one JSON line on stdout, as soon
as it is known: ``{"op": ..., "outcome": ..., "detail": ..., "fallbacks": [...], "samples": n}``.
A line ``{"start": op}`` comes before each op, so that a caller can tell which op a crash hit.

Outcomes: ``same``; ``cpu-fails`` (no sample runs on the CPU); ``forward-raises``,
``forward-differs``, ``output-on-cpu`` (an output tensor not on npu), ``not-differentiable`` (an
output the CPU can differentiate has no gradient on npu), ``backward-raises``, ``grad-none`` (a
gradient None on npu, not on the CPU), ``grad-differs``, ``grad-on-cpu``. ``fallbacks`` lists the
ops that fell back while the op ran on npu (forward and backward).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import types
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

COTANGENT_SEED = 1234
OP_SEED = 5678


class Difference(Exception):
    """The npu disagrees with the CPU on a sample: ``outcome`` says how."""

    def __init__(self, outcome: str, detail: str) -> None:
        super().__init__(f"{outcome}: {detail}")
        self.outcome = outcome
        self.detail = detail


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def _flatten(value: Any) -> List[Any]:
    from torch.utils._pytree import tree_flatten

    return list(tree_flatten(value)[0])


def _copied(value: Any, memo: Dict[int, Any], device: str) -> Any:
    """``value`` with each tensor copied to ``device`` as a leaf of its own that requires grad where
    the original does (the same tensor twice: the same copy). The CPU runs on copies too, made the
    same way, so that both sides start from the same inputs (a sample's partial views and in-place
    history stay behind). On npu each device argument naming the CPU (``x.to("cpu")``) names npu."""
    import torch
    from torch.utils._pytree import tree_map

    def move(item: Any) -> Any:
        if device == "npu" and isinstance(item, torch.device) and item.type == "cpu":
            return torch.device("npu")
        if device == "npu" and isinstance(item, str) and item == "cpu":
            return "npu"
        if not isinstance(item, torch.Tensor):
            return item
        if id(item) not in memo:
            copy = item.detach().clone() if device == "cpu" else item.detach().to(device)
            if item.requires_grad:
                copy.requires_grad_()
            memo[id(item)] = copy
        return memo[id(item)]

    return tree_map(move, value)


def _compare(npu: Sequence[Any], cpu: Sequence[Any], what: str) -> None:
    """Raise :class:`Difference` unless ``npu`` (on npu) equals ``cpu`` element by element."""
    import torch

    if len(npu) != len(cpu):
        raise Difference(f"{what}-differs", f"{len(npu)} values on npu, {len(cpu)} on the CPU")
    for index, (a, b) in enumerate(zip(npu, cpu)):
        if isinstance(b, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise Difference(f"{what}-differs", f"#{index}: {type(a).__name__} on npu, a tensor on CPU")
            if b.device.type == "cpu" and a.device.type != "npu" and b.numel() > 0:
                raise Difference(
                    f"{'output' if what == 'forward' else 'grad'}-on-cpu", f"#{index} is on {a.device}"
                )
            try:
                torch.testing.assert_close(a.cpu(), b, equal_nan=True)
            except AssertionError as exc:
                raise Difference(f"{what}-differs", f"#{index}: {' '.join(str(exc).split())[:300]}") from None
        elif isinstance(a, torch.Tensor) or (a != b and not (a != a and b != b)):
            raise Difference(f"{what}-differs", f"#{index}: {a!r} on npu, {b!r} on the CPU")


def _grad_targets(sample: Any) -> List[Any]:
    import torch

    leaves = _flatten([sample.input, sample.args, sample.kwargs])
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]


def _outputs_needing_grad(out: Any) -> List[Tuple[int, Any]]:
    import torch

    return [
        (i, t)
        for i, t in enumerate(_flatten(out))
        if isinstance(t, torch.Tensor) and t.requires_grad and (t.is_floating_point() or t.is_complex())
    ]


def _run(op: Any, sample: Any, memo: Dict[int, Any], device: str) -> Any:
    """The op's output on ``device``, on copies of the sample's tensors (``memo`` maps them)."""
    import torch

    first, args, kwargs = (_copied(part, memo, device) for part in (sample.input, sample.args, sample.kwargs))
    torch.manual_seed(OP_SEED)
    return op(first, *args, **kwargs)


def check_sample(op: Any, sample: Any) -> bool:
    """Compare one sample; False when the CPU cannot run it. Raises :class:`Difference`."""
    import torch

    targets = _grad_targets(sample)
    cpu_memo: Dict[int, Any] = {}
    try:
        cpu_out = _run(op, sample, cpu_memo, "cpu")
        cpu_outs = _outputs_needing_grad(sample.output_process_fn_grad(cpu_out))
        cpu_inputs = [cpu_memo[id(t)] for t in targets]
        generator = torch.Generator().manual_seed(COTANGENT_SEED)
        cotangents = [torch.randn(t.shape, dtype=t.dtype, generator=generator) for _, t in cpu_outs]
        cpu_grads = (
            torch.autograd.grad([t for _, t in cpu_outs], cpu_inputs, cotangents, allow_unused=True)
            if cpu_outs and cpu_inputs
            else ()
        )
    except Exception:  # noqa: BLE001 - a sample the CPU rejects says nothing about the npu
        return False
    npu_memo: Dict[int, Any] = {}
    try:
        npu_out = _run(op, sample, npu_memo, "npu")
    except Exception as exc:  # noqa: BLE001
        raise Difference("forward-raises", _first_line(exc)) from None
    _compare(_flatten(npu_out), _flatten(cpu_out), "forward")
    if not cpu_grads:
        return True
    npu_flat = _flatten(sample.output_process_fn_grad(npu_out))
    npu_outs = []
    for index, _ in cpu_outs:
        tensor = npu_flat[index]
        if not tensor.requires_grad:
            raise Difference("not-differentiable", f"output #{index} has no grad_fn on npu")
        npu_outs.append(tensor)
    npu_inputs = [npu_memo[id(t)] for t in targets]
    try:
        npu_cotangents = [c.to("npu") for c in cotangents]
        npu_grads = torch.autograd.grad(npu_outs, npu_inputs, npu_cotangents, allow_unused=True)
    except Exception as exc:  # noqa: BLE001
        raise Difference("backward-raises", _first_line(exc)) from None
    for index, (a, b) in enumerate(zip(npu_grads, cpu_grads)):
        if (a is None) != (b is None):
            raise Difference("grad-none", f"input #{index}: {'None' if a is None else 'a tensor'} on npu")
    pairs = [(a, b) for a, b in zip(npu_grads, cpu_grads) if b is not None]
    _compare([a for a, _ in pairs], [b for _, b in pairs], "grad")
    return True


def check_op(op: Any, dtype: Any, samples: int) -> Dict[str, Any]:
    """The outcome of one OpInfo (the first difference among its samples)."""
    from ascend_env import sim

    sim.reset()
    ran = 0
    outcome: Dict[str, Any] = {"outcome": "same", "detail": ""}
    try:
        for sample in _samples(op, dtype, samples):
            if check_sample(op, sample):
                ran += 1
    except Difference as diff:
        outcome = {"outcome": diff.outcome, "detail": diff.detail}
        ran += 1
    except Exception as exc:  # noqa: BLE001 - making the samples failed: the CPU's side
        outcome = {"outcome": "cpu-fails", "detail": _first_line(exc)}
    if ran == 0 and outcome["outcome"] == "same":
        outcome = {"outcome": "cpu-fails", "detail": "no sample runs on the CPU"}
    outcome["fallbacks"] = sorted(sim.fallbacks())
    outcome["samples"] = ran
    return outcome


def _samples(op: Any, dtype: Any, count: int) -> Iterator[Any]:
    produced = 0
    for sample in op.sample_inputs("cpu", dtype, requires_grad=True):
        if produced == count:
            return
        produced += 1
        yield sample


def opinfo_name(op: Any) -> str:
    """``name`` or ``name.variant``, as PyTorch's test names spell an OpInfo."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def selected(dtype: Any, names: Optional[Sequence[str]]) -> List[Any]:
    """The OpInfos to sweep, in ``op_db`` order."""
    from torch.testing._internal.common_methods_invocations import op_db

    chosen = []
    for op in op_db:
        name = opinfo_name(op)
        if names is not None:
            if name in names:
                chosen.append(op)
        elif op.supports_autograd and dtype in op.supported_dtypes("cpu"):
            chosen.append(op)
    return chosen


def _install_expecttest_stand_in() -> None:
    """torch's test helpers import ``expecttest`` for a TestCase base class the sweep never uses;
    where it is not installed a stand-in module serves (nothing here compares expect files)."""
    try:
        import expecttest  # noqa: F401
    except ImportError:
        import unittest

        module = types.ModuleType("expecttest")
        module.TestCase = unittest.TestCase  # type: ignore[attr-defined]
        module.ACCEPT = False  # type: ignore[attr-defined]
        sys.modules["expecttest"] = module


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True, help="the torch_npu release whose op table the npu runs")
    parser.add_argument("--dtype", default="float32", choices=("float32", "complex64"))
    parser.add_argument("--ops", help="comma-separated OpInfo names (default: all that support autograd)")
    parser.add_argument("--shard", default="0/1", help="I/N: only every N-th OpInfo, from the I-th (0-based)")
    parser.add_argument("--after", help="start after this OpInfo (resuming after a crash)")
    parser.add_argument("--samples", type=int, default=3)
    options = parser.parse_args(argv)

    os.environ.setdefault("TORCH_NPU_WARNING_DISABLE", "1")
    warnings.simplefilter("ignore")
    _install_expecttest_stand_in()
    import torch

    from ascend_env import sim

    sim.enable(options.table)
    torch.set_default_dtype(torch.float32)
    dtype = getattr(torch, options.dtype)
    ops = selected(dtype, options.ops.split(",") if options.ops else None)
    index, count = (int(part) for part in options.shard.split("/"))
    ops = ops[index::count]
    if options.after:
        names = [opinfo_name(op) for op in ops]
        ops = ops[names.index(options.after) + 1 :] if options.after in names else ops
    emit: Callable[[Dict[str, Any]], None] = lambda record: print(json.dumps(record), flush=True)  # noqa: E731
    for op in ops:
        name = opinfo_name(op)
        emit({"start": name})
        emit({"op": name, **check_op(op, dtype, options.samples)})
    emit({"done": True, "torch": torch.__version__, "table": sim.enabled_table()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
