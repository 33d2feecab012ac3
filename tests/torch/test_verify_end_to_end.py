"""verify end to end on the simulated NPU, in fresh virtual environments as a Docker build has them.

Each environment is a venv (no pip) holding its own copy of this environment's transformers
release (4.46.3 in the torch env; each old-torch env has its own) and ascend-env installed from a
wheel built from this checkout; torch and the other dependencies come from this environment
through a path ``.pth`` line, which Python puts after the venv's own site-packages. Commands run
with a minimal environment, stdin closed and no TTY, from a directory outside the checkout.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import time
import venv
from pathlib import Path
from typing import Dict, Optional

import pytest

from ascend_env.kernels import registry
from ascend_env.patching.state import read_state
from ascend_env.sim import optables

ROOT = Path(__file__).resolve().parents[2]
# The release this environment's tokenizers and huggingface-hub were resolved for.
VERSION = importlib.metadata.version("transformers")
TRANSFORMERS = f"transformers=={VERSION}"
SILENCED = {
    "RANK": "1",
    "TORCH_NPU_DISABLED_WARNING": "1",
    "TORCH_NPU_WARNING_DISABLE": "1",
    "TORCH_CPP_LOG_LEVEL": "ERROR",
}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """ascend-env as a wheel, built once from this checkout."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(out)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return next(out.glob("ascend_env-*.whl"))


