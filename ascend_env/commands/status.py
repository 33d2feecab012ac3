"""``ascend-env status``: applied, not applied, partly applied, drifted, or nothing to do."""

from __future__ import annotations

import argparse
from pathlib import Path

from ascend_env import install as engine
from ascend_env.output import write_json, write_text


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target", metavar="DIR", help="the site-packages directory (default: transformers')"
    )
    parser.add_argument(
        "--patches-dir",
        metavar="DIR",
        help="a patches directory with manifest.json (default: the shipped one)",
    )


def run(args: argparse.Namespace) -> int:
    site_packages = engine.resolve_site_packages(args.target)
    report, code = engine.status(
        site_packages,
        search_sys_path=args.target is None,
        directory=Path(args.patches_dir) if args.patches_dir else None,
    )
    if args.json:
        write_json({"ok": code == 0, **report})
        return code
    lines = [f"{report['status']}: transformers {report['transformers']} in {site_packages}"]
    if report.get("detail"):
        lines.append(f"  {report['detail']}")
    for item in report.get("files", []):
        lines.append(f"  {item['status']}: {item['path']} ({item['patch']})")
    for line in report.get("drift", []):
        lines.append(f"  drift: {line}")
    if report.get("run"):
        lines.append(f"  run: {report['run']}")
    write_text("\n".join(lines))
    return code
