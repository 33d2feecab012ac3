"""``state.json`` as the startup hook reads it: cheaply, importing nothing beyond the standard library."""

from __future__ import annotations

import json
import subprocess
import sys

# What patching/state.py's docstring promises the hook's drift check imports of ascend_env.
CHEAP = {
    "ascend_env",
    "ascend_env.exceptions",
    "ascend_env.patching",
    "ascend_env.patching.bytecode",
    "ascend_env.patching.diffs",
    "ascend_env.patching.faults",
    "ascend_env.patching.owners",
    "ascend_env.patching.problems",
    "ascend_env.patching.state",
    "ascend_env.patching.store",
    "ascend_env.utils",
    "ascend_env.utils.atomic",
    "ascend_env.utils.jsontext",
}

DRIFT = r"""
import hashlib, json, sys
from pathlib import Path
from ascend_env.patching.state import drift, has_state

site = Path(sys.argv[1])
(site / ".ascend-env").mkdir()
(site / "kept.py").write_text("x = 1\n")
(site / "edited.py").write_text("x = 2\n")
entries = [
    {"path": name, "kind": "patch", "before": None, "after": hashlib.sha256(b"x = 1\n").hexdigest()}
    for name in ("kept.py", "edited.py")
]
state = {"schema": 1, "tool_version": "0", "applied_at": "t", "distribution": "transformers",
         "version": "1", "entries": entries}
(site / ".ascend-env" / "state.json").write_text(json.dumps(state))
print(json.dumps({"has_state": has_state(site), "drift": drift(site), "modules": sorted(sys.modules)}))
"""


def test_the_hooks_drift_check_imports_only_what_state_py_says(tmp_path):
    result = subprocess.run(
        [sys.executable, "-I", "-c", DRIFT, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["has_state"] is True
    assert found["drift"] == ["edited.py changed since ascend-env install"]
    ours = {name for name in found["modules"] if name.split(".")[0] == "ascend_env"}
    assert ours <= CHEAP, sorted(ours - CHEAP)
    assert not {"packaging", "torch", "torch_npu", "transformers"} & set(found["modules"])
