"""The ``ascend-env`` command line.

Each subcommand lives in ``ascend_env.commands.<name>`` and provides two functions:
``configure(parser)`` adds its options and ``run(args) -> int`` does the work and
returns the exit code. Exit codes: 0 ok, 1 a check failed, 2 usage or environment error.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import re
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, List, NoReturn, Optional, Sequence, Tuple

from ascend_env import __version__
from ascend_env.exceptions import AscendEnvError, UsageError
from ascend_env.output import seal_stdout_after_json, write_json
from ascend_env.utils import progress

__all__ = [
    "COMMANDS",
    "ENVIRONMENT",
    "EXIT_USAGE",
    "INTERRUPTED",
    "build_parser",
    "entry_point",
    "main",
    "version_text",
]

EXIT_USAGE = 2

COMMANDS: Dict[str, str] = {
    "detect": "Report CANN, driver, torch, torch_npu, transformers and Python, and whether they fit.",
    "install": "Patch the installed transformers and install the NPU isin startup hook.",
    "restore": "Put back the original transformers files and remove the startup hook.",
    "status": "Show what is applied, whether it drifted, and what the startup hook did.",
    "verify": "Run a smoke test in a fresh process; fail on any isin fallback to the CPU.",
    "audit": "Run a command on the simulated NPU (or the real torch_npu on the emulated CANN) and list "
    "every op that fell back to the CPU.",
    "patch-wheel": "Write a patched copy of a transformers wheel for an internal index.",
}

#: The environment variables ascend-env reads, as ``--help`` lists them.
ENVIRONMENT: Tuple[Tuple[str, str], ...] = (
    ("ASCEND_ENV_SOC", "the Ascend SoC (910A, 910B, 310P, ...); default: what npu-smi info says"),
    (
        "ASCEND_ENV_CACHE_DIR",
        "where the simulated NPU's C++ backend and the emulated CANN are built once, and torch_npu "
        "wheels unpacked (default: $XDG_CACHE_HOME/ascend-env, else ~/.cache/ascend-env)",
    ),
    ("ASCEND_ENV_COMPILE_GUARD", "0: the startup hook leaves torch_npu's compile mode alone"),
    ("ASCEND_ENV_DISABLE", "1: the startup hook does nothing in this process"),
    (progress.VARIABLE, "-1 quiet, 0 (default) or 1 verbose progress on stderr; -q and -v set it"),
    ("ASCEND_HOME_PATH", "the CANN toolkit (set by CANN's set_env.sh)"),
    (
        "ASCEND_TOOLKIT_HOME",
        "the CANN toolkit where ASCEND_HOME_PATH is unset (set by CANN's set_env.sh too); its binary "
        "kernels decide the compile-mode guard",
    ),
    (
        "CXX",
        "the C++ compiler that builds the simulated NPU's backend and the emulated CANN (default: "
        "c++, g++, clang++)",
    ),
    ("NO_COLOR", "set: no dimmed progress lines on a terminal"),
)


def _command_module(name: str) -> ModuleType:
    """The module of command ``name`` (``commands/<name>.py``), imported on first use."""
    return importlib.import_module("ascend_env.commands." + name.replace("-", "_"))


def _load(name: str) -> ModuleType:
    """The module whose ``run`` :func:`main` calls for command ``name``."""
    return _command_module(name)


class _ArgumentError(UsageError):
    """argparse's usage error, with the usage text that precedes it on stderr (not with --json)."""

    def __init__(self, problem: str, fix: str, usage: str, prog: str) -> None:
        super().__init__(problem, fix)
        self.usage = usage
        self.prog = prog

    def to_dict(self) -> Dict[str, Any]:
        return {**super().to_dict(), "error": UsageError.__name__}

    def text(self) -> str:
        return f"{self.usage}{self.prog}: error: {self.problem}\n  fix: {self.fix}\n"


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors exit 2 (through :func:`main`, which honours --json),
    say where the help is, and suggest the option or value meant where one is spelt alike."""

    def error(self, message: str) -> NoReturn:
        name = self.prog.partition(" ")[2]
        where = f"'ascend-env help {name}'" if name else "'ascend-env --help'"
        meant = _meant(message, list(self._option_string_actions))
        if meant:
            message += f". Did you mean {meant!r}?"
        raise _ArgumentError(message, f"see {where}", self.format_usage(), self.prog)


_UNRECOGNIZED = "unrecognized arguments: "
# argparse quotes the choices ('a', 'b'); some newer Pythons do not (a, b): both are read.
_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<value>.*)' \(choose from (?P<choices>.*)\)$")


def _meant(message: str, options: Sequence[str]) -> Optional[str]:
    """The option (of ``options``) or the value meant by the argparse error ``message``, where one
    is spelt alike: ``--torch_npu`` for ``--torch-npu``, ``sim`` for ``simm``; else None."""
    if message.startswith(_UNRECOGNIZED):
        long_options = [option for option in options if option.startswith("--")]
        for word in message[len(_UNRECOGNIZED) :].split():
            if not word.startswith("--"):
                continue
            typed = word.partition("=")[0]
            spelt = typed.replace("_", "-").lower()
            if spelt in long_options:
                return spelt
            close = difflib.get_close_matches(typed, long_options, n=1, cutoff=0.8)
            if close:
                return close[0]
        return None
    found = _INVALID_CHOICE.search(message)
    if found:
        choices = [choice.strip().strip("'") for choice in found.group("choices").split(",")]
        close = difflib.get_close_matches(found.group("value"), choices, n=1, cutoff=0.6)
        return close[0] if close else None
    return None


class _CommandParser(_Parser):
    """A subcommand's parser: an option it does not know is its own error, with its own usage
    (argparse would hand it to the top-level parser, whose usage says nothing of the command's).

    The command's own options are added when the parser is first used (to parse, or for its help
    or usage), so that a run imports only the chosen command's module and what that imports."""

    def __init__(self, *args: Any, command: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._unconfigured = command

    def _configure(self) -> None:
        name, self._unconfigured = self._unconfigured, None
        if name is not None:
            _command_module(name).configure(self)

    def format_usage(self) -> str:
        self._configure()
        return super().format_usage()

    def format_help(self) -> str:
        self._configure()
        return super().format_help()

    def parse_known_args(  # type: ignore[override]
        self, args: Optional[Sequence[str]] = None, namespace: Optional[argparse.Namespace] = None
    ) -> Tuple[argparse.Namespace, List[str]]:
        self._configure()
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def _verbosity_options(parser: argparse.ArgumentParser, default: Any) -> None:
    """``-q`` and ``-v``, accepted before the command and after it."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "-q",
        "--quiet",
        dest="verbosity",
        action="store_const",
        const=progress.QUIET,
        default=default,
        help="no progress lines on stderr",
    )
    group.add_argument(
        "-v",
        "--verbose",
        dest="verbosity",
        action="store_const",
        const=progress.VERBOSE,
        default=default,
        help="more detail in the progress lines on stderr",
    )


def version_text() -> str:
    """What ``--version`` prints: the version, where ascend_env is imported from, and the Python."""
    where = Path(__file__).resolve().parent
    python = ".".join(str(n) for n in sys.version_info[:3])
    return f"ascend-env {__version__} from {where} (Python {python}, {sys.executable})"


def _epilog() -> str:
    width = max(len(name) for name, _ in ENVIRONMENT)
    indent = " " * (width + 4)
    lines = [
        textwrap.fill(text, 79, initial_indent=f"  {name:<{width}}  ", subsequent_indent=indent)
        for name, text in ENVIRONMENT
    ]
    return "'ascend-env help COMMAND' shows a command's options.\n\nenvironment variables:\n" + "\n".join(
        lines
    )


def build_parser() -> argparse.ArgumentParser:
    """The parser for every subcommand; a command's module loads when its parser is first used."""
    parser = _Parser(
        prog="ascend-env",
        description="Make transformers generation run fully on Ascend NPUs.",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=version_text(),
        help="show the version, where it runs from and on which Python, and exit",
    )
    _verbosity_options(parser, default=None)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_CommandParser)
    for name, summary in COMMANDS.items():
        sub = subparsers.add_parser(name, help=summary, description=summary, command=name)
        sub.add_argument("--json", action="store_true", help="write machine-readable JSON to stdout")
        _verbosity_options(sub, default=argparse.SUPPRESS)
    return parser


