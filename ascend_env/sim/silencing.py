"""What silences torch_npu's warnings: the rule of the simulated NPU's CAUTION line and 64-bit
warning, as ``warnings_silenced()`` in ``sim/csrc/sim_backend.cpp`` reads it (tests/unit/sim/test_silencing.py
reads it there): a ``RANK`` other than 0, a switch set to 1, a quiet C++ log level.

Imports nothing else of ascend_env, and no torch.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

__all__ = ["LOG_LEVEL", "QUIET_LOG_LEVELS", "RANK", "WARNING_SWITCHES", "warnings_silenced"]

RANK = "RANK"
WARNING_SWITCHES = ("TORCH_NPU_DISABLED_WARNING", "TORCH_NPU_WARNING_DISABLE")
LOG_LEVEL = "TORCH_CPP_LOG_LEVEL"
QUIET_LOG_LEVELS = ("ERROR", "FATAL", "2", "3")


def warnings_silenced(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether torch_npu's warnings are off: the rule of the simulator's CAUTION line
    (``warnings_silenced()`` in ``sim/csrc/sim_backend.cpp``), read at each warning as it is."""
    environ = os.environ if environ is None else environ
    rank = environ.get(RANK)
    if rank and rank != "0":
        return True
    if any(environ.get(switch) == "1" for switch in WARNING_SWITCHES):
        return True
    level = environ.get(LOG_LEVEL)
    return level is not None and level.upper() in QUIET_LOG_LEVELS
