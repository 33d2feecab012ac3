"""What the end-to-end tests of ``--cann emulated`` share: the real torch_npu wheel that fits this
Python and torch (from ``$ASCEND_ENV_TORCH_NPU_WHEELS``, a directory of wheels as pip downloaded
them), the reasons to skip where it cannot run, throwaway environments, and the seed script.

They run in a Python 3.8 venv with torch 2.1.0 (CUDA build, on the CPU), transformers 4.46.3 and
this checkout installed; torch_npu's 2.1.0.post6 wheel in that directory. Nothing is fetched: the
tests set ``PIP_NO_INDEX=1``.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

ROOT = Path(__file__).resolve().parents[2]
WHEELS = "ASCEND_ENV_TORCH_NPU_WHEELS"
TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"
ISIN_OUT = "aten::isin.Tensor_Tensor_out"
CAUTION = "[W VariableFallbackKernel.cpp:51] Warning: CAUTION: The operator 'aten::isin.Tensor_Tensor_out'"

# A transformers generate() on the npu device, as users run it, checked against the CPU.
SEED = """
import torch
import torch_npu  # noqa: F401  (before torch_npu 2.5.1 a script imports it itself)
from ascend_env.checks.smoke import GENERATE_OPTIONS, PROMPT, tiny_llama

model = tiny_llama()
ids = torch.tensor(PROMPT)
with torch.no_grad():
    expected = model.generate(ids, attention_mask=torch.ones_like(ids), **GENERATE_OPTIONS)
    on_npu = ids.to("npu")
    got = model.to("npu").generate(on_npu, attention_mask=torch.ones_like(on_npu), **GENERATE_OPTIONS)
assert got.device.type == "npu", got.device
assert torch.equal(got.cpu(), expected), (got.cpu().tolist(), expected.tolist())
print("tokens", expected.tolist())
"""


def _torch() -> Optional[str]:
    try:
        return importlib.metadata.version("torch").split("+", 1)[0]
    except importlib.metadata.PackageNotFoundError:
        return None


def _why_not() -> Optional[str]:
    """Why the real binary cannot run on the emulated CANN here; None where it can."""
    from ascend_env.sim import emulated

    why = emulated.available()
    if why is not None:
        return f"the emulated CANN cannot run: {why}"
    if _torch() is None:
        return "torch is not installed: the real torch_npu needs the torch it is built for"
    if not os.environ.get(WHEELS):
        return f"${WHEELS} names no directory of torch_npu wheels (e.g. torch_npu 2.1.0.post6's cp38 wheel)"
    if not (shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")):
        return "no C++ compiler: the emulated CANN is built on first use"
    return None


def fitting_wheels() -> List[Path]:
    """Every torch_npu wheel in ``$ASCEND_ENV_TORCH_NPU_WHEELS`` for this Python and torch, oldest first."""
    if _why_not() is not None:
        return []
    from ascend_env.checks import torch_npu_wheel

    found: List[Path] = []
    for path in sorted(Path(os.environ[WHEELS]).glob("torch_npu-*.whl")):
        release, tags = torch_npu_wheel.parse_wheel_name(path.name)
        if TAG in tags and torch_npu_wheel.needed_torch(release) == _torch():
            found.append(path)
    return found


def wheel_params() -> List[Any]:
    """``pytest.param`` per fitting wheel (its release as the id), or one that skips, saying why."""
    why = _why_not() or f"no torch_npu wheel in ${WHEELS} for {TAG} and torch {_torch()}"
    found = fitting_wheels()
    if not found:
        return [pytest.param(None, marks=pytest.mark.skip(reason=why), id="no-wheel")]
    return [pytest.param(path, id=path.name.split("-")[1]) for path in found]


def fitting_wheel() -> Path:
    """The newest fitting wheel without a native isin (the seed script's case), else the newest;
    skip, saying why, where there is none."""
    found = fitting_wheels()
    if not found:
        pytest.skip(_why_not() or f"no torch_npu wheel in ${WHEELS} for {TAG} and torch {_torch()}")
    lacking = [path for path in found if lacks_isin(path.name.split("-")[1])]
    return (lacking or found)[-1]


def lacks_isin(release: str) -> bool:
    """Whether torch_npu ``release`` has no NPU kernel for isin.Tensor_Tensor_out (the registry's word)."""
    from ascend_env.kernels.registry import OVERLOADS

    return any(op.op == "isin.Tensor_Tensor_out" and op.needed_by(release) for op in OVERLOADS)


def misfit_wheel() -> Path:
    """A torch_npu wheel in the directory that does not fit this Python (another cpXY), else skip."""
    fitting_wheel()  # skips where nothing can run
    for path in sorted(Path(os.environ[WHEELS]).glob("torch_npu-*.whl")):
        if f"-{TAG}-" not in path.name:
            return path
    pytest.skip(f"every wheel in ${WHEELS} is for {TAG}: none to refuse")
    raise AssertionError("unreachable")


def make_env(root: Path, torch_npu: Optional[Path] = None) -> Path:
    """A throwaway venv (no pip) with its own copy of this environment's transformers release, that
    reaches the other packages and this checkout through a ``.pth`` line (after its own
    site-packages), so that ascend-env installs its hook there alone; with ``torch_npu``, that wheel
    installed in it. Returns its python."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    site = next(root.glob("lib/python*/site-packages"))
    ours = [p for p in sys.path if p.endswith("-packages") and Path(p).is_dir()]
    (site / "zz_dependencies.pth").write_text("\n".join([str(ROOT), *ours]) + "\n")
    transformers = f"transformers=={importlib.metadata.version('transformers')}"
    for what in [transformers] + ([str(torch_npu)] if torch_npu is not None else []):
        pip = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-compile",
            "--target",
            str(site),
        ]
        subprocess.run([*pip, what], check=True, capture_output=True, timeout=600)
    return root / "bin" / "python"


def site_of(python: Path) -> Path:
    return next(python.parent.parent.glob("lib/python*/site-packages"))


def environment(**extra: str) -> Dict[str, str]:
    """This environment, no network for pip, and nothing that silences torch_npu's warnings."""
    env = dict(os.environ)
    for name in ("RANK", "TORCH_NPU_DISABLED_WARNING", "TORCH_NPU_WARNING_DISABLE", "TORCH_CPP_LOG_LEVEL"):
        env.pop(name, None)
    env.update({"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "", **extra})
    return env


def ascend_env(python: Path, *args: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess:
    """``python -m ascend_env ARGS`` in ``cwd``, its output captured."""
    return subprocess.run(
        [str(python), "-m", "ascend_env", *args],
        env=environment(**extra),
        cwd=str(cwd),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=900,
    )
