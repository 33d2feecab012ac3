"""verify's verdict on the smoke reports (``ascend_env.checks.verdict``): the fallback lines read
from fd 2, each check over good and broken reports, compile mode, the emulated CANN."""

from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest
from typed_reports import unknown_keys
from verify_support import CAUTION, ISIN_OUT, failed, good_report, judged

from ascend_env import states
from ascend_env.checks import smoke, verdict, verify_result, verify_text
from ascend_env.checks.smoke_report import SmokeReport
from ascend_env.checks.verify_result import Smoke
from ascend_env.hook.runtime import HookStatus


def test_fallback_lines_reads_torch_npus_caution_line():
    text = "noise\n" + "".join(CAUTION.format(op=op) for op in (ISIN_OUT, "aten::foo", ISIN_OUT))
    assert verdict.fallback_lines(text) == [ISIN_OUT, "aten::foo"]
    assert verdict.fallback_lines("Warning: something else about aten::isin\n") == []


def test_refused_ops_reads_the_errors_of_fallback_disable():
    simulated = (
        "RuntimeError: CAUTION: The operator 'aten::isin.Scalar_Tensor' is not currently supported "
        "on the NPU backend, and falling back to the CPU is disabled by "
        "TORCH_NPU_FALLBACK_CPU_DISABLE=1."
    )
    real = (
        "RuntimeError: The operator 'aten::isin.Tensor_Tensor_out' would execute its main computation on "
        "CPU through dispatcher backend fallback, but CPU fallback is disabled by "
        "TORCH_NPU_FALLBACK_CPU_DISABLE=1."
    )
    assert verdict.refused_ops(simulated + "\n" + real) == ["aten::isin.Scalar_Tensor", ISIN_OUT]
    assert verdict.refused_ops("RuntimeError: The operator 'aten::isin' failed") == []


def test_the_good_report_is_a_smoke_report():
    assert unknown_keys(good_report(), SmokeReport, {"HookStatus": HookStatus}) == []


def test_a_clean_report_passes_and_says_simulator():
    result = judged(good_report())
    assert result["ok"] and verify_text.exit_code(result) == 0
    assert failed(result) == {}
    text = verify_text.format_text(result)
    assert text.startswith("verify: passed on the simulator, not a real NPU (torch_npu 2.1.0.post6 op table)")
    assert "--simulate was given" in text


def test_an_isin_caution_line_fails():
    report = good_report()
    report["steps"]["generate"]["fallbacks"] = {ISIN_OUT: 9}
    result = judged(report, CAUTION.format(op=ISIN_OUT))
    assert verify_text.exit_code(result) == 1
    assert list(failed(result)) == ["isin fallback"]
    assert ISIN_OUT in failed(result)["isin fallback"] and "CAUTION line" in failed(result)["isin fallback"]


def test_the_line_alone_fails_on_a_real_device():
    report = good_report(
        backend={"kind": "npu", "release": "2.1.0.post6", "name": "Ascend910B", "fallback_disable": False}
    )
    result = judged(report, CAUTION.format(op=ISIN_OUT))
    assert list(failed(result)) == ["isin fallback"]
    text = verify_text.format_text(result)
    assert text.startswith("verify: FAILED on npu:0, a real Ascend NPU (Ascend910B")


def test_a_counted_fallback_without_its_line_means_something_silenced_it():
    report = good_report()
    report["steps"]["isin"]["fallbacks"] = {ISIN_OUT: 2}
    result = judged(report, stderr="")
    assert set(failed(result)) == {"fallback line", "isin fallback"}
    assert "no CAUTION line reached fd 2" in failed(result)["fallback line"]


