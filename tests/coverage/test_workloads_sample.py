"""The CI sample of the coverage matrix's workloads beyond text generation:
``tools/coverage_matrix.py run --suite workloads --sample`` in this environment.

Runs only in ``tox -e torch-2.3.1`` (``ASCEND_ENV_COVERAGE=1``; torch 2.3.1, torchvision 0.18.1,
transformers 4.57.6): a Faster R-CNN detection, ``nn.TransformerEncoder`` in eval, istft with its
gradient, a Qwen2-VL forward and 4-bit unpacking, under ``audit`` on torch_npu 2.2.0's table, before
install and after it (in a scratch copy of transformers). The outputs must equal the CPU's; before
install each workload falls back on exactly the ops measured; after install exactly those without a
kernel in the fix registry still do (shown on the page), and the committed docs/coverage.json must
agree.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import coverage_beyond  # noqa: E402
import coverage_matrix  # noqa: E402

pytestmark = pytest.mark.skipif(
    os.environ.get("ASCEND_ENV_COVERAGE") != "1", reason="the coverage sample runs in tox -e torch-2.3.1"
)

# What each workload of the sample falls back on before install, on torch_npu 2.2.0's table (as
# measured; Qwen2-VL's vision tower calls repeat_interleave.self_Tensor, which 2.2.0 lists).
EXPECTED_BEFORE = {
    "faster_rcnn": {"torchvision::nms", "torchvision::roi_align"},
    "transformer_encoder": {"aten::_transformer_encoder_layer_fwd"},
    "istft": {"aten::_fft_c2r", "aten::_fft_r2c", "aten::unfold_backward"},
    "qwen2_vl": set(),
    "unpack_4bit": {"aten::bitwise_left_shift.Tensor_out", "aten::bitwise_right_shift.Tensor_out"},
}


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Dict[str, Any]:
    data = tmp_path_factory.mktemp("coverage") / "coverage.json"
    command = [sys.executable, str(ROOT / "tools" / "coverage_matrix.py"), "run", "--suite", "workloads"]
    done = subprocess.run(
        command + ["--sample", "--data", str(data)], capture_output=True, text=True, timeout=1800
    )
    assert data.is_file(), done.stderr[-3000:]
    (record,) = coverage_matrix.load(data)["runs"].values()
    return {"returncode": done.returncode, "stdout": done.stdout, "record": record}


def test_outputs_match_the_cpu_and_no_fixed_op_falls_back_after_install(sample):
    assert coverage_matrix.problems(sample["record"]) == []
    assert sample["returncode"] == 0, sample["stdout"]
    assert sorted(sample["record"]["phases"]["before"]) == sorted(coverage_beyond.SAMPLE)


def test_before_install_each_workload_falls_back_and_after_only_the_unfixed_ops(sample):
    record = sample["record"]
    fixed = coverage_matrix.fixed_ops(record["table"])
    for name, ops in EXPECTED_BEFORE.items():
        before = set(record["phases"]["before"][name]["fallbacks"])
        assert before == ops, (name, before)
        after = set(record["phases"]["after"][name]["fallbacks"])
        assert after == {op for op in before if op not in fixed}, (name, after)


def test_the_committed_data_agrees(sample):
    record = sample["record"]
    committed = coverage_matrix.load(coverage_matrix.DATA)["runs"].get(coverage_matrix.key(record))
    assert committed is not None, f"docs/coverage.json has no run for {coverage_matrix.key(record)}"
    for phase, archs in record["phases"].items():
        for name, arch in archs.items():
            known = committed["phases"][phase][name]
            assert sorted(arch["fallbacks"]) == sorted(known["fallbacks"]), (phase, name)
            assert arch["strategies"] == known["strategies"], (phase, name)
