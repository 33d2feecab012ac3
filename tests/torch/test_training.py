"""Real training scripts under ``audit``: the CPU's losses and weights, and nothing falls back once
``install`` put the startup hook (the isin fallback without it: the audit must fail then)."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest
import torch
from conftest import TESTS_TORCH
from test_hook import hooked_env  # noqa: F401 - the hook fixture, shared

SCRIPTS = Path(TESTS_TORCH) / "training"
ISIN_OUT = "aten::isin.Tensor_Tensor_out"
SILENCERS = (
    "RANK",
    "TORCH_NPU_DISABLED_WARNING",
    "TORCH_NPU_WARNING_DISABLE",
    "TORCH_CPP_LOG_LEVEL",
    "ASCEND_ENV_DISABLE",
)
# The release of torch_npu that pins this torch and has no NPU isin; 2.1.0.post6 elsewhere.
TABLE = {"2.2": "2.2.0", "2.3": "2.3.1"}.get(".".join(torch.__version__.split(".")[:2]), "2.1.0.post6")


def audited(python: Path, script: Path, out: Path, *args: str, **env: str) -> Dict[str, Any]:
    """``python -m ascend_env audit --json --torch-npu TABLE -- python script ... out``: its report."""
    environ = {k: v for k, v in os.environ.items() if k not in SILENCERS}
    environ.update(env)
    result = subprocess.run(
        [
            str(python),
            "-m",
            "ascend_env",
            "audit",
            "--json",
            "--torch-npu",
            TABLE,
            "--",
            str(python),
            str(script),
            *args,
            str(out),
        ],
        capture_output=True,
        text=True,
        env=environ,
        cwd=str(out.parent),
        timeout=600,
    )
    assert result.stdout, result.stderr
    report = json.loads(result.stdout)
    assert report["returncode"] == 0, result.stderr[-3000:]
    report["exit"] = result.returncode
    return report


def assert_same_training(got: Dict[str, Any], expected: Dict[str, Any]) -> None:
    assert len(got["losses"]) == len(expected["losses"]) > 0
    torch.testing.assert_close(torch.tensor(got["losses"]), torch.tensor(expected["losses"]))
    assert sorted(got["weights"]) == sorted(expected["weights"])
    for name, weight in expected["weights"].items():
        torch.testing.assert_close(got["weights"][name], weight, msg=lambda m, name=name: f"{name}: {m}")
    # Every trained weight moved on the CPU, so weights left where they started would not compare.
    initial = expected["initial"]
    still = [name for name, weight in expected["weights"].items() if torch.equal(weight, initial[name])]
    assert not still, still


@pytest.fixture(scope="module")
def sft_on_cpu(npu) -> Dict[str, Any]:
    # After the npu fixture: PyTorch's autograd engine learns of the npu device at the first backward.
    namespace = runpy.run_path(str(SCRIPTS / "sft_llama.py"))
    return namespace["train"]("cpu")


def test_llama_fine_tuning_under_audit_gives_the_cpus_losses_and_weights(hooked_env, tmp_path, sft_on_cpu):  # noqa: F811
    out = tmp_path / "npu.pt"
    report = audited(hooked_env, SCRIPTS / "sft_llama.py", out, "npu")
    assert report["fallbacks"] == {} and report["exit"] == 0, report
    assert report["processes"] == 3  # the script and its two DataLoader workers
    assert_same_training(torch.load(out), sft_on_cpu)
    assert sft_on_cpu["grad_norms"] == pytest.approx(torch.load(out)["grad_norms"], rel=1e-4)


def test_llama_fine_tuning_without_the_hook_fails_the_audit_on_isin(hooked_env, tmp_path, sft_on_cpu):  # noqa: F811
    out = tmp_path / "npu.pt"
    report = audited(hooked_env, SCRIPTS / "sft_llama.py", out, "npu", ASCEND_ENV_DISABLE="1")
    assert report["exit"] == 1 and report["ok"] is False
    assert report["fallbacks"] == {ISIN_OUT: 6}, report  # one isin per micro-batch
    assert_same_training(torch.load(out), sft_on_cpu)


def _cuda_loop_on_cpu(tmp_path: Path) -> Dict[str, Any]:
    """The CUDA-written loop with "cuda" read as "cpu" and no transfer_to_npu: the CPU's run."""
    source = (SCRIPTS / "cuda_loop.py").read_text()
    port = "from torch_npu.contrib import transfer_to_npu  # noqa: F401 - the one line the port adds\n"
    assert port in source
    cpu_source = (
        source.replace(port, "")
        .replace(".cuda()", ".cpu()")
        .replace('"cuda"', '"cpu"')
        .replace("torch.cuda.", "torch.cpu.")
    )
    script = tmp_path / "cpu_loop.py"
    script.write_text(cpu_source)
    out = tmp_path / "cpu.pt"
    result = subprocess.run(
        [sys.executable, str(script), str(out)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return torch.load(out)


def test_a_cuda_written_loop_through_transfer_to_npu_gives_the_cpus_training(hooked_env, tmp_path):  # noqa: F811
    out = tmp_path / "npu.pt"
    report = audited(hooked_env, SCRIPTS / "cuda_loop.py", out)
    assert report["fallbacks"] == {} and report["exit"] == 0, report
    got = torch.load(out)
    assert got["device"] == "npu:0"
    assert_same_training(got, _cuda_loop_on_cpu(tmp_path))
