"""The long reliability runs: the unit suites again with 200+ random kills, every crash point
finished by both commands, and thousands of fuzz inputs per property (tox env ``reliability``).

Each suite runs in its own pytest process with its counts in the environment, so the summary
lines are those of that run; this file checks that the counts reached the promised size.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

UNIT = Path(__file__).resolve().parents[1] / "unit"
KILLS = int(os.environ.get("ASCEND_ENV_RELIABILITY_KILLS", "200"))
FUZZ_EXAMPLES = int(os.environ.get("ASCEND_ENV_RELIABILITY_FUZZ", "2000"))


def run_suite(test_file: str, env: dict) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", str(UNIT / test_file), "-q", "-p", "no:cacheprovider"],
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, **env},
    )
    print(result.stdout[-3000:])
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    match = re.search(r"^[a-z ]+ \(json\): (\{.*\})$", result.stdout, re.M)
    assert match, result.stdout[-2000:]
    return json.loads(match.group(1))


def test_crash_and_concurrency_long():
    counts = run_suite(
        "patching/test_journal_crash.py",
        {"ASCEND_ENV_RELIABILITY_RUNS": str(KILLS * 3 // 2), "ASCEND_ENV_RELIABILITY_STRIDE": "1"},
    )
    assert counts["kills"] >= KILLS, counts
    assert counts["signal_kills"] >= KILLS // 2, counts


def test_fuzz_long():
    counts = run_suite(
        "patching/test_fuzz_parsers.py",
        {"ASCEND_ENV_FUZZ_EXAMPLES": str(FUZZ_EXAMPLES), "ASCEND_ENV_FUZZ_RANDOM": "1"},
    )
    assert counts["fuzz_inputs"] >= 7 * FUZZ_EXAMPLES * 9 // 10, counts
