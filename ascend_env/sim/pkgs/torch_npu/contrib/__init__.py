"""``torch_npu.contrib`` of the simulated torch_npu: ``transfer_to_npu``."""

from typing import NoReturn


def __getattr__(name: str) -> NoReturn:
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(
        f"the simulated torch_npu has no torch_npu.contrib.{name}; ascend-env's simulator models "
        "torch_npu.contrib.transfer_to_npu only"
    )
