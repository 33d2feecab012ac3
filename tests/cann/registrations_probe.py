"""Run under ``python -m ascend_env.cann`` by test_optables_binary.py: the real dispatcher's
PrivateUse1 (and SparsePrivateUse1) registrations of upstream aten ops, as one JSON document on
stdout. Upstream: the ``aten::`` ops this torch knows before torch_npu is imported."""

from __future__ import annotations

import json

import torch

UPSTREAM = {name for name in torch._C._dispatch_get_all_op_names() if name.startswith("aten::")}

import torch_npu  # noqa: E402  (the real binary, on the emulated CANN)


def upstream(key: str) -> list:
    names = torch._C._dispatch_get_registrations_for_dispatch_key(key)
    return sorted(name[len("aten::") :] for name in names if name in UPSTREAM)


print(
    json.dumps(
        {
            "version": torch_npu.__version__,
            "upstream": sorted(name[len("aten::") :] for name in UPSTREAM),
            "PrivateUse1": upstream("PrivateUse1"),
            "SparsePrivateUse1": upstream("SparsePrivateUse1"),
        }
    )
)