def test_a_refused_fallback_needs_no_line():
    report = good_report()
    message = (
        f"RuntimeError: CAUTION: The operator '{ISIN_OUT}' is not currently supported on the NPU "
        "backend, and falling back to the CPU is disabled by TORCH_NPU_FALLBACK_CPU_DISABLE=1."
    )
    report["steps"]["isin"]["overloads"]["isin.Tensor_Tensor"] = {"ok": False, "error": message}
    report["steps"]["isin"].update(fallbacks={ISIN_OUT: 1}, fallback_disable=True)
    result = judged(report)
    assert set(failed(result)) == {"isin", "isin fallback"}
    assert "refused by TORCH_NPU_FALLBACK_CPU_DISABLE" in failed(result)["isin fallback"]


def test_a_silencer_left_in_the_child_fails():
    result = judged(good_report(silencers={"TORCH_CPP_LOG_LEVEL": "ERROR"}))
    assert list(failed(result)) == ["fallback line"]
    assert "TORCH_CPP_LOG_LEVEL=ERROR" in failed(result)["fallback line"]


def test_a_wrong_result_fails():
    report = good_report()
    report["steps"]["isin"]["overloads"]["isin.Scalar_Tensor_out"] = {"ok": False, "error": "[True] differs"}
    report["steps"]["generate"].update(ok=False, error="the tokens [[1]] differ from the CPU's [[2]]")
    result = judged(report)
    assert set(failed(result)) == {"isin", "generate"}
    assert "isin.Scalar_Tensor_out: [True] differs" in failed(result)["isin"]


def test_other_fallbacks_are_findings_unless_strict():
    report = good_report()
    report["steps"]["generate"]["fallbacks"] = {"aten::foo": 3}
    stderr = CAUTION.format(op="aten::foo")
    lenient = judged(report, stderr)
    assert lenient["ok"] and lenient["findings"] == ["aten::foo fell back to the CPU (generate, 3 times)"]
    assert "note  aten::foo fell back" in verify_text.format_text(lenient)
    strict = judged(report, stderr, True)
    assert verify_text.exit_code(strict) == 1 and list(failed(strict)) == ["strict"]


@pytest.mark.parametrize("status", states.BROKEN)
def test_broken_patch_states_fail(status):
    """Every state in which status exits 1 and asks the user to act ("transformers removed"
    included: verify once kept a list of its own without it)."""
    report = good_report()
    report["installation"]["patches"].update(
        status=status, code=1, drift=["transformers/x.py changed"], run="python -m ascend_env restore"
    )
    result = judged(report)
    assert list(failed(result)) == ["patches"]
    assert failed(result)["patches"].startswith(status)
    fix = {check["name"]: check["fix"] for check in result["checks"]}["patches"]
    assert "python -m ascend_env restore" in fix


def test_patches_not_applied_pass_when_the_hook_works():
    report = good_report()
    report["installation"]["patches"].update(status="not applied", code=0)
    assert judged(report)["ok"]


def test_a_hook_only_install_reads_as_not_applied():
    report = good_report()
    report["installation"]["patches"]["files"] = {"transformers/pytorch_utils.py": "clean"}
    patches = next(check for check in judged(report)["checks"] if check["name"] == "patches")
    assert patches["ok"] and patches["detail"].startswith("not applied: transformers 4.46.3")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"hook_files": []}, "not installed"),
        ({"hook_disabled": True}, "ASCEND_ENV_DISABLE"),
        ({"hook_current": False}, "differ"),
        ({"hook_started": False}, "did not run at start-up"),
    ],
)
def test_a_hook_that_did_not_run_fails(change, expected):
    report = good_report()
    report["installation"].update(change)
    result = judged(report)
    assert list(failed(result)) == ["hook"] and expected in failed(result)["hook"]


def test_a_hook_that_registered_too_little_fails():
    report = good_report()
    report["hook"]["registered"] = ["isin.Tensor_Tensor"]
    assert "isin.Tensor_Tensor_out" in failed(judged(report))["hook"]


def test_a_hook_that_could_not_register_fails():
    """A hook whose kernels did not register (its kernel module failed to import under this torch,
    say) fails verify, with its reason, even where every isin overload looked covered."""
    report = good_report()
    report["hook"]["errors"] = ["ImportError: import of ascend_env.ops halted; None in sys.modules"]
    reason = failed(judged(report))["hook"]
    assert reason.startswith("the startup hook failed: ") and "ascend_env.ops" in reason


