"""``ascend-env audit [--torch-npu VERSION] [--timeout SECONDS] [--paths] [--soc SOC] [--fail-on ...]
-- COMMAND...``: list the ops that fall back to the CPU, in every Python process of the command, and
with ``--paths`` the would-be online compiles, 64-bit warnings and host syncs of torch_npu's
dispatch paths."""

from __future__ import annotations

import argparse
import sys

from ascend_env.checks import audit
from ascend_env.output import write_json, write_text
from ascend_env.sim import paths as sim_paths


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--torch-npu",
        metavar="VERSION",
        help="the torch_npu release whose op table to simulate "
        "(default: the installed torch_npu's own op lists, else the newest known release)",
    )
    parser.add_argument(
        "--timeout", metavar="SECONDS", type=float,
        help="stop the command and every process it started after SECONDS, report what was seen "
        "and fail (exit 1)",
    )
    parser.add_argument(
        "--soc", metavar="SOC",
        help="the Ascend SoC to simulate for --paths: 910A, 910B, 310P, ... or a full name "
        "(default: this machine's: $ASCEND_ENV_SOC, else npu-smi info; else Ascend910B1, assumed)",
    )
    parser.add_argument(
        "--paths", action="store_true",
        help="model torch_npu's dispatch paths: would-be online compiles, 64-bit warnings and host "
        "syncs, per generate() step",
    )
    parser.add_argument(
        "--fail-on", metavar="FINDINGS",
        help="comma-separated findings that fail the audit: fallbacks, compiles, syncs, 64bit "
        "(default: fallbacks; compiles, syncs and 64bit turn on --paths)",
    )
    parser.add_argument(
        "user_command", nargs=argparse.REMAINDER, metavar="-- COMMAND",
        help="the command to run, after '--' (e.g. -- python my_script.py)",
    )


def run(args: argparse.Namespace) -> int:
    command = list(args.user_command)
    if command and command[0] == "--":
        command = command[1:]
    fail_on = sim_paths.parse_fail_on(args.fail_on)
    paths = bool(args.paths) or any(kind != "fallbacks" for kind in fail_on)
    try:
        findings = audit.run(command, args.torch_npu, timeout=args.timeout, soc=args.soc, paths=paths)
    except audit.Interrupted as stop:
        # As the CLI answers Ctrl-C: one line, no traceback; 128 + the signal, as a shell reports it.
        sys.stderr.write(f"ascend-env: audit interrupted by {stop}: the command and every process it "
                         "started were stopped, and nothing is reported.\n")
        return 128 + stop.signum
    code = audit.exit_code(findings, fail_on)
    if args.json:
        write_json({"ok": code == 0, "schema": audit.SCHEMA, **findings})
    else:
        write_text(audit.format_text(findings))
    return code
