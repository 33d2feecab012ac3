"""The audited process's start-up with torch: the simulator starts when torch has executed, the
simulated torch_npu is found as a real one would be (before torch too, ahead of an installed one),
torch's device-backend autoload is modelled, and the startup hook hears of torch_npu by its import."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from ascend_env.cli import main
from ascend_env.hook import files

ISIN = "aten::isin.Tensor_Tensor_out"
# torch >= 2.5 loads torch.backends entry points at import (torch/__init__.py).
TORCH_AUTOLOADS = hasattr(torch, "_import_device_backends")

USES_NPU = textwrap.dedent(
    """
    import sys
    {first}
    x = torch.tensor([1, 2, 3], device="npu")
    print(int(torch.isin(x, x[1:]).sum()), flush=True)  # before the stderr line, buffered or not
    print("torch_npu" in sys.modules, file=sys.stderr)
    """
)


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def audit_json(capfd, *args: str):
    code = main(["audit", "--json", *args])
    captured = capfd.readouterr()
    return code, json.loads(captured.out), captured.err


def test_torch_npu_before_torch(capfd, tmp_path):
    script = write(tmp_path, "s.py", USES_NPU.format(first="import torch_npu\nimport torch"))
    code, report, err = audit_json(capfd, "--torch-npu", "2.1.0.post6", "--", sys.executable, script)
    assert code == 1 and report["fallbacks"] == {ISIN: 1} and report["without_torch_npu"] == []
    (process,) = report["per_process"]
    assert process["torch"] is True and process["torch_npu"] == "simulated" and process["npu_used"] is True
    assert "2\n" in err  # the command's stdout goes to stderr under --json


def test_using_npu_without_torch_npu_on_an_old_release_is_a_finding(capfd, tmp_path):
    script = write(tmp_path, "s.py", USES_NPU.format(first="import torch"))
    code = main(["audit", "--torch-npu", "2.4.0", "--", sys.executable, script])
    out = capfd.readouterr().out.splitlines()
    assert code == 1 and out[0] == "2"  # the script's own output, then the report
    lines = out[out.index("audit: torch_npu 2.4.0 op table on the simulated NPU") :]
    assert lines[1] == "1 Python process used the npu device without importing torch_npu:"
    assert "on torch_npu 2.4.0 this script fails on a real NPU: add `import torch_npu`" in lines[2]
    assert lines[-1] == (
        "audit failed on the simulator (torch_npu 2.4.0's op table): 1 process used the npu device "
        "without importing "
        "torch_npu; fix: add `import torch_npu` before the script uses the npu device"
    )


@pytest.mark.parametrize("switch", [None, "0"])
def test_autoload_of_a_release_from_2_5_1(capfd, tmp_path, monkeypatch, switch):
    """torch_npu 2.5.1 loads itself at `import torch` on torch >= 2.5 (its torch.backends entry
    point), unless TORCH_DEVICE_BACKEND_AUTOLOAD=0: there a script need not import torch_npu."""
    if switch is not None:
        monkeypatch.setenv("TORCH_DEVICE_BACKEND_AUTOLOAD", switch)
    script = write(tmp_path, "s.py", USES_NPU.format(first="import torch"))
    code, report, err = audit_json(capfd, "--torch-npu", "2.5.1", "--", sys.executable, script)
    (process,) = report["per_process"]
    autoloads = TORCH_AUTOLOADS and switch is None
    assert process["autoload"] is autoloads
    assert process["torch_npu"] == ("simulated" if autoloads else None)
    assert err.splitlines()[-1] == str(autoloads)  # what the script saw in sys.modules
    assert report["without_torch_npu"] == ([] if autoloads else [process["pid"]])
    assert code == (0 if autoloads else 1)


def test_the_hook_hears_of_the_simulated_torch_npu_by_its_import(capfd, tmp_path):
    """transformers' availability check probes for torch_npu, then imports it: the startup hook
    must hear of it, and each process's report copies the hook's events."""
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    (hook_dir / files.MODULE_FILE).write_bytes(files.files()[files.MODULE_FILE])
    script = write(
        tmp_path,
        "s.py",
        textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(hook_dir)!r})
        import ascend_env_hook  # as the .pth line does at start-up
        from transformers.utils import is_torch_npu_available
        assert is_torch_npu_available()
        import torch
        x = torch.tensor([1, 2, 3], device="npu")
        print(int(torch.isin(x, x[1:]).sum()))
    """),
    )
    code, report, _ = audit_json(capfd, "--torch-npu", "2.1.0.post6", "--", sys.executable, script)
    (process,) = report["per_process"]
    assert process["hook_events"] == ["torch_npu: import after 1 probe (simulated)"]
    # The hook registered its NPU isin: nothing falls back.
    assert code == 0 and report["fallbacks"] == {}, report


