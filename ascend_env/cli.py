"""The ``ascend-env`` command line.

Each subcommand lives in ``ascend_env.commands.<name>`` and provides two functions:
``configure(parser)`` adds its options and ``run(args) -> int`` does the work and
returns the exit code. Exit codes: 0 ok, 1 a check failed, 2 usage or environment error.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType
from typing import Dict, List, NoReturn, Optional, Sequence

from ascend_env import __version__
from ascend_env.exceptions import AscendEnvError
from ascend_env.output import write_json

EXIT_USAGE = 2

COMMANDS: Dict[str, str] = {
    "detect": "Report CANN, driver, torch, torch_npu, transformers and Python, and whether they fit.",
    "install": "Patch the installed transformers and install the NPU isin startup hook.",
    "restore": "Put back the original transformers files and remove the startup hook.",
    "status": "Show what is applied, whether it drifted, and what the startup hook did.",
    "verify": "Run a smoke test in a fresh process; fail on any isin fallback to the CPU.",
    "audit": "Run a command on the simulated NPU and list every op that fell back to the CPU.",
    "patch-wheel": "Write a patched copy of a transformers wheel for an internal index.",
}


def _load(name: str) -> ModuleType:
    return importlib.import_module("ascend_env.commands." + name.replace("-", "_"))


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors exit 2 and mention ``--help``."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n  fix: see '{self.prog} --help'\n")


def build_parser() -> argparse.ArgumentParser:
    """The parser for every subcommand."""
    parser = _Parser(
        prog="ascend-env",
        description="Make transformers generation run fully on Ascend NPUs.",
    )
    parser.add_argument("--version", action="version", version=f"ascend-env {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, summary in COMMANDS.items():
        sub = subparsers.add_parser(name, help=summary, description=summary)
        sub.add_argument("--json", action="store_true", help="write machine-readable JSON to stdout")
        _load(name).configure(sub)
    return parser


#: What an interrupted run says: the journal lets the next run finish a change in progress.
INTERRUPTED = (
    "ascend-env: interrupted. A change in progress is finished by the next install or restore "
    "(its journal keeps it); python -m ascend_env status shows where things stand.\n"
)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the CLI and return its exit code."""
    args = None
    try:
        parser = build_parser()
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
        if args.command is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        return int(_load(args.command).run(args))
    except AscendEnvError as exc:
        return _report_error(exc, as_json=getattr(args, "json", False))
    except KeyboardInterrupt:
        sys.stderr.write(INTERRUPTED)
        return 130


def _report_error(exc: AscendEnvError, as_json: bool) -> int:
    """Print ``exc`` (to stdout as JSON, or to stderr as text) and return its exit code."""
    if as_json:
        write_json({"ok": False, **exc.to_dict()})
    else:
        sys.stderr.write(f"ascend-env: {exc}\n")
    return exc.exit_code


def entry_point(argv: Optional[List[str]] = None) -> None:
    """The ``ascend-env`` console script."""
    sys.exit(main(argv))
