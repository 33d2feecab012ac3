"""``verify`` on the real torch_npu binary on the emulated CANN, end to end, in throwaway environments
with the real wheel installed (no CANN, no NPU: a Docker build step's machine).

``--cann emulated`` asks for it; ``verify`` alone chooses it where torch_npu cannot start on a
machine without an NPU, and says so. Before the fix the binary's CAUTION line for isin fails it;
after ``install --hook-only`` no line comes, and the verdict is green unless an entry point the
emulated CANN lacks was reached (then it is "not proven", never green).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from emulated_e2e import ISIN_OUT, ascend_env, fitting_wheel, make_env, site_of

from ascend_env.kernels import registry

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="torch_npu's wheels are for Linux")


@pytest.fixture(scope="module")
def python(tmp_path_factory) -> Path:
    return make_env(tmp_path_factory.mktemp("verify-emulated"), fitting_wheel())


def release_of(python: Path) -> str:
    return next(site_of(python).glob("torch_npu-*.dist-info")).name[len("torch_npu-") : -len(".dist-info")]


def verify(python: Path, *args: str):
    done = ascend_env(python, "verify", "--json", *args, cwd=python.parent.parent)
    return done, json.loads(done.stdout)


def failed(result):
    return {check["name"]: check["detail"] for check in result["checks"] if not check["ok"]}


def test_the_automatic_choice_runs_the_real_binary_and_says_so(python):
    done, result = verify(python)
    assert done.returncode == 1, done.stderr  # unfixed: isin falls back
    assert result["schema"] == 2
    assert result["simulator_reason"].startswith(
        "torch_npu is installed but did not start (ImportError: libhccl.so"
    )
    assert result["fallbacks"][ISIN_OUT]["line"] is True
    assert ISIN_OUT in failed(result)["isin fallback"]
    first = ascend_env(python, "verify", cwd=python.parent.parent).stdout.splitlines()[0]
    # Every entry point the smoke test reaches is emulated (isin.Scalar_Tensor's
    # aclnnIsInScalarTensor included): the real binary ran, and the line says so.
    assert result["device"] == "emulated_cann" and result["not_proven"] == [], result["not_proven"]
    assert result["simulator_reason"].endswith(": the real binary ran on the emulated CANN")
    assert result["fallbacks"][ISIN_OUT]["count"] is None  # the binary's line, no simulator count
    assert first.startswith(f"verify: FAILED on the real torch_npu {release_of(python)} binary")
    assert "binary on the emulated CANN, not a real NPU: torch_npu is installed but did not start" in first
    # Asked for explicitly, it runs there whatever it proves, and is never green before the fix.
    done, explicit = verify(python, "--cann", "emulated")
    assert explicit["device"] == "emulated_cann" and done.returncode == 1
    assert (
        explicit["fallbacks"][ISIN_OUT]["line"] is True and explicit["fallbacks"][ISIN_OUT]["count"] is None
    )


def test_after_install_hook_only_the_binary_prints_no_caution_line(python):
    installed = ascend_env(
        python, "install", "--hook-only", "--target", str(site_of(python)), cwd=python.parent
    )
    assert installed.returncode == 0, installed.stderr
    try:
        done, result = verify(python, "--cann", "emulated")
        assert (
            result["device"] == "emulated_cann" and result["simulator_reason"] == "--cann emulated was given"
        )
        assert "isin fallback" not in failed(result) and "hook" not in failed(result)
        assert ISIN_OUT not in result["fallbacks"] and "CAUTION" not in done.stderr
        assert "isin.Tensor_Tensor" in result["hook"]["registered"]
        # Every fix the release needs ran on the binary against the CPU (or, on torch 2.3.1, whose
        # CPU has no fused AdamW kernel, against AdamW's unfused step), torchvision's where it is
        # installed: none is "not tried".
        needed = {
            fix.name
            for fix in registry.FIXES
            if fix.needed_by(release_of(python))
            and (not fix.requires or importlib.util.find_spec(fix.requires))
        }
        details = {check["name"]: check["detail"] for check in result["checks"]}
        assert needed <= set(details), needed - set(details)
        assert [name for name in needed if details[name].startswith("not tried")] == [], details
        # Green: every entry point the binary reached is emulated, and every check passes on it.
        assert failed(result) == {} and result["not_proven"] == [] and result["ok"] is True
        assert done.returncode == 0
        # A 910A compiles online by default: the hook's guard turns that off (aclSetCompileopt), and
        # the verdict line says the real binary passed.
        text = ascend_env(python, "verify", "--cann", "emulated", "--soc", "Ascend910A", cwd=python.parent)
        lines = text.stdout.splitlines()
        assert text.returncode == 0, text.stdout + text.stderr[-3000:]
        assert lines[0].startswith(
            f"verify: passed on the real torch_npu {release_of(python)} binary on the emulated CANN, "
            "not a real NPU"
        ), lines[0]
        assert any(line.startswith("  ok    compile mode: ") for line in lines), lines
    finally:
        ascend_env(python, "restore", "--target", str(site_of(python)), cwd=python.parent)


def test_cann_emulated_refuses_a_simulated_release(python):
    done = ascend_env(python, "verify", "--cann", "emulated", "--torch-npu", "2.1.0.post6", cwd=python.parent)
    assert done.returncode == 2 and "takes neither --torch-npu" in done.stderr
