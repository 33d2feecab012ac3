"""``ascend-env audit [--torch-npu VERSION] -- COMMAND...``: list the ops that fall back to the CPU."""

from __future__ import annotations

import argparse

from ascend_env.checks import audit
from ascend_env.output import write_json, write_text


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--torch-npu",
        metavar="VERSION",
        help="the torch_npu release whose op table to simulate "
        "(default: the installed torch_npu's own op lists, else the newest known release)",
    )
    parser.add_argument(
        "user_command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
        help="the command to run, after '--' (e.g. -- python my_script.py)",
    )


def run(args: argparse.Namespace) -> int:
    command = list(args.user_command)
    if command and command[0] == "--":
        command = command[1:]
    findings = audit.run(command, args.torch_npu)
    code = audit.exit_code(findings)
    if args.json:
        write_json({"ok": code == 0, **findings})
    else:
        write_text(audit.format_text(findings))
    return code
