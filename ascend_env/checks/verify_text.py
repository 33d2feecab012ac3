"""``verify``'s verdict as text, and its exit code, from a
:class:`ascend_env.checks.verify_result.VerifyResult` or from the ``--json`` document it was
written as."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Sequence, Union

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
    for check in _folded(data["checks"]):
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


_OVERLOADS = re.compile(r"all (\d+) overloads (.*)")


def _folded(checks: Sequence[Mapping[str, Any]]) -> List[Mapping[str, Any]]:
    """``checks``, with each run of passing ones that say the same thing on one line: the fixes'
    steps (``isin (6), polar (2): every overload ...``) and their fallback checks. Failed checks
    keep a line each; ``--json`` keeps every check."""
    folded: List[Dict[str, Any]] = []
    for check in checks:
        name, detail = check["name"], check["detail"]
        steps = _OVERLOADS.fullmatch(detail) if check["ok"] else None
        if steps:
            name, detail = f"{name} ({steps.group(1)})", f"every overload {steps.group(2)}"
        last = folded[-1] if folded else None
        if (
            check["ok"]
            and last is not None
            and last["ok"]
            and (last["detail"], last.get("fix")) == (detail, None)
        ):
            last["name"] = f"{last['name']}, {name}"
            continue
        folded.append({**check, "name": name, "detail": detail})
    return [dict(check, name=_single(check["name"])) for check in folded]


def _single(name: str) -> str:
    """A lone step keeps its plain name (``isin``, not ``isin (6)``), as ``--json`` names it."""
    return re.sub(r" \(\d+\)$", "", name) if ", " not in name else name


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
