"""``ascend-env detect``: report the environment and whether its parts fit together.

Exit codes: 0 when the verdict is ``ok`` or ``unknown``, 1 when it is ``mismatch``, 2 for a usage
error (a ``--path`` that is not a directory).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, List, Optional

from ascend_env.detect.compat import Verdict
from ascend_env.detect.report import CompileMode, FixedOp, Isin, Package, Report, detect
from ascend_env.exceptions import UsageError
from ascend_env.output import bold, verdict_line, write_json, write_text

__all__ = ["configure", "render", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``detect``'s options."""
    parser.add_argument(
        "--path",
        dest="paths",
        action="append",
        type=Path,
        metavar="DIR",
        help="search only this site-packages directory for torch, torch_npu and transformers "
        "(repeatable; default: this interpreter's sys.path)",
    )


def run(args: argparse.Namespace) -> int:
    """Print the report; 1 on a mismatch, else 0."""
    paths: Optional[List[Path]] = args.paths
    for path in paths or []:
        if not path.is_dir():
            raise UsageError(f"--path {path} is not a directory.", "pass a site-packages directory")
    report = detect(paths=paths)
    if args.json:
        write_json(report.to_dict())
    else:
        write_text(render(report, heading=lambda text: bold(text, sys.stdout)))
    return 1 if report.verdict == "mismatch" else 0


def _package_line(label: str, package: Package) -> str:
    if not package.installed:
        return f"{label}: not installed"
    where = package.package_dir or package.location
    return f"{label}: {package.version}" + (f" ({where})" if where else "")


def _yes_no(value: Optional[bool]) -> str:
    return {True: "yes", False: "no", None: "unknown"}[value]


def _compile_mode_lines(mode: CompileMode) -> List[str]:
    soc = f"{mode.soc} (from {mode.soc_source})" if mode.soc else f"unknown ({mode.soc_source})"
    kernels = mode.kernels
    if kernels.installed:
        found = f"installed ({kernels.path}" + (f"; {', '.join(kernels.socs)}" if kernels.socs else "") + ")"
    else:
        found = ("not installed" if kernels.installed is False else "unknown") + f" ({kernels.reason})"
    if mode.jit_compile_default is None:
        jit = "unknown (the SoC is unknown)"
    elif mode.jit_compile_default:
        jit = "JIT compile on: acl_op compiles every new input shape online"
    else:
        jit = "JIT compile off: prebuilt op_api kernels"
    return [f"  SoC: {soc}", f"  binary kernels: {found}", f"  torch_npu's default: {jit}"]


def render(report: Report, heading: Callable[[str], str] = lambda text: text) -> str:
    """The human report, in the style of PyTorch's ``collect_env``."""
    lines = _environment_lines(report)
    lines += ["", heading("isin")] + _isin_lines(report.isin)
    if report.fixes:
        lines += ["", heading("Ops ascend-env fixes")] + _fix_lines(report.fixes)
    if report.compile_mode is not None:
        lines += ["", heading("Compile mode")] + _compile_mode_lines(report.compile_mode)
    lines += ["", heading(f"Compatibility: {report.compat.status}")] + _compat_lines(report.compat)
    for title, items in (("Problems", report.problems), ("Notes", report.notes)):
        if items:
            lines += ["", heading(title)] + [f"  - {item}" for item in items]
    return "\n".join([*lines, "", _verdict(report)])


def _verdict(report: Report) -> str:
    """The last line: the compatibility verdict, the first check that set it, and install's work."""
    compat = report.compat
    cause = compat.reasons[0] if compat.reasons and compat.status != "ok" else "every check passed"
    work = {
        True: "install has work to do",
        False: "install has nothing to do",
        None: "whether install has work to do is unknown",
    }[report.isin.install_has_work]
    return verdict_line("detect", compat.status, f"{cause.rstrip('.')}; {work}")


def _environment_lines(report: Report) -> List[str]:
    """Python, the three packages, the CANN toolkit and the driver."""
    lines = [
        f"Python version: {report.python_version} ({report.python_implementation}, {report.machine})",
        f"Python executable: {report.executable}",
        "Site-packages: " + (", ".join(str(p) for p in report.site_packages) or "none found"),
        _package_line("torch version", report.torch),
        _package_line("torch_npu version", report.torch_npu),
        _package_line("transformers version", report.transformers),
    ]
    if report.torch_npu.requires_torch:
        lines.append(f"torch_npu requires: {report.torch_npu.requires_torch}")
    toolkit = report.toolkit
    if toolkit.found:
        version = toolkit.version or "version unknown"
        lines.append(f"CANN toolkit: {version} ({toolkit.root}, from {toolkit.origin})")
    else:
        lines.append("CANN toolkit: not found (searched " + ", ".join(toolkit.searched) + ")")
    driver = report.driver
    if driver.found:
        lines.append(f"Ascend driver: {driver.version or 'version unknown'} ({driver.path})")
    else:
        lines.append("Ascend driver: not found")
    return lines


def _isin_lines(isin: Isin) -> List[str]:
    lines = []
    if isin.native or isin.missing:
        lines.append("  native on the NPU: " + (", ".join(isin.native) or "none"))
        lines.append("  missing: " + (", ".join(isin.missing) or "none"))
    lines.append(f"  falls back to the CPU: {_yes_no(isin.falls_back)} - {isin.reason}")
    lines.append(f"  install has work to do: {_yes_no(isin.install_has_work)} - {isin.install_reason()}")
    return lines


_STATUS = {
    "native": "native",
    "host_copy": "registered, runs on the CPU",
    "fixed": "fixed by the startup hook",
    "falls_back": "FALLS BACK to the CPU",
    "no_torch_npu": "no torch_npu",
    "not_used": "not in use",
    "left_to": "left to another package",
    "unknown": "unknown",
}


def _fix_lines(fixes: List[FixedOp]) -> List[str]:
    """One line per op: native / fixed / falls back, and the overloads concerned."""
    lines = []
    for fixed in fixes:
        overloads = f" ({', '.join(fixed.falls_back)})" if fixed.falls_back else ""
        lines.append(f"  {fixed.op}: {_STATUS.get(fixed.status, fixed.status)}{overloads} - {fixed.reason}")
    return lines


def _compat_lines(verdict: Verdict) -> List[str]:
    """The matching table row, if any, then one line per check."""
    lines = []
    if verdict.row is not None:
        row = verdict.row
        cann = ", ".join(row.cann) if row.cann else "unknown"
        lines.append(
            f"  table row ({row.status}): torch_npu {row.torch_npu} = torch {row.torch}, CANN {cann}, "
            f"Python {', '.join(row.python)}"
        )
    marks = {"ok": "ok", "unknown": "??", "mismatch": "XX"}
    lines += [f"  [{marks[c.status]}] {c.name}: {c.reason}" for c in verdict.checks]
    return lines
