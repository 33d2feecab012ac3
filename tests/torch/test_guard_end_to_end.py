"""The compile-mode guard end to end: the installed hook, a fresh interpreter, the simulated NPU.

The simulated SoC (``ASCEND_ENV_SIM_SOC``) decides torch_npu's default compile mode; a fake CANN
toolkit (``ASCEND_TOOLKIT_HOME``) has or lacks the binary kernels directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path
from typing import Dict, Optional

import pytest

from ascend_env.hook import compile_guard, files

SILENCERS = ("RANK", "TORCH_NPU_DISABLED_WARNING", "TORCH_NPU_WARNING_DISABLE", "TORCH_CPP_LOG_LEVEL")

REPORT = """
import json
import torch
from ascend_env import sim
from ascend_env.hook import runtime
from ascend_env.sim import compile_mode
sim.enable(torch_npu="2.1.0.post6"); sim.add_torch_npu_to_path()
import torch_npu  # the hook hears of the simulator by its torch_npu's import, as of a real one
{after}
print(json.dumps({{"jit": compile_mode.jit_compile(), "internal_format": compile_mode.allow_internal_format(),
                  "guard": runtime.status()["compile_guard"]}}))
"""

SPAWN = """
import json, multiprocessing
def child(queue):
    import torch
    from ascend_env import sim
    from ascend_env.hook import runtime
    from ascend_env.sim import compile_mode
    sim.enable(torch_npu="2.1.0.post6"); sim.add_torch_npu_to_path()
    import torch_npu
    queue.put([compile_mode.jit_compile(), runtime.status()["compile_guard"]["applied"]])
if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=child, args=(queue,))
    process.start()
    print(json.dumps(queue.get(timeout=120)))
    process.join()
"""


def make_env(root: Path, guard: bool) -> Path:
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    site = next(root.glob("lib/python*/site-packages"))
    paths = [p for p in sys.path if p and Path(p).is_dir()]
    (site / "_ascend_env_test_paths.pth").write_text("\n".join(paths) + "\n")
    for name, data in files.files(guard).items():
        (site / name).write_bytes(data)
    return root / "bin" / "python"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory) -> Path:
    return make_env(tmp_path_factory.mktemp("guarded"), True)


@pytest.fixture(scope="module")
def unguarded(tmp_path_factory) -> Path:
    return make_env(tmp_path_factory.mktemp("unguarded"), False)


@pytest.fixture(scope="module")
def kernels(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cann") / "latest"
    (root / compile_guard.KERNELS_SUBDIR / "ascend910").mkdir(parents=True)
    return root


@pytest.fixture(scope="module")
def no_kernels(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cann-no-kernels") / "latest"
    root.mkdir()
    return root


def run(
    python: Path,
    soc: str,
    toolkit: Path,
    after: str = "",
    code: Optional[str] = None,
    env: Optional[Dict[str, str]] = None,
) -> dict:
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in SILENCERS and not k.startswith(("ASCEND_ENV_", "ASCEND_HOME", "ASCEND_TOOLKIT"))
    }
    environ.update({"ASCEND_ENV_SIM_SOC": soc, "ASCEND_TOOLKIT_HOME": str(toolkit)}, **(env or {}))
    script = python.parent.parent / "script.py"  # a file: spawn re-imports the main module
    script.write_text(code if code is not None else REPORT.format(after=after))
    done = subprocess.run(
        [str(python), str(script)], capture_output=True, text=True, env=environ, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("soc", ["910A", "Ascend910PremiumA", "310P"])
def test_guard_turns_jit_compile_off_where_the_soc_compiles_online(guarded, kernels, soc):
    found = run(guarded, soc, kernels)
    assert found["jit"] is False and found["internal_format"] is False
    assert found["guard"]["applied"] and found["guard"]["soc_source"] == "simulator"


def test_without_binary_kernels_the_guard_stays_off_and_says_why(guarded, no_kernels):
    found = run(guarded, "910A", no_kernels)
    assert found["jit"] is True and not found["guard"]["applied"]
    assert "no binary kernels" in found["guard"]["reason"]
    assert "Ascend-cann-kernels-910a" in found["guard"]["reason"]


def test_not_needed_on_910b(guarded, kernels):
    found = run(guarded, "910B", kernels)
    assert found["jit"] is False and found["internal_format"] is True
    assert not found["guard"]["applied"] and "not needed" in found["guard"]["reason"]


def test_switched_off_by_the_variable(guarded, kernels):
    found = run(guarded, "910A", kernels, env={"ASCEND_ENV_COMPILE_GUARD": "0"})
    assert found["jit"] is True and "turned off" in found["guard"]["reason"]


def test_switched_off_by_install_option(unguarded, kernels):
    found = run(unguarded, "910A", kernels)
    assert found["jit"] is True and "turned off" in found["guard"]["reason"]


def test_a_script_that_sets_jit_compile_itself_keeps_it(guarded, kernels):
    found = run(guarded, "910A", kernels, after="compile_mode.set_jit_compile(True)")
    assert found["guard"]["applied"] and found["jit"] is True


def test_spawned_children_are_guarded_too(guarded, kernels):
    assert run(guarded, "310P", kernels, code=SPAWN) == [False, True]


GENERATE = """
import torch, transformers
import torch_npu  # as Ascend scripts do: the startup hook hears of it here
config = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                  bos_token_id=1, eos_token_id=2, pad_token_id=0)
torch.manual_seed(0)
model = transformers.LlamaForCausalLM(config).eval().to("npu")
ids = torch.tensor([[5, 6, 7, 8]], device="npu")
with torch.no_grad():
    model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, min_new_tokens=8,
                   do_sample=False, pad_token_id=0)
