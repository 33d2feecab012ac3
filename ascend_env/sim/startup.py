"""The audited process's side of ``ascend-env audit`` (started by ``shim/sitecustomize.py``).

The audit passes its choices in the environment:

- ``ASCEND_ENV_AUDIT_TORCH_NPU``: the torch_npu release whose op table to run, or
- ``ASCEND_ENV_AUDIT_OPLISTS``: a torch_npu package directory whose YAML op lists to run
  (``ASCEND_ENV_AUDIT_LABEL`` names it, ``ASCEND_ENV_AUDIT_FALLBACK_DISABLE=1`` if it honours
  ``TORCH_NPU_FALLBACK_CPU_DISABLE``);
- ``ASCEND_ENV_AUDIT_REPORTS``: a directory where each process writes ``<pid>.json`` at exit.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from pathlib import Path
from typing import Mapping, Optional

TORCH_NPU = "ASCEND_ENV_AUDIT_TORCH_NPU"
OPLISTS = "ASCEND_ENV_AUDIT_OPLISTS"
LABEL = "ASCEND_ENV_AUDIT_LABEL"
FALLBACK_DISABLE = "ASCEND_ENV_AUDIT_FALLBACK_DISABLE"
REPORTS = "ASCEND_ENV_AUDIT_REPORTS"


def start_from_environment(environ: Optional[Mapping[str, str]] = None) -> None:
    """Enable the simulator as the audit asked and report the fallbacks at exit."""
    environ = os.environ if environ is None else environ
    reports = environ.get(REPORTS)
    if not reports:
        return
    report = Path(reports, f"{os.getpid()}.json")
    try:
        from ascend_env import sim

        if environ.get(OPLISTS):
            from ascend_env import oplists

            ops = oplists.read_torch_npu(Path(environ[OPLISTS]))
            sim.enable_ops(environ.get(LABEL, environ[OPLISTS]), ops, environ.get(FALLBACK_DISABLE) == "1")
        else:
            sim.enable(environ.get(TORCH_NPU) or None)
        sim.add_torch_npu_to_path()  # `import torch_npu` finds the simulated one
    except Exception as exc:  # reported to the audit, which fails with it
        _write(report, {"pid": os.getpid(), "argv": sys.argv, "error": str(exc)})
        sys.stderr.write(f"ascend-env audit: the simulated NPU could not start: {exc}\n")
        return
    atexit.register(_report, report)


def _report(report: Path) -> None:
    from ascend_env import sim

    _write(report, {
        "pid": os.getpid(), "argv": sys.argv, "table": sim.enabled_table(),
        "fallbacks": dict(sorted(sim.fallbacks().items())),
    })


def _write(path: Path, data: dict) -> None:
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(data), encoding="utf-8")
    os.replace(partial, path)
