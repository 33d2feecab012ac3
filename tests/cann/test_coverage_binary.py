"""A sample of the coverage matrix on the real torch_npu binary (the emulated CANN): three tiny
architectures from configs (GPT-2, Mixtral's routed experts, T5's encoder-decoder) and three
decoding strategies (greedy with two EOS tokens, beam search with a length penalty, repetition
penalty with no-repeat n-grams), each strategy's tokens on the npu device against the CPU's.

For each torch_npu wheel of $ASCEND_ENV_TORCH_NPU_WHEELS that fits this Python and torch: before
install, the binary's own CAUTION lines name exactly the ops the simulator says fall back
for the same command and release, and its tokens equal the CPU's on both of its dispatch paths
(910B: aclnn; 910A: JIT compile on, aclopCompileAndExecute). After ``install --hook-only``
nothing falls back and the tokens still equal the CPU's. The command runs under ``audit`` as a
user's would; an entry point the emulated CANN lacks makes the run "not proven" and the test fail.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, Tuple

import pytest
from emulated_e2e import ascend_env, lacks_isin, make_env, site_of, wheel_params

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="torch_npu's wheels are for Linux")

HERE = Path(__file__).resolve().parent
ARCHS = "gpt2,mixtral,t5"
STRATEGIES = "greedy_2eos,beam_length_penalty,repetition_ngram"


def run(python: Path, tmp_path: Path, name: str, *audit: str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The probe under ``audit AUDIT``: the audit's report and the probe's cells."""
    cells, report = tmp_path / f"{name}-cells.json", tmp_path / f"{name}-report.json"
    done = ascend_env(
        python,
        "audit",
        *audit,
        "--report",
        str(report),
        "--",
        str(python),
        str(HERE / "coverage_probe.py"),
        ARCHS,
        STRATEGIES,
        str(cells),
        cwd=tmp_path,
    )
    assert cells.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    found = json.loads(report.read_text())
    assert found["returncode"] == 0 and not found.get("not_proven"), (
        found.get("not_proven") or done.stderr[-3000:]
    )
    return found, json.loads(cells.read_text())


def all_same(cells: Dict[str, Any]) -> None:
    wrong = {(arch, s): v for arch, row in cells.items() for s, v in row.items() if v != "same"}
    assert wrong == {} and len(cells) == 3, wrong


@pytest.mark.parametrize("wheel", wheel_params())
def test_coverage_sample_binary_against_the_simulator_before_and_after_install(
    tmp_path: Path, wheel: Path
) -> None:
    release = wheel.name.split("-")[1]
    binary = ("--cann", "emulated", "--torch-npu-wheel", str(wheel))
    model, cells = run(Path(sys.executable), tmp_path, "sim", "--torch-npu", release)
    all_same(cells)
    expected = set(model["fallbacks"])
    # generation reaches isin: it falls back exactly where the release lacks it
    assert ("aten::isin.Tensor_Tensor_out" in expected) is lacks_isin(release), expected
    for soc in ("910B1", "910A"):
        before, cells = run(Path(sys.executable), tmp_path, f"before-{soc}", *binary, "--soc", soc)
        assert set(before["fallbacks"]) == expected, (soc, before["fallbacks"], model["fallbacks"])
        all_same(cells)
        counters = before["cann"]
        # the two dispatch paths: aclnn kernels on 910B, online-compiled aclop ops on 910A
        assert (soc == "910A") == bool(counters.get("aclop_compile")), (soc, sorted(counters))

    python = make_env(tmp_path / "env")
    installed = ascend_env(python, "install", "--hook-only", "--target", str(site_of(python)), cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr
    after, cells = run(python, tmp_path, "after", *binary)
    assert after["fallbacks"] == {} and after["ok"] is True, after["fallbacks"]
    all_same(cells)
