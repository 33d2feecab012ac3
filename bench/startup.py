"""Start-up cost of the ascend-env hook: `python -c pass` with and without it, side by side.

Throw-away virtual environments of the same interpreter each hold a copy of ascend_env, as
``pip install`` would leave it:

* ``plain``: nothing else (the baseline);
* ``hooked``: the hook files too, as ``install`` writes them;
* ``empty module`` (with ``--floor``): a ``.pth`` line that imports an empty top-level module, the
  least that any ``.pth`` import hook costs.

The same three are timed a second time with setuptools' ``distutils-precedence.pth`` (and the
``_distutils_hack`` module it imports) in each environment, copied from the setuptools that this
interpreter imports: torch requires setuptools, so every environment the hook is meant for has
that ``.pth`` file, and start-up there already pays for reading a ``.pth`` file and importing a
module from site-packages. Without an importable setuptools the second set is skipped.

    python bench/startup.py [--runs 400] [--floor] [--no-bytecode] [--json PATH]

Runs go round all environments, the order rotating each round. For each environment the report
gives the median wall time and CPU time (user + system, from ``wait4``) of one start, the added
time (difference of medians), and the ratio to its set's ``plain``: the median over the rounds of
the ratio within a round, so that load from other processes, which comes and goes, hits both
sides alike. ``--json PATH`` also writes the figures to ``PATH`` (as ``bench/results/startup.json``
holds them; the docs build renders that file into the manual's table). Not a test: timings depend
on the machine and its load.
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import time
import venv
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from bench_tables import STARTUP_HEADER, startup_row, write

import ascend_env
from ascend_env.hook import files

SETUPTOOLS_PTH = "distutils-precedence.pth"
# A marker file: make_env removes the hook's .pyc from an environment that holds it.
NO_PYC = "no-hook-pyc.txt"
SETUPTOOLS_SET = "with setuptools' .pth"


def make_env(root: Path, contents: Dict[str, bytes], trees: Dict[str, Path]) -> Path:
    """A venv with a copy of ascend_env in its site-packages, plus ``contents`` and copies of the
    directories ``trees`` (by name in site-packages); its python."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    site = next(root.glob("lib/python*/site-packages"))
    trees = {"ascend_env": Path(ascend_env.__file__).parent, **trees}
    for name, source in trees.items():
        shutil.copytree(source, site / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name, data in contents.items():
        (site / name).parent.mkdir(exist_ok=True)
        (site / name).write_bytes(data)
    compileall.compile_dir(site, quiet=1)  # as pip does at install
    if NO_PYC in contents:  # the hook as install wrote it before it wrote the .pyc
        for pyc in (site / "__pycache__").glob(f"{files.NAME}.*.pyc"):
            pyc.unlink()
    return root / "bin" / "python"


def setuptools_files() -> Optional[Tuple[Dict[str, bytes], Dict[str, Path]]]:
    """setuptools' start-up ``.pth`` file and the module it imports, from this interpreter."""
    spec = importlib.util.find_spec("_distutils_hack")
    if spec is None or spec.origin is None:
        return None
    package = Path(spec.origin).parent
    pth = package.parent / SETUPTOOLS_PTH
    if not pth.is_file():
        return None
    return {SETUPTOOLS_PTH: pth.read_bytes()}, {"_distutils_hack": package}


def start_once(python: Path, no_bytecode: bool = False) -> Tuple[float, float]:
    """Wall and CPU seconds of one ``python -c pass``, with a bare environment (plus
    ``PYTHONDONTWRITEBYTECODE=1`` with ``no_bytecode``)."""
    environ = {"PATH": os.environ.get("PATH", "")}
    if no_bytecode:
        environ["PYTHONDONTWRITEBYTECODE"] = "1"
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
    parser.add_argument(
        "--no-bytecode",
        action="store_true",
        help="start with PYTHONDONTWRITEBYTECODE=1, as images do, and also time the hook without its .pyc",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures to PATH as JSON")
    args = parser.parse_args(argv)
    kinds: Dict[str, Dict[str, bytes]] = {"plain": {}, "hooked": {**files.files(), **files.bytecode()}}
    if args.no_bytecode:
        kinds["hooked, no .pyc"] = {**files.files(), NO_PYC: b""}
    if args.floor:
        kinds["empty module"] = {"floor_hook.pth": b"import floor_hook\n", "floor_hook.py": b""}
    sets: Dict[str, Tuple[Dict[str, bytes], Dict[str, Path]]] = {"bare venv": ({}, {})}
    setuptools = setuptools_files()
    if setuptools is not None:
        sets[SETUPTOOLS_SET] = setuptools
    envs = [(set_name, kind) for set_name in sets for kind in kinds]
    samples: Dict[Tuple[str, str], List[Tuple[float, float]]] = {env: [] for env in envs}
    with tempfile.TemporaryDirectory() as tmp:
        pythons = {}
        for i, (set_name, kind) in enumerate(envs):
            extra_files, trees = sets[set_name]
            pythons[set_name, kind] = make_env(Path(tmp, str(i)), {**extra_files, **kinds[kind]}, trees)
        for python in pythons.values():  # warm the page cache
            start_once(python, args.no_bytecode)
        for round_ in range(args.runs):
            for env in envs[round_ % len(envs) :] + envs[: round_ % len(envs)]:
                samples[env].append(start_once(pythons[env], args.no_bytecode))
    print(f"python {sys.version.split()[0]}, {args.runs} starts each, rotating order")
    if setuptools is None:
        print(f"(no setuptools importable here: the set {SETUPTOOLS_SET!r} is skipped)")
    print("\n".join(STARTUP_HEADER))
    rows: List[Dict[str, Any]] = []
    for set_name, kind in envs:
        row: Dict[str, Any] = {"environment": kind, "set": set_name}
        values, base = samples[set_name, kind], samples[set_name, "plain"]
        for index, name in ((0, "wall"), (1, "cpu")):
            median = statistics.median(v[index] for v in values)
            row[name + "_ms"] = median * 1e3
            row[name + "_added_ms"] = (median - statistics.median(b[index] for b in base)) * 1e3
            row[name + "_ratio"] = statistics.median(v[index] / b[index] for v, b in zip(values, base))
        rows.append(row)
        print(startup_row(row))
    if args.json is not None:
        write(
            args.json,
            {
                "bench": "startup",
                "schema": 1,
                "command": "python bench/startup.py " + " ".join(sys.argv[1:] if argv is None else argv),
                "python": sys.version.split()[0],
                "runs": args.runs,
                "no_bytecode": args.no_bytecode,
                "rows": rows,
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
