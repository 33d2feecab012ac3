"""``torch.npu`` and ``torch_npu.npu`` on the simulated NPU: one module, as in torch_npu.

One device, ``npu:0``, whose kernels run on the CPU, synchronously. What the real module offers
(``torch_npu/npu/__init__.py``, Ascend/pytorch v6.0.rc2-pytorch2.1.0, the 2.1.0.post6 release,
commit 06cec48dda7dda594c652ec907cf296fc82a70c7) is here where it means something without a
device: devices, streams and events (no-ops with the right types), memory queries (the bytes npu
tensors hold), random number generators (``torch.Generator(device="npu")``; CPU algorithm, so a
seeded npu stream equals the CPU's), the compile settings (:mod:`ascend_env.sim.compile_mode`),
autocast. Any other name raises AttributeError naming the simulator. ``__all__`` is what
``transfer_to_npu`` copies onto ``torch.cuda``.
"""

from __future__ import annotations

import sys
import time
import types
from typing import Any, Dict, List, Optional, Tuple

from ascend_env.sim import compile_mode

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

# The device memory the simulated card reports (an Ascend910B1's 64 GiB of HBM).
TOTAL_MEMORY = 64 * 1024**3
_current = 0


def _torch() -> types.ModuleType:
    import torch

    return torch


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


def _index(device: Any) -> int:
    index = getattr(device, "index", device)
    if isinstance(device, str):
        index = int(device.split(":", 1)[1]) if ":" in device else 0
    return 0 if index is None else int(index)


def set_device(device: Any) -> None:
    if _index(device) != 0:
        raise RuntimeError(f"the simulated NPU has one device, npu:0; got {device!r}")


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
        if device is not None and _index(device) >= 0:
            set_device(device)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


class device_of(device):  # noqa: N801
    """``with torch.npu.device_of(tensor):``."""

    def __init__(self, obj: Any) -> None:
        super().__init__(obj.get_device() if getattr(obj, "is_npu", False) else None)


# ------------------------------------------------------------------ streams and events


def _stream_bases() -> Tuple[type, type]:
    """The classes torch's dynamo wants device streams and events to derive from, where it checks
    (torch 2.2 to 2.4: the abstract ``torch._streambase._StreamBase`` / ``_EventBase``, asserted when
    ``torch._dynamo`` imports once ``transfer_to_npu`` made ``torch.cuda.Stream`` this class); newer
    torch keeps those names only as deprecated aliases of ``torch.Stream`` / ``torch.Event``."""
    try:
        from torch import _streambase
    except ImportError:  # torch 2.1
        return object, object
    torch = _torch()
    stream_base, event_base = _streambase._StreamBase, _streambase._EventBase
    if hasattr(torch, "Stream") and issubclass(stream_base, torch.Stream):
        return object, object
    return stream_base, event_base


_STREAM_BASE, _EVENT_BASE = _stream_bases()


