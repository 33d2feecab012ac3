"""PyTorch's OpInfo samples, forward and backward, on the simulated NPU against the CPU.

Each sweep (``opinfo_plan``) runs ``opinfo_sweep.py`` in a process of its own (one op table per
process); every OpInfo must give the CPU's outputs and gradients, or differ as
``opinfo_explained`` documents. The checker itself is tested first, on ops made to differ.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import opinfo_explained
import opinfo_plan
import opinfo_sweep
import pytest
import torch
from opinfo_sweep import Difference, check_sample

SWEEP = Path(opinfo_sweep.__file__).resolve()
ROOT = SWEEP.parents[2]
# A sweep that crashes is resumed after the OpInfo it crashed on, this many times at most.
RESTARTS = 5
SILENCERS = ("RANK", "TORCH_NPU_DISABLED_WARNING", "TORCH_NPU_WARNING_DISABLE", "TORCH_CPP_LOG_LEVEL")


def run_sweep(sweep: opinfo_plan.Sweep) -> List[Dict[str, Any]]:
    """The records of one sweep; an OpInfo that killed the process is recorded as ``crash``."""
    env = {k: v for k, v in os.environ.items() if k not in SILENCERS}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    records: List[Dict[str, Any]] = []
    after: List[str] = []
    for _ in range(RESTARTS + 1):
        command = [
            sys.executable,
            str(SWEEP),
            "--table",
            sweep.table,
            "--dtype",
            sweep.dtype,
            "--shard",
            f"{sweep.shard}/{sweep.shards}",
            "--samples",
            str(opinfo_plan.samples()),
            *after,
        ]
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
        lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
        records += [line for line in lines if "op" in line]
        if lines and lines[-1].get("done"):
            return records
        started = [line["start"] for line in lines if "start" in line]
        assert started, f"the sweep did not start (exit {result.returncode}):\n{result.stderr[-3000:]}"
        records.append({"op": started[-1], "outcome": "crash", "detail": result.stderr[-500:]})
        after = ["--after", started[-1]]
    raise AssertionError(f"the sweep crashed {RESTARTS + 1} times: {records[-RESTARTS:]}")


# ------------------------------------------------------------------ the checker, on ops made to differ


class _Sample:
    def __init__(self, *tensors: torch.Tensor) -> None:
        self.input, self.args, self.kwargs = tensors[0], tensors[1:], {}

    @staticmethod
    def output_process_fn_grad(out: Any) -> Any:
        return out


class _DoubleGradOnNpu(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 1

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * (2 if grad.device.type == "npu" else 1)


def _on_npu(t: torch.Tensor) -> bool:
    return t.device.type == "npu"


# outcome -> (how many inputs, an op that differs on npu that way)
CASES = {
    "forward-raises": (1, lambda x: torch.sin(x) if not _on_npu(x) else torch.ops.aten.no_such_op(x)),
    "forward-differs": (1, lambda x: torch.sin(x) + (1e-3 if _on_npu(x) else 0)),
    "output-on-cpu": (1, lambda x: torch.sin(x).cpu()),
    "not-differentiable": (1, lambda x: torch.sin(x.detach() if _on_npu(x) else x)),
    "grad-differs": (1, _DoubleGradOnNpu.apply),
    "grad-none": (2, lambda x, y: x * (y.detach() if _on_npu(y) else y)),
}


@pytest.fixture(scope="module")
def npu() -> str:
    from ascend_env import sim

    sim.enable("2.1.0.post6")
    return "npu"


def test_the_checker_passes_an_op_that_matches(npu):
    assert check_sample(torch.sin, _Sample(torch.randn(4, requires_grad=True)))
    pair = _Sample(torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True))
    assert check_sample(torch.mul, pair)


@pytest.mark.parametrize("outcome", sorted(CASES))
def test_the_checker_reports_each_way_to_differ(npu, outcome):
    count, op = CASES[outcome]
    with pytest.raises(Difference) as caught:
        check_sample(op, _Sample(*(torch.randn(4, requires_grad=True) for _ in range(count))))
    assert caught.value.outcome == outcome


def test_the_checker_leaves_out_what_the_cpu_cannot_run(npu):
    assert not check_sample(lambda x: torch.linalg.cholesky(-x.abs() - 1), _Sample(torch.randn(2, 2)))


# ------------------------------------------------------------------ the sweeps

SWEEPS = opinfo_plan.sweeps(torch.__version__)


@pytest.mark.parametrize("sweep", SWEEPS, ids=str)
def test_opinfo_samples_give_the_cpus_results_and_gradients(sweep):
    records = run_sweep(sweep)
    compared = [r for r in records if r["outcome"] != "cpu-fails"]
    # The sweep compared something: most OpInfos run on the CPU (a broken sample set would not).
    assert len(compared) >= 0.95 * len(records) > 0, [r for r in records if r["outcome"] == "cpu-fails"]
    unexplained = [
        f"{r['op']}: {r['outcome']}: {r['detail']}"
        for r in compared
        if r["outcome"] != "same" and not opinfo_explained.explains(r["op"], r["outcome"])
    ]
    assert not unexplained, "\n".join(unexplained)
