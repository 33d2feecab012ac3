"""``python -m ascend_env.cann [--soc SOC] [--report FILE] SCRIPT [ARGS...]``: run a Python script
under the emulated CANN (in this process: the libraries are loaded before the script imports
torch_npu), for manual checks. ``--report`` writes the counters there as JSON when it ends."""

from __future__ import annotations

import argparse
import json
import runpy
import sys
from typing import List, Optional

__all__ = ["main"]


def main(argv: Optional[List[str]] = None) -> int:
    """Run the script; its exit status is ours."""
    from ascend_env.cann import runtime

    parser = argparse.ArgumentParser(prog="python -m ascend_env.cann", description=__doc__)
    parser.add_argument("--soc", default=runtime.DEFAULT_SOC, help="the SoC name aclrtGetSocName answers")
    parser.add_argument("--report", help="write the counters to this file as JSON at the end")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    runtime.enable(options.soc)
    sys.argv = [options.script, *options.args]
    status = 0
    try:
        runpy.run_path(options.script, run_name="__main__")
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        if options.report:
            with open(options.report, "w", encoding="utf-8") as handle:
                json.dump(runtime.report(), handle, indent=1, sort_keys=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
