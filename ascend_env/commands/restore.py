"""``ascend-env restore``: put back the original transformers files and remove the hook and state."""

from __future__ import annotations

import argparse

from ascend_env.commands import add_target
from ascend_env.output import verdict_line, write_json, write_text
from ascend_env.patching import engine

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="show what would change; write nothing")
    add_target(parser)


def run(args: argparse.Namespace) -> int:
    site_packages = engine.resolve_site_packages(args.target)
    report = engine.restore(site_packages, dry_run=args.dry_run)
    if args.json:
        write_json({"ok": True, **report.to_dict()})
        return 0
    lines = [f"{report.result}: {site_packages}"]
    if report.recovered:
        lines.append(f"  {report.recovered}")
    for item in report.files:
        lines.append(f"  {item.action}: {item.path}")
    lines.append(verdict_line("restore", report.result, _cause(report)))
    write_text("\n".join(lines))
    return 0


def _cause(report: engine.RestoreReport) -> str:
    count = len(report.files)
    if report.result == "nothing to restore":
        return "ascend-env has nothing recorded here (status: not applied)"
    if report.result == "would restore":
        return f"nothing written (--dry-run); {count} file(s) would be put back or removed"
    return f"{count} file(s) put back or removed; transformers and this site-packages are as before install"
