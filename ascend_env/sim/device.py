"""``torch.npu`` on the simulated NPU: what transformers, autocast and user scripts touch.

One device, ``npu:0``. Random numbers come from the CPU generator (kernels run on the CPU), so
seeding is ``torch.manual_seed``'s business and the functions here only keep the API whole.
"""

from __future__ import annotations

from typing import Any, List, Optional

_current = 0


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def _lazy_init() -> None:
    """Nothing to initialise: the backend is ready once ``ascend_env.sim.enable`` returns."""


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    return 1


def current_device() -> int:
    return _current


def _index(device: Any) -> int:
    index = getattr(device, "index", device)
    if isinstance(device, str):
        index = int(device.split(":", 1)[1]) if ":" in device else 0
    return 0 if index is None else int(index)


def set_device(device: Any) -> None:
    if _index(device) != 0:
        raise RuntimeError(f"the simulated NPU has one device, npu:0; got {device!r}")


def synchronize(device: Optional[Any] = None) -> None:
    """Kernels run synchronously on the CPU: nothing to wait for."""


def get_device_name(device: Optional[Any] = None) -> str:
    return "Ascend (simulated by ascend-env)"


def get_amp_supported_dtype() -> List[Any]:
    import torch

    return [torch.float16, torch.bfloat16]


def is_bf16_supported() -> bool:
    return True


# torch 2.1 to 2.3 ask the device module about autocast (torch.autocast(device_type="npu")); the
# state is PyTorch's own, for the PrivateUse1 dispatch key, kept by the simulator's C++ backend.
def is_autocast_enabled() -> bool:
    import torch

    return bool(torch.ops.ascend_sim.autocast_enabled())


def set_autocast_enabled(enabled: bool) -> None:
    import torch

    torch.ops.ascend_sim.set_autocast_enabled(bool(enabled))


def get_autocast_dtype() -> Any:
    import torch

    return torch.ops.ascend_sim.autocast_dtype().dtype


def set_autocast_dtype(dtype: Any) -> None:
    import torch

    torch.ops.ascend_sim.set_autocast_dtype(dtype)


def manual_seed(seed: int) -> None:
    """Random kernels use the CPU generator, which ``torch.manual_seed`` seeds."""


def manual_seed_all(seed: int) -> None:
    """Random kernels use the CPU generator, which ``torch.manual_seed`` seeds."""


def empty_cache() -> None:
    """Memory is host memory, freed when tensors die."""


def memory_allocated(device: Optional[Any] = None) -> int:
    return 0


class device:  # noqa: N801 - the name torch.cuda.device and torch_npu use
    """``with torch.npu.device(0):`` (only index 0 exists)."""

    def __init__(self, device: Any) -> None:
        set_device(device)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
