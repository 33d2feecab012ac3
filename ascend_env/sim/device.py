"""``torch.npu`` and ``torch_npu.npu`` on the simulated NPU: one module, as in torch_npu.

One device, ``npu:0``, whose kernels run on the CPU, synchronously. What the real module offers
(``torch_npu/npu/__init__.py``, Ascend/pytorch v6.0.rc2-pytorch2.1.0, the 2.1.0.post6 release,
commit 06cec48dda7dda594c652ec907cf296fc82a70c7) is here where it means something without a
device: devices, streams and events (no-ops with the right types), memory queries (the bytes npu
tensors hold), random number generators (``torch.Generator(device="npu")``; CPU algorithm, so a
seeded npu stream equals the CPU's), the compile settings (:mod:`ascend_env.sim.compile_mode`),
autocast. Any other name raises AttributeError naming the simulator. ``__all__`` is what
``transfer_to_npu`` copies onto ``torch.cuda``. This module is the device and the face; each other
part is a module of its own, as in torch_npu: :mod:`~ascend_env.sim.streams`,
:mod:`~ascend_env.sim.memory`, :mod:`~ascend_env.sim.generators`, :mod:`~ascend_env.sim.autocast`,
:mod:`~ascend_env.sim.options` (with :mod:`~ascend_env.sim.device_index`, the one device index).
"""

from __future__ import annotations

import sys
import types
from typing import Any, Dict, Optional

from ascend_env.sim import autocast, compile_mode, generators, options
from ascend_env.sim.autocast import (
    get_amp_supported_dtype,
    get_autocast_dtype,
    is_autocast_enabled,
    is_bf16_supported,
    set_autocast_dtype,
    set_autocast_enabled,
)
from ascend_env.sim.device_index import index_of, set_device
from ascend_env.sim.generators import (
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from ascend_env.sim.memory import (
    TOTAL_MEMORY,
    empty_cache,
    max_memory_allocated,
    max_memory_cached,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_cached,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_max_memory_allocated,
    reset_max_memory_cached,
    reset_peak_memory_stats,
)
from ascend_env.sim.options import config, is_jit_compile_false, set_compile_mode, set_option
from ascend_env.sim.streams import Event, Stream, current_stream, default_stream, set_stream, stream

__all__ = [
    "is_initialized",
    "init",
    "synchronize",
    "device_count",
    "can_device_access_peer",
    "set_device",
    "current_device",
    "get_device_name",
    "get_device_properties",
    "get_device_capability",
    "mem_get_info",
    "is_available",
    "device",
    "device_of",
    "stream",
    "set_stream",
    "current_stream",
    "default_stream",
    "utilization",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "initial_seed",
    "empty_cache",
    "memory_stats",
    "reset_peak_memory_stats",
    "reset_max_memory_allocated",
    "reset_max_memory_cached",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "memory_cached",
    "max_memory_cached",
    "memory_summary",
    "Stream",
    "Event",
    "set_option",
    "set_compile_mode",
    "get_rng_state",
    "set_rng_state",
    "get_rng_state_all",
    "set_rng_state_all",
    "is_jit_compile_false",
    "get_amp_supported_dtype",
    "is_autocast_enabled",
    "is_bf16_supported",
    "set_autocast_enabled",
    "get_autocast_dtype",
    "set_autocast_dtype",
    "config",
    "get_soc_version",
]

_current = 0


# ------------------------------------------------------------------ devices


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def init() -> None:
    """Nothing to initialise: the backend is ready once ``ascend_env.sim.enable`` returns."""


def _lazy_init() -> None:
    """Nothing to initialise: the backend is ready once ``ascend_env.sim.enable`` returns."""


def _lazy_call(callback: Any) -> None:
    """torch_npu queues these until the device starts; the simulated one has started."""
    callback()


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    return 1


def current_device() -> int:
    return _current


def can_device_access_peer(device: Any, peer: Any) -> bool:
    set_device(device)
    set_device(peer)
    return False


def synchronize(device: Optional[Any] = None) -> None:
    """Kernels run synchronously on the CPU: nothing to wait for."""


def get_device_name(device: Optional[Any] = None) -> str:
    """The SoC's name, as torch_npu answers (``Ascend910B1``): the simulated SoC."""
    set_device(device)
    return compile_mode.soc()


class _DeviceProperties:
    """What ``get_device_properties`` answers (torch_npu's ``_NPUDeviceProperties``)."""

    def __init__(self) -> None:
        self.name = compile_mode.soc()
        self.total_memory = TOTAL_MEMORY

    def __repr__(self) -> str:
        return f"_NPUDeviceProperties(name='{self.name}', total_memory={self.total_memory // 1024**2}MB)"


def get_device_properties(device: Optional[Any] = None) -> _DeviceProperties:
    set_device(device)
    return _DeviceProperties()


def get_device_capability(device: Optional[Any] = None) -> None:
    """torch_npu answers None: NPUs have no CUDA compute capability."""
    return None


def utilization(device: Optional[Any] = None) -> int:
    return 0


def get_soc_version() -> int:
    """torch_npu's ``SocVersion`` number of the simulated SoC (``$ASCEND_ENV_SIM_SOC``)."""
    from ascend_env.detect import socs

    return socs.soc_version(compile_mode.soc())


class device:  # noqa: N801 - the name torch.cuda.device and torch_npu use
    """``with torch.npu.device(0):`` (only index 0 exists)."""

    def __init__(self, device: Any) -> None:
        if device is not None and index_of(device) >= 0:
            set_device(device)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


class device_of(device):  # noqa: N801
    """``with torch.npu.device_of(tensor):``."""

    def __init__(self, obj: Any) -> None:
        super().__init__(obj.get_device() if getattr(obj, "is_npu", False) else None)


# ------------------------------------------------------------------ submodules


def _submodule(name: str, members: Dict[str, Any]) -> types.ModuleType:
    """``torch_npu.npu.<name>``, registered in sys.modules with ``__all__`` (transfer_to_npu
    copies each module's ``__all__`` onto the matching ``torch.cuda`` module)."""
    module = types.ModuleType(f"{__name__}.{name}")
    module.__dict__.update(members)
    module.__all__ = sorted(members)  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    return module


random = _submodule("random", {name: getattr(generators, name) for name in generators.RANDOM_NAMES})


_LAZY_SUBMODULES = {"amp": autocast.amp_members}


def __getattr__(name: str) -> Any:
    if name == "default_generators":
        return (generators.default_generator(),)
    if name in _LAZY_SUBMODULES:
        module = _submodule(name, _LAZY_SUBMODULES[name]())
        globals()[name] = module
        return module
    if name.startswith("__"):  # probes such as __path__ or __file__ of a plain module
        raise AttributeError(name)
    raise AttributeError(options.missing("torch.npu", name))
