"""The real torch_npu binary, unchanged, on the emulated CANN (ascend_env/cann), against the CPU.

Each check runs in a fresh process (``python -m ascend_env.cann``: the libraries are loaded before
torch_npu is imported), with the newest torch_npu wheel of ``$ASCEND_ENV_TORCH_NPU_WHEELS`` that
lacks an NPU isin and fits this Python and torch, unpacked and first on its path (as ``audit
--torch-npu-wheel`` runs it: nothing installed). Skipped, saying why, where there is none.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest
from emulated_e2e import environment, fitting_wheel, lacks_isin


@functools.lru_cache(maxsize=None)
def unpacked() -> Path:
    """The wheel's directory, unpacked in the build cache (skips where no wheel fits)."""
    from ascend_env.checks import torch_npu_wheel

    return torch_npu_wheel.unpack(fitting_wheel())


def isin_falls_back() -> bool:
    """Whether the wheel's torch_npu lacks an NPU isin (then its own CPU fallback runs it)."""
    return lacks_isin(fitting_wheel().name.split("-")[1])


SCENARIO = Path(__file__).resolve().parent / "scenario.py"
ISIN_PROBE = Path(__file__).resolve().parent / "isin_probe.py"
CAUTION = "CAUTION: The operator 'aten::isin.Tensor_Tensor_out' is not currently supported"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="torch_npu's wheels are for Linux")


