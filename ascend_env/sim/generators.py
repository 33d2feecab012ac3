"""The simulated NPU's random number generator: ``torch.npu``'s seeding and state functions
(``torch_npu.npu.random``) over the C++ backend's default generator, a CPU algorithm, so that a
seeded npu stream equals the CPU's.
"""

from __future__ import annotations

import types
from typing import Any, List

from ascend_env.sim.device_index import set_device

__all__ = [
    "RANDOM_NAMES",
    "default_generator",
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "set_rng_state",
    "set_rng_state_all",
]


def _torch() -> types.ModuleType:
    import torch

    return torch


def default_generator() -> Any:
    return _torch().ops.ascend_sim.default_generator()


def manual_seed(seed: int) -> None:
    """Seed the npu default generator (``torch.manual_seed`` calls ``manual_seed_all`` too)."""
    default_generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)


def seed() -> None:
    default_generator().seed()


def seed_all() -> None:
    seed()


def initial_seed() -> int:
    return int(default_generator().initial_seed())


def get_rng_state(device: Any = "npu") -> Any:
    set_device(device)
    return default_generator().get_state()


def set_rng_state(new_state: Any, device: Any = "npu") -> None:
    set_device(device)
    default_generator().set_state(new_state)


def get_rng_state_all() -> List[Any]:
    return [get_rng_state()]


def set_rng_state_all(new_states: List[Any]) -> None:
    for state in new_states:
        set_rng_state(state)


RANDOM_NAMES = [
    "get_rng_state",
    "get_rng_state_all",
    "set_rng_state",
    "set_rng_state_all",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "initial_seed",
]
