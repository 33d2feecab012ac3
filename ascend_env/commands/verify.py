"""``ascend-env verify [--device npu|sim|auto] [--cann sim|emulated] [--torch-npu VERSION] [--strict]
[--python PATH]``: the smoke test."""

from __future__ import annotations

import argparse
import os
import sys

from ascend_env.checks import verify, verify_text
from ascend_env.detect import machine, socs
from ascend_env.output import write_json, write_text
from ascend_env.sim import emulated

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        choices=verify.DEVICES,
        default="auto",
        help="npu: the real npu:0 or fail; sim: the simulated NPU; auto (default): npu:0 on a machine "
        "with an NPU (a torch_npu that is missing or cannot start there fails), else the simulator",
    )
    parser.add_argument(
        "--cann",
        choices=emulated.CANN,
        help="emulated: the installed torch_npu's own binary on ascend-env's emulated CANN (host memory, "
        "no NPU); sim: the simulator, as --simulate. Default: as --device auto chooses (on a machine "
        "without an NPU where torch_npu cannot start: the emulated CANN, else the simulator)",
    )
    parser.add_argument(
        "--simulate",
        action="store_true",
        help="the same as --device sim",
    )
    parser.add_argument(
        "--torch-npu",
        metavar="VERSION",
        help="simulate this torch_npu release's op table (implies --simulate; default: the installed "
        "torch_npu's op lists, else the oldest known release, which lacks what the affected releases lack)",
    )
    parser.add_argument(
        "--soc",
        metavar="SOC",
        help="the Ascend SoC to simulate: 910A, 910B, 310P, ... or a full name (default: $ASCEND_ENV_SOC, "
        "else Ascend910B1, assumed)",
    )
    parser.add_argument("--strict", action="store_true", help="fail when any op at all falls back to the CPU")
    parser.add_argument(
        "--python",
        metavar="PATH",
        default=sys.executable,
        help="the interpreter to verify (default: this one); ascend-env must be installed in it",
    )


def run(args: argparse.Namespace) -> int:
    # An unknown SoC (--soc, else $ASCEND_ENV_SOC) is a usage error before the smoke test runs.
    chosen = os.environ.get(machine.SOC_VARIABLE, "").strip()
    if args.soc:
        socs.canonical(args.soc)
    elif chosen:
        socs.canonical(chosen, machine.SOC_VARIABLE)
    options = verify.Options(
        python=args.python,
        simulate=args.simulate or args.cann == emulated.CANN_SIM,
        cann=args.cann if args.cann == emulated.CANN_EMULATED else None,
        device=args.device,
        torch_npu=args.torch_npu,
        strict=args.strict,
        soc=args.soc,
    )
    result = verify.verify(options)
    if args.json:
        write_json(result.to_dict())
    else:
        write_text(verify_text.format_text(result))
    return verify_text.exit_code(result)