def run(args: List[str], env: Dict[str, str], timeout: int = 900) -> subprocess.CompletedProcess:
    path = os.pathsep.join(p for p in (str(unpacked()), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "ascend_env.cann", *args],
        capture_output=True,
        text=True,
        env=environment(**{**env, "PYTHONPATH": path}),
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One build cache for the module (the libraries are built once, by the first run)."""
    explicit = os.environ.get("ASCEND_ENV_CACHE_DIR")
    if explicit:
        return explicit
    directory = tmp_path_factory.mktemp("cache")
    directory.chmod(0o700)
    return str(directory)


@pytest.fixture(scope="module", params=["Ascend910B1", "Ascend910A"])
def scenario(request: pytest.FixtureRequest, cache: str) -> Dict[str, Any]:
    """The scenario's report on a 910B (JIT compile off: aclnn) and a 910A (on: aclop)."""
    result = run(["--soc", request.param, str(SCENARIO)], {"ASCEND_ENV_CACHE_DIR": cache})
    assert result.returncode == 0, result.stderr[-4000:]
    report: Dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    report["soc"] = request.param
    report["stderr"] = result.stderr
    return report


def aclnn_path(report: Dict[str, Any]) -> bool:
    return report["soc"] == "Ascend910B1"


def test_set_device_and_the_soc_default_compile_mode(scenario: Dict[str, Any]) -> None:
    # CANN's default: JIT compile off where the SoC is a 910B, on elsewhere.
    assert scenario["jit_compile"] is (not aclnn_path(scenario))


def test_isin_runs_the_binarys_own_cpu_fallback_once(scenario: Dict[str, Any]) -> None:
    assert scenario["isin"]["equal"] is True
    assert "unimplemented" not in scenario["isin"]["delta"]
    if isin_falls_back():
        assert scenario["stderr"].count(CAUTION) == 1  # two isin calls, one CAUTION line
        assert scenario["isin"]["delta"].get("aclnn", {}) == {}  # on the host, not through CANN
        assert scenario["isin"]["delta"].get("aclop", {}) == {}
    else:  # a release with an NPU isin (2.3.1.post2): its kernel runs through CANN
        assert CAUTION not in scenario["stderr"]
        assert scenario["isin"]["delta"].get("aclnn" if aclnn_path(scenario) else "aclop")


def test_a_floating_argument_is_decoded(scenario: Dict[str, Any]) -> None:
    layer_norm = scenario["layer_norm"]
    assert layer_norm["equal"] is True
    if aclnn_path(scenario):
        assert layer_norm["delta"]["aclnn"] == {"aclnnLayerNorm": 1}
    else:
        assert layer_norm["delta"]["aclop"] == {"LayerNorm": 1}


def test_scalar_isin_and_masked_selects_dynamic_shape(scenario: Dict[str, Any]) -> None:
    # aclnnIsInScalarTensor (a 0-dim out) and aclnnMaskedSelect, whose output shape the kernel
    # sets and torch_npu reads back with aclGetViewShape (one selecting nothing: shape [0]).
    check = scenario["scalar_isin_masked_select"]
    assert check["equal"] is True
    assert "unimplemented" not in check["delta"]
    if aclnn_path(scenario):
        assert check["delta"]["aclnn"] == {"aclnnIsInScalarTensor": 4, "aclnnMaskedSelect": 2}
    else:  # the shape comes back in the output descriptor (aclopCompileAndExecuteV2); isin with a
        # scalar element runs on the host there (op-plugin aclops/IsInKernelNpu.cpp, b761d58)
        assert check["delta"]["aclop"] == {"MaskedSelect": 2} and "aclnn" not in check["delta"]


def test_indexing_equals_the_cpu(scenario: Dict[str, Any]) -> None:
    # an empty index of another dtype than self is a real index (it writes nothing), not the
    # placeholder of a left-out dim: read as one, x[1, []] = -1 wrote the whole row and beam
    # search's tokens differed from the CPU's
    check = scenario["indexing"]
    assert check["equal"] == [True] * len(check["equal"]) and len(check["equal"]) == 13
    assert "unimplemented" not in check["delta"]


def test_mlp_training_step_equals_the_cpu(scenario: Dict[str, Any]) -> None:
    mlp = scenario["mlp"]
    assert mlp["equal"] is True and mlp["loss"][0] == pytest.approx(mlp["loss"][1], abs=1e-6)
    delta = mlp["delta"]
    assert "unimplemented" not in delta
    if aclnn_path(scenario):
        assert "aclop" not in delta
        assert {"aclnnAddmm", "aclnnLogSoftmax", "aclnnNLLLossBackward", "aclnnThresholdBackward"} <= set(
            delta["aclnn"]
        )
    else:
        assert "aclnn" not in delta
        assert {"MatMul", "LogSoftmaxV2", "NLLLossGrad", "ReluGrad"} <= set(delta["aclop"])
        # each aclop call is wrapped in ACL_OP_JIT_COMPILE enable ... disable
        assert delta["aclSetCompileopt"]["10=enable"] == delta["aclSetCompileopt"]["10=disable"] > 0


def test_tiny_llama_generate_gives_the_cpus_tokens(scenario: Dict[str, Any]) -> None:
    llama = scenario["llama"]
    assert llama["equal"] is True, (llama["tokens"], llama["expected"])
    assert "unimplemented" not in llama["delta"]
    steps = llama["steps"]
    assert len(steps) >= 3
    kind = "aclnn" if aclnn_path(scenario) else "aclop"
    other = "aclop" if aclnn_path(scenario) else "aclnn"
    assert all(sum(step.get(kind, {}).values()) > 0 and other not in step for step in steps)


def test_an_op_it_does_not_implement_fails_loudly_naming_it(cache: str, tmp_path: Path) -> None:
    script = tmp_path / "add.py"
    script.write_text(
        "import torch, torch_npu\n"
        "torch.npu.set_device(0)\n"
        "x = torch.ones(3).npu()\n"
        "print((x * 2).cpu().tolist())\n"
        "(x + x).cpu()\n",
        encoding="utf-8",
    )
    report = tmp_path / "report.json"
    result = run(
        ["--report", str(report), str(script)],
        {"ASCEND_ENV_CACHE_DIR": cache, "ASCEND_ENV_CANN_DISABLE": "aclnnAdd"},
    )
    message = "ascend-env emulated CANN: aclnnAddGetWorkspaceSize is not implemented"
    assert result.returncode != 0
    assert "[2.0, 2.0, 2.0]" in result.stdout  # the ops before it ran
    assert message in result.stderr
    counters = json.loads(report.read_text(encoding="utf-8"))["counters"]
    assert counters["unimplemented"] == {"aclnnAddGetWorkspaceSize": 1}
    assert counters["aclnn"] == {"aclnnMuls": 1}


def test_a_generated_stub_fails_loudly_naming_itself(cache: str, tmp_path: Path) -> None:
    script = tmp_path / "stub.py"
    script.write_text(
        "import ctypes, json\n"
        "from ascend_env.cann import runtime\n"
        "lib = ctypes.CDLL('libhccl.so')\n"
        "code = lib.HcclGetRootInfo(None)\n"
        "lib.aclGetRecentErrMsg.restype = ctypes.c_char_p\n"
        "import os\n"
        "message = lib.aclGetRecentErrMsg().decode()\n"
        "print(json.dumps([code, message, runtime.report()['counters'], os.getpid()]))\n",
        encoding="utf-8",
    )
    at_exit = tmp_path / "report-%p.json"
    result = run([str(script)], {"ASCEND_ENV_CACHE_DIR": cache, "ASCEND_ENV_CANN_REPORT": str(at_exit)})
    assert result.returncode == 0, result.stderr[-3000:]
    code, message, counters, pid = json.loads(result.stdout.strip().splitlines()[-1])
    # the report written at exit, one file per process ("%p": the process id)
    written = json.loads((tmp_path / f"report-{pid}.json").read_text(encoding="utf-8"))
    assert written["counters"]["unimplemented"] == {"HcclGetRootInfo": 1}
    assert code != 0
    assert message == "ascend-env emulated CANN: HcclGetRootInfo is not implemented"
    assert result.stderr.count(message) == 1
    assert counters["unimplemented"] == {"HcclGetRootInfo": 1}


@pytest.mark.parametrize(
    "soc, guard, jit_compile, calls",
    [
        ("Ascend910B1", "1", False, {"aclnn": {"aclnnEqTensor": 1, "aclnnAny": 1}, "aclop": {}}),
        # 910A compiles online by default; the hook's compile-mode guard turns that off ...
        ("Ascend910A", "1", False, {"aclnn": {"aclnnEqTensor": 1, "aclnnAny": 1}, "aclop": {}}),
        # ... and without the guard isin's ops are online compiles.
        ("Ascend910A", "0", True, {"aclnn": {}, "aclop": {"Equal": 1, "ReduceAny": 1}}),
    ],
)
def test_the_startup_hook_registers_isin_on_the_real_binary(
    cache: str, tmp_path: Path, soc: str, guard: str, jit_compile: bool, calls: Dict[str, Any]
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    install = subprocess.run(
        [sys.executable, "-m", "ascend_env", "install", "--hook-only", "--target", str(site), "--json"],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    result = run(
        ["--soc", soc, str(ISIN_PROBE), str(site)],
        {"ASCEND_ENV_CACHE_DIR": cache, "ASCEND_ENV_COMPILE_GUARD": guard},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["equal"] is True
    assert "CAUTION" not in result.stderr  # the hook's kernel, not the binary's CPU fallback
    assert report["jit_compile"] is jit_compile
    if isin_falls_back():  # else the release's own isin kernel runs, not the hook's
        assert {"aclnn": report["aclnn"], "aclop": report["aclop"]} == calls


def test_without_the_hook_isin_falls_back_to_the_cpu(cache: str, tmp_path: Path) -> None:
    result = run([str(ISIN_PROBE), str(tmp_path)], {"ASCEND_ENV_CACHE_DIR": cache})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["equal"] is True
    if isin_falls_back():
        assert report["aclnn"] == {} and report["aclop"] == {}
        assert result.stderr.count(CAUTION) == 1
    else:
        assert CAUTION not in result.stderr and report["aclnn"]
