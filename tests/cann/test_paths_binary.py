"""The dispatch-path model (``audit --paths``) against the real torch_npu 2.1.0.post6 binary on the
emulated CANN: the smoke test's tiny Llama, per decoding step and per aten op, the model's would-be
online compiles against the ``aclopCompileAndExecute`` first calls the binary makes with
``ACL_OP_JIT_COMPILE`` on (910A), and its ``op_api`` calls against the aclnn calls (910B).

Where they differ the difference is pinned here op by op, with its reason, so that a change in
either side shows. The wheel of 2.1.0.post6 (the release measured) is run by path from
``$ASCEND_ENV_TORCH_NPU_WHEELS``; skipped where this Python and torch cannot run it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest
from emulated_e2e import environment, fitting_wheels

HERE = Path(__file__).resolve().parent
RELEASE = "2.1.0.post6"


pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="torch_npu's wheels are for Linux")


def _unpacked() -> Path:
    """torch_npu RELEASE's wheel from ``$ASCEND_ENV_TORCH_NPU_WHEELS``, unpacked (run by path, as
    ``audit --torch-npu-wheel`` runs it); skip where this Python and torch cannot run it."""
    from ascend_env.checks import torch_npu_wheel

    found = [w for w in fitting_wheels() if w.name.split("-")[1] == RELEASE]
    if not found:
        pytest.skip(f"needs torch 2.1.0 and torch_npu {RELEASE}'s wheel in $ASCEND_ENV_TORCH_NPU_WHEELS")
    return torch_npu_wheel.unpack(found[0])


# One aten op, more than one compiled kernel on the binary, that the model does not count: it counts
# the op once per new call signature, and the helper kernels torch_npu adds inside it where an input
# is not contiguous or not of the operands' common dtype (sim/compile_keys.helper_kernels); not yet
# these: casts for dtypes a kernel does not take (ArgMaxV2, ReduceSum of bools, a comparison of an
# int64 tensor with a float scalar), ConcatD's and MatMul's own Transpose / AsStrided / Slice, Select's
# BroadcastTo, a second Fill, the CPU fallback's StridedSlice copy. measured - model per step,
# steps 0, 1, steady.
HELPER_KERNELS: Dict[str, List[int]] = {
    "argmax": [1, 0, 0],  # Cast of ArgMaxV2's output
    "cat": [1, 0, 0],  # Transpose
    "clone": [1, 0, 1],  # AsStrided / BroadcastTo / Slice: one per view kind, not per signature
    "isin.Tensor_Tensor": [1, 1, 1],  # the fallback's StridedSlice (the model counts no fallback)
    "lt.Scalar": [1, 0, 0],  # Cast of the int64 tensor compared with a float
    "matmul": [1, 1, 1],  # Transpose, AsStrided, Slice beyond the transposed operand MatMul takes
    "npu_dtype_cast": [1, 1, 0],  # torch_npu's own op (Cast), which the simulator does not have
    "ones_like": [1, 0, 0],  # a second Fill
    "rsub.Scalar": [1, 0, 0],  # Mul
    "sum": [2, 0, 0],  # Cast of the bools summed
    "where.self": [2, 0, 0],  # BroadcastTo of the condition and the scalar other
}
# Not yet right in the model (it counts a compile the binary does not make): measured - model.
MODEL_OVERCOUNTS: Dict[str, List[int]] = {
    "contiguous": [-1, 0, 0],
    "ge.Scalar": [0, -1, -1],
    "new_ones": [0, -1, -1],
}


def run(command: List[str], env: Dict[str, str], real: bool) -> str:
    """The last line ``command`` prints; with ``real``, the binary first on its path."""
    if real:
        env = {
            **env,
            "PYTHONPATH": os.pathsep.join(p for p in (str(_unpacked()), os.environ.get("PYTHONPATH")) if p),
        }
    done = subprocess.run(command, capture_output=True, text=True, env=environment(**env), timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    explicit = os.environ.get("ASCEND_ENV_CACHE_DIR")
    if explicit:
        return explicit
    directory = tmp_path_factory.mktemp("cache")
    directory.chmod(0o700)
    return str(directory)


def measured(soc: str, cache: str) -> List[Dict[str, Any]]:
    out = run(
        [sys.executable, "-m", "ascend_env.cann", "--soc", soc, str(HERE / "steps_probe.py")],
        {"ASCEND_ENV_CACHE_DIR": cache},
        real=True,
    )
    steps: List[Dict[str, Any]] = json.loads(out)["by_op"]
    return steps


def modelled(soc: str, cache: str) -> List[Dict[str, Any]]:
    out = run(
        [sys.executable, str(HERE / "model_probe.py"), RELEASE, soc, str(HERE / "steps_probe.py")],
        {"ASCEND_ENV_CACHE_DIR": cache},
        real=False,
    )
    steps: List[Dict[str, Any]] = json.loads(out)
    return steps


def test_compiles_per_op_and_step_910a(cache: str) -> None:
    real, model = measured("Ascend910A", cache), modelled("Ascend910A", cache)
    assert len(real) == len(model) == 8
    for column, step in enumerate((0, 1, 2)):
        got = {op: entry["compile"] for op, entry in real[step].items() if entry["compile"]}
        want = model[step]["by_op"]
        differences = {op: got.get(op, 0) - want.get(op, 0) for op in set(got) | set(want)}
        differences = {op: d for op, d in differences.items() if d}
        expected = {op: d[column] for op, d in {**HELPER_KERNELS, **MODEL_OVERCOUNTS}.items() if d[column]}
        assert differences == expected, f"step {step}"
    # the steady state is steady on both sides: the same count every step from the third on
    assert len({sum(e["compile"] for e in s.values()) for s in real[3:]}) <= 2
    assert sum(model[7]["by_op"].values()) > 0


def test_aclnn_calls_per_step_910b(cache: str) -> None:
    real, model = measured("Ascend910B1", cache), modelled("Ascend910B1", cache)
    for step in range(len(real)):
        assert not any(entry["compile"] for entry in real[step].values())  # JIT off: no compile
        assert not model[step]["by_op"]
        calls = sum(entry["aclnn"] for entry in real[step].values())
        ops = model[step]["paths"].get("op_api", 0)
        # each op_api op is one aclnn call or more (InplaceCopy of a view, Cast): never fewer
        assert ops <= calls <= ops * 1.25, (step, ops, calls)
