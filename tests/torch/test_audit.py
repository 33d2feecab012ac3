"""``ascend-env audit``: runs a command on the simulated NPU and reports every CPU fallback."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
import yaml

from ascend_env.cli import main
from ascend_env.sim import optables

ISIN_OUT = "aten::isin.Tensor_Tensor_out"

SCRIPT = textwrap.dedent(
    """
    import subprocess, sys, torch
    import torch_npu  # as a script must on a real NPU before torch_npu 2.5.1 (the simulated one here)
    x = torch.tensor([1, 2, 3], device="npu")
    assert (x * 2).device.type == "npu"
    for _ in range(2):
        assert torch.isin(x, x[1:]).cpu().tolist() == [False, True, True]
    if "--child" in sys.argv:
        subprocess.run([sys.executable, __file__], check=True)
    sys.exit(int(sys.argv[-1]) if sys.argv[-1].isdigit() else 0)
    """
)


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "my_script.py"
    path.write_text(SCRIPT, encoding="utf-8")
    return str(path)


def audit(capsys, *args):
    code = main(["audit", "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def test_old_release_reports_isin_and_fails(capfd, script):
    code = main(["audit", "--json", "--torch-npu", "2.1.0.post6", "--", sys.executable, script])
    captured = capfd.readouterr()
    report = json.loads(captured.out)
    assert code == 1 and report["ok"] is False
    assert report["table"] == "2.1.0.post6" and report["returncode"] == 0
    assert report["fallbacks"] == {ISIN_OUT: 2} and report["processes"] == 1
    assert captured.err.count("CAUTION: The operator 'aten::isin.Tensor_Tensor_out'") == 1


def test_every_python_process_of_the_command_is_audited(capsys, script):
    code, report = audit(capsys, "--torch-npu", "2.2.0", "--", sys.executable, script, "--child")
    assert code == 1
    assert report["processes"] == 2 and report["fallbacks"] == {ISIN_OUT: 4}


def test_fixed_release_passes_and_text_output_says_so(capsys, script):
    code = main(["audit", "--torch-npu", "2.4.0", "--", sys.executable, script])
    out = capsys.readouterr().out
    assert code == 0
    assert out.splitlines() == [
        "audit: torch_npu 2.4.0 op table on the simulated NPU",
        "no op fell back to the CPU (1 Python process)",
        "audit passed on the simulator (torch_npu 2.4.0's op table): nothing fell back to the CPU "
        "in 1 audited Python process",
    ]


def test_failing_command_fails_the_audit(capsys, script):
    code, report = audit(capsys, "--torch-npu", "2.4.0", "--", sys.executable, script, "3")
    assert code == 1 and report["returncode"] == 3 and report["fallbacks"] == {}


def test_default_is_the_installed_torch_npu_yaml(capsys, tmp_path, monkeypatch, script):
    # A torch_npu 2.4.0 whose op lists lack isin: the audit must follow its YAML, not the table.
    site = tmp_path / "site"
    aten = site / "torch_npu" / "csrc" / "aten"
    aten.mkdir(parents=True)
    (site / "torch_npu" / "__init__.py").write_text("raise ImportError('never imported')\n")
    info = site / "torch_npu-2.4.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_npu\nVersion: 2.4.0\n")
    ops = sorted(op for op in optables.load("2.4.0") if not op.startswith("isin"))
    (aten / "npu_native_functions.yaml").write_text(yaml.safe_dump({"backend": "NPU", "supported": ops}))
    monkeypatch.syspath_prepend(str(site))
    code, report = audit(capsys, "--", sys.executable, script)
    assert code == 1
    assert report["table"].startswith("2.4.0 (installed, ") and str(site) in report["table"]
    assert report["fallbacks"] == {ISIN_OUT: 2}


def test_without_torch_npu_the_oldest_table_runs_and_says_so(capsys, script):
    # A newer table (2.14.0 has an NPU isin) would hide the fallback of the affected releases.
    code, report = audit(capsys, "--", sys.executable, script)
    assert report["table"] == optables.releases()[0] == "2.1.0.post3" and report["table_chosen"] == "oldest"
    assert code == 1 and report["fallbacks"] == {ISIN_OUT: 2}
    main(["audit", "--", sys.executable, script])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(
        "audit: torch_npu 2.1.0.post3 op table on the simulated NPU (no --torch-npu and "
        "no torch_npu installed: the oldest known release"
    )


def test_command_without_python_is_an_error(capsys):
    code = main(["audit", "--torch-npu", "2.4.0", "--", "true"])
    assert code == 2
    assert "no Python process of the command ran on the simulated NPU" in capsys.readouterr().err