def make_env(root: Path, wheel: Path) -> Path:
    """A venv with its own transformers and ascend-env (from ``wheel``); returns its bin directory."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    python = root / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            "--no-compile",
            TRANSFORMERS,
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    site = next(root.glob("lib/python*/site-packages"))
    # This environment's site-packages only (never the checkout); their own .pth files stay unread.
    ours = [p for p in sys.path if p.endswith("-packages") and Path(p).is_dir()]
    (site / "zz_dependencies.pth").write_text("\n".join(ours) + "\n")
    return root / "bin"


def sh(bin_dir: Path, script: str, env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """Run ``script`` as a Docker RUN step would: minimal environment, stdin closed, no TTY."""
    base = {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": os.environ["HOME"]}
    for name in ("ASCEND_ENV_CACHE_DIR", "XDG_CACHE_HOME", "CXX"):
        if name in os.environ:
            base[name] = os.environ[name]
    base.update(env or {})
    return subprocess.run(
        ["sh", "-c", "exec 0<&-\n" + script],
        env=base,
        capture_output=True,
        text=True,
        cwd=str(bin_dir.parent),
        timeout=900,
    )


@pytest.fixture(scope="module")
def shared(tmp_path_factory, wheel) -> Path:
    """One environment for the tests that set up their own state first."""
    return make_env(tmp_path_factory.mktemp("verify-env"), wheel)


def site_of(bin_dir: Path) -> Path:
    return next(bin_dir.parent.glob("lib/python*/site-packages"))


def test_docker_build_steps_pass_on_the_simulator(tmp_path, wheel, record_property):
    bin_dir = make_env(tmp_path / "docker", wheel)
    started = time.monotonic()
    done = sh(
        bin_dir,
        "python -m ascend_env install --patches always && "
        "python -m ascend_env verify --torch-npu 2.1.0.post6",
    )
    record_property("install_and_verify_seconds", round(time.monotonic() - started, 1))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "verify: passed on the simulator, not a real NPU (torch_npu 2.1.0.post6 op table): "
        "--torch-npu was given"
    ) in done.stdout
    assert "ok    isin fallback, polar fallback, " in done.stdout  # passing checks alike, one line
    assert (
        "ok    hook: heard of torch_npu through transformers' check, import accelerate, a plain import; "
        "registered isin.Tensor_Tensor, isin.Tensor_Tensor_out"
    ) in done.stdout
    assert f"ok    patches: applied: transformers {VERSION}" in done.stdout
    assert "\033[" not in done.stdout  # plain text off a TTY


def test_drifted_patches_fail(shared):
    assert sh(shared, "python -m ascend_env install --patches always").returncode == 0
    state = read_state(site_of(shared))
    assert state is not None and state.entries
    target = site_of(shared) / state.entries[0].path
    original = target.read_bytes()
    target.write_bytes(original + b"\n# edited after install\n")
    try:
        done = sh(shared, "python -m ascend_env verify --torch-npu 2.1.0.post6 --json")
    finally:
        target.write_bytes(original)
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)
    failed = {check["name"]: check for check in result["checks"] if not check["ok"]}
    assert list(failed) == ["patches"]
    assert failed["patches"]["detail"].startswith(f"drifted: transformers {VERSION}")
    assert f"{state.entries[0].path} changed since ascend-env install" in failed["patches"]["detail"]
    assert "install" in failed["patches"]["fix"]


def test_unpatched_with_the_hook_off_fails_even_with_every_silencer_set(shared):
    setup = sh(shared, "python -m ascend_env restore && python -m ascend_env install --hook-only")
    assert setup.returncode == 0, setup.stderr
    done = sh(
        shared,
        "python -m ascend_env verify --torch-npu 2.1.0.post6",
        {"ASCEND_ENV_DISABLE": "1", "TORCH_NPU_FALLBACK_CPU_DISABLE": "1", **SILENCED},
    )
    assert done.returncode == 1, done.stderr
    out = done.stdout
    assert out.startswith("verify: FAILED on the simulator")
    # The silencers were neutralised in the smoke test's process, so torch_npu's line was printed.
    assert "ok    fallback line: nothing silences it" in out
    assert (
        "FAIL  isin fallback: aten::isin.Tensor_Tensor_out fell back to the CPU in generate, isin "
        "(CAUTION line on fd 2; counted"
    ) in out
    assert "FAIL  hook: the startup hook is turned off by ASCEND_ENV_DISABLE" in out
    assert "ok    patches: not applied" in out
    # Every fix the table lacks falls back in its smoke step (isin in generate too), and the hook.
    # (a fix whose op needs a package this Python lacks, torchvision's, is not tried: no line)
    lacking = [
        fix.name for fix in registry.FIXES if fix.needed_by("2.1.0.post6") and importable(fix.requires)
    ]
    assert lacking[0] == "isin" and len(lacking) > 1
    for name in lacking:
        assert f"FAIL  {name} fallback: " in out
    assert out.count("fix: ") == len(lacking) + 1


def importable(module: Optional[str]) -> bool:
    """Whether the package a fix's op needs (torchvision) is importable here (None: torch's own)."""
    return module is None or importlib.util.find_spec(module) is not None


@pytest.fixture(scope="module")
def device_torch_npu(tmp_path_factory) -> Path:
    """A torch_npu 2.13.0 (metadata, op lists) whose import brings up the simulator as its device."""
    root = tmp_path_factory.mktemp("device-torch-npu")
    package = root / "torch_npu"
    (package / "csrc" / "aten").mkdir(parents=True)
    ops = sorted(optables.load("2.13.0"))
    (package / "csrc" / "aten" / "npu_native_functions.yaml").write_text(
        "supported:\n" + "".join(f"  - {op}\n" for op in ops)
    )
    (package / "__init__.py").write_text(
        "from pathlib import Path as _Path\n"
        "from ascend_env import sim as _sim\nfrom ascend_env.detect import npu_oplists as _oplists\n"
        "__version__ = '2.13.0'\n"
        "_sim.enable_ops('2.13.0', _oplists.read_torch_npu(_Path(__file__).parent), True)\n"
        # Recent transformers (4.57 here) imports it from torch_npu once that is importable (NPU
        # flash attention); the tiny models never call it.
        "def npu_fusion_attention(*args, **kwargs):\n    raise NotImplementedError\n"
    )
    dist = root / "torch_npu-2.13.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_npu\nVersion: 2.13.0\n")
    return root


def test_on_a_device_generate_runs_in_a_second_process_without_fallback_disable(shared, device_torch_npu):
    assert sh(shared, "python -m ascend_env install --patches always").returncode == 0
    done = sh(shared, "python -m ascend_env verify --json", {"PYTHONPATH": str(device_torch_npu)})
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["device"] == "npu" and result["simulator_reason"] is None
    assert result["release"] == "2.13.0"
    # torch_npu reads TORCH_NPU_FALLBACK_CPU_DISABLE once per process: isin ran under it, generate
    # in a second process without it.
    # Then one process per other import path (import accelerate, a plain import).
    assert result["fallback_disable"] is True and result["processes"] == 4
    # 2.13.0 runs every isin overload natively (isin.Scalar_Tensor through its out= form); the
    # hook registers only what its table lacks (_assert_async and the encoder layer's fast path, in
    # no release; torchvision's ops where torchvision is installed).
    table = optables.load("2.13.0")
    lacking = [op for op in registry.OVERLOADS if all(name not in table for name in op.when_missing)]
    torch_ops = [op.op for op in lacking if op.fix.requires is None]
    # torchvision's, where it is installed: registered once verify's step of them imports it
    theirs = [op.op for op in lacking if op.fix.requires is not None and importable(op.fix.requires)]
    registered = result["hook"]["registered"]
    assert registered[: len(torch_ops)] == torch_ops and sorted(registered) == sorted(torch_ops + theirs)
    assert {"_assert_async", "_assert_async.msg"} <= set(torch_ops) and "isin.Tensor_Tensor" not in torch_ops
    names = [fix.name for fix in registry.FIXES]
    assert [check["name"] for check in result["checks"]] == [
        "fallback line",
        *names,
        "generate",
        *(f"{name} fallback" for name in names),
        "patches",
        "hook",
        "compile mode",
    ]
    # This stand-in has no torch_npu.npu.is_jit_compile_false(): reported, not failed.
    assert "not checked" in result["checks"][-1]["detail"]


@pytest.fixture(scope="module")
def toolkits(tmp_path_factory) -> Dict[str, Path]:
    """CANN toolkit stand-ins, with and without the binary kernels directory."""
    root = tmp_path_factory.mktemp("toolkits")
    (root / "kernels" / "opp" / "built-in" / "op_impl" / "ai_core" / "tbe" / "kernel" / "ascend910").mkdir(
        parents=True
    )
    (root / "none").mkdir()
    return {"kernels": root / "kernels", "none": root / "none"}


def compile_check(bin_dir: Path, env: Dict[str, str]) -> Dict[str, object]:
    done = sh(bin_dir, "python -m ascend_env verify --torch-npu 2.1.0.post6 --json", env)
    result = json.loads(done.stdout)
    (check,) = [check for check in result["checks"] if check["name"] == "compile mode"]
    return {"returncode": done.returncode, **check}


def test_verify_fails_on_online_compiles_and_passes_with_the_guard(shared, toolkits):
    """Simulated 910A: without the hook every steady decoding step would compile online (exit 1,
    fix: install); with the hook and the binary kernels none does; without the kernels the guard
    stays off and verify says to install them; on the default SoC it passes and says it assumed."""
    setup = sh(shared, "python -m ascend_env restore && python -m ascend_env install --patches always")
    assert setup.returncode == 0, setup.stderr
    on_910a = {"ASCEND_ENV_SIM_SOC": "910A", "ASCEND_TOOLKIT_HOME": str(toolkits["kernels"])}
    guarded = compile_check(shared, on_910a)
    assert guarded["ok"] and guarded["returncode"] == 0, guarded
    assert "no online compiles in the steady state of generate() on simulated Ascend910A" in guarded["detail"]
    unhooked = compile_check(shared, {**on_910a, "ASCEND_ENV_DISABLE": "1"})
    assert not unhooked["ok"] and unhooked["returncode"] == 1
    assert "would-be online compiles in the steady state" in unhooked["detail"]
    assert "ascend_env install" in unhooked["fix"]
    no_kernels = compile_check(shared, {**on_910a, "ASCEND_TOOLKIT_HOME": str(toolkits["none"])})
    assert not no_kernels["ok"] and "Ascend-cann-kernels-910a" in no_kernels["fix"]
    assumed = compile_check(shared, {})
    assert assumed["ok"] and "Ascend910B1 (assumed" in assumed["detail"]


@pytest.fixture(scope="module")
def torch_npu_without_cann(tmp_path_factory) -> Path:
    """The real torch_npu 2.1.0.post6 as it imports where CANN's environment was not set up."""
    root = tmp_path_factory.mktemp("torch-npu-no-cann")
    (root / "torch_npu" / "csrc" / "aten").mkdir(parents=True)
    (root / "torch_npu" / "csrc" / "aten" / "npu_native_functions.yaml").write_text(
        "supported:\n" + "".join(f"  - {op}\n" for op in sorted(optables.load("2.1.0.post6")))
    )
    (root / "torch_npu" / "__init__.py").write_text(
        "raise ImportError('libhccl.so: cannot open shared object file: No such file or directory')\n"
    )
    dist = root / "torch_npu-2.1.0.post6.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_npu\nVersion: 2.1.0.post6\n")
    return root


