"""``ascend-env status``: applied, hook only, not applied, partly applied, drifted, ... in the words
of :mod:`ascend_env.states`, with the startup hook's part."""

from __future__ import annotations

import argparse
import importlib.machinery
import sys
from pathlib import Path
from typing import Any, List, Optional, Tuple, TypedDict

from ascend_env import states
from ascend_env.commands import add_patches_dir, add_target
from ascend_env.hook import files
from ascend_env.output import continued, verdict_line, write_json, write_text
from ascend_env.patching import engine
from ascend_env.utils import progress

__all__ = ["HookPart", "configure", "describe", "describe_hook", "overall", "run"]


class HookPart(TypedDict, total=False):
    """The startup hook's part of ``status`` (``status --json``'s ``hook``): its files in the
    site-packages, whether they are this ascend-env's, the guard's setting, and the fresh-process
    probe (absent where the hook is not installed)."""

    installed: List[str]
    current: bool
    compile_guard: Optional[bool]
    probe: files.HookProbe


def describe_hook(hook_status: HookPart) -> List[str]:
    """The plain-text lines of :func:`_hook_report`."""
    if not hook_status["installed"]:
        return ["  startup hook: not installed"]
    lines = [f"  startup hook: installed ({', '.join(hook_status['installed'])})"]
    if not hook_status["current"]:
        lines.append(
            "  startup hook: its files differ from this ascend-env's; run: python -m ascend_env install"
        )
    setting = hook_status.get("compile_guard")
    if setting is not None:
        lines.append(
            "  compile-mode guard: "
            + (
                "on (JIT compile off where the SoC would compile online and binary kernels are installed)"
                if setting
                else "off (installed with --no-compile-guard)"
            )
        )
    found = hook_status.get("probe", files.HookProbe())
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


def _hook_report(site_packages: Path) -> Tuple[HookPart, int]:
    """The startup hook's part of the status: installed, ran in a fresh process, registered."""
    report: HookPart = {
        "installed": files.installed(site_packages),
        "current": files.is_current(site_packages),
        "compile_guard": files.compile_guard_setting(site_packages),
    }
    if not report["installed"]:
        return report, 0
    if str(site_packages) not in {str(Path(p).resolve()) for p in sys.path if p}:
        report["probe"] = {"ran": None, "error": f"{site_packages} is not on this Python's path"}
        return report, 0
    if importlib.machinery.PathFinder.find_spec("torch_npu") is None:
        report["probe"] = files.probe(sys.executable)
    else:  # the probe imports torch_npu (and torch), as a real program does: seconds
        with progress.step(
            "checking the startup hook in a fresh Python process",
            note="it imports torch_npu, as your programs do",
        ):
            report["probe"] = files.probe(sys.executable)
    failed = report["probe"].get("ran") is not True or bool(report["probe"].get("errors"))
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
    state = overall(report, hook_status)
    code = max(state.code, hook_code)
    if args.json:
        write_json({"ok": code == 0, **_with_state(report.to_dict(), state), "hook": hook_status})
    else:
        write_text(describe(report, hook_status))
    return code


def overall(report: engine.StatusReport, hook_status: HookPart) -> states.State:
    """The state in :mod:`ascend_env.states`' words: the patches' and the startup hook's together."""
    verdict = report.verdict
    return states.combine(
        verdict.status,
        verdict.code,
        bool(hook_status["installed"]),
        verdict.detail,
        verdict.run,
        transformers=report.transformers is not None,
    )


def _with_state(data: dict[str, Any], state: states.State) -> dict[str, Any]:
    """The engine's ``--json`` document with the combined state's words in place of its own."""
    if state.status in states.BROKEN:
        return data  # the engine's words, key order included
    drift = data.pop("drift", None)
    for key in ("status", "detail", "run"):
        data.pop(key, None)
    data["status"] = state.status
    if state.detail is not None:
        data["detail"] = state.detail
    if drift is not None:
        data["drift"] = drift
    if state.run is not None:
        data["run"] = state.run
    return data


def describe(report: engine.StatusReport, hook_status: HookPart) -> str:
    """The plain-text form of a status report and its startup hook's part."""
    state = overall(report, hook_status)
    transformers = report.transformers or "(not installed)"
    lines = [f"{state.status}: transformers {transformers} in {report.site_packages}"]
    if state.detail:
        lines.append(f"  {state.detail}")
    for item in report.files:
        lines.append(f"  {item.status}: {item.path} ({item.patch})")
    for line in report.verdict.drift or []:
        lines.append(f"  drift: {line}")
    lines.extend(describe_hook(hook_status))
    if state.run:
        lines.append(f"  run: {state.run}")
    lines.append(verdict_line("status", state.status, _cause(state, hook_status)))
    return "\n".join(lines)


def _cause(state: states.State, hook_status: HookPart) -> str:
    """Why the state is what it is, in one clause."""
    if hook_status["installed"] and not hook_status["current"]:
        return "the startup hook's files differ from this ascend-env's (run: python -m ascend_env install)"
    if state.status == states.APPLIED and state.code == 0:
        return "transformers' files are patched and the startup hook is installed"
    if state.status == states.HOOK_ONLY:
        return "the startup hook is installed; transformers' files are not patched"
    # Never the status again ("status: drifted: drifted"): where no detail says why, its words.
    return state.detail or _WHY.get(state.status, "see the lines above")


_WHY = {
    "drifted": "files ascend-env wrote changed since it wrote them (the drift lines above)",
    "not applied": "transformers' files are not patched",
    states.APPLIED: "transformers' files are patched",
    "partly applied": "some of transformers' files are patched and others not",
    "conflict": "some of transformers' files are neither the released nor the patched text",
    "interrupted": "an ascend-env run was interrupted",
}
