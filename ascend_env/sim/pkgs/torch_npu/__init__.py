"""The simulated torch_npu: what Ascend scripts and transformers import, on ascend-env's simulated NPU.

Importable only where ``ascend_env.sim.add_torch_npu_to_path()`` put this directory's parent on
``sys.path`` (the audit's and verify's simulated processes, and ``ascend_env.sim`` users who ask),
after ``ascend_env.sim.enable``: it never stands in for a real torch_npu in any other process.
``torch_npu.npu`` is ``torch.npu`` (:mod:`ascend_env.sim.device`), as in torch_npu; ``__version__``
is the simulated release; ``torch_npu.contrib.transfer_to_npu`` runs CUDA-written code on npu.
"""

import sys
from typing import Any, Iterable, NoReturn, Sequence

import torch

# Aliases here shape the namespace of a stand-in for torch_npu: ``_sim`` keeps ascend_env.sim private
# (a public ``torch_npu.sim`` is no torch_npu name) ...
from ascend_env import sim as _sim

if _sim.enabled_table() is None:
    raise ImportError(
        "the simulated torch_npu needs the simulated NPU running in this process; "
        "fix: call ascend_env.sim.enable(RELEASE) before importing torch_npu, or run the script under "
        "'python -m ascend_env audit --torch-npu RELEASE -- python SCRIPT'"
    )

# ... and ascend_env.sim.device is torch_npu's public ``torch_npu.npu`` (``torch.npu``), not a ``device``.
from ascend_env.sim import device as npu  # noqa: E402

from ._fusion import npu_fusion_attention  # noqa: E402,F401
from ._rotary import npu_rotary_mul  # noqa: E402,F401

sys.modules[__name__ + ".npu"] = npu
__version__ = _sim.enabled_table()
#: Tells the startup hook's record that the torch_npu it heard of is this stand-in.
ASCEND_ENV_SIMULATED = True
__all__ = ["npu", "npu_fusion_attention", "npu_rotary_mul"]


def _apply_patches(monkey_patches: Iterable[Sequence[Any]]) -> None:
    """torch_npu's ``_apply_patches`` (torch_npu/__init__.py, Ascend/pytorch v6.0.rc2-pytorch2.1.0):
    a module patch with ``__all__`` copies those names onto the torch module at ``dest``; any other
    patch replaces ``dest``."""
    import types

    for dest, patch in monkey_patches:
        parts = dest.split(".")
        parent = torch
        for part in parts[:-1]:
            parent = getattr(parent, part)
        last = parts[-1]
        module = isinstance(patch, types.ModuleType)
        if not module or not hasattr(parent, last) or not hasattr(patch, "__all__"):
            setattr(parent, last, patch)
            if module:
                sys.modules[f"{parent.__name__}.{last}"] = patch
            continue
        target = getattr(parent, last)
        for attr in patch.__all__:
            setattr(target, attr, getattr(patch, attr))


def __getattr__(name: str) -> NoReturn:
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(
        f"the simulated torch_npu has no torch_npu.{name}; ascend-env's simulator models torch_npu.npu "
        "(torch.npu), torch_npu.contrib.transfer_to_npu, npu_fusion_attention and npu_rotary_mul"
    )
