"""``python coverage_probe.py ARCH[,ARCH...] STRATEGY[,STRATEGY...] OUT``: a sample of the coverage
matrix (tools/coverage_models.py's tiny config-built models and decoding strategies) on the npu
device, each strategy's tokens compared with the CPU's. Run under ``audit`` on the simulator and on
the real torch_npu binary on the emulated CANN by test_coverage_binary.py; writes one JSON document
to OUT: ``{arch: {strategy: "same" | "differs" | "npu error: ..." | "not covered: ..."}}``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch_npu  # noqa: F401  (the simulated one, or the real binary)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import coverage_models  # noqa: E402


def status(cpu: object, npu: object) -> str:
    """As tools/coverage_matrix.py words a cell."""
    if isinstance(cpu, dict):
        return f"not covered: {cpu['error']}"
    if isinstance(npu, dict):
        return f"npu error: {npu['error']}"
    return "same" if cpu == npu else "differs"


archs, strategies = (argument.split(",") for argument in sys.argv[1:3])
out = Path(sys.argv[3])
found = {}
# After an error inside a kernel torch_npu's task queue stops for good (Ascend/pytorch
# v2.3.1-6.0.rc2, NPUQueue.cpp: ReadQueue sets ERROR_EXIT, the next Enqueue throws once and leaves
# CAN_EXIT, where later tasks are dropped): a probe that went on hung until the test's timeout. The
# npu is not used again; the first error is the probe's answer.
npu_error = ""
for arch in archs:
    tokens = {}
    for device in ("cpu", "npu"):
        model = coverage_models.build(arch)
        if device == "npu" and not npu_error:
            model = model.to(device)
        for strategy in strategies:
            if device == "npu" and npu_error:
                tokens[(device, strategy)] = {"error": f"not run: the npu stopped at {npu_error}"}
                continue
            try:
                tokens[(device, strategy)] = coverage_models.run_strategy(model, model, device, strategy)
            except Exception as exc:  # noqa: BLE001 - reported, compared with the CPU's
                tokens[(device, strategy)] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:200]}
                if device == "npu":
                    npu_error = f"{arch} {strategy}: {tokens[(device, strategy)]['error']}"
    found[arch] = {s: status(tokens["cpu", s], tokens["npu", s]) for s in strategies}
    print(f"coverage probe: {arch} done", file=sys.stderr, flush=True)
out.write_text(json.dumps(found))
assert torch.npu.is_available() and not npu_error, npu_error
