"""The coverage matrix's CI sample: ``tools/coverage_matrix.py run --sample`` in this environment.

Runs only in ``tox -e torch-2.3.1`` (``ASCEND_ENV_COVERAGE=1``; torch 2.3.1, transformers 4.57.6):
it runs generation under ``audit`` twice (before install, and after install in a scratch copy of
transformers) on torch_npu 2.2.0's op table. Nothing may fall back after install, the NPU tokens
must equal the CPU's, the run before install must fall back (on isin everywhere, on polar where the
rotary embedding calls ``torch.polar``), and every cell it shares with the committed
docs/coverage.json must agree.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import coverage_matrix  # noqa: E402

pytestmark = pytest.mark.skipif(
    os.environ.get("ASCEND_ENV_COVERAGE") != "1", reason="the coverage sample runs in tox -e torch-2.3.1"
)


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Dict[str, Any]:
    data = tmp_path_factory.mktemp("coverage") / "coverage.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "coverage_matrix.py"), "run", "--sample", "--data", str(data)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert data.is_file(), done.stderr[-3000:]
    (record,) = coverage_matrix.load(data)["runs"].values()
    return {"returncode": done.returncode, "stdout": done.stdout, "record": record}


def test_nothing_falls_back_after_install_and_tokens_match(sample):
    assert coverage_matrix.problems(sample["record"]) == []
    assert sample["returncode"] == 0, sample["stdout"]


def test_before_install_the_sample_falls_back(sample):
    before = sample["record"]["phases"]["before"]
    built = {name: arch for name, arch in before.items() if not arch["error"]}
    assert set(built) >= {"llama", "llama4_text", "deepseek_v2"}, before
    for name, arch in built.items():
        assert "aten::isin.Tensor_Tensor_out" in arch["fallbacks"], name
    for name in ("llama4_text", "deepseek_v2"):
        assert "aten::polar.out" in built[name]["fallbacks"]
    assert "aten::polar.out" not in built["llama"]["fallbacks"]


def test_the_committed_data_agrees(sample):
    record = sample["record"]
    committed = coverage_matrix.load(coverage_matrix.DATA)["runs"].get(coverage_matrix.key(record))
    assert committed is not None, f"docs/coverage.json has no run for {coverage_matrix.key(record)}"
    for phase, archs in record["phases"].items():
        for name, arch in archs.items():
            known = committed["phases"][phase].get(name)
            if known is None:
                continue
            assert sorted(arch["fallbacks"]) == sorted(known["fallbacks"]), (phase, name)
            for strategy, status in arch["strategies"].items():
                if strategy in known["strategies"]:
                    assert status == known["strategies"][strategy], (phase, name, strategy)
    json.dumps(record)
