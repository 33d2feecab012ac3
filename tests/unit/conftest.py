"""Fixtures that several unit test modules share."""

from __future__ import annotations

import pytest

from ascend_env.hook import runtime


@pytest.fixture
def record(monkeypatch):
    """A fresh in-process hook record (``runtime.RECORD``) for the test, the real one untouched."""
    fresh = runtime._Record()
    monkeypatch.setattr(runtime, "RECORD", fresh)
    return fresh
