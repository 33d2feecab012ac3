"""``audit --cann emulated`` end to end: the real torch_npu binary, unchanged, on the emulated CANN.

Before ascend-env's fix the seed script's generate() makes the binary print its own CAUTION line for
isin and the audit fails; after ``install --hook-only`` it prints none and the audit passes. An
entry point the emulated CANN lacks makes the run "not proven"; a wheel that cannot load here is
refused before anything runs; the wheel given by path needs no network (``PIP_NO_INDEX=1``).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from emulated_e2e import (
    CAUTION,
    ISIN_OUT,
    SEED,
    ascend_env,
    fitting_wheel,
    lacks_isin,
    make_env,
    misfit_wheel,
    site_of,
    wheel_params,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="torch_npu's wheels are for Linux")

HCCL = """
import os, sys
import torch, torch.distributed as dist
import torch_npu  # noqa: F401
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29593")
try:
    dist.init_process_group("hccl", rank=0, world_size=1)
    dist.all_reduce(torch.ones(3, device="npu"))
except Exception as exc:  # the emulated CANN has no collectives: the binary's call fails
    print("collective failed:", type(exc).__name__, file=sys.stderr)
"""


@pytest.fixture(scope="module")
def wheel() -> Path:
    return fitting_wheel()


def audit(python: Path, wheel: Path, tmp_path: Path, script: str, *more: str):
    path = tmp_path / "seed.py"
    path.write_text(script)
    done = ascend_env(
        python,
        "audit",
        "--cann",
        "emulated",
        "--torch-npu-wheel",
        str(wheel),
        "--report",
        str(tmp_path / "report.json"),
        *more,
        "--",
        str(python),
        str(path),
        cwd=tmp_path,
    )
    return done, json.loads((tmp_path / "report.json").read_text())


@pytest.mark.parametrize("release_wheel", wheel_params())
def test_before_install_the_binary_itself_says_whether_isin_falls_back(tmp_path, release_wheel):
    done, report = audit(Path(sys.executable), release_wheel, tmp_path, SEED)
    release = report["backend"]["release"]
    assert report["backend"]["kind"] == "emulated_cann" and report["backend"]["source"] == "wheel"
    assert report["not_proven"] == [] and report["per_process"][0]["torch_npu"] == "real"
    assert "tokens [[" in done.stdout  # generate() ran on the binary and matched the CPU
    assert report["cann"]["aclnn"], report["cann"]  # native ops reached the emulated CANN
    last = done.stdout.strip().splitlines()[-1]
    if not lacks_isin(release):  # a release with a native isin: no line, and it passes
        assert done.returncode == 0 and report["fallbacks"] == {} and "CAUTION" not in done.stderr
        return
    assert done.returncode == 1, done.stderr
    assert report["fallbacks"] == {ISIN_OUT: 1} and report["fallbacks_counted"] == "processes"
    assert done.stderr.count(CAUTION) == 1  # the binary's own line, copied through to the user
    assert last.startswith(
        f"audit failed on the real torch_npu {release} binary on the emulated CANN: "
        f"1 op fell back to the CPU ({ISIN_OUT}); fix: run python -m ascend_env install"
    )


@pytest.mark.parametrize("release_wheel", wheel_params())
def test_after_install_hook_only_no_caution_line_and_it_passes(tmp_path, release_wheel):
    wheel = release_wheel
    python = make_env(tmp_path / "env")
    installed = ascend_env(python, "install", "--hook-only", "--target", str(site_of(python)), cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr
    done, report = audit(python, wheel, tmp_path, SEED)
    assert done.returncode == 0, done.stdout + done.stderr
    assert report["fallbacks"] == {} and report["not_proven"] == [] and report["ok"] is True
    assert "CAUTION" not in done.stderr
    if lacks_isin(report["backend"]["release"]):  # the hook's isin, on the NPU's own kernels
        assert report["cann"]["aclnn"].get("aclnnEqTensor"), report["cann"]
    assert report["per_process"][0]["hook_events"], report["per_process"][0]
    assert done.stdout.strip().splitlines()[-1] == (
        f"audit passed on the real torch_npu {report['backend']['release']} binary on the emulated CANN: "
        "nothing fell back to the CPU in 1 audited Python process"
    )


def test_an_entry_point_the_emulated_cann_lacks_is_not_proven_and_named(tmp_path, wheel):
    done, report = audit(Path(sys.executable), wheel, tmp_path, HCCL)
    assert done.returncode == 1, done.stderr
    named = [name for name in report["unimplemented"] if name.startswith("Hccl")]
    assert named, report["unimplemented"]
    assert any(
        re.match(r"the emulated CANN does not implement Hccl\w+, which", n) for n in report["not_proven"]
    )
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("audit not proven on the real torch_npu") and named[0] in last
    assert report["ok"] is False


def test_a_wheel_for_another_python_or_torch_is_refused_before_anything_runs(tmp_path, wheel):
    other = misfit_wheel()
    marker = tmp_path / "ran"
    command = ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    refused = ascend_env(
        Path(sys.executable),
        "audit",
        "--cann",
        "emulated",
        "--torch-npu-wheel",
        str(other),
        *command,
        cwd=tmp_path,
    )
    assert refused.returncode == 2 and not marker.exists()
    assert "it cannot be imported here" in refused.stderr and "fix: give the torch_npu" in refused.stderr
    # A release for another torch is refused before pip is asked for it (no index here anyway).
    other_torch = ascend_env(
        Path(sys.executable), "audit", "--cann", "emulated", "--torch-npu", "2.3.1", *command, cwd=tmp_path
    )
    assert other_torch.returncode == 2 and not marker.exists()
    assert "is built for torch 2.3.1, and this Python has torch" in other_torch.stderr
    assert "pip could not fetch" not in other_torch.stderr


def test_without_network_only_a_wheel_by_path_runs(tmp_path, wheel):
    release = wheel.name.split("-")[1]
    command = ["audit", "--cann", "emulated", "--torch-npu", release, "--", "true"]
    empty = str(tmp_path / "empty-cache")
    missing = ascend_env(Path(sys.executable), *command, cwd=tmp_path, ASCEND_ENV_CACHE_DIR=empty)
    assert missing.returncode == 2
    assert f"pip could not fetch torch_npu {release}'s wheel" in missing.stderr
    assert "give it with --torch-npu-wheel PATH" in missing.stderr