def import_run(order: str, events: List[str]) -> Smoke:
    """A process that only reached torch_npu (``order``) and kept the hook's record."""
    report = {
        "silencers": {},
        "backend": good_report()["backend"],
        "imports": {"order": order},
        "steps": {},
        "hook": dict(good_report()["hook"], events=events),
        "warnings": [],
    }
    return Smoke("sim", [], report, "", imports=order)


def test_the_hook_must_hear_of_torch_npu_on_every_import_path():
    heard = [
        import_run("accelerate", ["torch_npu: import after 1 probe (simulated)"]),
        import_run("direct", ["torch_npu: import (simulated)"]),
    ]
    result = judged(good_report(), "", False, *heard)
    assert result["ok"] and result["processes"] == 3
    detail = next(c["detail"] for c in result["checks"] if c["name"] == "hook")
    assert detail.startswith("heard of torch_npu through transformers' check, import accelerate, a plain")
    assert [path["events"] for path in result["import_paths"]] == [
        ["torch_npu: import after 1 probe (simulated)"],
        ["torch_npu: import after 1 probe (simulated)"],
        ["torch_npu: import (simulated)"],
    ]
    # The hook that missed torch_npu behind accelerate's probe: verify fails, naming that path.
    missed = judged(good_report(), "", False, import_run("accelerate", []), heard[1])
    assert not missed["ok"] and list(failed(missed)) == ["hook"]
    assert "did not hear of torch_npu reached through import accelerate" in failed(missed)["hook"]


def test_a_hook_that_missed_the_main_import_fails():
    report = good_report()
    report["hook"]["events"] = []
    assert "reached through transformers' check" in failed(judged(report))["hook"]


def test_torch_npu_that_cannot_start_on_an_npu_machine_fails_with_the_cann_fix():
    report = {
        "silencers": {},
        "installation": good_report()["installation"],
        "steps": {},
        "warnings": [],
        "device_error": "ImportError: libhccl.so: cannot open shared object file: No such file or directory",
        "npu_machine": "/dev/davinci0 exists",
        "cann": "source /usr/local/Ascend/ascend-toolkit/set_env.sh in this shell, then verify again",
    }
    result = verdict.judge([Smoke("auto", list(smoke.STEPS), report)]).to_dict()
    assert not result["ok"] and verify_text.exit_code(result) == 1
    device = next(c for c in result["checks"] if c["name"] == "device")
    assert "this machine has an NPU (/dev/davinci0 exists)" in device["detail"]
    assert "libhccl.so" in device["detail"]
    assert device["fix"].startswith("source /usr/local/Ascend/ascend-toolkit/set_env.sh")
    assert result["device"] == "npu" and result["simulator_reason"] is None  # never the simulator
    text = verify_text.format_text(result)
    assert text.startswith("verify: FAILED on this machine's NPU: torch_npu did not start")


def test_broken_torch_and_missing_report_fail():
    broken = judged(
        {
            "silencers": {},
            "installation": good_report()["installation"],
            "steps": {},
            "torch_error": "ImportError: no torch",
            "warnings": [],
        }
    )
    assert set(failed(broken)) == {"torch", "hook"}
    crashed = verdict.judge([Smoke("sim", ["isin"], {}, "Segmentation fault\n", -11)]).to_dict()
    assert "exited -11 without a report" in failed(crashed)["smoke test"]


def stopped(error: Dict[str, Any]) -> Dict[str, Any]:
    """The verdict on a smoke test that stopped with ``error`` before the backend started."""
    report = {"silencers": {}, "installation": good_report()["installation"], "steps": {}, "warnings": []}
    return judged({**report, "error": error})


