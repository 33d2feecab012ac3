"""Start-up cost of a Python process under ``ascend-env audit`` that never imports torch.

Every Python process of an audited command runs the audit's ``sitecustomize``
(``ascend_env/sim/shim``). Most of them (shell helpers, pip, tokenizer workers) never import
torch, and the simulator waits for torch, so such a process should cost little more than a plain
start (issue #37 item 6 set the bar at 3x). This times, side by side, in rotating order:

* ``plain``: ``python -c pass``;
* ``audited``: the same, as the audit starts it (the shim first on ``PYTHONPATH``, a report
  directory and a table in the environment): it writes its report and waits for torch;
* with ``--torch``: ``python -c "import torch"`` plain and audited (the simulator starts there).

    python bench/audit_startup.py [--python PATH] [--runs 200] [--torch] [--json PATH]

The ratio is the median over the rounds of the ratio within a round, so that load from other
processes, which comes and goes, hits both sides alike. Not a test: timings depend on the machine
and its load. ``PATH`` must import ascend_env (this checkout on its ``sys.path``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
SHIM = ROOT / "ascend_env" / "sim" / "shim"


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
    audited = dict(plain, PYTHONPATH=f"{SHIM}{os.pathsep}{ROOT}", ASCEND_ENV_AUDIT_REPORTS=reports,
                   ASCEND_ENV_AUDIT_TORCH_NPU="2.1.0.post6", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    return {"plain": plain, "audited": audited}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter to time (default: this one)")
    parser.add_argument("--runs", type=int, default=200, help="starts of each kind")
    parser.add_argument("--torch", action="store_true", help="also time 'import torch' plain and audited")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures to PATH as JSON")
    args = parser.parse_args(argv)
    codes = {"pass": "pass"}
    if args.torch:
        codes["import torch"] = "import torch"
    kinds = [(code, env) for code in codes for env in ("plain", "audited")]
    samples: Dict[Tuple[str, str], List[Tuple[float, float]]] = {kind: [] for kind in kinds}
    reports = tempfile.mkdtemp(prefix="ascend-env-bench-")
    try:
        envs = environments(reports)
        for code, env in kinds:  # warm the page cache and the bytecode
            start_once(args.python, codes[code], envs[env])
        for round_ in range(args.runs):
            for code, env in kinds[round_ % len(kinds):] + kinds[: round_ % len(kinds)]:
                samples[code, env].append(start_once(args.python, codes[code], envs[env]))
            for name in os.listdir(reports):
                os.unlink(os.path.join(reports, name))
    finally:
        shutil.rmtree(reports, ignore_errors=True)
    version = os.popen(f"{args.python} -c 'import sys; print(sys.version.split()[0])'").read().strip()
    print(f"python {version} ({args.python}), {args.runs} starts each, rotating order")
    print(f"{'command':<22} {'wall ms':>8} {'cpu ms':>8} {'wall ratio':>10} {'cpu ratio':>10}")
    rows = []
    for code, env in kinds:
        values, base = samples[code, env], samples[code, "plain"]
        row = {"command": f"-c {codes[code]!r}", "environment": env}
        for index, name in ((0, "wall"), (1, "cpu")):
            row[name + "_ms"] = statistics.median(v[index] for v in values) * 1e3
            row[name + "_ratio"] = statistics.median(v[index] / b[index] for v, b in zip(values, base)
                                                     if b[index] > 0)
        rows.append(row)
        print(f"{codes[code] + ', ' + env:<22} {row['wall_ms']:>8.1f} {row['cpu_ms']:>8.1f} "
              f"{row['wall_ratio']:>10.2f} {row['cpu_ratio']:>10.2f}")
    if args.json is not None:
        args.json.write_text(json.dumps({"bench": "audit_startup", "schema": 1, "python": version,
                                         "runs": args.runs, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
