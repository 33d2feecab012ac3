"""Install one transformers release into this environment, then run the matrix proof on it.

The old-torch tox environments call it once per release, so that one torch install (several GB)
serves the whole matrix for that torch::

    python tools/matrix_run.py 4.44.2

It runs ``pytest tests/matrix`` with the environment's own ``pytest`` script (not ``python -m
pytest``, which would put the checkout ahead of the installed ascend-env wheel).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import List

from packaging.version import InvalidVersion, Version


def main(argv: List[str]) -> int:
    if len(argv) != 1:
        print(
            "usage: python tools/matrix_run.py VERSION (one transformers release, e.g. 4.44.2)",
            file=sys.stderr,
        )
        return 2
    try:
        version = str(Version(argv[0]))
    except InvalidVersion:
        print(f"matrix_run: {argv[0]!r} is not a version; give a release, e.g. 4.44.2", file=sys.stderr)
        return 2
    install = [sys.executable, "-I", "-m", "pip", "install", "--no-compile", "-q", f"transformers=={version}"]
    code = subprocess.call(install)
    if code != 0:
        return code
    print(f"matrix_run: transformers {version}", flush=True)
    pytest = Path(sys.executable).with_name("pytest")
    return subprocess.call([str(pytest), "tests/matrix", "-p", "no:cacheprovider", "-q"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
