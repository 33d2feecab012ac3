"""``ascend-env status``: applied, not applied, partly applied, drifted, or nothing to do."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, List, Tuple

from ascend_env.commands import add_patches_dir, add_target
from ascend_env.hook import files as hook
from ascend_env.output import continued, write_json, write_text
from ascend_env.patching import engine


def describe_hook(hook_status: dict[str, Any]) -> List[str]:
    """The plain-text lines of :func:`_hook_report`."""
    if not hook_status["installed"]:
        return ["  startup hook: not installed"]
    lines = [f"  startup hook: installed ({', '.join(hook_status['installed'])})"]
    if not hook_status["current"]:
        lines.append("  startup hook: its files differ from this ascend-env's; run: ascend-env install")
    setting = hook_status.get("compile_guard")
    if setting is not None:
        lines.append("  compile-mode guard: " + (
            "on (JIT compile off where the SoC would compile online and binary kernels are installed)"
            if setting else "off (installed with --no-compile-guard)"))
    found = hook_status.get("probe", {})
    if found.get("error"):
        lines.append(f"  startup hook: not checked in a fresh process: {continued(found['error'])}")
    elif found.get("disabled"):
        lines.append("  startup hook: turned off by ASCEND_ENV_DISABLE in this environment")
    elif found.get("ran"):
        if found.get("backend") is None:
            lines.append("  startup hook: ran in a fresh process; waits for torch_npu (not installed)")
        elif found.get("backend_error"):
            lines.append(
                "  startup hook: ran in a fresh process, but not checked there: torch_npu does not "
                f"import ({continued(found['backend_error'])}); with CANN set up (set_env.sh) it can be, and "
                "verify checks it on the simulated NPU"
            )
        else:
            registered = ", ".join(found.get("registered", [])) or "nothing (torch_npu has them all)"
            lines.append(f"  startup hook: ran in a fresh process; registered {registered}")
            guard = found.get("compile_guard")
            if guard:
                done = "turned JIT compile off" if guard.get("applied") else "left the compile mode alone"
                why = guard.get("error") or guard.get("reason")
                lines.append(f"  compile-mode guard: {done} there: {why}")
        lines.extend(f"  startup hook error: {continued(error)}" for error in found.get("errors", []))
    else:
        lines.append("  startup hook: did not run in a fresh process")
    return lines


def configure(parser: argparse.ArgumentParser) -> None:
    add_target(parser)
    add_patches_dir(parser)


def _hook_report(site_packages: Path) -> Tuple[dict[str, Any], int]:
    """The startup hook's part of the status: installed, ran in a fresh process, registered."""
    report: dict[str, Any] = {
        "installed": hook.installed(site_packages), "current": hook.is_current(site_packages),
        "compile_guard": hook.compile_guard_setting(site_packages)}
    if not report["installed"]:
        return report, 0
    if str(site_packages) not in {str(Path(p).resolve()) for p in sys.path if p}:
        report["probe"] = {"ran": None, "error": f"{site_packages} is not on this Python's path"}
        return report, 0
    report["probe"] = hook.probe(sys.executable)
    failed = report["probe"].get("ran") is not True or report["probe"].get("errors")
    if report["probe"].get("disabled"):
        failed = False
    return report, 1 if failed or not report["current"] else 0


def run(args: argparse.Namespace) -> int:
    site_packages = engine.resolve_site_packages(args.target)
    report = engine.status(
        site_packages,
        search_sys_path=args.target is None,
        directory=Path(args.patches_dir) if args.patches_dir else None,
    )
    hook_status, hook_code = _hook_report(site_packages)
    code = max(report.code, hook_code)
    if args.json:
        write_json({"ok": code == 0, **report.to_dict(), "hook": hook_status})
    else:
        write_text(describe(report, hook_status))
    return code


def describe(report: engine.StatusReport, hook_status: dict[str, Any]) -> str:
    """The plain-text form of a status report and its startup hook's part."""
    verdict = report.verdict
    transformers = report.transformers or "(not installed)"
    lines = [f"{verdict.status}: transformers {transformers} in {report.site_packages}"]
    if verdict.detail:
        lines.append(f"  {verdict.detail}")
    for item in report.files:
        lines.append(f"  {item.status}: {item.path} ({item.patch})")
    for line in verdict.drift or []:
        lines.append(f"  drift: {line}")
    lines.extend(describe_hook(hook_status))
    if verdict.run:
        lines.append(f"  run: {verdict.run}")
    return "\n".join(lines)