"""


def audit_steady_compiles(
    python: Path, soc: str, toolkit: Path, env: Optional[Dict[str, str]] = None
) -> list:
    """``audit --paths --soc soc`` of a tiny Llama generate() run by ``python``: the would-be online
    compiles of each steady decoding step."""
    script = python.parent.parent / "generate.py"
    script.write_text(GENERATE)
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in SILENCERS and not k.startswith(("ASCEND_ENV_", "ASCEND_HOME", "ASCEND_TOOLKIT"))
    }
    environ.update({"ASCEND_TOOLKIT_HOME": str(toolkit)}, **(env or {}))
    done = subprocess.run(
        [
            str(python),
            "-m",
            "ascend_env",
            "audit",
            "--torch-npu",
            "2.1.0.post6",
            "--paths",
            "--soc",
            soc,
            "--json",
            "--",
            str(python),
            str(script),
        ],
        capture_output=True,
        text=True,
        env=environ,
        timeout=600,
    )
    findings = json.loads(done.stdout)
    (run,) = findings["paths"]["generate"]
    return [step["would_compile"] for step in run["steps"][findings["paths"]["steady_from"] :]]


@pytest.mark.parametrize("soc", ["910A", "310P"])
def test_under_audit_the_guard_leaves_no_online_compile_in_decoding(guarded, kernels, soc):
    unguarded_steps = audit_steady_compiles(guarded, soc, kernels, {"ASCEND_ENV_DISABLE": "1"})
    assert len(unguarded_steps) >= 4 and all(count > 0 for count in unguarded_steps), unguarded_steps
    assert audit_steady_compiles(guarded, soc, kernels) == [0] * len(unguarded_steps)


RANKS = """
import json, os, sys
import torch
import torch_npu  # as every Ascend script does: the startup hook hears of it here
from torch.utils.data import DataLoader, Dataset
from ascend_env import runtime
from ascend_env.sim import compile_mode

class Modes(Dataset):
    def __len__(self):
        return 2
    def __getitem__(self, index):
        return torch.tensor([int(compile_mode.jit_compile()), os.getpid()])

out = sys.argv[1]
loader = DataLoader(Modes(), batch_size=1, num_workers=1, multiprocessing_context="fork")
workers = [row[0].tolist() for row in loader]
record = {"rank": os.environ["RANK"], "pid": os.getpid(), "jit": compile_mode.jit_compile(),
          "applied": runtime.status()["compile_guard"]["applied"], "workers": workers}
with open(os.path.join(out, "rank" + os.environ["RANK"] + ".json"), "w") as f:
    json.dump(record, f)
"""


def test_the_guard_reaches_torchrun_ranks_and_dataloader_workers_under_audit(guarded, kernels, tmp_path):
    """torchrun --nproc-per-node 2 on a simulated 310P, each rank with a fork DataLoader worker:
    JIT compile is off in every rank and every worker, and audit counts every process."""
    script = tmp_path / "ranks.py"
    script.write_text(RANKS)
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in SILENCERS and not k.startswith(("ASCEND_ENV_", "ASCEND_HOME", "ASCEND_TOOLKIT"))
    }
    environ["ASCEND_TOOLKIT_HOME"] = str(kernels)
    command = [
        str(guarded),
        "-m",
        "ascend_env",
        "audit",
        "--torch-npu",
        "2.1.0.post6",
        "--soc",
        "310P",
        "--json",
        "--",
        str(guarded),
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        str(script),
        str(tmp_path),
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=environ, timeout=600)
    findings = json.loads(done.stdout)
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert all(r["jit"] is False and r["applied"] for r in ranks), ranks
    # Each batch: JIT compile (0: off) as the worker, another process, saw it.
    assert all(jit == 0 and pid != r["pid"] for r in ranks for jit, pid in r["workers"]), ranks
    # The launcher, two ranks and a DataLoader worker of each.
    assert findings["processes"] >= 5, findings["per_process"]
    assert {p["rank"] for p in findings["per_process"]} >= {"0", "1"}


API_SHAPE = """
import json
import torch
from ascend_env import sim
from ascend_env.hook import compile_guard
sim.enable("2.1.0.post6")
sim.add_torch_npu_to_path()
import torch_npu
decision = compile_guard.decide("Ascend910A", "test", compile_guard.Kernels(True, "/kernels"))
compile_guard.apply(decision, torch_npu.npu.set_compile_mode, torch.npu.config)
print(json.dumps({"applied": decision.applied, "error": decision.error,
                  "jit_off": torch_npu.npu.is_jit_compile_false(),
                  "internal_format": torch.npu.config.allow_internal_format}))
"""


def test_the_guard_calls_torch_npus_own_api_shape(tmp_path):
    """The guard against torch_npu's Python API as 2.1.0.post6 has it (the simulated package:
    ``torch_npu.npu.set_compile_mode(jit_compile=...)``, ``torch.npu.config``)."""
    script = tmp_path / "api.py"
    script.write_text(API_SHAPE)
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ASCEND_ENV_SIM_SOC": "910A"},
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found == {"applied": True, "error": None, "jit_off": True, "internal_format": False}
