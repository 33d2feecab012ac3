"""``audit --paths --cann emulated``: the real torch_npu binary's online compiles and aclnn calls per
decoding step, measured on the emulated CANN, beside the dispatch-path model's figures for the
same script (a second run of it on the simulator).

On a 910A (JIT compile on by default) the seed script's generate() compiles online in every step:
``--fail-on compiles`` fails on the measured counts. After ``install --hook-only`` the compile
guard turns JIT compile off (the emulated toolkit has binary kernels): the binary compiles nothing,
runs aclnn kernels instead, and the same audit passes. On a 910B nothing compiles, and each step's
aclnn calls are at least the model's op_api ops.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
from emulated_e2e import SEED, ascend_env, fitting_wheel, make_env, site_of

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="torch_npu's wheels are for Linux")


@pytest.fixture(scope="module")
def wheel() -> Path:
    return fitting_wheel()


def audit(python: Path, wheel: Path, tmp_path: Path, soc: str, *more: str) -> Tuple[Any, Dict[str, Any]]:
    script = tmp_path / "seed.py"
    script.write_text(SEED)
    report = tmp_path / f"report-{soc}.json"
    done = ascend_env(
        python,
        "audit",
        "--cann",
        "emulated",
        "--torch-npu-wheel",
        str(wheel),
        "--paths",
        "--soc",
        soc,
        "--report",
        str(report),
        *more,
        "--",
        str(python),
        str(script),
        cwd=tmp_path,
    )
    return done, json.loads(report.read_text())


def on_npu(report: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The seed script's generate() on the npu device (the other runs on the CPU), measured, and
    the model's run of the same call."""
    measured = report["paths_measured"]["generate"]
    assert len(measured) == len(report["paths"]["generate"]) == 2, report["paths_measured"]
    ours = max(measured, key=lambda run: sum(s["aclnn"] + s["aclop"] for s in run["steps"]))
    index = measured.index(ours)
    theirs = report["paths"]["generate"][index]
    assert (theirs["site"], theirs["mode"]) == (ours["site"], ours["mode"])
    return ours, theirs


def span(values: List[int]) -> str:
    return str(min(values)) if min(values) == max(values) else f"{min(values)}-{max(values)}"


def compiles(run: Dict[str, Any]) -> List[int]:
    return [step["compiles"] for step in run["steps"]]


def test_paths_on_910a_the_binary_compiles_online_until_install_turns_jit_off(
    tmp_path: Path, wheel: Path
) -> None:
    before, report = audit(Path(sys.executable), wheel, tmp_path, "910A", "--fail-on", "compiles")
    assert before.returncode == 1, before.stdout + before.stderr
    assert report["paths_measured"]["soc"] == "Ascend910A" and report["paths_model"] is None
    ours, theirs = on_npu(report)
    assert len(ours["steps"]) == len(theirs["steps"]) == 8
    measured, model = compiles(ours), [step["would_compile"] for step in theirs["steps"]]
    assert min(measured[2:]) > 0 and ours["steady_compiles"]["total"] == sum(measured[2:])
    # the binary compiles what the model counts and torch_npu's helper kernels besides (Cast,
    # Transpose, AsStrided, ...: tests/cann/test_paths_binary.py pins them op by op)
    assert all(m <= got <= 1.5 * m for got, m in zip(measured, model)), (measured, model)
    text = before.stdout
    assert "measured on the real torch_npu" in text and "SoC Ascend910A" in text
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("measured on the real torch_npu"))
    header = next(i for i in range(start, len(lines)) if f"generate() at {ours['site']} (" in lines[i])
    row = next(line for line in lines[header:] if line.strip().startswith("2-7"))
    assert row.split()[1:3] == [span(measured[2:]), span(model[2:])]  # measured, then the model's
    last = text.strip().splitlines()[-1]
    assert last.startswith("audit failed on the real torch_npu") and (
        f"the real binary made {sum(measured[2:])} online compiles" in last
    ), last
    assert "measured on the emulated CANN" in last and "fix: run: python -m ascend_env install" in last

    python = make_env(tmp_path / "env")
    installed = ascend_env(python, "install", "--hook-only", "--target", str(site_of(python)), cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr
    after, fixed = audit(python, wheel, tmp_path, "910A", "--fail-on", "compiles")
    assert after.returncode == 0, after.stdout + after.stderr
    ours, theirs = on_npu(fixed)
    assert compiles(ours) == [0] * 8 and all(step["aclnn"] > 0 for step in ours["steps"])
    assert [step["would_compile"] for step in theirs["steps"]] == [0] * 8  # the model agrees
    assert (
        after.stdout.strip()
        .splitlines()[-1]
        .startswith(
            "audit passed on the real torch_npu "
            + fixed["backend"]["release"]
            + " binary on the emulated CANN "
            "(--fail-on compiles)"
        )
    )


def test_paths_on_910b_no_compile_and_at_least_one_aclnn_call_per_modelled_op(
    tmp_path: Path, wheel: Path
) -> None:
    done, report = audit(Path(sys.executable), wheel, tmp_path, "910B1", "--fail-on", "compiles")
    assert done.returncode == 0, done.stdout + done.stderr
    ours, theirs = on_npu(report)
    assert compiles(ours) == [0] * 8
    for step, model in zip(ours["steps"], theirs["steps"]):
        ops = model["paths"].get("op_api", 0)
        # each op_api op is one aclnn call or more (InplaceCopy of a view, Cast): never fewer
        assert ops <= step["aclnn"] <= ops * 1.25, (step["aclnn"], ops)
