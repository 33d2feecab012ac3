"""``ascend-env verify`` end to end without torch: the CLI's exit codes with a torch that cannot be
imported (which also proves the parent never imports torch), and its usage errors."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest
from verify_support import SILENCED, failed

from ascend_env.checks import smoke, verify_text


def test_a_python_without_transformers_exits_2_with_its_fix(tmp_path):
    """torch imports, transformers is not installed: the smoke test says so before the simulator
    starts (not a ModuleNotFoundError to report)."""

    if importlib.util.find_spec("transformers") is not None:
        pytest.skip("transformers is installed in this Python")
    fake = tmp_path / "fake"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text("")
    code, out, err, _ = run_verify("--simulate", "--json", env={"PYTHONPATH": str(fake)})
    assert code == 2, err
    result = json.loads(out)
    assert result["error"] == "EnvironmentProblem"
    assert result["problem"].startswith("transformers is not installed for ")
    assert "reaches torch_npu through transformers' check and runs its generate()" in result["problem"]
    assert result["fix"].startswith("install the transformers your programs run (pip install transformers;")
    assert "[sim]" in result["fix"] and "report it" not in result["fix"]


@pytest.fixture
def broken_torch(tmp_path: Path) -> Path:
    """A directory with a ``torch`` whose import fails, noting each importing pid (and autoload)."""
    root = tmp_path / "broken"
    (root / "torch").mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text(
        "import os\n"
        f"with open({str(tmp_path / 'imported')!r}, 'a') as f: f.write(f'{{os.getpid()}}\\n')\n"
        "raise ImportError('this torch is broken (autoload=' + "
        "os.environ.get('TORCH_DEVICE_BACKEND_AUTOLOAD', 'unset') + ')')\n"
    )
    return root


def run_verify(*args: str, env: Optional[Dict[str, str]] = None, cwd: Optional[Path] = None) -> tuple:
    """``python -m ascend_env verify ARGS``: (returncode, stdout, stderr, pid)."""
    full = {k: v for k, v in os.environ.items() if k not in smoke.SILENCERS}
    for name, value in (env or {}).items():
        full[name] = value + os.pathsep + full[name] if name == "PYTHONPATH" and full.get(name) else value
    command = [sys.executable, "-m", "ascend_env", "verify", *args]
    process = subprocess.Popen(
        command,
        env=full,
        cwd=cwd,
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = process.communicate(timeout=300)
    return process.returncode, out, err, process.pid


def imported_by(tmp_path: Path) -> List[int]:
    marker = tmp_path / "imported"
    return [int(line) for line in marker.read_text().split()] if marker.exists() else []


def test_a_broken_torch_import_fails_and_the_parent_never_imports_torch(tmp_path, broken_torch):
    code, out, err, pid = run_verify("--simulate", "--json", env={"PYTHONPATH": str(broken_torch)})
    assert code == 1, err
    result = json.loads(out)
    assert result["ok"] is False and result["device"] == "simulator"
    assert "import torch failed: ImportError: this torch is broken (autoload=0)" in failed(result)["torch"]
    importers = imported_by(tmp_path)
    assert importers and pid not in importers


def test_a_torch_npu_that_does_not_start_falls_back_to_the_simulator(tmp_path, broken_torch):
    (broken_torch / "torch_npu").mkdir()
    (broken_torch / "torch_npu" / "__init__.py").write_text("raise ImportError('libhccl.so: cannot open')\n")
    code, out, err, _ = run_verify("--json", env={"PYTHONPATH": str(broken_torch)})
    assert code == 1, err
    result = json.loads(out)
    # The real device was tried first (torch imported as usual), then the simulator with autoload off.
    assert result["simulator_reason"].startswith(
        "torch_npu is installed but did not start (ImportError: this torch is broken (autoload=unset)"
    )
    assert "(autoload=0)" in failed(result)["torch"]
    # Then the real binary on the emulated CANN where this ascend-env ships it, which needs torch too.
    from ascend_env.sim import emulated

    if emulated.available() is None:
        assert (
            "; the emulated CANN could not run it (ImportError: this torch is broken"
            in result["simulator_reason"]
        )
        assert len(imported_by(tmp_path)) == 3
    else:
        assert len(imported_by(tmp_path)) == 2
    assert "on the simulator" in verify_text.format_text(result)


def test_a_silencer_the_target_python_sets_itself_fails(tmp_path, broken_torch):
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nTORCH_CPP_LOG_LEVEL=ERROR exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    code, out, err, _ = run_verify(
        "--simulate", "--python", str(wrapper), "--json", env={"PYTHONPATH": str(broken_torch)}
    )
    assert code == 1, err
    assert "TORCH_CPP_LOG_LEVEL=ERROR was still set" in failed(json.loads(out))["fallback line"]


def test_silencers_in_the_parent_do_not_reach_the_child(tmp_path, broken_torch):
    code, out, err, _ = run_verify("--simulate", "--json", env={"PYTHONPATH": str(broken_torch), **SILENCED})
    assert code == 1, err
    assert "fallback line" not in failed(json.loads(out))


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--torch-npu", "9.9.9"], "no op table for torch_npu '9.9.9'"),
        (["--python", "/nonexistent/python"], "not an executable file"),
        (["--bogus"], "unrecognized arguments"),
    ],
)
def test_usage_errors_exit_2(args, needle):
    code, out, err, _ = run_verify(*args)
    assert code == 2
    assert needle in err


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        ([], {"ASCEND_ENV_SOC": "garbage"}, "unknown Ascend SoC 'garbage' in $ASCEND_ENV_SOC."),
        (["--soc", "91OB"], {}, "unknown Ascend SoC '91OB'. Did you mean '910B'?"),
    ],
)
def test_an_unknown_soc_fails_before_the_smoke_test(args, env, said):
    code, out, err, _ = run_verify("--simulate", *args, env=env)
    assert code == 2 and out == ""
    assert err.splitlines()[0] == f"ascend-env: {said}", err
    assert "smoke test" not in err  # nothing ran first


def test_the_help_names_the_table_verify_runs_by_default():
    """Without torch_npu and --torch-npu, the oldest release's table (which lacks what the affected
    releases lack), as --help says: it once said the newest."""

    from ascend_env.checks import tables
    from ascend_env.cli import build_parser

    if importlib.util.find_spec("torch_npu") is not None:
        pytest.skip("torch_npu is installed: its own op lists are the default")
    assert tables.choose_table(None).chosen == "oldest"
    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    help_text = " ".join(subparsers.choices["verify"].format_help().split())
    assert "else the oldest known release, which lacks what the affected releases lack" in help_text
    assert "newest" not in help_text


def test_a_python_without_ascend_env_exits_2(tmp_path):
    wrapper = tmp_path / "python"
    # -S: no site-packages; -E: no PYTHONPATH. Nothing but the standard library is importable.
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -S -E "$@"\n')
    wrapper.chmod(0o755)
    code, out, err, _ = run_verify("--simulate", "--python", str(wrapper), "--json", cwd=tmp_path)
    assert code == 2, err
    result = json.loads(out)
    assert result["error"] == "EnvironmentProblem" and "cannot import ascend_env" in result["problem"]
    # The fix installs this ascend-env (the checkout it runs from, or the wheel it was installed
    # from), never a name on an index.
    from ascend_env import origin

    assert result["fix"] == f"install this ascend-env into it: {origin.install_command(str(wrapper))}"
    where = origin.source()
    assert where is not None and where in result["fix"]
    assert "pip install ascend-env" not in result["fix"]