class Stream(_STREAM_BASE):  # type: ignore[misc, valid-type]
    """An NPU stream. Kernels run synchronously, so every stream is always idle."""

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __init__(self, device: Optional[Any] = None, priority: int = 0, **kwargs: Any) -> None:
        set_device(device)
        self.priority = priority

    @property
    def device(self) -> Any:
        return _torch().device("npu", 0)

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        """Nothing to wait for."""

    def wait_event(self, event: Event) -> None:
        """Nothing to wait for."""

    def wait_stream(self, stream: Stream) -> None:
        """Nothing to wait for."""

    def record_event(self, event: Optional[Event] = None) -> Event:
        event = Event() if event is None else event
        event.record(self)
        return event

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class Event(_EVENT_BASE):  # type: ignore[misc, valid-type]
    """An NPU event; ``elapsed_time`` measures host time between two ``record()`` calls."""

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> None:
        self.enable_timing = enable_timing
        self._recorded: Optional[float] = None

    def record(self, stream: Optional[Stream] = None) -> None:
        self._recorded = time.perf_counter()

    def wait(self, stream: Optional[Stream] = None) -> None:
        """Nothing to wait for."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        """Nothing to wait for."""

    def elapsed_time(self, end_event: Event) -> float:
        if self._recorded is None or end_event._recorded is None:
            raise RuntimeError("both events must be recorded before calculating elapsed time.")
        return (end_event._recorded - self._recorded) * 1000.0


_DEFAULT_STREAM = Stream()
_stream_now: List[Stream] = [_DEFAULT_STREAM]


def current_stream(device: Optional[Any] = None) -> Stream:
    return _stream_now[-1]


def default_stream(device: Optional[Any] = None) -> Stream:
    return _DEFAULT_STREAM


def set_stream(stream: Optional[Stream]) -> None:
    if stream is not None:
        _stream_now[-1] = stream


class stream:  # noqa: N801 - torch.cuda.stream's name
    """``with torch.npu.stream(s):`` makes ``s`` the current stream inside."""

    def __init__(self, stream: Optional[Stream]) -> None:
        self._stream = stream

    def __enter__(self) -> Optional[Stream]:
        _stream_now.append(self._stream or _stream_now[-1])
        return self._stream

    def __exit__(self, *exc: object) -> None:
        _stream_now.pop()


# ------------------------------------------------------------------ memory


def _counts() -> Tuple[int, int]:
    allocated, peak = _torch().ops.ascend_sim.memory_stats()
    return int(allocated), int(peak)


def memory_allocated(device: Optional[Any] = None) -> int:
    """Bytes held by npu tensors now."""
    return _counts()[0]


def max_memory_allocated(device: Optional[Any] = None) -> int:
    """The most bytes npu tensors held since start or the last ``reset_peak_memory_stats``."""
    return _counts()[1]


# Freed memory goes back to the host at once: nothing is cached, reserved equals allocated.
memory_reserved = memory_cached = memory_allocated
max_memory_reserved = max_memory_cached = max_memory_allocated


def reset_peak_memory_stats(device: Optional[Any] = None) -> None:
    _torch().ops.ascend_sim.reset_peak_memory()


reset_max_memory_allocated = reset_max_memory_cached = reset_peak_memory_stats


def empty_cache() -> None:
    """Memory is host memory, freed when tensors die: no cache to empty."""


def mem_get_info(device: Optional[Any] = None) -> Tuple[int, int]:
    """(free bytes, total bytes) of the simulated card."""
    return TOTAL_MEMORY - memory_allocated(), TOTAL_MEMORY


def memory_stats(device: Optional[Any] = None) -> Dict[str, int]:
    allocated, peak = _counts()
    return {
        "allocated_bytes.all.current": allocated,
        "allocated_bytes.all.peak": peak,
        "reserved_bytes.all.current": allocated,
        "reserved_bytes.all.peak": peak,
    }


def memory_summary(device: Optional[Any] = None, abbreviated: bool = False) -> str:
    allocated, peak = _counts()
    return f"simulated NPU memory: {allocated} bytes allocated, peak {peak} bytes (host memory, no cache)\n"


# ------------------------------------------------------------------ random numbers


def _default_generator() -> Any:
    return _torch().ops.ascend_sim.default_generator()


def manual_seed(seed: int) -> None:
    """Seed the npu default generator (``torch.manual_seed`` calls ``manual_seed_all`` too)."""
    _default_generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)


def seed() -> None:
    _default_generator().seed()


def seed_all() -> None:
    seed()


def initial_seed() -> int:
    return int(_default_generator().initial_seed())


def get_rng_state(device: Any = "npu") -> Any:
    set_device(device)
    return _default_generator().get_state()


def set_rng_state(new_state: Any, device: Any = "npu") -> None:
    set_device(device)
    _default_generator().set_state(new_state)


def get_rng_state_all() -> List[Any]:
    return [get_rng_state()]


def set_rng_state_all(new_states: List[Any]) -> None:
    for state in new_states:
        set_rng_state(state)


_RANDOM_NAMES = [
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


# ------------------------------------------------------------------ autocast


def get_amp_supported_dtype() -> List[Any]:
    torch = _torch()
    return [torch.float16, torch.bfloat16]


def is_bf16_supported() -> bool:
    return True


# torch 2.1 to 2.3 ask the device module about autocast (torch.autocast(device_type="npu")); the
# state is PyTorch's own, for the PrivateUse1 dispatch key, kept by the simulator's C++ backend.
def is_autocast_enabled() -> bool:
    return bool(_torch().ops.ascend_sim.autocast_enabled())


def set_autocast_enabled(enabled: bool) -> None:
    _torch().ops.ascend_sim.set_autocast_enabled(bool(enabled))


def get_autocast_dtype() -> Any:
    return _torch().ops.ascend_sim.autocast_dtype().dtype


def set_autocast_dtype(dtype: Any) -> None:
    _torch().ops.ascend_sim.set_autocast_dtype(dtype)


# ------------------------------------------------------------------ compile settings


def set_compile_mode(jit_compile: bool = False) -> None:
    """``torch_npu.npu.set_compile_mode``: JIT compile on (every op on acl_op) or off."""
    compile_mode.set_jit_compile(bool(jit_compile))


def is_jit_compile_false() -> bool:
    return not compile_mode.jit_compile()


_OPTIONS: Dict[str, str] = {}
# The values torch_npu accepts for the options it checks (torch_npu/npu/npu_config.py, _option_map).
_OPTION_VALUES = {
    "ACL_PRECISION_MODE": ("allow_fp32_to_fp16", "must_keep_origin_dtype"),
    "ACL_OP_SELECT_IMPL_MODE": ("high_performance", "high_precision"),
    "ACL_OP_DEBUG_LEVEL": ("0", "1", "2", "3", "4"),
    "ACL_OP_COMPILER_CACHE_MODE": ("disable", "enable", "force"),
    "ACL_OP_DEBUG_OPTION": ("oom",),
}


def set_option(option: Dict[str, Any]) -> None:
    """``torch_npu.npu.set_option``: ``jitCompile`` and ``ALLOW_INTERNAL_FORMAT`` change what the
    simulator models; the other options are checked as torch_npu checks them and kept."""
    if not isinstance(option, dict):
        raise TypeError("npu option must be a dict.")
    for name, value in option.items():
        text = str(value)
        allowed = _OPTION_VALUES.get(name)
        if allowed is not None and text not in allowed:
            raise ValueError(f"value of {name} should be in {list(allowed)} but got {value}")
        if name == "jitCompile":
            compile_mode.set_jit_compile(text == "enable")
        elif name == "ALLOW_INTERNAL_FORMAT":
            compile_mode.set_allow_internal_format(text == "enable")
        _OPTIONS[name] = text


class _NpuConfig:
    """``torch.npu.config``: ``allow_internal_format``, backed by :mod:`ascend_env.sim.compile_mode`."""

    @property
    def allow_internal_format(self) -> bool:
        return compile_mode.allow_internal_format()

    @allow_internal_format.setter
    def allow_internal_format(self, value: bool) -> None:
        compile_mode.set_allow_internal_format(bool(value))

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(_missing("torch.npu.config", name))


config = _NpuConfig()


# ------------------------------------------------------------------ submodules


def _submodule(name: str, members: Dict[str, Any]) -> types.ModuleType:
    """``torch_npu.npu.<name>``, registered in sys.modules with ``__all__`` (transfer_to_npu
    copies each module's ``__all__`` onto the matching ``torch.cuda`` module)."""
    module = types.ModuleType(f"{__name__}.{name}")
    module.__dict__.update(members)
    module.__all__ = sorted(members)  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    return module


random = _submodule("random", {name: globals()[name] for name in _RANDOM_NAMES})


def _amp_members() -> Dict[str, Any]:
    import torch

    class autocast(torch.amp.autocast):  # noqa: N801 - torch_npu.npu.amp.autocast
        """``torch.npu.amp.autocast(...)``: ``torch.autocast("npu", ...)``."""

        def __init__(
            self, enabled: bool = True, dtype: Any = torch.float16, cache_enabled: bool = True
        ) -> None:
            super().__init__("npu", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)

    members: Dict[str, Any] = {
        "autocast": autocast,
        "custom_fwd": torch.cuda.amp.custom_fwd,
        "custom_bwd": torch.cuda.amp.custom_bwd,
    }
    scaler = getattr(torch.amp, "GradScaler", None)  # device-generic from torch 2.3
    if scaler is not None:

        class GradScaler(scaler):  # type: ignore[misc, valid-type]
            """``torch.npu.amp.GradScaler``: ``torch.amp.GradScaler("npu", ...)``."""

            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__("npu", *args, **kwargs)

        members["GradScaler"] = GradScaler
    return members


_LAZY_SUBMODULES = {"amp": _amp_members}


def _missing(where: str, name: str) -> str:
    return (
        f"the simulated torch_npu has no {where}.{name}; ascend-env's simulator models torch_npu's "
        "device, stream, event, memory, random-number and compile-mode API, transfer_to_npu, and "
        "npu_fusion_attention (see ascend_env/sim/device.py)"
    )


def __getattr__(name: str) -> Any:
    if name == "default_generators":
        return (_default_generator(),)
    if name in _LAZY_SUBMODULES:
        module = _submodule(name, _LAZY_SUBMODULES[name]())
        globals()[name] = module
        return module
    if name.startswith("__"):  # probes such as __path__ or __file__ of a plain module
        raise AttributeError(name)
    raise AttributeError(_missing("torch.npu", name))
