"""The proof on one real transformers release: install, generate on the simulated NPU, restore.

Runs only in the tox environments of the ``transformers`` label (``ASCEND_ENV_MATRIX=1``), each
of which pins one transformers release next to torch 2.13.0 and ascend-env installed as a wheel,
because it patches the environment's transformers. In order:

1. the CPU reference: ``generation.py cpu npu:<table>`` in a fresh process, on the release's
   original files: the NPU run there must fall back on isin (else the matrix proves nothing);
2. ``python -m ascend_env install --patches always`` from a scratch directory;
3. ``generation.py npu:<table>`` in a fresh process with ``ASCEND_ENV_DISABLE=1`` (startup hook off,
   so the patches alone must keep isin on the device), with torch_npu 2.1.0.post6's op table, or for
   a release that needs no patch, 2.4.0's (the first line with a native NPU isin; transformers 5.1
   and newer need torch >= 2.4);
4. ``python -m ascend_env restore``, then every file in transformers' RECORD is checked.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from ascend_env.patching.manifest import NothingToDo, Release, load_manifest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generation import CASES, REQUIRED  # noqa: E402

pytestmark = pytest.mark.skipif(
    os.environ.get("ASCEND_ENV_MATRIX") != "1",
    reason="patches the installed transformers: runs only in the tox envs of the 'transformers' label",
)

GENERATION = Path(__file__).resolve().parent / "generation.py"
OLD_TABLE = "2.1.0.post6"
NATIVE_TABLE = "2.4.0"


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def python(args: List[str], cwd: Path, env: Dict[str, str] = None, timeout: float = 900):
    full = {k: v for k, v in os.environ.items() if k != "ASCEND_ENV_DISABLE"}
    full.update(env or {})
    return subprocess.run(
        [sys.executable, *args], cwd=str(cwd), env=full, capture_output=True, text=True, timeout=timeout
    )


def generate(cwd: Path, *args: str, env: Dict[str, str] = None) -> Dict[str, Any]:
    done = python([str(GENERATION), *args], cwd, env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def cli(cwd: Path, *args: str) -> Dict[str, Any]:
    done = python(["-m", "ascend_env", *args, "--json"], cwd)
    assert done.returncode == 0, (
        f"ascend-env {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    )
    return json.loads(done.stdout)


def record_mismatches(site: Path, dist: importlib.metadata.Distribution) -> List[str]:
    """Files of ``dist`` whose bytes differ from their RECORD hash (or that are missing)."""
    rows = list(csv.reader(dist.read_text("RECORD").splitlines()))
    assert len(rows) > 100 and not any(row[0].endswith(".pyc") for row in rows)
    wrong = []
    for path, digest, _size in rows:
        if not digest:
            continue
        file = site / path
        if not file.is_file() or record_hash(file.read_bytes()) != digest:
            wrong.append(path)
    return wrong


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> Dict[str, Any]:
    scratch = tmp_path_factory.mktemp("matrix")
    version = importlib.metadata.version("transformers")
    site = Path(importlib.util.find_spec("transformers").origin).parent.parent
    manifest = load_manifest()
    outcome = manifest.lookup(version)
    table = NATIVE_TABLE if isinstance(outcome, NothingToDo) else OLD_TABLE
    result: Dict[str, Any] = {"version": version, "site": site, "outcome": outcome, "table": table}
    # The CPU reference and, for contrast, the unpatched release on the simulated NPU: one process.
    before = generate(scratch, "cpu", f"npu:{table}", env={"ASCEND_ENV_DISABLE": "1"})
    result["cpu"], result["npu_unpatched"] = before["cpu"], before["npu"]
    result["install"] = cli(scratch, "install", "--patches", "always", "--target", str(site))
    try:
        targets = outcome.changes if isinstance(outcome, Release) else {}
        result["patched"] = {t: hashlib.sha256((site / t).read_bytes()).hexdigest() for t in targets}
        result["npu"] = generate(scratch, f"npu:{table}", env={"ASCEND_ENV_DISABLE": "1"})["npu"]
    finally:
        result["restore"] = cli(scratch, "restore", "--target", str(site))
    result["record"] = record_mismatches(site, importlib.metadata.distribution("transformers"))
    return result


def test_the_release_is_listed_or_needs_nothing(matrix):
    assert isinstance(matrix["outcome"], (Release, NothingToDo)), matrix["version"]


def test_install_patched_exactly_the_listed_files(matrix):
    outcome = matrix["outcome"]
    if isinstance(outcome, Release):
        assert matrix["patched"] == {target: change.after for target, change in outcome.changes.items()}
    changed = {path for path in matrix["install"].get("changed", []) if path.startswith("transformers/")}
    assert changed == set(getattr(outcome, "changes", {}))


def test_unpatched_the_release_falls_back_on_isin(matrix):
    # The same run before install: proves that the patched run below has something to prove.
    assert matrix["npu"]["transformers"] == matrix["version"] == matrix["cpu"]["transformers"]
    unpatched = matrix["npu_unpatched"]["fallbacks"]
    if isinstance(matrix["outcome"], Release):
        assert any("isin" in op for op in unpatched), unpatched
    else:  # a release that needs no patch runs on a table with a native isin
        assert not any("isin" in op for op in unpatched), unpatched


def test_no_isin_falls_back_to_the_cpu(matrix):
    fallbacks = matrix["npu"]["fallbacks"]
    assert not {op: n for op, n in fallbacks.items() if "isin" in op}, fallbacks


@pytest.mark.parametrize("case", list(CASES))
def test_tokens_equal_the_unpatched_cpu_run(matrix, case):
    cpu, npu = matrix["cpu"]["tokens"][case], matrix["npu"]["tokens"][case]
    if case in REQUIRED:
        assert isinstance(cpu, list), cpu
    assert npu == cpu


def test_restore_gives_back_every_file_of_the_record(matrix):
    assert matrix["restore"]["ok"] is True
    assert matrix["record"] == []
