"""Start-up cost of the ascend-env hook: `python -c pass` with and without it, side by side.

Two throw-away virtual environments of the same interpreter each hold a copy of ascend_env, as
``pip install`` would leave it; one of them also holds the hook files. Runs alternate between the two, and the
report gives the medians, the added time and the ratio.

    python bench/startup.py [--runs 300]
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

import ascend_env
from ascend_env import hook


def make_env(root: Path, with_hook: bool) -> Path:
    """A venv with a copy of ascend_env in its site-packages, with or without the hook files."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    site = next(root.glob("lib/python*/site-packages"))
    shutil.copytree(
        Path(ascend_env.__file__).parent, site / "ascend_env", ignore=shutil.ignore_patterns("__pycache__")
    )
    compileall.compile_dir(site / "ascend_env", quiet=1)
    if with_hook:
        for name, data in hook.files().items():
            (site / name).write_bytes(data)
    return root / "bin" / "python"


def time_once(python: Path) -> float:
    start = time.perf_counter()
    subprocess.run([str(python), "-c", "pass"], check=True, env={"PATH": os.environ.get("PATH", "")})
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plain = make_env(Path(tmp, "plain"), with_hook=False)
        hooked = make_env(Path(tmp, "hooked"), with_hook=True)
        for python in (plain, hooked):  # warm the page cache
            time_once(python)
        plain_times, hooked_times = [], []
        for _ in range(args.runs):
            plain_times.append(time_once(plain))
            hooked_times.append(time_once(hooked))
    without, with_ = statistics.median(plain_times), statistics.median(hooked_times)
    print(f"python {sys.version.split()[0]}, {args.runs} runs each, alternating")
    print(f"python -c pass, without hook: median {without * 1e3:.2f} ms")
    print(f"python -c pass, with hook:    median {with_ * 1e3:.2f} ms")
    print(f"added: {(with_ - without) * 1e3:+.2f} ms   ratio: {with_ / without:.3f}")


if __name__ == "__main__":
    main()
