"""``ascend-env audit [--cann sim|emulated] [--torch-npu VERSION[,VERSION...]|affected]
[--torch-npu-wheel PATH] [--timeout SECONDS] [--paths] [--soc SOC] [--fail-on ...] [--report FILE]
-- COMMAND...``: list the ops that fall back to the CPU, in every Python process of the command, on
the simulator or (``--cann emulated``) the real torch_npu binary on the emulated CANN, and with
``--paths`` the would-be online compiles, 64-bit warnings and host syncs of torch_npu's dispatch
paths."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ascend_env.checks import audit, audit_text, paths_report, tables
from ascend_env.checks.findings import Findings
from ascend_env.exceptions import AscendEnvError, UsageError
from ascend_env.output import write_json, write_text
from ascend_env.sim import emulated
from ascend_env.utils import atomic, supervise

__all__ = ["Result", "configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--torch-npu",
        metavar="VERSION",
        help="the torch_npu release whose op table to simulate (with --cann emulated: whose real wheel "
        "to run); several, comma-separated, run the command "
        f"once each; '{tables.AFFECTED}' runs each release that lacks an NPU isin (2.1.0.post3 to "
        "2.1.0.post6, 2.2.x, 2.3.1). Default: the installed torch_npu's own op lists, else the oldest "
        "known release",
    )
    parser.add_argument(
        "--cann",
        choices=emulated.CANN,
        default=emulated.CANN_SIM,
        help="sim (default): the simulator, a model of torch_npu that reads the release's op table; "
        "emulated: the real torch_npu binary on ascend-env's emulated CANN (host memory, no NPU): "
        "--torch-npu R's wheel (fetched once by pip), --torch-npu-wheel's, else the installed one",
    )
    parser.add_argument(
        "--torch-npu-wheel",
        metavar="PATH",
        type=Path,
        help="with --cann emulated: this torch_npu wheel file (no network needed); it must fit this "
        "Python and its torch",
    )
    parser.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=float,
        help="stop the command and every process it started after SECONDS, report what was seen "
        "and fail (exit 1)",
    )
    parser.add_argument(
        "--soc",
        metavar="SOC",
        help="the Ascend SoC to simulate for --paths: 910A, 910B, 310P, ... or a full name "
        "(default: this machine's: $ASCEND_ENV_SOC, else npu-smi info; else Ascend910B1, assumed)",
    )
    parser.add_argument(
        "--paths",
        action="store_true",
        help="model torch_npu's dispatch paths: would-be online compiles, 64-bit warnings and host "
        "syncs, per generate() step; with --cann emulated, also the binary's online compiles and aclnn "
        "calls per step, measured (the command runs again on the simulator for the model's figures)",
    )
    parser.add_argument(
        "--fail-on",
        metavar="FINDINGS",
        help="comma-separated findings that fail the audit: fallbacks, compiles, syncs, 64bit, stopped "
        "(processes audit had to stop after the command ended) (default: fallbacks; compiles, syncs "
        "and 64bit turn on --paths)",
    )
    parser.add_argument(
        "--report",
        metavar="FILE",
        help="also write the JSON report (as --json prints it) to FILE; '-' prints it on stdout, as --json "
        "does. With the JSON on stdout, the command's own stdout goes to stderr",
    )
    parser.add_argument(
        "user_command",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND",
        help="the command to run, after '--' (e.g. -- python my_script.py)",
    )


Result = Union[Findings, AscendEnvError]


def run(args: argparse.Namespace) -> int:
    command = list(args.user_command)
    if command and command[0] == "--":
        command = command[1:]
    fail_on = paths_report.parse_fail_on(args.fail_on)
    paths = bool(args.paths) or any(kind not in paths_report.WITHOUT_PATHS for kind in fail_on)
    cann = str(args.cann)
    if args.torch_npu_wheel is not None and cann != emulated.CANN_EMULATED:
        raise UsageError(
            "--torch-npu-wheel runs the real binary, which only --cann emulated does.",
            "add --cann emulated, or drop --torch-npu-wheel to audit on the simulator",
        )
    if cann == emulated.CANN_EMULATED:
        releases = _emulated_releases(args.torch_npu)
    else:
        releases = tables.releases_asked(args.torch_npu)
    json_on_stdout = bool(args.json) or args.report == "-"
    report_file = Path(args.report) if args.report not in (None, "-") else None
    results: List[Tuple[str, Result]] = []
    what = " (the real binary)" if cann == emulated.CANN_EMULATED else "'s op table"
    try:
        for index, release in enumerate(releases):
            if len(releases) > 1:
                sys.stderr.write(
                    f"ascend-env: audit: running the command on torch_npu {release}{what} "
                    f"({index + 1} of {len(releases)})\n"
                )
            try:
                # The JSON document is stdout's alone: the command's own output goes to stderr.
                findings = audit.run(
                    command,
                    release,
                    timeout=args.timeout,
                    soc=args.soc,
                    paths=paths,
                    stdout=_stderr_fd() if json_on_stdout else None,
                    cann=cann,
                    wheel=args.torch_npu_wheel,
                )
            except AscendEnvError as exc:
                if len(releases) == 1:
                    raise
                results.append((str(release), exc))
                continue
            results.append((findings["table"].split(" ", 1)[0], findings))
            if not json_on_stdout:
                write_text(audit_text.format_text(findings, fail_on))
    except supervise.Interrupted as stop:
        # As the CLI answers Ctrl-C: one line, no traceback; 128 + the signal, as a shell reports it.
        sys.stderr.write(
            f"ascend-env: audit interrupted by {stop}: the command and every process it "
            "started were stopped, and nothing is reported.\n"
        )
        return 128 + stop.signum
    document = _document(results, fail_on)
    if report_file is not None:
        _write_report(report_file, document)
    if json_on_stdout:
        write_json(document)
    elif len(results) > 1:
        for release, result in results:
            if isinstance(result, AscendEnvError):
                write_text(f"audit: torch_npu {release}: {result}")
        write_text(audit_text.combined_verdict(results, fail_on).line)
    return _code(results, fail_on)


def _emulated_releases(value: Optional[str]) -> List[Optional[str]]:
    """``--torch-npu``'s releases for the real binary: named ones as given (each is checked to fit
    before it runs), ``affected`` not at all: one torch runs only its own torch_npu releases."""
    if value is None:
        return [None]
    if any(part.strip().lower() == tables.AFFECTED for part in value.split(",")):
        raise UsageError(
            f"--torch-npu {tables.AFFECTED} names releases for several torches, and the real binary "
            "runs only on the torch it is built for.",
            "name the releases built for this torch (e.g. --torch-npu 2.1.0.post3,2.1.0.post6 on torch "
            "2.1.0), or audit them all on the simulator (--cann sim)",
        )
    chosen: List[Optional[str]] = []
    for part in (p.strip() for p in value.split(",")):
        if part and part not in chosen:
            chosen.append(part)
    return chosen or [None]


def _stderr_fd() -> int:
    """This process's standard error as a file descriptor for the command (fd 2 where sys.stderr
    has none, as under a test's capture)."""
    sys.stderr.flush()
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return 2


