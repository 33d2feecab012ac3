"""``verify``'s verdict as text, and its exit code, from a
:class:`ascend_env.checks.verify_result.VerifyResult` or from the ``--json`` document it was
written as."""

from __future__ import annotations

from typing import Any, Mapping, Union

from ascend_env.checks.verify_result import VerifyResult

__all__ = ["exit_code", "format_text"]


def _as_dict(result: Union[VerifyResult, Mapping[str, Any]]) -> Mapping[str, Any]:
    return result.to_dict() if isinstance(result, VerifyResult) else result


def exit_code(result: Union[VerifyResult, Mapping[str, Any]]) -> int:
    """0 when every check passed, else 1 (``result`` may also be the ``--json`` document)."""
    return 0 if _as_dict(result)["ok"] else 1


def format_text(result: Union[VerifyResult, Mapping[str, Any]]) -> str:
    """The short human report (``result`` may also be the ``--json`` document)."""
    data = _as_dict(result)
    verdict = "passed" if data["ok"] else ("NOT PROVEN" if data.get("not_proven") else "FAILED")
    lines = [f"verify: {verdict} {_where(data)}"]
    for check in data["checks"]:
        lines.append(f"  {'ok  ' if check['ok'] else 'FAIL'}  {check['name']}: {check['detail']}")
        if check.get("fix"):
            lines.append(f"        fix: {check['fix']}")
    for finding in data["findings"]:
        lines.append(f"  note  {finding}" + ("" if data["strict"] else " (fails only with --strict)"))
    failed = [check["name"] for check in data["checks"] if not check["ok"]]
    if failed:
        cause = f"{len(failed)} of {len(data['checks'])} checks failed: {', '.join(failed)} (fix lines above)"
    elif data["checks"]:
        cause = f"all {len(data['checks'])} checks passed"
    else:
        cause = "nothing was checked"
    lines.append(f"verify: {verdict}: {cause}")
    return "\n".join(lines)


def _where(data: Mapping[str, Any]) -> str:
    if data["device"] == "npu" and data.get("device_name") is None:
        return "on this machine's NPU: torch_npu did not start"
    if data["device"] == "npu":
        return f"on npu:0, a real Ascend NPU ({data['device_name']}, torch_npu {data['release']})"
    if data["device"] == "emulated_cann":
        where = f"on the real torch_npu {data['release']} binary on the emulated CANN, not a real NPU"
        return where + (f": {data['simulator_reason']}" if data.get("simulator_reason") else "")
    if data.get("release"):
        where = f"on the simulator, not a real NPU (torch_npu {data['release']} op table)"
    else:  # it never started: no torch, or an error before the op table was chosen
        where = "on the simulator, not a real NPU (it did not start: see the checks below)"
    if data.get("simulator_reason"):
        where += f": {data['simulator_reason']}"
    return where
