"""Ascend SoC names, and the compile mode torch_npu starts in on each.

The names are torch_npu's own (``torch_npu.npu.get_soc_version()`` answers with the enum of
``torch_npu/csrc/core/npu/NpuVariables.h``; ``c10_npu::GetSocName()`` with these strings).

op-plugin runs an op through ``op_api`` (aclnn, prebuilt binary kernels) when
``at_npu::native::env::CheckJitDisable()`` is true, else through ``acl_op``, which compiles every
new input shape online. torch_npu's device start leaves JIT compile on for the 910A family and
for 310P, and off from Ascend910B1 on (``GetAndSetDefaultJitCompileByAcl`` in
``torch_npu/csrc/core/npu/sys_ctrl/npu_sys_ctrl.cpp``, Ascend/pytorch v2.1.0-5.0.0 to
v2.3.1-6.0.0: the ACL default, ``enable`` on those SoCs). Importing this module imports nothing
but the standard library.
"""

from __future__ import annotations

import difflib
from typing import Dict, Optional, Tuple

from ascend_env.detect.cann import shown
from ascend_env.exceptions import UsageError

__all__ = ["ALIASES", "KNOWN", "canonical", "family", "jit_compile_default", "lookup", "soc_version"]

# In torch_npu's SocVersion order (NpuVariables.h): the 910A family, 310P, 910B, 310B, 910_93.
KNOWN: Tuple[str, ...] = (
    "Ascend910PremiumA",
    "Ascend910ProA",
    "Ascend910A",
    "Ascend910ProB",
    "Ascend910B",
    "Ascend310P1",
    "Ascend310P2",
    "Ascend310P3",
    "Ascend310P4",
    "Ascend310P5",
    "Ascend310P7",
    "Ascend910B1",
    "Ascend910B2",
    "Ascend910B2C",
    "Ascend910B3",
    "Ascend910B4",
    "Ascend910B4-1",
    "Ascend310B1",
    "Ascend310B2",
    "Ascend310B3",
    "Ascend310B4",
    "Ascend910_9391",
    "Ascend910_9392",
    "Ascend910_9381",
    "Ascend910_9382",
    "Ascend910_9372",
    "Ascend910_9361",
)

# What people type: the card's family name. "910B" is the 910B card (Ascend910B1..B4), not the
# legacy "Ascend910B" member of the 910A family, which only its full name selects.
ALIASES: Dict[str, str] = {
    "910A": "Ascend910A",
    "910PROA": "Ascend910ProA",
    "910PREMIUMA": "Ascend910PremiumA",
    "910B": "Ascend910B1",
    "310P": "Ascend310P3",
    "310B": "Ascend310B1",
    "910_93": "Ascend910_9391",
}

_BY_KEY: Dict[str, str] = {name.upper(): name for name in KNOWN}
_FIRST_JIT_OFF = KNOWN.index("Ascend910B1")


def lookup(name: str) -> Optional[str]:
    """torch_npu's name for ``name`` (a full name or an alias, any case), or None."""
    key = name.strip().upper()
    if key.startswith("ASCEND") and key not in _BY_KEY:
        key = key[len("ASCEND") :]
    return _BY_KEY.get(key) or ALIASES.get(key) or _BY_KEY.get("ASCEND" + key)


def canonical(name: str, variable: Optional[str] = None) -> str:
    """Like :func:`lookup`, but an unknown name raises ``UsageError`` listing the known ones, the
    likeliest first where one is spelt alike; ``variable``: the environment variable it came from,
    which the error names."""
    found = lookup(name)
    if found is None:
        spelt = {key.upper(): key for key in (*ALIASES, *KNOWN)}
        close = difflib.get_close_matches(name.strip().upper(), list(spelt), n=1, cutoff=0.6)
        problem = f"unknown Ascend SoC {shown(name)}" + (f" in ${variable}" if variable else "") + "."
        if close:
            problem += f" Did you mean {spelt[close[0]]!r}?"
        known = "one of " + ", ".join(sorted(ALIASES)) + " or a full name: " + ", ".join(KNOWN)
        fix = f"set {variable} to {known}, or unset it" if variable else f"use {known}"
        raise UsageError(problem, fix)
    return found


def jit_compile_default(soc: str) -> bool:
    """Whether torch_npu starts with JIT compile on (every op on ``acl_op``) on ``soc``."""
    return KNOWN.index(canonical(soc)) < _FIRST_JIT_OFF


def family(soc: str) -> str:
    """The card family a user would name: ``910A``, ``310P``, ``910B``, ``310B`` or ``910_93``."""
    name = canonical(soc)
    for prefix, label in (
        ("Ascend910_93", "910_93"),
        ("Ascend310P", "310P"),
        ("Ascend310B", "310B"),
        ("Ascend910B", "910B"),
    ):
        if name.startswith(prefix) and (label != "910B" or name != "Ascend910B"):
            return label
    return "910A"


# The first SocVersion number of each group (Ascend/pytorch torch_npu/csrc/core/npu/NpuVariables.h,
# branch v2.8.0, commit c4194988d3c830375abf08e01d5bec3fe6a86406); members count up from it.
_SOC_VERSION_BASES = (
    ("Ascend910PremiumA", 100),
    ("Ascend310P1", 200),
    ("Ascend910B1", 220),
    ("Ascend310B1", 240),
    ("Ascend910_9391", 250),
)


def soc_version(soc: str) -> int:
    """``torch_npu.npu.get_soc_version()`` on ``soc``: its number in torch_npu's SocVersion enum."""
    index = KNOWN.index(canonical(soc))
    first, number = max(
        (KNOWN.index(name), base) for name, base in _SOC_VERSION_BASES if KNOWN.index(name) <= index
    )
    return number + index - first