def test_a_smoke_test_that_stopped_says_so_not_that_the_backend_did_not_start():
    result = stopped({"type": "RuntimeError", "problem": "boom", "fix": None, "environment": False})
    checks = {check["name"]: check for check in result["checks"]}
    assert checks["smoke test"]["detail"] == "RuntimeError: boom"
    assert checks["smoke test"]["fix"].startswith("report it")  # a bug of ours: report it
    assert checks["hook"]["detail"] == "not checked: the smoke test stopped before it took the hook's record"
    report = {"silencers": {}, "installation": good_report()["installation"], "steps": {}, "warnings": []}
    no_torch = judged({**report, "torch_error": "ImportError: no torch"})
    assert failed(no_torch)["hook"] == "not checked: the NPU backend did not start"


def test_an_environment_problem_in_a_smoke_test_keeps_its_own_fix():
    result = stopped(
        {
            "type": "EnvironmentProblem",
            "problem": "the cache is not yours.",
            "fix": "set X",
            "environment": True,
        }
    )
    check = {check["name"]: check for check in result["checks"]}["smoke test"]
    assert (check["detail"], check["fix"]) == ("the cache is not yours.", "set X")


def test_a_second_process_is_judged_with_the_first():
    first = good_report()
    first["backend"]["fallback_disable"] = True
    first["steps"].pop("generate")
    second = good_report()
    second["steps"] = {"generate": {"ok": True, "error": None, "fallbacks": {}}}
    line = CAUTION.format(op="aten::isin.Tensor_Scalar")
    result = judged(first, "", False, Smoke("npu", ["generate"], second, line))
    assert result["processes"] == 2 and result["fallback_disable"] is True
    assert list(failed(result)) == ["isin fallback"]


def test_judge_returns_typed_checks_and_fallbacks_that_serialise_to_the_json_document():
    report = good_report()
    report["steps"]["generate"]["fallbacks"] = {ISIN_OUT: 2, "aten::foo": 1}
    result = verdict.judge([Smoke("sim", list(smoke.STEPS), report, CAUTION.format(op=ISIN_OUT))])
    assert isinstance(result.checks[0], verify_result.Check) and result.device == "simulator"
    assert result.fallbacks[ISIN_OUT] == verify_result.Fallback(line=True, count=2, steps=["generate"])
    data = result.to_dict()
    assert list(data) == [
        "ok",
        "schema",
        "device",
        "device_name",
        "release",
        "simulator_reason",
        "strict",
        "fallback_disable",
        "processes",
        "checks",
        "fallbacks",
        "findings",
        "installation",
        "hook",
        "import_paths",
        "warnings",
        "backend",
        "not_proven",
    ]
    assert data["schema"] == 2 and data["not_proven"] == []
    assert data["backend"] == {
        "kind": "simulator",
        "release": data["release"],
        "words": f"the simulator, not a real NPU (torch_npu {data['release']} op table)",
    }
    assert data["fallbacks"]["aten::foo"] == {
        "line": False,
        "refused": False,
        "count": 1,
        "steps": ["generate"],
    }
    assert json.loads(json.dumps(data)) == data
    # The text report and the exit code read the same from the result and from its JSON document.
    assert verify_text.format_text(result) == verify_text.format_text(data)
    assert verify_text.exit_code(result) == verify_text.exit_code(data) == 1
    result.python, result.seconds = "/usr/bin/python3", 1.25
    assert list(result.to_dict())[-2:] == ["python", "seconds"]


