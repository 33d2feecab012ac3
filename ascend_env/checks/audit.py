"""``audit``: run a command on the simulated NPU and collect every op that fell back to the CPU.

The command runs with ``ascend_env/sim/shim`` first on ``PYTHONPATH``; its ``sitecustomize``
enables the simulator in every Python process the command starts (see ``ascend_env.sim.startup``),
and each process writes its fallback counts to a report directory when it exits. This module
never imports torch: the command's own Python does.
"""

from __future__ import annotations

import collections
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

from ascend_env.exceptions import EnvironmentProblem, UsageError
from ascend_env.sim import compile_mode, optables, startup
from ascend_env.sim import paths as sim_paths

SHIM_DIR = Path(__file__).resolve().parent.parent / "sim" / "shim"


def installed_torch_npu() -> Optional[Path]:
    """The package directory of the torch_npu installed in this Python, without importing it."""
    try:
        spec = importlib.util.find_spec("torch_npu")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def choose_table(torch_npu: Optional[str]) -> Dict[str, str]:
    """The environment that tells the audited processes which op table to run.

    An explicit release wins; otherwise the installed torch_npu's own YAML op lists, else the
    newest table. Returns the variables plus ``"label"`` (the table's name, for the report).
    """
    if torch_npu:
        version = optables.canonical(torch_npu)
        return {"label": version, startup.TORCH_NPU: version}
    package = installed_torch_npu()
    if package is not None:
        try:
            version = importlib.metadata.version("torch_npu")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        try:
            disable = optables.has_fallback_disable(version)
        except UsageError:
            disable = False
        label = f"{version} (installed, {package})"
        return {
            "label": label, startup.OPLISTS: str(package), startup.LABEL: label,
            startup.FALLBACK_DISABLE: "1" if disable else "0",
        }
    version = optables.newest()
    return {"label": version, startup.TORCH_NPU: version}


def audited_environment(table: Mapping[str, str], reports: Path,
                        base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """``base`` (default: this process's environment) set up for an audited command."""
    env = dict(os.environ if base is None else base)
    for key in (startup.TORCH_NPU, startup.OPLISTS, startup.LABEL, startup.FALLBACK_DISABLE):
        env.pop(key, None)
    env.update({k: v for k, v in table.items() if k != "label"})
    env[startup.REPORTS] = str(reports)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(SHIM_DIR) + (os.pathsep + path if path else "")
    # A real torch_npu, if installed, must not claim the PrivateUse1 backend first.
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    return env


def collect(reports: Path) -> List[dict]:
    """The reports the audited processes wrote, oldest pid first."""
    found = []
    for path in sorted(reports.glob("*.json")):
        try:
            found.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return sorted(found, key=lambda r: r.get("pid", 0))


def run(command: Sequence[str], torch_npu: Optional[str] = None, soc: Optional[str] = None,
        paths: bool = False) -> dict:
    """Run ``command`` on the simulated NPU and return the audit's findings.

    Keys: ``table``, ``command``, ``returncode``, ``processes`` (how many Python processes ran on
    the simulator), ``errors`` (processes where it could not start), ``fallbacks`` (op -> count);
    with ``paths``, ``soc`` and ``paths`` (``ascend_env.sim.paths.summarize``) on the SoC ``soc``.
    """
    if not command:
        raise UsageError(
            "audit needs a command to run.",
            "put it after '--', e.g. ascend-env audit --torch-npu 2.1.0.post6 -- python my_script.py",
        )
    table = choose_table(torch_npu)
    chosen_soc = sim_paths.choose_soc(soc) if paths or soc else None
    if chosen_soc is not None:
        table[compile_mode.SOC_ENV] = chosen_soc["name"]
    if paths:
        table[sim_paths.ENV] = "1"
    with tempfile.TemporaryDirectory(prefix="ascend-env-audit-") as scratch:
        env = audited_environment(table, Path(scratch))
        if not paths:
            env.pop(sim_paths.ENV, None)
        try:
            completed = subprocess.run(list(command), env=env)
        except OSError as exc:
            raise UsageError(
                f"cannot run {command[0]!r}: {exc.strerror or exc}.", "check the command after '--'"
            ) from None
        reports = collect(Path(scratch))
    totals: collections.Counter = collections.Counter()
    for report in reports:
        totals.update(report.get("fallbacks", {}))
    errors = [report["error"] for report in reports if "error" in report]
    if not reports:
        raise EnvironmentProblem(
            "no Python process of the command ran on the simulated NPU, so nothing was audited "
            f"(the command exited {completed.returncode}).",
            "run a Python command that can import ascend_env and torch, e.g. -- python my_script.py",
        )
    findings = {
        "table": table["label"],
        "command": list(command),
        "returncode": completed.returncode,
        "processes": len(reports) - len(errors),
        "errors": errors,
        "fallbacks": dict(sorted(totals.items(), key=lambda item: (-item[1], item[0]))),
    }
    if paths:
        findings["soc"] = chosen_soc
        findings["paths"] = sim_paths.summarize(reports, chosen_soc)
    return findings


def exit_code(findings: dict, fail_on: Sequence[str] = ("fallbacks",)) -> int:
    """1 if the simulator failed to start, the command failed, or a finding of ``fail_on`` is
    present (``fallbacks``; with ``--paths``: ``compiles``, ``syncs``, ``64bit``); else 0."""
    if findings["errors"] or findings["returncode"] != 0:
        return 1
    if "fallbacks" in fail_on and findings["fallbacks"]:
        return 1
    if "paths" in findings and sim_paths.failing(findings["paths"], tuple(fail_on)):
        return 1
    return 0


def format_text(findings: dict) -> str:
    """The human-readable report."""
    lines = [f"audit: torch_npu {findings['table']} op table on the simulated NPU"]
    if findings["returncode"] != 0:
        lines.append(f"the command exited {findings['returncode']}")
    for error in findings["errors"]:
        lines.append(f"the simulated NPU could not start in one process: {error}")
    fallbacks = findings["fallbacks"]
    processes = findings["processes"]
    where = f"{processes} Python process{'es' if processes != 1 else ''}"
    if not fallbacks:
        lines.append(f"no op fell back to the CPU ({where})")
        if "paths" in findings:
            lines += sim_paths.format_text(findings["paths"])
        return "\n".join(lines)
    lines.append(f"{len(fallbacks)} op{'s' if len(fallbacks) != 1 else ''} fell back to the CPU ({where}):")
    width = max(len(name) for name in fallbacks)
    for name, count in fallbacks.items():
        lines.append(f"  {name.ljust(width)}  {count}")
    if "paths" in findings:
        lines += sim_paths.format_text(findings["paths"])
    return "\n".join(lines)
