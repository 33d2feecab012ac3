"""Smoke reports as the smoke test writes them (``ascend_env.checks.smoke_report.SmokeReport``) and
the verdict on them, for the tests of verify's modules and command."""

from __future__ import annotations

import copy
from typing import Any, Dict

from ascend_env.checks import smoke, verdict
from ascend_env.checks.smoke_report import SmokeReport
from ascend_env.checks.verify_result import Smoke
from ascend_env.kernels import registry
from ascend_env.sim import optables

CAUTION = (
    "[W VariableFallbackKernel.cpp:51] Warning: CAUTION: The operator '{op}' is not currently supported on "
    "the NPU backend and will fall back to run on the CPU. This may have performance implications. "
    "(function npu_cpu_fallback)\n"
)


ISIN_OUT = "aten::isin.Tensor_Tensor_out"


SILENCED = {
    "RANK": "1",
    "TORCH_NPU_DISABLED_WARNING": "1",
    "TORCH_NPU_WARNING_DISABLE": "1",
    "TORCH_CPP_LOG_LEVEL": "ERROR",
}


def _lacking(op: registry.Op) -> bool:
    """Whether the 2.1.0.post6 table lacks ``op`` (the hook registers it there)."""
    table = optables.load("2.1.0.post6")
    return all(name not in table for name in op.when_missing)


def good_report(**changes: Any) -> SmokeReport:
    """What the smoke test reports when all is well on the simulator (2.1.0.post6 table)."""
    report: SmokeReport = {
        "silencers": {},
        "installation": {
            "site_packages": "/site",
            "hook_files": ["ascend_env_hook.pth"],
            "hook_current": True,
            "hook_started": True,
            "hook_disabled": False,
            "patches": {"status": "applied", "code": 0, "transformers": "4.46.3", "drift": []},
        },
        "backend": {
            "kind": "simulator",
            "release": "2.1.0.post6",
            "name": "simulated NPU",
            "fallback_disable": False,
        },
        "steps": {
            **{
                fix.name: {
                    "overloads": {sample.overload: {"ok": True, "error": None} for sample in fix.smoke},
                    "fallbacks": {},
                }
                for fix in registry.FIXES
                if fix.smoke
            },
            "generate": {"ok": True, "error": None, "fallbacks": {}},
        },
        "imports": {"order": "transformers", "available": True, "module": "/sim/pkgs/torch_npu/__init__.py"},
        "hook": {
            "hook_started": True,
            "disabled": False,
            "events": ["torch_npu: import after 1 probe (simulated)"],
            "registered": [op.op for op in registry.OVERLOADS if _lacking(op)],
            "native": [op.op for op in registry.OVERLOADS if not _lacking(op)],
            "errors": [],
        },
        "warnings": [],
    }
    report.update(copy.deepcopy(changes))  # type: ignore[typeddict-item]
    return report


def judged(report: Dict[str, Any], stderr: str = "", strict: bool = False, *more: Smoke) -> Dict[str, Any]:
    runs = [Smoke("sim", list(smoke.STEPS), report, stderr), *more]
    return verdict.judge(runs, strict, "--simulate was given").to_dict()


def failed(result: Dict[str, Any]) -> Dict[str, str]:
    return {check["name"]: check["detail"] for check in result["checks"] if not check["ok"]}
