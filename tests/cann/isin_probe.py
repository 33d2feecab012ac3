"""Run under ``python -m ascend_env.cann`` by test_emulated_cann.py, after a site directory holding
ascend-env's startup hook was added (argv[1]): torch.isin on npu tensors, against the CPU, and the
aclnn and aclop calls it made. One JSON line on stdout."""

from __future__ import annotations

import json
import site
import sys
from typing import Dict

site.addsitedir(sys.argv[1])  # processes the hook's .pth, as at start-up in an installed environment

import torch  # noqa: E402
import torch_npu  # noqa: E402

from ascend_env.cann import runtime  # noqa: E402


def calls(kind: str, before: Dict[str, Dict[str, int]], after: Dict[str, Dict[str, int]]) -> Dict[str, int]:
    old = before.get(kind, {})
    return {k: v - old.get(k, 0) for k, v in after.get(kind, {}).items() if v - old.get(k, 0)}


torch.npu.set_device(0)
elements, tests = torch.tensor([1, 2, 3, 4, 5]), torch.tensor([2, 4, 9])
before = runtime.report()["counters"]
result = torch.isin(elements.npu(), tests.npu()).cpu()
after = runtime.report()["counters"]
report = {
    "equal": torch.equal(result, torch.isin(elements, tests)),
    "jit_compile": not torch_npu.npu.is_jit_compile_false(),
    "aclnn": calls("aclnn", before, after),
    "aclop": calls("aclop", before, after),
}
print(json.dumps(report))
