"""Start-up cost of a Python process under ``ascend-env audit`` that never imports torch.

Every Python process of an audited command runs the audit's ``sitecustomize``
(``ascend_env/_audited_shim``). Most of them (shell helpers, pip, tokenizer workers) never import
torch, and the simulator waits for torch, so such a process should cost little more than a plain
start (issue #37 item 6 set the bar at 3x). This times, side by side, in rotating order, for each
interpreter given:

* ``plain``: ``python -c pass``;
* ``audited``: the same, as the audit starts it (the shim first on ``PYTHONPATH``, a report
  directory and a table in the environment): it writes its report and waits for torch;
* with ``--torch``: ``python -c "import torch"`` plain and audited (the simulator starts there).

    python bench/audit_startup.py [--python PATH ...] [--runs 200] [--torch] [--json PATH]

Each row gives the median wall and CPU time (user + system, from ``wait4``) of one start and the
ratio to the plain start of the same command: the median over the rounds of the ratio within a
round, so that load from other processes, which comes and goes, hits both sides alike. ``--json
PATH`` also writes the figures to ``PATH`` (as ``bench/results/audit_startup.json`` holds them;
the docs build renders that file into the manual's table). Not a test: timings depend on the
machine and its load. Each interpreter must import ascend_env from this checkout (it is put first
on ``PYTHONPATH``) and, for ``--torch``, torch.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from bench_tables import AUDIT_STARTUP_HEADER, audit_startup_row, write

ROOT = Path(__file__).resolve().parents[1]
SHIM = ROOT / "ascend_env" / "_audited_shim"


def start_once(python: str, code: str, environ: Dict[str, str]) -> Tuple[float, float]:
    """Wall and CPU seconds (user + system, from ``wait4``) of one ``python -c code``."""
    start = time.perf_counter()
    pid = os.posix_spawn(python, [python, "-c", code], environ)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"{python} -c {code!r} failed (wait status {status})")
    return wall, usage.ru_utime + usage.ru_stime


def environments(reports: str) -> Dict[str, Dict[str, str]]:
    """The plain environment and the audited one (as ``audit`` sets it up)."""
    plain = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT)}
    if "ASCEND_ENV_CACHE_DIR" in os.environ:  # where the simulator's library was built
        plain["ASCEND_ENV_CACHE_DIR"] = os.environ["ASCEND_ENV_CACHE_DIR"]
    audited = dict(
        plain,
        PYTHONPATH=f"{SHIM}{os.pathsep}{ROOT}",
        ASCEND_ENV_AUDIT_REPORTS=reports,
        ASCEND_ENV_AUDIT_TORCH_NPU="2.1.0.post6",
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
    )
    return {"plain": plain, "audited": audited}


def bench(python: str, codes: List[str], runs: int) -> List[Dict[str, Any]]:
    """The rows of one interpreter."""
    version = subprocess.run(
        [python, "-c", "import sys; print(sys.version.split()[0])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    kinds = [(code, env) for code in codes for env in ("plain", "audited")]
    samples: Dict[Tuple[str, str], List[Tuple[float, float]]] = {kind: [] for kind in kinds}
    reports = tempfile.mkdtemp(prefix="ascend-env-bench-")
    try:
        envs = environments(reports)
        for code, env in kinds:  # warm the page cache and the bytecode
            start_once(python, code, envs[env])
        for round_ in range(runs):
            for code, env in kinds[round_ % len(kinds) :] + kinds[: round_ % len(kinds)]:
                samples[code, env].append(start_once(python, code, envs[env]))
            for name in os.listdir(reports):
                os.unlink(os.path.join(reports, name))
    finally:
        shutil.rmtree(reports, ignore_errors=True)
    rows = []
    for code, env in kinds:
        values, base = samples[code, env], samples[code, "plain"]
        row: Dict[str, Any] = {"python": version, "command": f"-c {code!r}", "environment": env}
        for index, name in ((0, "wall"), (1, "cpu")):
            row[name + "_ms"] = statistics.median(v[index] for v in values) * 1e3
            row[name + "_ratio"] = statistics.median(
                v[index] / b[index] for v, b in zip(values, base) if b[index] > 0
            )
        rows.append(row)
    return rows


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--python",
        action="append",
        metavar="PATH",
        help="an interpreter to time (repeatable; default: this one)",
    )
    parser.add_argument("--runs", type=int, default=200, help="starts of each kind")
    parser.add_argument("--torch", action="store_true", help="also time 'import torch' plain and audited")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures to PATH as JSON")
    args = parser.parse_args(argv)
    codes = ["pass"] + (["import torch"] if args.torch else [])
    print(f"{args.runs} starts of each kind, rotating order; ratio: median of per-round ratios to plain")
    print("\n".join(AUDIT_STARTUP_HEADER))
    rows: List[Dict[str, Any]] = []
    for python in args.python or [sys.executable]:
        for row in bench(python, codes, args.runs):
            rows.append(row)
            print(audit_startup_row(row))
    if args.json is not None:
        write(
            args.json,
            {
                "bench": "audit_startup",
                "schema": 1,
                "command": "python bench/audit_startup.py "
                + " ".join(sys.argv[1:] if argv is None else argv),
                "runs": args.runs,
                "rows": rows,
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
