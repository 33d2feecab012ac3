"""Start-up safety: the hook never breaks a process, whatever state ascend_env is in.

Each case writes the hook's files (``ascend_env.hook.files.files()``) into a temporary site directory
and processes it with ``site.addsitedir`` in a fresh interpreter, as start-up would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from ascend_env.hook import files


def hook_site(root: Path) -> Path:
    site = root / "hook-site"
    site.mkdir()
    for name, data in files.files().items():
        (site / name).write_bytes(data)
    return site


def python(code: str, *flags: str, cwd: Path, extra_path: str = "") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "ASCEND_ENV_DISABLE"))}
    env["PYTHONPATH"] = extra_path
    return subprocess.run(
        [sys.executable, *flags, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(cwd),
        env=env,
    )


def test_hook_with_ascend_env_removed(tmp_path):
    site = hook_site(tmp_path)
    # -S: no site-packages, so no ascend_env (nor the checkout: cwd is elsewhere).
    result = python(
        f"""
        import importlib.util, site, sys
        assert importlib.util.find_spec("ascend_env") is None
        site.addsitedir({str(site)!r})
        print("alive", sorted(m for m in sys.modules if m.startswith("ascend_env")))
        """,
        "-S",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    # Only the self-contained hook module, waiting for torch_npu; ascend_env itself is never imported.
    assert result.stdout.strip() == "alive ['ascend_env_hook']"


def test_hook_with_a_broken_ascend_env(tmp_path):
    site = hook_site(tmp_path)
    broken = tmp_path / "broken"
    (broken / "ascend_env").mkdir(parents=True)
    (broken / "ascend_env" / "__init__.py").write_text("raise RuntimeError('half-installed ascend_env')\n")
    (broken / "ascend_env" / "runtime.py").write_text("def activate(:\n")  # a syntax error too
    result = python(
        f"""
        import site
        site.addsitedir({str(site)!r})
        import torch
        print("alive", torch.isin(torch.tensor([1, 2, 3]), torch.tensor([2])).tolist())
        """,
        cwd=tmp_path,
        extra_path=str(broken),
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout.strip() == "alive [False, True, False]"


def test_hook_exception_then_torch_npu_under_the_simulator(tmp_path):
    """isin's kernel module is broken when torch_npu is imported: the import succeeds, the error is
    recorded, isin on "npu" still runs (by the fallback), and the other fixes are registered."""
    site = hook_site(tmp_path)
    fake = tmp_path / "fake_torch_npu"
    (fake / "torch_npu").mkdir(parents=True)
    (fake / "torch_npu" / "__init__.py").write_text(
        "from ascend_env import sim\nsim.enable(torch_npu='2.1.0.post6')\n__version__ = '2.1.0.post6'\n"
    )
    result = python(
        f"""
        import site, sys
        site.addsitedir({str(site)!r})
        import ascend_env_hook as _boot
        from ascend_env.hook import runtime
        assert _boot.STATE.started and _boot.STATE.finder in sys.meta_path
        sys.modules["ascend_env.kernels.isin"] = None  # importing the kernel now raises
        import torch, torch_npu
        assert _boot.STATE.events == ["torch_npu: import"], _boot.STATE.events
        errors = runtime.status()["errors"]  # the hook's and the registration's (one per fix)
        assert any("kernels.isin" in e for e in errors), errors
        elements = torch.tensor([[1, 5, 9], [2, 5, 7]])
        tests = torch.tensor([5, 7, 11])
        got = torch.isin(elements.to("npu"), tests.to("npu"))
        assert got.device.type == "npu"
        assert torch.equal(got.cpu(), torch.isin(elements, tests))
        registered = runtime.status()["registered"]  # a broken kernel stops its own fix alone
        isin = [op for op in registered if op.startswith("isin")]
        print("alive", isin, "repeat_interleave.Tensor" in registered)
        """,
        cwd=tmp_path,
        extra_path=str(fake),
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout.strip().splitlines()[-1] == "alive [] True"
