"""The startup hook end to end: a fresh interpreter with the hook files in its site-packages.

Each test runs a throw-away virtual environment that sees this environment's packages (a path
``.pth`` line) and holds the hook files, so the hook starts exactly as in a user's environment.
The simulated NPU stands in for torch_npu: either enabled directly, or through a fake
``torch_npu`` package whose import enables it, as the real one registers its kernels on import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest

from ascend_env.detect.npu_oplists import ISIN_OVERLOADS
from ascend_env.hook import files
from ascend_env.kernels import registry
from ascend_env.sim import optables

CAUTION = "CAUTION: The operator 'aten::isin"
OVERRIDE = "Overriding a previously registered kernel"
SILENCERS = ("RANK", "TORCH_NPU_DISABLED_WARNING", "TORCH_NPU_WARNING_DISABLE", "TORCH_CPP_LOG_LEVEL")

# Every isin overload on "npu", checked against the CPU; prints the fallbacks and the hook's record.
SMOKE = """
import json, sys, threading
import torch
{enable}
from ascend_env import sim
from ascend_env.hook import runtime
cpu_e = torch.tensor([[1, 2, 3], [4, 5, 6]])
cpu_t = torch.tensor([2, 6, 9])
results = []
def check():
    e, t = cpu_e.to("npu"), cpu_t.to("npu")
    out = torch.empty(0, dtype=torch.bool, device="npu")
    pairs = [
        (torch.isin(e, t), torch.isin(cpu_e, cpu_t)),
        (torch.isin(e, t, invert=True), torch.isin(cpu_e, cpu_t, invert=True)),
        (torch.isin(e, t, out=out), torch.isin(cpu_e, cpu_t)),
        (torch.isin(e, 5), torch.isin(cpu_e, 5)),
        (torch.isin(6, t), torch.isin(6, cpu_t)),
    ]
    results.append(all(a.device.type == "npu" and torch.equal(a.cpu(), b) for a, b in pairs))
