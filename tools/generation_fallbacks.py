"""Which ops fall back to the CPU during transformers generation, under each torch_npu op table.

For every release with a table this runs ``ascend-env audit --json --torch-npu <release>`` on the
tiny GPT-2, Llama and Qwen2 models of ``tests/torch/conftest.py`` with every generation case there
(the run also checks that the NPU tokens equal the CPU ones), then prints a Markdown table that
groups releases with the same fallbacks. The table in docs/simulator.md comes from this script.

Usage::

    python tools/generation_fallbacks.py [--versions 2.1.0.post6 2.4.0 ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ascend_env.sim import optables  # noqa: E402

PRELUDE = f"""
import json, sys
sys.path.insert(0, {str(ROOT / "tests" / "torch")!r})
from conftest import CASES, MODELS, generate, tiny_model
"""
# Prints the CPU tokens of every (model, case) as JSON.
ON_CPU = (
    PRELUDE
    + """
print(json.dumps({f"{kind} {case}": generate(tiny_model(kind), "cpu", case).tolist()
                  for kind in MODELS for case in CASES}))
"""
)
# Generates on the NPU and exits non-zero if any tokens differ from the CPU ones (argv[1]).
ON_NPU = (
    PRELUDE
    + """
expected = json.loads(sys.argv[1])
for kind in MODELS:
    model = tiny_model(kind)
    for case in CASES:
        if generate(model, "npu", case).tolist() != expected[f"{kind} {case}"]:
            sys.exit(f"{kind} {case}: the NPU tokens differ from the CPU ones")
"""
)


def cpu_tokens() -> str:
    done = subprocess.run([sys.executable, "-c", ON_CPU], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def audit(version: str, expected: str) -> dict:
    command = [
        sys.executable,
        "-m",
        "ascend_env",
        "audit",
        "--json",
        "--torch-npu",
        version,
        "--",
        sys.executable,
        "-c",
        ON_NPU,
        expected,
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=str(ROOT))
    report = json.loads(done.stdout)
    if report.get("returncode", 1) != 0 or report.get("errors"):
        raise SystemExit(f"{version}: the generation run failed:\n{done.stderr[-2000:]}")
    return report


def table(results: Dict[str, Dict[str, int]]) -> str:
    groups: List[Tuple[Tuple[str, ...], List[str]]] = []
    for version in sorted(results, key=optables.releases().index):
        ops = tuple(sorted(results[version]))
        if groups and groups[-1][0] == ops:
            groups[-1][1].append(version)
        else:
            groups.append((ops, [version]))
    lines = ["| torch_npu op table | ops that fall back during generation |", "|---|---|"]
    for ops, versions in groups:
        span = ", ".join(versions)
        if len(versions) > 3:
            span = f"{versions[0]} to {versions[-1]} ({len(versions)} releases)"
        lines.append(f"| {span} | {', '.join(f'`{op}`' for op in ops) or 'none'} |")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", nargs="*", help="only these releases (default: every table)")
    args = parser.parse_args(argv)
    results: Dict[str, Dict[str, int]] = {}
    expected = cpu_tokens()
    for version in args.versions or optables.releases():
        results[version] = audit(version, expected)["fallbacks"]
        print(f"{version}: {results[version]}", file=sys.stderr, flush=True)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
