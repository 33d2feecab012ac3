"""``ascend-env restore``: put back the original transformers files and remove the hook and state."""

from __future__ import annotations

import argparse

from ascend_env.commands import add_target
from ascend_env.output import write_json, write_text
from ascend_env.patching import engine


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
    write_text("\n".join(lines))
    return 0
