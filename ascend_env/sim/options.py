"""``torch.npu``'s compile settings and options on the simulated NPU: ``set_compile_mode``,
``set_option`` (checked as torch_npu checks them) and ``torch.npu.config``, over
:mod:`ascend_env.sim.compile_mode`; and the error for a name the simulator does not model.
"""

from __future__ import annotations

from typing import Any, Dict

from ascend_env.sim import compile_mode

__all__ = ["config", "is_jit_compile_false", "missing", "set_compile_mode", "set_option"]


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
        raise AttributeError(missing("torch.npu.config", name))


config = _NpuConfig()


def missing(where: str, name: str) -> str:
    """The AttributeError text for ``<where>.<name>``, a torch_npu name the simulator does not model."""
    return (
        f"the simulated torch_npu has no {where}.{name}; ascend-env's simulator models torch_npu's "
        "device, stream, event, memory, random-number and compile-mode API, transfer_to_npu, and "
        "npu_fusion_attention (see ascend_env/sim/device.py)"
    )
