"""Benchmark ``ascend_env.ops.isin`` against native ``torch.isin`` on the CPU, side by side.

Usage::

    python bench/isin.py [--rounds 15] [--threads 1] [--quick] [--only GROUP] [--json PATH]

``--json PATH`` also writes the figures to ``PATH`` (as ``bench/results/isin.json`` holds them;
the docs build renders that file into the manual's table).

Every candidate runs on the same tensors in the same rounds (their order rotating per round);
each figure is the median over the rounds of its time per call divided by native ``torch.isin``'s
in the same round. The seed patch is timed apart (three calls, median). Candidates:

* ``ours``: ``ascend_env.ops.isin``;
* ``ours, bound``: ``ascend_env.ops.isin`` told the ids' bound (``value_bound``, the vocabulary
  size), where it fits a lookup table;
* ``seed patch``: ``torch.tensor([e in test.tolist() for e in elements.flatten()])``, the
  monkey patch this project replaces; where it would take minutes, it is timed on a prefix of the
  elements and scaled to all of them (marked ``~``);
* ``mps_friendly``: transformers' ``isin_mps_friendly`` as called on the CPU (it calls
  ``torch.isin``);
* ``mps branch``: the tile/eq/sum formula ``isin_mps_friendly`` uses where ``isin`` is missing
  (needs N*T memory; skipped past 2e8 pairs).

The end-of-sequence elements are ``input_ids[:, -1]`` of a B x 16 batch, the strided column that
transformers' ``EosTokenCriteria`` passes on every decoding step.

Not a test: timings depend on the machine and its load. Ratios come from one run.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from bench_tables import ISIN_HEADER, isin_row, write

from ascend_env.kernels.isin import isin

# group, label, elements, test elements, the ids' bound (None: none passed)
Case = Tuple[str, str, torch.Tensor, torch.Tensor, Optional[int]]

# A call of the seed patch is timed on at most this many element x test comparisons.
SEED_BUDGET = 20_000
MPS_BRANCH_MAX_PAIRS = 2 * 10**8


def seed_patch(elements: torch.Tensor, test: torch.Tensor) -> torch.Tensor:
    return torch.tensor([e in test.tolist() for e in elements.flatten()])


def mps_branch(elements: torch.Tensor, test: torch.Tensor) -> torch.Tensor:
    flat = elements.reshape(-1)
    return flat.tile(test.shape[0], 1).eq(test.unsqueeze(1)).sum(dim=0).bool().squeeze()


def mps_friendly() -> Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
    try:
        from transformers.pytorch_utils import isin_mps_friendly
    except ImportError:
        return None
    return isin_mps_friendly


def cases(quick: bool) -> List[Case]:
    generator = torch.Generator().manual_seed(0)

    def ids(high: int, *shape: int) -> torch.Tensor:
        return torch.randint(0, high, shape, generator=generator)

    found: List[Case] = []
    for b in (1, 8, 64):
        for t in (1, 2, 8):
            # The last token of each sequence, a strided column, as EosTokenCriteria passes it.
            found.append(("eos", f"B={b} T={t}", ids(32000, b, 16)[:, -1], ids(32000, t), 32000))
    for v in (32000, 152064):
        for t in (3, 10, 1000, 10000):  # 3: Llama 3's end-of-sequence ids, masked by logits processors
            found.append(("vocab", f"arange({v}) T={t}", torch.arange(v), ids(v, t), v))
    for t in (1, 24, 100, 10000, 100000):  # 24: where a pass per test id is closest to native
        found.append(("large", f"64x4096 T={t}", ids(32000, 64, 4096), ids(32000, t), 32000))
    # Two far outliers among the ids: sort-both's key must not lose its order for the rest.
    outliers = ids(152064, 64, 4096)
    outliers[0, 0], outliers[-1, -1] = 2**40, -(2**40)
    label = "64x4096 T=10000, ids < 152064, two at +-2**40"
    found.append(("large", label, outliers, ids(152064, 10000), None))
    if not quick:
        found.append(("large", "1e7 x 1e5, ids < 2**31", ids(2**31, 10**7), ids(2**31, 10**5), None))
        found.append(("large", "1e7 x 1e5, ids < 1e6", ids(10**6, 10**7), ids(10**6, 10**5), 10**6))
    return found


def calls_for(func: Callable[[], object], target_s: float = 0.002) -> int:
    """How many calls make one timing of about ``target_s``."""
    start = time.perf_counter()
    func()
    once = time.perf_counter() - start
    return max(1, min(10_000, int(target_s / max(once, 1e-7))))


def measure(
    candidates: Dict[str, Callable[[], object]], rounds: int, budget_s: float
) -> Tuple[float, Dict[str, float]]:
    """Native's median seconds per call, and each candidate's median ratio to native.

    Candidates are timed one after the other in each round, and each ratio is taken within a
    round, so that load from other processes, which comes and goes, hits both sides alike.
    """
    loops = {name: calls_for(func) for name, func in candidates.items()}
    samples: Dict[str, List[float]] = {name: [] for name in candidates}
    names = list(candidates)
    deadline = time.perf_counter() + budget_s
    for round_ in range(rounds):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in order:
            func, count = candidates[name], loops[name]
            start = time.perf_counter()
            for _ in range(count):
                func()
            samples[name].append((time.perf_counter() - start) / count)
        if round_ >= 2 and time.perf_counter() > deadline:
            break
    native = samples["native"]
    ratios = {
        name: statistics.median(value / base for value, base in zip(values, native))
        for name, values in samples.items()
    }
    return statistics.median(native), ratios


def seed_estimate(elements: torch.Tensor, test: torch.Tensor) -> Tuple[float, bool]:
    """Seconds per call of the seed patch, and whether it was scaled from a prefix."""
    flat = elements.reshape(-1)
    prefix = max(1, min(flat.numel(), SEED_BUDGET // max(1, test.numel())))
    part = flat[:prefix]
    timings = []
    for _ in range(3):
        start = time.perf_counter()
        seed_patch(part, test)
        timings.append(time.perf_counter() - start)
    return statistics.median(timings) * flat.numel() / prefix, prefix < flat.numel()


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="timing rounds per case (median)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--budget", type=float, default=20.0, help="seconds per case, at least 3 rounds")
    parser.add_argument("--quick", action="store_true", help="skip the 1e7 x 1e5 cases")
    parser.add_argument("--only", choices=["eos", "vocab", "large"], help="one group of cases")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures to PATH as JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    friendly = mps_friendly()

    print(f"torch {torch.__version__}, {args.threads} thread(s), median of up to {args.rounds} rounds")
    print()
    print("\n".join(ISIN_HEADER))
    rows: List[Dict[str, Any]] = []
    for group, label, elements, test, bound in cases(args.quick):
        if args.only and group != args.only:
            continue
        want = torch.isin(elements, test)
        if not torch.equal(isin(elements, test), want):
            raise SystemExit(f"ascend_env.ops.isin differs from torch.isin on {label}")
        if bound is not None and not torch.equal(isin(elements, test, value_bound=bound), want):
            raise SystemExit(f"ascend_env.ops.isin with value_bound={bound} differs on {label}")
        candidates: Dict[str, Callable[[], object]] = {
            "native": lambda e=elements, t=test: torch.isin(e, t),
            "ours": lambda e=elements, t=test: isin(e, t),
        }
        if bound is not None:
            candidates["bound"] = lambda e=elements, t=test, b=bound: isin(e, t, value_bound=b)
        if friendly is not None:
            candidates["mps_friendly"] = lambda e=elements, t=test: friendly(e, t)
        if elements.numel() * test.numel() <= MPS_BRANCH_MAX_PAIRS:
            candidates["mps branch"] = lambda e=elements, t=test: mps_branch(e, t)
        base, ratios = measure(candidates, args.rounds, args.budget)
        seed, scaled = seed_estimate(elements, test)
        row = {
            "group": group,
            "label": label,
            "native_us": base * 1e6,
            "ours": ratios["ours"],
            "bound": ratios.get("bound"),
            "seed": seed / base,
            "seed_scaled": scaled,
            "seed_vs_ours": seed / (base * ratios["ours"]),
            "mps_friendly": ratios.get("mps_friendly"),
            "mps_branch": ratios.get("mps branch"),
        }
        rows.append(row)
        print(isin_row(row), flush=True)
    if args.json is not None:
        write(
            args.json,
            {
                "bench": "isin",
                "schema": 1,
                "command": "python bench/isin.py " + " ".join(sys.argv[1:] if argv is None else argv),
                "torch": torch.__version__,
                "threads": args.threads,
                "machine": f"{platform.machine()}, {platform.processor() or 'unknown processor'}",
                "rows": rows,
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
