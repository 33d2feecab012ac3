"""verify's runs (``ascend_env.checks.verify``): the child's environment, the device chosen, and
what ``auto`` asks the machine before the smoke test runs."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from verify_support import SILENCED

from ascend_env.checks import smoke, verify, verify_text
from ascend_env.checks.verify_result import Smoke
from ascend_env.exceptions import UsageError


def test_every_silencer_is_neutralised_and_the_rest_kept():
    base = {**SILENCED, "PATH": "/usr/bin", "PYTHONPATH": "/x", smoke.FALLBACK_DISABLE: "1"}
    env = verify.child_environment(base, simulate=False, fallback_disable=False)
    assert env["RANK"] == "0"
    for name in (
        "TORCH_NPU_DISABLED_WARNING",
        "TORCH_NPU_WARNING_DISABLE",
        "TORCH_CPP_LOG_LEVEL",
        smoke.FALLBACK_DISABLE,
        verify.AUTOLOAD,
    ):
        assert name not in env
    assert env["PATH"] == "/usr/bin" and env["PYTHONPATH"] == "/x"
    assert base["RANK"] == "1"  # the parent's own environment is left alone


def test_fallback_disable_and_autoload_are_set_only_when_asked():
    env = verify.child_environment({}, simulate=True, fallback_disable=True)
    assert env[smoke.FALLBACK_DISABLE] == "1"
    assert env[verify.AUTOLOAD] == "0"
    assert verify.AUTOLOAD not in verify.child_environment({}, simulate=False, fallback_disable=True)


_names = st.sampled_from([*smoke.SILENCERS, "PATH", "OTHER", smoke.FALLBACK_DISABLE])


_values = st.text(alphabet="01ERORWNINGinfo ", max_size=6)


@settings(deadline=None)  # behaviour, not timing: loaded CI machines are slow
@given(st.dictionaries(_names, _values), st.booleans(), st.booleans())
def test_no_environment_leaves_a_silencer_in_the_child(base, simulate, fallback_disable):
    env = verify.child_environment(base, simulate=simulate, fallback_disable=fallback_disable)
    assert smoke.silencers(env) == {}
    assert (env.get(smoke.FALLBACK_DISABLE) == "1") is fallback_disable


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (verify.Options(), ("auto", None)),
        (verify.Options(device="npu"), ("npu", None)),
        (verify.Options(device="sim"), ("sim", "--device sim was given")),
        (verify.Options(simulate=True), ("sim", "--simulate was given")),
        (verify.Options(torch_npu="2.2.0"), ("sim", "--torch-npu was given")),
    ],
)
def test_the_device_is_chosen_as_asked(options, expected):
    assert verify._chosen_device(options) == expected


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (verify.Options(device="gpu"), "not one of auto, npu, sim"),
        (verify.Options(device="npu", torch_npu="2.2.0"), "cannot run on --device npu"),
    ],
)
def test_a_device_that_cannot_be_honoured_is_a_usage_error(options, said):
    with pytest.raises(UsageError, match=said):
        verify._chosen_device(options)


# On a machine with an NPU and an environment without torch_npu, auto fails (issue 42, item 7).
NPU_SMI_910B3 = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 23.0.0                   Version: 23.0.0                                               |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B3               | OK            | 93.2        38                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          3161 / 65536         |
+===========================+===============+====================================================+
"""


@pytest.mark.parametrize("machine_kind", ["davinci0", "npu-smi 910B3"])
def test_auto_on_an_npu_machine_without_torch_npu_fails(machine_kind, tmp_path, monkeypatch):
    from ascend_env.detect import machine

    if importlib.util.find_spec("torch_npu") is not None:  # pragma: no cover - an NPU test box
        pytest.skip("torch_npu is installed here")
    dev = tmp_path / "dev"
    dev.mkdir()
    if machine_kind == "davinci0":
        (dev / "davinci0").write_text("")
    real = machine.has_npu
    monkeypatch.setattr(machine, "has_npu", lambda: real(dev, lambda: NPU_SMI_910B3))
    result = verify.verify(verify.Options(python=sys.executable)).to_dict()
    assert not result["ok"] and verify_text.exit_code(result) == 1
    assert result["device"] == "npu" and result["simulator_reason"] is None  # never the simulator
    device = next(c for c in result["checks"] if c["name"] == "device")
    assert (
        "this machine has an NPU (" in device["detail"] and "torch_npu is not installed" in device["detail"]
    )
    assert "--device sim" in device["fix"] and "install torch_npu here" in device["fix"]
    assert verify_text.format_text(result).startswith("verify: FAILED on this machine's NPU")


@pytest.mark.parametrize("npu", [False, True])
def test_auto_asks_the_machine_before_it_runs_the_smoke_test(npu, monkeypatch):
    from ascend_env.detect import machine

    asked = []

    def fake_smoke(options, device, steps, env, imports=smoke.IMPORTS[0]):
        asked.append(device)
        report = (
            {"simulator_reason": "torch_npu is not installed"}
            if device == "auto"
            else {"device_error": "ModuleNotFoundError: No module named 'torch_npu'"}
        )
        return Smoke(device, list(steps), report)

    monkeypatch.setattr(machine, "has_npu", lambda: (npu, "/dev/davinci0 exists" if npu else "none"))
    monkeypatch.setattr(verify, "run_smoke", fake_smoke)
    runs, reason = verify._run_all(verify.Options(python=sys.executable), {})
    if npu:
        assert asked == ["npu"] and reason is None and runs[0].report["npu_machine"] == "/dev/davinci0 exists"
    else:  # no NPU: the simulator, as before
        assert asked[0] == "auto" and reason == "torch_npu is not installed"
