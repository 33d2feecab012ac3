"""The OpInfos whose samples differ between the simulated NPU and the CPU, and why.

Each entry: the OpInfo name, the outcomes it may have (``opinfo_sweep.py``), and the reason.
Nothing else may differ; docs/training.md lists the same. An OpInfo named here may also match.
"""

from __future__ import annotations

from typing import Dict, FrozenSet, Tuple

SPARSE = (
    "a sparse layout: the simulator models strided npu tensors only (torch_npu's SparsePrivateUse1 "
    "kernels are not simulated), so sparse npu tensors cannot be made or computed with"
)
CPU_ONLY_ARGUMENT = (
    "torch requires tensor_split's indices tensor on the CPU (on the device too); the sweep copies "
    "every tensor of a sample to npu"
)

KERNEL_CHOICE = (
    "scaled_dot_product_attention picks its kernel by device: the CPU's fused kernel on the CPU, the "
    "decomposition on npu (torch_npu's own kernel on the device); a few elements differ by about 1e-5"
)

EXPLAINED: Dict[str, Tuple[FrozenSet[str], str]] = {
    "nn.functional.scaled_dot_product_attention": (
        frozenset({"forward-differs", "grad-differs"}),
        KERNEL_CHOICE,
    ),
    "to_sparse": (frozenset({"forward-raises", "output-on-cpu"}), SPARSE),
    "sparse.sampled_addmm": (frozenset({"forward-raises"}), SPARSE),
    "sparse.mm.reduce": (frozenset({"forward-raises"}), SPARSE),
    "tensor_split": (frozenset({"forward-raises"}), CPU_ONLY_ARGUMENT),
}


def explains(op: str, outcome: str) -> bool:
    """Whether ``outcome`` of OpInfo ``op`` is one documented above."""
    entry = EXPLAINED.get(op)
    return entry is not None and outcome in entry[0]