check()
threads = [threading.Thread(target=check) for _ in range(4)]
for thread in threads: thread.start()
for thread in threads: thread.join()
print(json.dumps({{"equal": results, "fallbacks": dict(sim.fallbacks()), "status": runtime.status()}}))
"""

# The simulator, then its torch_npu imported as a program would: the hook hears of it by that import.
ENABLE_SIM = (
    "from ascend_env import sim; sim.enable(torch_npu={table!r}); sim.add_torch_npu_to_path()\n"
    "import torch_npu"
)
IMPORT_FAKE_TORCH_NPU = "import torch_npu"


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


@pytest.fixture(scope="module")
def fake_torch_npu(tmp_path_factory) -> Path:
    """A directory holding a ``torch_npu`` package whose import enables the simulator."""
    root = tmp_path_factory.mktemp("fake-torch-npu")
    (root / "torch_npu").mkdir()
    (root / "torch_npu" / "__init__.py").write_text(
        "__version__ = '2.1.0.post6'\n"
        "from ascend_env import sim as _sim\nfrom ascend_env.sim import optables as _tables\n"
        "_sim.enable_ops('torch_npu 2.1.0.post6', _tables.load('2.1.0.post6'))\n"
    )
    return root


def run(python: Path, code: str, env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in SILENCERS and k != "ASCEND_ENV_DISABLE"}
    environ.update(env or {})
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=environ, timeout=300)


def smoke(python: Path, enable: str, env: Optional[Dict[str, str]] = None) -> tuple:
    result = run(python, SMOKE.format(enable=enable), env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1]), result.stderr


def test_hook_removes_the_isin_fallback_on_2_1_0_post6(hooked_env):
    report, stderr = smoke(hooked_env, ENABLE_SIM.format(table="2.1.0.post6"))
    assert report["equal"] == [True] * 5
    assert not any(op.startswith("aten::isin") for op in report["fallbacks"]), report["fallbacks"]
    assert CAUTION not in stderr
    assert {"isin.Tensor_Tensor", "isin.Tensor_Tensor_out"} <= set(report["status"]["registered"])
    assert report["status"]["errors"] == []
    assert report["status"]["release"] == "2.1.0.post6"


def test_kill_switch_brings_the_fallback_back(hooked_env):
    report, stderr = smoke(hooked_env, ENABLE_SIM.format(table="2.1.0.post6"), {"ASCEND_ENV_DISABLE": "1"})
    assert report["equal"] == [True] * 5
    assert "aten::isin.Tensor_Tensor_out" in report["fallbacks"]
    assert stderr.count("CAUTION: The operator 'aten::isin.Tensor_Tensor_out'") == 1
    assert report["status"]["registered"] == []
    assert report["status"]["disabled"] is True


def lacking_ops(table: Any) -> List[Any]:
    """The overloads the hook registers on ``table`` in a process that imports no torchvision (the
    smoke scripts here): those it lacks, of the fixes of torch's own ops (torchvision's ops exist,
    and are registered, only once torchvision is imported: tests/torch/test_hook_torchvision.py)."""
    return [
        op
        for op in registry.OVERLOADS
        if all(name not in table for name in op.when_missing) and op.fix.requires is None
    ]


def test_native_isin_is_left_alone_on_2_4_0(hooked_env):
    report, stderr = smoke(hooked_env, ENABLE_SIM.format(table="2.4.0"))
    assert report["equal"] == [True] * 5
    # 2.4.0 runs every isin overload natively (isin.Scalar_Tensor through its native out= form),
    # and polar; the hook registers only the fixes its table lacks, never isin's or polar's.
    table = optables.load("2.4.0")
    lacking = [op.op for op in lacking_ops(table)]
    assert report["status"]["registered"] == lacking
    assert not any(op.startswith(("isin", "polar")) for op in lacking)
    assert set(ISIN_OVERLOADS) | {"polar", "polar.out"} <= set(report["status"]["native"])
    assert report["fallbacks"] == {}
    assert OVERRIDE not in stderr


def test_waits_for_the_torch_npu_import(hooked_env, fake_torch_npu):
    report, stderr = smoke(hooked_env, IMPORT_FAKE_TORCH_NPU, {"PYTHONPATH": str(fake_torch_npu)})
    assert report["equal"] == [True] * 5
    # The fake enables the simulator, then the finder reports the finished torch_npu import, whose
    # __version__ names the release.
    assert report["status"]["events"] == ["torch_npu: import"]
    assert report["status"]["release"] == "2.1.0.post6"
    assert report["status"]["waiting_for"] is None
    assert not any(op.startswith("aten::isin") for op in report["fallbacks"])
    assert CAUTION not in stderr


def test_a_hook_that_cannot_register_says_why(hooked_env):
    """The kernels cannot load (their module fails to import, as it did under torch 2.2 before
    ascend-env ran there): isin falls back as without the hook, the record says why, and the
    other fixes are registered all the same."""
    breaker = "import sys; sys.modules['ascend_env.kernels.isin'] = None\n"
    report, stderr = smoke(hooked_env, breaker + ENABLE_SIM.format(table="2.1.0.post6"))
    assert report["equal"] == [True] * 5
    assert "aten::isin.Tensor_Tensor_out" in report["fallbacks"] and CAUTION in stderr
    assert report["status"]["registered"]
    assert not any(op.startswith("isin") for op in report["status"]["registered"])
    assert report["status"]["events"] == ["torch_npu: import (simulated)"]
    assert any("ascend_env.kernels.isin" in error for error in report["status"]["errors"]), report["status"]


def test_registering_twice_is_harmless(hooked_env):
    code = (
        ENABLE_SIM.format(table="2.1.0.post6") + "\nimport json, torch\nimport ascend_env_hook as boot\n"
        "from ascend_env import _watch\nfrom ascend_env.hook import runtime\n"
        "first = list(runtime.status()['registered'])\n"
        "again = runtime.activate('torch_npu')\n_watch.notify(boot.STATE, 'torch_npu')\n"
        "x = torch.tensor([1, 2], device='npu')\n"
        "print(json.dumps([first, again, runtime.status()['registered'], torch.isin(x, x).cpu().tolist()]))\n"
    )
    result = run(hooked_env, code)
    assert result.returncode == 0, result.stderr
    first, again, final, values = json.loads(result.stdout.splitlines()[-1])
    assert first and again == [] and final == first
    assert values == [True, True]
    assert OVERRIDE not in result.stderr


def test_spawned_children_get_the_hook_too(hooked_env):
    code = (
        "import json, multiprocessing as mp\n"
        "def child(_):\n"
        "    import torch\n"
        "    from ascend_env import sim, runtime\n"
        "    sim.enable(torch_npu='2.1.0.post6'); sim.add_torch_npu_to_path()\n"
        "    import torch_npu\n"
        "    x = torch.tensor([3, 4, 5], device='npu')\n"
        "    hit = torch.isin(x, torch.tensor([4], device='npu')).cpu().tolist()\n"
        "    return hit, dict(sim.fallbacks()), runtime.status()['registered']\n"
        "if __name__ == '__main__':\n"
        "    with mp.get_context('spawn').Pool(2) as pool:\n"
        "        print(json.dumps(pool.map(child, range(2))))\n"
    )
    script = hooked_env.parent.parent / "spawn_check.py"
    script.write_text(code)
    result = subprocess.run(
        [str(hooked_env), str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k not in SILENCERS},
    )
    assert result.returncode == 0, result.stderr
    for hit, fallbacks, registered in json.loads(result.stdout.splitlines()[-1]):
        assert hit == [False, True, False]
        assert not any(op.startswith("aten::isin") for op in fallbacks)
        assert "isin.Tensor_Tensor" in registered
    assert CAUTION not in result.stderr


# One process per op table (the dispatcher holds one). A representative set by default; every
# release with ASCEND_ENV_ALL_TABLES=1 (the `tables` tox env, which CI runs).
REPRESENTATIVE = ("2.1.0.post3", "2.2.0", "2.3.1", "2.3.1.post2", "2.7.1.post11", "2.14.0")
TABLES = optables.releases() if os.environ.get("ASCEND_ENV_ALL_TABLES") == "1" else REPRESENTATIVE


@pytest.fixture(scope="module")
def table_smokes(request, hooked_env) -> Iterator[Dict[str, Future]]:
    """The smoke test under each selected table, one process per table, as many at once as there
    are cores (52 processes of about 3 s each with ASCEND_ENV_ALL_TABLES=1)."""
    tables = [
        item.callspec.params["table"]
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_every_op_table"
    ]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        yield {table: pool.submit(smoke, hooked_env, ENABLE_SIM.format(table=table)) for table in tables}


@pytest.mark.parametrize("table", TABLES)
def test_every_op_table(table_smokes, table):
    report, stderr = table_smokes[table].result()
    assert report["equal"] == [True] * 5
    ops = optables.load(table)
    falling_back = [op.op for op in lacking_ops(ops)]
    assert report["status"]["registered"] == falling_back
    assert not any(op.startswith("aten::isin") for op in report["fallbacks"]), report["fallbacks"]
    assert CAUTION not in stderr and OVERRIDE not in stderr


# ------------------------------------------------ the hook hears of torch_npu on programs' paths

# What real programs run before they touch torch_npu themselves (transformers 4.46 and accelerate
# 1.0: their availability checks probe with importlib.util.find_spec, then import torch_npu).
PROGRAM_PATHS = {
    "import accelerate": "import accelerate",
    "from transformers import Trainer": "from transformers import Trainer",
    "TrainingArguments()": (
        "import tempfile\nfrom transformers import TrainingArguments\n"
        "TrainingArguments(output_dir=tempfile.mkdtemp(), report_to=[])"
    ),
    "is_torch_npu_available()": (
        "from transformers.utils import is_torch_npu_available\nis_torch_npu_available()"
    ),
    "from accelerate import Accelerator": "from accelerate import Accelerator",
    "AutoModelForCausalLM, then import": "from transformers import AutoModelForCausalLM",
    "importlib.import_module": "import importlib\nimportlib.import_module('torch_npu')",
    "a thread": (
        "import threading\nt = threading.Thread(target=__import__, args=('torch_npu',))\nt.start(); t.join()"
    ),
}

PATH_SCRIPT = """
import json, sys, warnings
warnings.simplefilter("ignore")
import torch
{before}
{path}
import torch_npu
from ascend_env.hook import runtime
print(json.dumps(runtime.status()))
"""

# A stand-in torch_npu: imports torch, as the real one does, and nothing more.
STAND_IN = "import torch\n__version__ = '2.1.0.post6'\n"


@pytest.fixture(scope="module")
def stand_in_torch_npu(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("stand-in")
    (root / "torch_npu").mkdir()
    (root / "torch_npu" / "__init__.py").write_text(STAND_IN)
    return root


@pytest.mark.parametrize("path", list(PROGRAM_PATHS))
@pytest.mark.parametrize("backend", ["stand-in", "simulated"])
def test_the_hook_hears_of_torch_npu_on_the_paths_programs_take(
    hooked_env, stand_in_torch_npu, backend, path
):
    env = {}
    before = ""
    if backend == "simulated":
        before = "from ascend_env import sim\nsim.enable('2.1.0.post6'); sim.add_torch_npu_to_path()"
    else:
        env["PYTHONPATH"] = str(stand_in_torch_npu)
    result = run(hooked_env, PATH_SCRIPT.format(before=before, path=PROGRAM_PATHS[path]), env)
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout.splitlines()[-1])
    # torch_npu heard once; where torchvision is installed, transformers' Trainer imports it too,
    # and the hook hears of that (its fixes wait for it)
    heard = [event for event in status["events"] if event.startswith("torch_npu")]
    assert len(heard) == 1 and set(status["events"]) - set(heard) <= {"torchvision: import"}, status
    assert heard[0].startswith("torch_npu: import")
    assert heard[0].endswith("(simulated)") == (backend == "simulated")
    assert {"isin.Tensor_Tensor", "isin.Tensor_Tensor_out"} <= set(status["registered"]), status
    assert status["release"] == "2.1.0.post6" and status["waiting_for"] is None
