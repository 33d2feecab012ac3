"""The real torch_npu binary's dispatcher against ascend-env's op table of the same release.

For each torch_npu wheel that fits this Python and torch (``$ASCEND_ENV_TORCH_NPU_WHEELS``, as the
other tests of this folder take them; unpacked, run by path as ``audit --torch-npu-wheel`` runs it:
nothing installed), the upstream aten ops the binary registers under PrivateUse1 (its real
dispatcher, on the emulated CANN) must be exactly the table's (``optables.registered``: the
``supported:`` lists and the ``_foreach_*`` ops registered by hand), less the ops it registers for
sparse tensors only. The releases no Python here can import are checked against op-plugin's YAML
instead (tests/unit/sim/test_optables.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest
from emulated_e2e import environment, wheel_params

from ascend_env.sim import optables

PROBE = Path(__file__).resolve().parent / "registrations_probe.py"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="torch_npu's wheels are for Linux")


@pytest.fixture(scope="module", params=wheel_params())
def probe(request: pytest.FixtureRequest) -> Dict[str, Any]:
    from ascend_env.checks import torch_npu_wheel

    unpacked = torch_npu_wheel.unpack(request.param)
    path = os.pathsep.join(p for p in (str(unpacked), os.environ.get("PYTHONPATH", "")) if p)
    result = subprocess.run(
        [sys.executable, "-m", "ascend_env.cann", str(PROBE)],
        capture_output=True,
        text=True,
        env=environment(PYTHONPATH=path),
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    found: Dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["version"] == request.param.name.split("-")[1]  # the wheel's binary, not another
    return found


def test_optables_the_binary_registers_exactly_the_tables_upstream_ops(probe: Dict[str, Any]) -> None:
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


def test_optables_the_foreach_ops_registered_by_hand_are_the_tables(probe: Dict[str, Any]) -> None:
    version = probe["version"]
    dense = set(probe["PrivateUse1"])
    hand = {name for name in dense if name.startswith("_foreach_")} - optables.load(version)
    assert hand == optables.by_hand(version)
    assert hand, f"torch_npu {version} registers no _foreach_* op by hand"