def test_a_torch_never_installed_is_not_a_torch_to_reinstall():
    report = {
        "silencers": {},
        "installation": {
            "site_packages": "/site",
            "hook_files": [],
            "hook_current": False,
            "hook_started": False,
            "hook_disabled": False,
            "patches": {
                "status": "nothing to do",
                "code": 0,
                "transformers": None,
                "detail": "transformers is not installed here",
            },
        },
        "steps": {},
        "torch_error": "ModuleNotFoundError: No module named 'torch'",
        "warnings": [],
    }
    result = judged(report)
    checks = {check["name"]: check for check in result["checks"]}
    assert checks["torch"]["detail"] == (
        "torch is not installed in that Python, so the simulated NPU cannot start"
    )
    assert "reinstall" not in checks["torch"]["fix"] and "[sim]" in checks["torch"]["fix"]
    # "transformers None" and "(no op table)" for a simulator that never started.
    assert checks["patches"]["detail"].startswith("nothing to do: transformers (not installed) in /site")
    text = verify_text.format_text(result)
    assert "no op table" not in text and "None" not in text
    assert text.startswith(
        "verify: FAILED on the simulator, not a real NPU (it did not start: see the checks below)"
    )
    assert text.endswith("\nverify: FAILED: 2 of 4 checks failed: torch, hook (fix lines above)")
    broken = judged({**report, "torch_error": "ImportError: libc10.so: cannot open shared object file"})
    fix = {check["name"]: check["fix"] for check in broken["checks"]}["torch"]
    assert fix.startswith("reinstall torch in that Python")


SEED_64BIT = (
    "[W AddKernelNpu.cpp:82] Warning: The oprator of add is executed, Currently High Accuracy but "
    "Low Performance OP with 64-bit has been used, Please Do Some Cast at Python Functions with "
    "32-bit for Better Performance! (function operator())"
)


NPU_BACKEND = {"kind": "npu", "release": "2.1.0.post6", "name": "Ascend910A", "fallback_disable": False}


def compile_checks(record: Dict[str, Any], stderr: str = "", **changes: Any) -> Dict[str, Any]:
    result = judged(good_report(compile=record, **changes), stderr)
    (check,) = [check for check in result["checks"] if check["name"] == "compile mode"]
    return check


@pytest.mark.parametrize(
    "record, stderr, ok, words",
    [
        # A device: JIT compile off passes; on fails, with the guard's state deciding the fix.
        (
            {"soc": "Ascend910A", "jit_compile": False, "guard": {"applied": True}},
            "",
            True,
            "JIT compile off",
        ),
        ({"soc": "Ascend910A", "jit_compile": True, "guard": None}, "", False, "JIT compile is on"),
        (
            {"soc": "Ascend910B3", "jit_compile": False, "guard": None},
            SEED_64BIT,
            False,
            "AddKernelNpu.cpp:82",
        ),
        ({"soc": "Ascend910A", "jit_compile": None, "guard": None}, "", True, "not checked"),
    ],
)
def test_compile_mode_on_a_device(record, stderr, ok, words):
    check = compile_checks(record, stderr, backend=NPU_BACKEND)
    assert check["ok"] is ok and words in check["detail"]
    assert (check["fix"] is None) is ok


@pytest.mark.parametrize(
    "guard, fix",
    [
        (None, "python -m ascend_env install"),
        ({"applied": False, "reason": "no binary kernels (...)"}, "Ascend-cann-kernels-910a"),
        ({"applied": False, "reason": "turned off (...)"}, "without --no-compile-guard"),
        ({"applied": True, "reason": "..."}, "turned it back on"),
    ],
)
def test_compile_mode_fix_follows_what_the_guard_did(guard, fix):
    record = {
        "soc": "Ascend910A",
        "soc_assumed": False,
        "jit_compile": True,
        "guard": guard,
        "steady_would_compile": 60,
        "steady_would_compile_by_op": {"cat": 12},
    }
    check = compile_checks(record)
    assert not check["ok"] and "60 would-be online compiles" in check["detail"] and fix in check["fix"]


def test_compile_mode_on_the_simulator_passes_without_compiles_and_says_what_it_assumed():
    record = {
        "soc": "Ascend910B1",
        "soc_assumed": True,
        "jit_compile": False,
        "guard": None,
        "steady_would_compile": 0,
    }
    check = compile_checks(record)
    assert check["ok"] and "assumed" in check["detail"] and "modelled, not measured" in check["detail"]