def test_a_real_torch_npu_that_cannot_start_is_shadowed(capfd, tmp_path, monkeypatch):
    """A real torch_npu cannot run beside the simulator (without CANN it dies on libhccl.so):
    audited processes import the simulated one."""
    site = tmp_path / "site"
    (site / "torch_npu").mkdir(parents=True)
    (site / "torch_npu" / "__init__.py").write_text(
        "raise ImportError('libhccl.so: cannot open shared object file: No such file or directory')\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(site) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    script = write(tmp_path, "s.py", USES_NPU.format(first="import torch, torch_npu"))
    code, report, err = audit_json(capfd, "--torch-npu", "2.1.0.post6", "--", sys.executable, script)
    assert "libhccl" not in err and report["returncode"] == 0
    assert report["per_process"][0]["torch_npu"] == "simulated" and report["fallbacks"] == {ISIN: 1}


def test_a_process_that_never_imports_torch_is_counted_light(capfd, tmp_path):
    script = write(
        tmp_path,
        "s.py",
        textwrap.dedent("""
        import subprocess, sys, torch, torch_npu
        subprocess.run([sys.executable, "-c", "import sys; assert 'torch' not in sys.modules"], check=True)
        x = torch.tensor([1, 2, 3], device="npu")
        torch.isin(x, x)
    """),
    )
    code, report, _ = audit_json(capfd, "--torch-npu", "2.1.0.post6", "--", sys.executable, script)
    assert code == 1 and report["processes"] == 2 and report["unaudited"] == []
    assert sorted(p["torch"] for p in report["per_process"]) == [False, True]


def test_several_releases_run_the_command_once_each(capfd, tmp_path):
    script = write(tmp_path, "s.py", USES_NPU.format(first="import torch, torch_npu"))
    code, report, err = audit_json(capfd, "--torch-npu", "2.1.0.post6,2.4.0", "--", sys.executable, script)
    assert code == 1 and report["ok"] is False
    assert [(r["release"], r["ok"], r["fallbacks"]) for r in report["releases"]] == [
        ("2.1.0.post6", False, {ISIN: 1}),
        ("2.4.0", True, {}),
    ]
    assert report["verdict"] == (
        "audit failed on 1 of 2 releases: 2.1.0.post6 (each release's last line above says why)"
    )
    assert "(1 of 2)" in err and "(2 of 2)" in err
    main(["audit", "--torch-npu", "2.1.0.post6,2.4.0", "--", sys.executable, script])
    lines = capfd.readouterr().out.splitlines()
    assert lines[:2] == ["2", "audit: torch_npu 2.1.0.post6 op table on the simulated NPU"]
    assert "audit: torch_npu 2.4.0 op table on the simulated NPU" in lines
    assert lines[-1] == report["verdict"]


GENERATE = textwrap.dedent(
    """
    import torch, torch_npu
    import transformers as tf
    config = tf.LlamaConfig(vocab_size=96, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                            num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                            num_key_value_heads=2, max_position_embeddings=64, attn_implementation="eager")
    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(config).eval().to("npu")
    ids = torch.tensor([[5, 6, 7, 8]], device="npu")
    with torch.no_grad():
        for sample in (False, True):
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, min_new_tokens=4,
                           pad_token_id=0, do_sample=sample)
    """
)


def test_the_paths_report_names_each_generate_and_says_why_the_guard_stayed_off(capfd, tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", str(tmp_path / "no-toolkit"))
    script = write(tmp_path, "generate.py", GENERATE)
    code = main(
        [
            "audit",
            "--torch-npu",
            "2.1.0.post6",
            "--soc",
            "910A",
            "--paths",
            "--fail-on",
            "compiles",
            "--",
            sys.executable,
            script,
        ]
    )
    lines = capfd.readouterr().out.splitlines()
    assert code == 1
    titles = [line for line in lines if line.startswith("  generate() at ")]
    assert len(titles) == 2 and all(f"{script}:" in t for t in titles)
    assert "(greedy_search, pid " in titles[0] and "(sample, pid " in titles[1]
    # No startup hook in this Python: the guard never ran, and the fix says what to do.
    assert "  compile guard: did not run: the startup hook is not installed in this Python" in lines
    assert lines[-2].startswith("  fix: run: python -m ascend_env install")
    assert lines[-1].startswith("audit failed on the simulator (torch_npu 2.1.0.post6's op table): ")
    assert "(--fail-on compiles)" in lines[-1]
