"""The compile-mode guard's decision: JIT compile off only where it helps and is safe."""

from pathlib import Path

import pytest

from ascend_env.hook import compile_guard, files
from ascend_env.hook.compile_guard import Kernels

NPU_SMI_910B3 = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 23.0.rc3                 Version: 23.0.rc3                                             |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B3               | OK            | 96.3        41                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          3161 / 65536         |
+===========================+===============+====================================================+
"""


def toolkit(tmp_path: Path, kernels: bool, *socs: str) -> Path:
    root = tmp_path / "ascend-toolkit" / "latest"
    root.mkdir(parents=True)
    if kernels:
        for soc in socs or ("ascend910",):
            (root / compile_guard.KERNELS_SUBDIR / soc).mkdir(parents=True)
    return root


def test_npu_smi_names_the_soc():
    assert compile_guard.parse_npu_smi(NPU_SMI_910B3) == "Ascend910B3"
    assert compile_guard.parse_npu_smi(NPU_SMI_910B3.replace("910B3", "310P3")) == "Ascend310P3"
    assert compile_guard.parse_npu_smi(NPU_SMI_910B3.replace("910B3  ", "910PremiumA")) == "Ascend910PremiumA"
    assert compile_guard.parse_npu_smi("command not found") is None


def test_machine_soc_prefers_the_variable_and_says_where_from():
    chosen = compile_guard.machine_soc({"ASCEND_ENV_SOC": "310P"}, run=lambda: "")
    assert chosen == ("Ascend310P3", "$ASCEND_ENV_SOC")
    assert compile_guard.machine_soc({}, run=lambda: NPU_SMI_910B3) == ("Ascend910B3", "npu-smi info")
    soc, why = compile_guard.machine_soc({"ASCEND_ENV_SOC": "bogus"}, run=lambda: NPU_SMI_910B3)
    assert soc is None and "bogus" in why

    def missing() -> str:
        raise FileNotFoundError("npu-smi")

    soc, why = compile_guard.machine_soc({}, run=missing)
    assert soc is None and "npu-smi info did not answer" in why


def test_kernels_found_with_their_socs(tmp_path):
    found = compile_guard.find_kernels(toolkit(tmp_path, True, "ascend910", "ascend310p"))
    assert found.installed and found.socs == ["ascend310p", "ascend910"]
    missing = compile_guard.find_kernels(tmp_path / "other")
    assert missing.installed is False and "does not exist" in missing.reason
    assert compile_guard.find_kernels(None).installed is None


def test_unreadable_kernels_dir_is_unknown_not_an_error(tmp_path, monkeypatch):
    root = toolkit(tmp_path, True)

    def refuse(self):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "iterdir", refuse)
    found = compile_guard.find_kernels(root)
    assert found.installed is None and "cannot be read" in found.reason


@pytest.mark.parametrize(
    "soc, kernels, enabled, applies, words",
    [
        ("Ascend910A", True, True, True, "JIT compile on"),
        ("Ascend310P3", True, True, True, "JIT compile on"),
        ("Ascend910B3", True, True, False, "not needed"),
        ("Ascend910A", False, True, False, "Ascend-cann-kernels-910a"),
        ("Ascend310P3", None, True, False, "no binary kernels"),
        (None, True, True, False, "SoC is unknown"),
        ("Ascend910A", True, False, False, "turned off"),
    ],
)
def test_decision(soc, kernels, enabled, applies, words):
    decision = compile_guard.decide(soc, "test", Kernels(kernels, "/k", reason="why"), enabled)
    assert decision.apply is applies
    assert words in decision.reason


class Config:
    allow_internal_format = True


def test_apply_turns_jit_off_and_internal_format_off():
    calls = []
    config = Config()
    decision = compile_guard.decide("Ascend910A", "test", Kernels(True, "/k"))
    compile_guard.apply(decision, lambda **kw: calls.append(kw), config)
    assert calls == [{"jit_compile": False}] and config.allow_internal_format is False
    assert decision.applied and decision.error is None


def test_apply_keeps_an_error_and_never_raises():
    def broken(**kw):
        raise RuntimeError("ACL error 100000")

    decision = compile_guard.decide("Ascend910A", "t", Kernels(True, "/k"))
    compile_guard.apply(decision, broken, Config())
    assert not decision.applied and "ACL error 100000" in decision.error


def test_apply_does_nothing_when_not_needed():
    decision = compile_guard.decide("Ascend910B1", "t", Kernels(True, "/k"))
    compile_guard.apply(decision, lambda **kw: pytest.fail("called"), Config())
    assert not decision.applied


def test_from_environment_reads_toolkit_and_switch(tmp_path):
    root = toolkit(tmp_path, True)
    env = {"ASCEND_TOOLKIT_HOME": str(root), "ASCEND_ENV_SOC": "910A"}
    assert compile_guard.from_environment(env).apply
    assert not compile_guard.from_environment({**env, "ASCEND_ENV_COMPILE_GUARD": "0"}).apply
    assert not compile_guard.from_environment(env, enabled=False).apply
    simulated = compile_guard.from_environment(
        {"ASCEND_TOOLKIT_HOME": str(root)}, soc=("Ascend310P3", "simulator")
    )
    assert simulated.apply and simulated.soc_source == "simulator"


def test_hook_module_carries_the_setting(tmp_path):
    on, off = files.files(True)[files.MODULE_FILE], files.files(False)[files.MODULE_FILE]
    assert on != off and b"COMPILE_GUARD = False" in off
    for setting in (True, False):
        site = tmp_path / str(setting)
        site.mkdir()
        for name, data in files.files(setting).items():
            (site / name).write_bytes(data)
        assert files.compile_guard_setting(site) is setting
        assert files.is_current(site)
    namespace: dict = {}
    exec(compile(off, "ascend_env_hook.py", "exec"), namespace)
    assert namespace["COMPILE_GUARD"] is False