def _code(results: Sequence[Tuple[str, Result]], fail_on: Sequence[str]) -> int:
    if len(results) == 1:
        result = results[0][1]
        if isinstance(result, AscendEnvError):
            return result.exit_code
        return audit_text.exit_code(result, fail_on)
    return audit_text.combined_verdict(results, fail_on).code


def _document(results: Sequence[Tuple[str, Result]], fail_on: Sequence[str]) -> Dict[str, Any]:
    """``--json``'s document: one release's findings as they always were; several under ``releases``."""

    def one(result: Result) -> Dict[str, Any]:
        if isinstance(result, AscendEnvError):
            return {"ok": False, **result.to_dict()}
        found = audit_text.verdict(result, fail_on)
        return {"ok": found.code == 0, "schema": audit.SCHEMA, **result, "verdict": found.line}

    if len(results) == 1:
        return one(results[0][1])
    combined = audit_text.combined_verdict(results, fail_on)
    return {
        "ok": combined.code == 0,
        "schema": audit.SCHEMA,
        "verdict": combined.line,
        "releases": [dict(one(result), release=release) for release, result in results],
    }


def _write_report(path: Path, document: Dict[str, Any]) -> None:
    try:
        with atomic.replacing(path) as partial, partial.open("w", encoding="utf-8") as out:
            write_json(document, out)
    except OSError as exc:
        raise UsageError(
            f"--report {path}: cannot write it ({exc.strerror or exc}).",
            "name a file in a directory you can write to",
        ) from None
