"""The startup hook registers the torchvision fixes once torchvision is imported, on every path a
program takes: torchvision before torch_npu or after it, ``from torchvision.ops import nms``,
``import torchvision.ops``, a ``find_spec`` probe first, and in a child process. Then nms and
roi_align run on the (simulated) NPU without a fallback, equal to the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from ascend_env.hook import files

pytest.importorskip("torchvision")

SILENCERS = ("RANK", "TORCH_NPU_DISABLED_WARNING", "TORCH_NPU_WARNING_DISABLE", "TORCH_CPP_LOG_LEVEL")
BACKEND = (
    "from ascend_env import sim\nsim.enable('2.1.0.post6'); sim.add_torch_npu_to_path()\nimport torch_npu"
)

# Runs the ops on "npu" against the CPU; prints the fallbacks and the hook's record.
CHECK = """
import json
import torch
from ascend_env import sim
from ascend_env.hook import runtime
boxes = torch.tensor([[0.0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30]])
scores = torch.tensor([0.9, 0.8, 0.7])
x, rois = torch.rand(1, 2, 6, 6), torch.tensor([[0.0, 0, 0, 4, 4], [0, 1, 1, 5, 3]])
nms, roi_align = torch.ops.torchvision.nms, torch.ops.torchvision.roi_align
xn = x.to("npu").requires_grad_()
out = roi_align(xn, rois.to("npu"), 1.0, 2, 2, -1, False)
out.sum().backward()
xc = x.clone().requires_grad_()
roi_align(xc, rois, 1.0, 2, 2, -1, False).sum().backward()
equal = [
    torch.equal(nms(boxes.to("npu"), scores.to("npu"), 0.5).cpu(), nms(boxes, scores, 0.5)),
    torch.equal(out.detach().cpu(), roi_align(x, rois, 1.0, 2, 2, -1, False)),
    torch.allclose(xn.grad.cpu(), xc.grad), xn.grad.device.type == "npu",
]
print(json.dumps({"equal": equal, "fallbacks": dict(sim.fallbacks()), "status": runtime.status()}))
"""

PATHS = {
    "torchvision before torch_npu": f"import torchvision\n{BACKEND}",
    "import torchvision after": f"{BACKEND}\nimport torchvision",
    "from torchvision.ops import nms": f"{BACKEND}\nfrom torchvision.ops import nms",
    "import torchvision.ops": f"{BACKEND}\nimport torchvision.ops",
    "find_spec probe, then import": (
        f"{BACKEND}\nimport importlib.util\nimportlib.util.find_spec('torchvision')\nimport torchvision"
    ),
}


@pytest.fixture(scope="module")
def hooked_env(tmp_path_factory) -> Path:
    """A venv seeing this environment's packages, with the hook installed; returns its python."""
    root = tmp_path_factory.mktemp("hooked-env")
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    site = next(root.glob("lib/python*/site-packages"))
    paths = [p for p in sys.path if p and Path(p).is_dir()]
    (site / "_ascend_env_test_paths.pth").write_text("\n".join(paths) + "\n")
    for name, data in files.files().items():
        (site / name).write_bytes(data)
    return root / "bin" / "python"


def run(python: Path, code: str, env=None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in SILENCERS and k != "ASCEND_ENV_DISABLE"}
    environ.update(env or {})
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=environ, timeout=300)


def _result(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("path", list(PATHS))
def test_registered_once_torchvision_is_imported(hooked_env, path):
    result = _result(run(hooked_env, "import torch\n" + PATHS[path] + CHECK))
    status = result["status"]
    assert status["errors"] == [], status
    assert {"nms", "roi_align", "_roi_align_backward"} <= set(status["registered"]), status
    heard = [event for event in status["events"] if event.startswith("torchvision")]
    if path == "torchvision before torch_npu":
        assert heard == []  # registered when torch_npu came up: torchvision was there already
    else:
        assert len(heard) == 1, status["events"]
    assert result["equal"] == [True] * 4 and result["fallbacks"] == {}, result


def test_without_the_hook_they_fall_back(hooked_env):
    result = _result(
        run(
            hooked_env,
            "import torch\n" + PATHS["import torchvision after"] + CHECK,
            {"ASCEND_ENV_DISABLE": "1"},
        )
    )
    assert result["status"]["registered"] == []
    assert {"torchvision::nms", "torchvision::roi_align", "torchvision::_roi_align_backward"} <= set(
        result["fallbacks"]
    )
    assert result["equal"] == [True] * 4  # on the CPU, the same answers


def test_a_child_process_registers_them_too(hooked_env):
    child = "import torch\n" + PATHS["from torchvision.ops import nms"] + CHECK
    parent = (
        "import subprocess, sys\n"
        f"done = subprocess.run([sys.executable, '-c', {child!r}], capture_output=True, text=True)\n"
        "sys.stdout.write(done.stdout); sys.stderr.write(done.stderr); sys.exit(done.returncode)"
    )
    result = _result(run(hooked_env, parent))
    assert {"nms", "roi_align", "_roi_align_backward"} <= set(result["status"]["registered"])
    assert result["equal"] == [True] * 4 and result["fallbacks"] == {}