NPU_SMI = """\
| NPU     Name      | Health          | Power(W)   Temp(C)   Hugepages-Usage(page)   |
| 0       910A      | OK              | 71.4       42        0    / 0                |
"""


def test_verify_fails_where_the_machine_has_an_npu_and_torch_npu_cannot_start(
    shared, torch_npu_without_cann, tmp_path
):
    """The everyday mistake: CANN's set_env.sh not sourced on an Ascend machine. A pass on the
    simulator there would be a false green: verify fails, naming the cause and the fix."""
    assert sh(shared, "python -m ascend_env install --patches always").returncode == 0
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "npu-smi").write_text(f"#!/bin/sh\ncat <<'EOF'\n{NPU_SMI}EOF\n")
    (fake_bin / "npu-smi").chmod(0o755)
    toolkit = tmp_path / "Ascend" / "ascend-toolkit"
    (toolkit / "latest").mkdir(parents=True)
    (toolkit / "set_env.sh").write_text("export LD_LIBRARY_PATH=...\n")
    env = {"PYTHONPATH": str(torch_npu_without_cann), "ASCEND_TOOLKIT_HOME": str(toolkit / "latest")}
    on_npu = sh(shared, "python -m ascend_env verify", {**env, "PATH": f"{fake_bin}:{shared}:/usr/bin:/bin"})
    assert on_npu.returncode == 1, on_npu.stdout + on_npu.stderr
    assert on_npu.stdout.startswith("verify: FAILED on this machine's NPU: torch_npu did not start")
    assert (
        "FAIL  device: this machine has an NPU (npu-smi info lists an Ascend910A), but torch_npu did "
        "not start: ImportError: libhccl.so"
    ) in on_npu.stdout
    assert f"fix: source {toolkit / 'set_env.sh'} in this shell" in on_npu.stdout
    assert "passed" not in on_npu.stdout
    # The same environment in a Docker build step (no device, no npu-smi): the simulator, and why.
    build = sh(shared, "python -m ascend_env verify", env)
    assert build.returncode == 0, build.stdout + build.stderr
    assert "torch_npu is installed but did not start (ImportError: libhccl.so" in build.stdout
    no_npu = "this machine has no NPU (no /dev/davinci* devices, and npu-smi info does not answer)"
    assert no_npu in build.stdout
    # Its binary first, on the emulated CANN: this torch_npu has none, and the line says so.
    assert "the emulated CANN could not run it (" in build.stdout
    assert "holds no torch_npu binaries" in build.stdout
    # --device npu never falls back to the simulator, NPU or not.
    forced = sh(shared, "python -m ascend_env verify --device npu", env)
    assert forced.returncode == 1 and "FAIL  device: npu:0 did not start" in forced.stdout


def test_polar_on_a_release_without_it(shared):
    """torch_npu 2.2.0 has no polar: the hook registers ascend-env's and verify's polar step and
    check pass; with the hook off, the polar step's own calls fall back and verify fails."""
    assert sh(shared, "python -m ascend_env install --patches always").returncode == 0
    done = sh(shared, "python -m ascend_env verify --torch-npu 2.2.0 --json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert {"polar", "polar.out"} <= set(result["hook"]["registered"])
    checks = {check["name"]: check for check in result["checks"]}
    assert checks["polar"]["ok"] and checks["polar fallback"]["ok"]
    off = sh(shared, "python -m ascend_env verify --torch-npu 2.2.0", {"ASCEND_ENV_DISABLE": "1"})
    assert off.returncode == 1
    assert "FAIL  polar fallback: aten::polar.out fell back to the CPU in polar" in off.stdout
