"""``ascend-env install``: patch the installed transformers (and add the startup hook)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ascend_env.commands import add_patches_dir, add_target
from ascend_env.exceptions import UsageError
from ascend_env.hook import compile_guard, files
from ascend_env.output import verdict_line, write_json, write_text
from ascend_env.patching import engine

__all__ = ["configure", "describe", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="show what would change; write nothing")
    parser.add_argument(
        "--patches",
        choices=engine.PATCH_MODES,
        default="auto",
        help="auto: patch only when torch_npu has no native NPU isin (default); always; never",
    )
    parser.add_argument(
        "--hook-only",
        action="store_true",
        help="install only the startup hook that registers the NPU isin (same as --patches never)",
    )
    parser.add_argument(
        "--no-compile-guard",
        dest="compile_guard",
        action="store_false",
        help="leave torch_npu's compile mode alone (default: the hook turns JIT compile off where the "
        "SoC would compile online and binary kernels are installed; also $ASCEND_ENV_COMPILE_GUARD=0)",
    )
    add_target(parser)
    add_patches_dir(parser)


def describe(report: engine.InstallReport, compile_guard: bool) -> str:
    """The plain-text form of an install report."""
    lines = [
        f"{report.result}: transformers {report.transformers or '(not installed)'} in {report.site_packages}"
    ]
    if report.reason:
        lines.append(f"  {report.reason}")
    if report.recovered:
        lines.append(f"  {report.recovered}")
    for path in report.changed:
        lines.append(f"  {'would change' if report.dry_run else 'changed'} {path}")
    for path in report.adopted:
        verb = "would adopt" if report.dry_run else "adopted"
        lines.append(f"  {verb} {path} (left by an install whose state was lost)")
    lines.append("  " + _GUARD_LINES[compile_guard])
    lines.append(verdict_line("install", report.result, _AFTER.get(report.result, report.reason)))
    return "\n".join(lines)


#: What ``status`` says after each result (:mod:`ascend_env.states`), for the last line.
_AFTER = {
    "applied": "transformers' files are patched and the startup hook is installed (status: applied)",
    "already applied": "nothing to write; transformers' files are patched and the startup hook is "
    "installed (status: applied)",
    "would apply": "nothing written (--dry-run); install would patch transformers' files (status after: "
    "applied)",
    "hook installed": "the startup hook is installed; transformers' files are not patched "
    "(status: hook only)",
    "hook already installed": "nothing to write; the startup hook is installed, transformers' files are "
    "not patched (status: hook only)",
    "would install the hook": "nothing written (--dry-run); install would install the startup hook, "
    "no patch (status after: hook only)",
}


_GUARD_LINES = {
    True: "compile-mode guard on: where the SoC would compile ops online and binary kernels are "
    "installed, the hook turns JIT compile off (off: --no-compile-guard)",
    False: "compile-mode guard off: torch_npu's compile mode is left alone",
}


def run(args: argparse.Namespace) -> int:
    if args.hook_only and args.patches != "auto":
        raise UsageError(
            f"--hook-only and --patches {args.patches} contradict each other.", "pass one of them."
        )
    site_packages = engine.resolve_site_packages(args.target)
    if args.target is None:
        engine.check_not_shared(site_packages)
    guard = args.compile_guard and not compile_guard.switched_off(os.environ)
    report = engine.install(
        site_packages,
        patches="never" if args.hook_only else args.patches,
        dry_run=args.dry_run,
        extra_files=engine.startup_hook_files(site_packages, files.written(guard)),
        search_sys_path=args.target is None,
        directory=Path(args.patches_dir) if args.patches_dir else None,
    )
    if args.json:
        write_json({"ok": True, **report.to_dict(), "compile_guard": guard})
    else:
        write_text(describe(report, guard))
    return 0
