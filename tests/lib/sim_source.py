"""The simulated NPU's C++ source, for the tests that tie a Python mirror to it."""

from __future__ import annotations

from pathlib import Path

from ascend_env import sim

BACKEND = Path(sim.__file__).resolve().parent / "csrc" / "sim_backend.cpp"


def cpp() -> str:
    return BACKEND.read_text(encoding="utf-8")


def cpp_block(start: str) -> str:
    """The C++ from ``start`` to the first line that is a closing brace alone."""
    text = cpp()
    at = text.index(start)
    return text[at : text.index("\n}", at)]
