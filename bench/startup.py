"""Start-up cost of the ascend-env hook: `python -c pass` with and without it, side by side.

Throw-away virtual environments of the same interpreter each hold a copy of ascend_env, as
``pip install`` would leave it:

* ``plain``: nothing else (the baseline);
* ``hooked``: the hook files too, as ``install`` writes them;
* ``empty module`` (with ``--floor``): a ``.pth`` line that imports an empty top-level module, the
  least that any ``.pth`` import hook costs.

    python bench/startup.py [--runs 400] [--floor]

Runs go round the environments, the order rotating each round. For each environment the report
gives the median wall time and CPU time (user + system, from ``wait4``) of one start, the added
time (difference of medians), and the ratio to ``plain``: the median over the rounds of the ratio
within a round, so that load from other processes, which comes and goes, hits both sides alike.
Not a test: timings depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import sys
import tempfile
import time
import venv
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import ascend_env
from ascend_env import hook


def make_env(root: Path, files: Dict[str, bytes]) -> Path:
    """A venv with a copy of ascend_env in its site-packages, plus ``files``; its python."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    site = next(root.glob("lib/python*/site-packages"))
    shutil.copytree(
        Path(ascend_env.__file__).parent, site / "ascend_env", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name, data in files.items():
        (site / name).write_bytes(data)
    compileall.compile_dir(site, quiet=1)
    return root / "bin" / "python"


def start_once(python: Path) -> Tuple[float, float]:
    """Wall and CPU seconds of one ``python -c pass``, with a bare environment."""
    environ = {"PATH": os.environ.get("PATH", "")}
    start = time.perf_counter()
    pid = os.posix_spawn(str(python), [str(python), "-c", "pass"], environ)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"{python} -c pass failed (wait status {status})")
    return wall, usage.ru_utime + usage.ru_stime


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400, help="starts of each environment")
    parser.add_argument("--floor", action="store_true", help="also time a .pth that imports an empty module")
    args = parser.parse_args(argv)
    variants: Dict[str, Dict[str, bytes]] = {"plain": {}, "hooked": hook.files()}
    if args.floor:
        variants["empty module"] = {"floor_hook.pth": b"import floor_hook\n", "floor_hook.py": b""}
    samples: Dict[str, List[Tuple[float, float]]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory() as tmp:
        pythons = {
            name: make_env(Path(tmp, str(i)), files) for i, (name, files) in enumerate(variants.items())
        }
        for python in pythons.values():  # warm the page cache
            start_once(python)
        names = list(pythons)
        for round_ in range(args.runs):
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                samples[name].append(start_once(pythons[name]))
    print(f"python {sys.version.split()[0]}, {args.runs} starts each, rotating order")
    print("| environment | wall | added | ratio | CPU | added | ratio |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    base = samples["plain"]
    for name, values in samples.items():
        cells = []
        for kind in (0, 1):
            median = statistics.median(v[kind] for v in values)
            added = median - statistics.median(b[kind] for b in base)
            ratio = statistics.median(v[kind] / b[kind] for v, b in zip(values, base))
            cells += [f"{median * 1e3:.2f} ms", f"{added * 1e3:+.2f} ms", f"{ratio:.3f}"]
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
