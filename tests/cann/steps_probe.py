"""The smoke test's tiny Llama, greedy ``generate()`` on npu. Under ``python -m ascend_env.cann`` (the
real torch_npu on the emulated CANN) it prints one JSON document on stdout: per decoding step, per
aten op, the ``aclopCompileAndExecute`` first calls (online compiles on a real NPU) and aclnn calls
it caused (``by_op``), and the step's totals. Under ``audit --paths`` (the simulator) it only runs,
and the dispatch-path model counts. Used by test_paths_binary.py."""

from __future__ import annotations

import contextlib
import json
from typing import Any, Dict, List

import torch
import torch_npu  # noqa: F401
import transformers
from torch.utils._python_dispatch import TorchDispatchMode

from ascend_env.checks.smoke import GENERATE_OPTIONS, PROMPT, tiny_llama

try:
    from ascend_env.cann import runtime

    MEASURING = runtime.enabled()
except ImportError:  # pragma: no cover - the emulated CANN ships with ascend-env
    MEASURING = False

STEPS: List[Dict[str, Dict[str, Any]]] = []


def totals() -> Any:
    counters = runtime.report().get("counters", {})
    return counters.get("aclop_compile", {}), counters.get("aclnn", {})


class PerOp(TorchDispatchMode):
    """Each aten op's share of the counters (synchronised around it: aclnn runs on the task queue)."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        schema = func._schema
        name = schema.name.split("::", 1)[-1] + ("." + schema.overload_name if schema.overload_name else "")
        torch.npu.synchronize()
        compiles_before, aclnn_before = totals()
        out = func(*args, **(kwargs or {}))
        torch.npu.synchronize()
        compiles, aclnn = totals()
        new = {k: v - compiles_before.get(k, 0) for k, v in compiles.items() if v - compiles_before.get(k, 0)}
        calls = sum(aclnn.values()) - sum(aclnn_before.values())
        if STEPS and (new or calls):
            entry = STEPS[-1].setdefault(name, {"compile": 0, "aclnn": 0, "types": {}})
            entry["compile"] += sum(new.values())
            entry["aclnn"] += calls
            for kind, count in new.items():
                entry["types"][kind] = entry["types"].get(kind, 0) + count
        return out


if MEASURING:
    criteria = transformers.generation.stopping_criteria.StoppingCriteriaList
    original = criteria.__call__

    def step_ends(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        STEPS.append({})
        return out

    criteria.__call__ = step_ends

model = tiny_llama().to("npu")
ids = torch.tensor(PROMPT).to("npu")
with torch.no_grad(), PerOp() if MEASURING else contextlib.nullcontext():
    STEPS.append({})
    tokens = model.generate(ids, attention_mask=torch.ones_like(ids), **GENERATE_OPTIONS)
if MEASURING:
    print(json.dumps({"tokens": tokens.cpu().tolist(), "by_op": STEPS[:-1]}))
