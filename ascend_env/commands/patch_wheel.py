"""``ascend-env patch-wheel``: write a patched copy of a transformers wheel for an internal index."""

from __future__ import annotations

import argparse
from pathlib import Path

from ascend_env.commands import add_patches_dir
from ascend_env.exceptions import UsageError
from ascend_env.output import verdict_line, write_json, write_text
from ascend_env.patching.wheels import patch_wheel

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("wheel", help="a released wheel, e.g. transformers-4.46.3-py3-none-any.whl")
    parser.add_argument(
        "-o", "--output-dir", metavar="DIR", default=".", help="where to write the patched wheel (default: .)"
    )
    parser.add_argument(
        "--build",
        type=int,
        default=1,
        metavar="N",
        help="the N of the local version X+ascend.N (default 1); raise it for each rebuild that differs",
    )
    add_patches_dir(parser)


def run(args: argparse.Namespace) -> int:
    wheel = Path(args.wheel)
    if not wheel.is_file():
        raise UsageError(f"{wheel} is not a file.", "pass the path of a downloaded wheel.")
    directory = Path(args.patches_dir) if args.patches_dir else None
    result = patch_wheel(wheel, Path(args.output_dir), build=args.build, directory=directory)
    if args.json:
        write_json({"ok": True, **result.to_dict()})
        return 0
    lines = [f"wrote {result.path} ({result.original_version} -> {result.version})"]
    lines += [f"  {target}: {change.patch}" for target, change in result.changes.items()]
    lines.append(
        verdict_line(
            "patch-wheel",
            "wrote",
            f"{result.path.name}, {len(result.changes)} file(s) "
            f"patched; install it from your index in place of {result.original_version}",
        )
    )
    write_text("\n".join(lines))
    return 0