#: What an interrupted run says: the journal lets the next run finish a change in progress.
INTERRUPTED = (
    "ascend-env: interrupted. A change in progress is finished by the next install or restore "
    "(its journal keeps it); python -m ascend_env status shows where things stand.\n"
)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the CLI and return its exit code."""
    args = None
    arguments = list(sys.argv[1:] if argv is None else argv)
    as_json = _wants_json(arguments)
    try:
        parser = build_parser()
        command, position = _command_word(arguments)
        if command == "help":
            return _help(parser, arguments[position + 1 :])
        if command is not None and command not in COMMANDS:
            raise _unknown_command(command)
        args = parser.parse_args(arguments)
        if args.verbosity is not None:
            progress.set_level(args.verbosity)
        if args.command is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        return int(_load(args.command).run(args))
    except _ArgumentError as exc:
        if as_json:
            return _report_error(exc, as_json=True)
        sys.stderr.write(exc.text())
        return exc.exit_code
    except AscendEnvError as exc:
        return _report_error(exc, as_json=getattr(args, "json", as_json))
    except KeyboardInterrupt:
        sys.stderr.write(INTERRUPTED)
        return 130


def _wants_json(arguments: Sequence[str]) -> bool:
    """Whether ``--json`` is among the options (not in a command after ``--``): a usage error is
    then a JSON document on stdout too, as every other error is."""
    options = arguments[: arguments.index("--")] if "--" in arguments else arguments
    return "--json" in options


def _command_word(arguments: Sequence[str]) -> Tuple[Optional[str], int]:
    """The first argument that is not an option (the top-level options take no value), and where."""
    for position, argument in enumerate(arguments):
        if argument == "--":
            break
        if not argument.startswith("-"):
            return argument, position
    return None, len(arguments)


def _unknown_command(word: str) -> UsageError:
    close = difflib.get_close_matches(word, [*COMMANDS, "help"], n=1, cutoff=0.6)
    problem = f"{word!r} is not an ascend-env command."
    if close:
        problem += f" Did you mean {close[0]!r}?"
    return UsageError(problem, f"one of: {', '.join(COMMANDS)} (ascend-env --help says what each does)")


def _help(parser: argparse.ArgumentParser, rest: Sequence[str]) -> int:
    """``ascend-env help [COMMAND]``: the command's help (or the overview) on stdout."""
    words = [word for word in rest if not word.startswith("-")]
    if not words:
        parser.print_help(sys.stdout)
        return 0
    if words[0] not in COMMANDS:
        raise _unknown_command(words[0])
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    subparsers.choices[words[0]].print_help(sys.stdout)
    return 0


def _report_error(exc: AscendEnvError, as_json: bool) -> int:
    """Print ``exc`` (to stdout as JSON, or to stderr as text) and return its exit code."""
    if as_json:
        write_json({"ok": False, **exc.to_dict()})
    else:
        sys.stderr.write(f"ascend-env: {exc}\n")
    return exc.exit_code


def entry_point(argv: Optional[List[str]] = None) -> None:
    """The ``ascend-env`` console script (and ``python -m ascend_env``): ``--json``'s stdout holds
    the document alone, whatever the environment prints at exit."""
    seal_stdout_after_json()
    sys.exit(main(argv))
