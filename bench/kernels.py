"""Benchmark the kernels of the fixed ops against the native op, side by side, in one run.

Usage::

    python bench/kernels.py [--device cpu] [--rounds 15] [--threads 1]

For each fixed op (repeat_interleave.Tensor, the bit shifts, sort(stable=True), bucketize,
_assert_async) and a few sizes, the kernel of ``ascend_env/kernels`` and the native op run on the
same tensors in the same rounds (their order alternating); each figure is the median over the
rounds of the kernel's time per call divided by the native op's in the same round (below 1: the
kernel is faster). On the CPU that compares the kernel with the CPU fallback's own computation,
without the fallback's two copies; ``--device cuda`` runs both on a GPU, where the native op has
a device kernel, as a stand-in for an NPU that has one.

Not a test: timings depend on the machine and its load. Ratios come from one run.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from typing import Any, Callable, List, Tuple

import kernels_nn
import kernels_signal
import kernels_vision
import torch

from ascend_env.kernels import assert_async, bitwise_shift, bucketize, repeat_interleave, sort_stable

# label, the kernel's call, the native op's call
Case = Tuple[str, Callable[[], Any], Callable[[], Any]]


def cases(device: str) -> List[Case]:
    generator = torch.Generator().manual_seed(0)
    found: List[Case] = []
    for n in (16, 4096, 1 << 20):
        repeats = torch.randint(0, 8, (n,), generator=generator).to(device)
        found.append(
            (
                f"repeat_interleave.Tensor n={n}",
                lambda r=repeats: repeat_interleave.repeat_interleave_tensor(r),
                lambda r=repeats: torch.repeat_interleave(r),
            )
        )
    for n in (64, 1 << 16, 1 << 22):
        packed = torch.randint(-(1 << 31), (1 << 31) - 1, (n,), dtype=torch.int32, generator=generator).to(
            device
        )
        shifts = torch.arange(0, 32, 4, dtype=torch.int32).repeat(n // 8 + 1)[:n].to(device)
        found.append(
            (
                f"bitwise_right_shift.Tensor n={n}",
                lambda a=packed, b=shifts: bitwise_shift.bitwise_right_shift(a, b),
                lambda a=packed, b=shifts: torch.bitwise_right_shift(a, b),
            )
        )
    for shape in ((64,), (32, 1000), (1 << 20,)):
        values = torch.randint(0, 50, shape, generator=generator).float().to(device)
        found.append(
            (
                f"sort.stable {'x'.join(map(str, shape))} (ties)",
                lambda v=values: sort_stable.sort_stable(v, stable=True),
                lambda v=values: torch.sort(v, stable=True),
            )
        )
    boundaries = torch.linspace(-3, 3, 33).to(device)
    for n in (64, 1 << 20):
        values = torch.randn(n, generator=generator).to(device)
        found.append(
            (
                f"bucketize.Tensor n={n}",
                lambda v=values: bucketize.bucketize_tensor(v, boundaries),
                lambda v=values: torch.bucketize(v, boundaries),
            )
        )
    one = torch.tensor(1, device=device)
    found.append(("_assert_async", lambda: assert_async.assert_async(one), lambda: torch._assert_async(one)))
    # one file of cases per family of fixes (kernels/registry/<family>.py)
    for family in (kernels_vision, kernels_nn, kernels_signal):
        found += family.cases(device)
    return found


def _timed(call: Callable[[], Any], device: str, calls: int) -> float:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or "cpu"
    print(
        f"torch {torch.__version__}, {args.device} ({name}), {args.threads} thread(s), {args.rounds} rounds"
    )
    print(f"{'op':42} {'native':>12} {'kernel':>12} {'kernel/native':>14}")
    for label, ours, native in cases(args.device):
        ours(), native()  # warm up, and the same answer is tested elsewhere
        first = _timed(native, args.device, 1)
        calls = max(1, min(200, int(0.02 / max(first, 1e-7))))
        ratios, native_times, our_times = [], [], []
        for index in range(args.rounds):
            pair = (ours, native) if index % 2 else (native, ours)
            times = {id(call): _timed(call, args.device, calls) for call in pair}
            native_times.append(times[id(native)])
            our_times.append(times[id(ours)])
            ratios.append(times[id(ours)] / times[id(native)])
        native_us = statistics.median(native_times) * 1e6
        our_us = statistics.median(our_times) * 1e6
        print(f"{label:42} {native_us:10.1f}us {our_us:10.1f}us {statistics.median(ratios):13.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
