"""The hook hears of the import that defines a fix's op (``torchvision``) as it hears of
torch_npu's: on every import path, once, and only after the backend came up."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path
from typing import List

import pytest

from ascend_env.hook import runtime, watch
from ascend_env.utils.importhooks import ImportWatcher

NAME = "ascend_env_test_defines_ops"


@pytest.fixture
def heard(monkeypatch, tmp_path: Path) -> List[str]:
    """Sources that reached ``runtime.activate``; ``NAME`` is awaited until it is imported."""
    (tmp_path / f"{NAME}.py").write_text("DEFINED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, NAME, raising=False)
    sources: List[str] = []
    monkeypatch.setattr(runtime, "activate", lambda source: sources.append(source) or [])
    monkeypatch.setattr(runtime, "awaited_imports", lambda: [] if NAME in sys.modules else [NAME])
    before = list(sys.meta_path)
    yield sources
    sys.meta_path[:] = [finder for finder in sys.meta_path if finder in before]
    sys.modules.pop(NAME, None)


def _state() -> types.SimpleNamespace:
    return types.SimpleNamespace(started=True, disabled=False, events=[], errors=[], heard=[])


@pytest.mark.parametrize(
    "how, event",
    [
        (lambda: importlib.import_module(NAME), "import"),
        (lambda: (importlib.util.find_spec(NAME), __import__(NAME)), "import after 1 probe"),
        (
            lambda: [importlib.util.find_spec(NAME) for _ in range(2)] + [__import__(NAME)],
            "import after 2 probes",
        ),
    ],
    ids=["import", "probe-then-import", "two-probes"],
)
def test_heard_after_the_backend_on_every_path(heard, how, event):
    state = _state()
    watch.notify(state, "torch_npu")
    assert heard == ["torch_npu"]
    assert any(isinstance(finder, ImportWatcher) for finder in sys.meta_path)
    how()
    assert heard == ["torch_npu", NAME]
    assert state.events == ["torch_npu", f"{NAME}: {event}"] and state.errors == []
    assert not any(isinstance(finder, ImportWatcher) for finder in sys.meta_path)
    importlib.import_module(NAME)  # once
    assert heard == ["torch_npu", NAME]


def test_imported_before_the_backend_is_heard_at_once(heard):
    importlib.import_module(NAME)
    state = _state()
    watch.notify(state, "torch_npu")
    assert heard == ["torch_npu"]  # nothing awaited: activate already saw it imported
    assert not any(isinstance(finder, ImportWatcher) for finder in sys.meta_path)


def test_nothing_is_watched_before_the_backend_or_with_the_kill_switch(heard):
    state = _state()
    state.disabled = True
    watch.notify(state, "torch_npu")
    importlib.import_module(NAME)
    assert heard == [] and state.events == []
