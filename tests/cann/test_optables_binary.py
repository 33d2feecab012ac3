"""The real torch_npu binary's dispatcher against ascend-env's op table of the same release.

The upstream aten ops the installed torch_npu registers under PrivateUse1 (its real dispatcher, on
the emulated CANN) must be exactly the table's (``optables.registered``: the ``supported:`` lists and
the ``_foreach_*`` ops registered by hand), less the ops it registers for sparse tensors only. Skipped
where torch_npu's wheel is not installed, or no C++ compiler is.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

from ascend_env.sim import optables

PROBE = Path(__file__).resolve().parent / "registrations_probe.py"

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("torch_npu") is None or importlib.util.find_spec("torch") is None,
        reason="needs torch and the torch_npu wheel installed (pip install --no-deps torch_npu==<release>)",
    ),
    pytest.mark.skipif(
        not any(shutil.which(c) for c in ("c++", "g++", "clang++")),
        reason="needs a C++ compiler to build the emulated CANN",
    ),
]


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    cache = os.environ.get("ASCEND_ENV_CACHE_DIR")
    if not cache:
        directory = tmp_path_factory.mktemp("cache")
        directory.chmod(0o700)
        cache = str(directory)
    result = subprocess.run(
        [sys.executable, "-m", "ascend_env.cann", str(PROBE)],
        capture_output=True,
        text=True,
        env={**os.environ, "ASCEND_ENV_CACHE_DIR": cache},
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    found: Dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return found


def test_the_binary_registers_exactly_the_tables_upstream_ops(probe: Dict[str, Any]) -> None:
    version = probe["version"]
    upstream = set(probe["upstream"])
    dense, sparse = set(probe["PrivateUse1"]), set(probe["SparsePrivateUse1"])
    table = optables.registered(version) & upstream
    sparse_only = (table - dense) & sparse  # e.g. _coalesce: a kernel for sparse tensors only
    assert sparse_only <= {"_coalesce"}, sorted(sparse_only)
    assert not dense - table, f"registered by {version} but not in its table: {sorted(dense - table)}"
    missing = table - dense - sparse_only
    assert not missing, f"in {version}'s table but not registered: {sorted(missing)}"
    assert len(dense) > 1000


def test_the_foreach_ops_registered_by_hand_are_the_tables(probe: Dict[str, Any]) -> None:
    version = probe["version"]
    dense = set(probe["PrivateUse1"])
    hand = {name for name in dense if name.startswith("_foreach_")} - optables.load(version)
    assert hand == optables.by_hand(version)
    assert hand, f"torch_npu {version} registers no _foreach_* op by hand"