def test_a_polar_fallback_fails_like_an_isin_one():
    steps = good_report()["steps"]
    steps["generate"]["fallbacks"] = {"aten::polar.out": 8}
    result = judged(
        good_report(steps=steps),
        "CAUTION: The operator 'aten::polar.out' is not currently "
        "supported on the NPU backend and will fall back to run on the CPU.",
    )
    assert not result["ok"]
    assert failed(result) == {
        "polar fallback": "aten::polar.out fell back to the CPU in generate "
        "(CAUTION line on fd 2; counted 8 times by the simulator)"
    }
    assert result["findings"] == []  # a fixed op's fallback is a failure, not a finding


def test_a_wrong_polar_step_fails():
    steps = good_report()["steps"]
    steps["polar"]["overloads"]["polar.out"] = {"ok": False, "error": "the result is not the out= tensor"}
    wrong = "polar.out: the result is not the out= tensor"
    assert failed(judged(good_report(steps=steps))) == {"polar": wrong}


def test_a_hook_record_without_polar_fails():
    hook = good_report()["hook"]
    hook["native"] = [op for op in hook["native"] if not op.startswith("polar")]
    assert failed(judged(good_report(hook=hook))) == {
        "hook": "polar, polar.out: neither native nor registered by the hook"
    }


EMULATED = {
    "kind": "emulated_cann",
    "release": "2.1.0.post6",
    "name": "Ascend910B1 (emulated CANN, host memory)",
    "fallback_disable": True,
}


WHY_EMULATED = "torch_npu is installed but did not start (...), and this machine has no NPU (...)"


def judged_emulated(report: Dict[str, Any], stderr: str = "") -> Dict[str, Any]:
    runs = [Smoke("emulated", list(smoke.STEPS), report, stderr)]
    return verdict.judge(runs, False, WHY_EMULATED + ": the real binary ran on the emulated CANN").to_dict()


def test_the_real_binary_on_the_emulated_cann_is_named_as_such():
    result = judged_emulated(
        good_report(backend=EMULATED, emulated_cann={"counters": {"aclnn": {"aclnnAdd": 2}}})
    )
    assert result["ok"] and result["device"] == "emulated_cann" and result["not_proven"] == []
    assert result["backend"] == {
        "kind": "emulated_cann",
        "release": "2.1.0.post6",
        "words": "the real torch_npu 2.1.0.post6 binary on the emulated CANN, not a real NPU",
    }
    assert failed(result) == {}
    text = verify_text.format_text(result)
    assert text.startswith(
        "verify: passed on the real torch_npu 2.1.0.post6 binary on the emulated CANN, not a real NPU: "
        "torch_npu is installed but did not start"
    )
    assert "ok    emulated CANN: every CANN entry point the binary called is implemented" in text


def test_its_caution_line_fails_as_on_a_real_device():
    result = judged_emulated(good_report(backend=EMULATED), CAUTION.format(op=ISIN_OUT))
    assert list(failed(result)) == ["isin fallback"]
    assert verify_text.format_text(result).startswith(
        "verify: FAILED on the real torch_npu 2.1.0.post6 binary"
    )


def test_an_entry_point_the_emulated_cann_lacks_is_not_proven():
    line = "ascend-env emulated CANN: aclnnIsIn is not implemented\n"
    counted = {"counters": {"unimplemented": {"aclrtFoo": 1}}}
    result = judged_emulated(good_report(backend=EMULATED, emulated_cann=counted), line)
    assert not result["ok"] and verify_text.exit_code(result) == 1
    assert result["not_proven"] == [
        "the emulated CANN does not implement aclrtFoo",
        "the emulated CANN does not implement aclnnIsIn",
    ]
    assert failed(result)["emulated CANN"] == (
        "not proven: the binary called aclrtFoo, aclnnIsIn, which the emulated CANN does not implement"
    )
    assert verify_text.format_text(result).startswith("verify: NOT PROVEN on the real torch_npu 2.1.0.post6")
    # On the simulator the emulated CANN's words never appear.
    assert "emulated CANN" not in failed(judged(good_report(), line))
