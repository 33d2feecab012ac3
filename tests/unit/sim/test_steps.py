"""ascend_env.sim.steps: generate() calls and decoding steps heard through transformers' own
classes (stand-ins here: the real ones run in tests/torch/test_sim_paths.py)."""

from __future__ import annotations

import sys
import types

from ascend_env.sim import steps


class Recorder:
    def __init__(self) -> None:
        self.events: list = []

    def site(self) -> str:
        return "chat.py:7"

    def enter_generate(self, site: str = "<unknown>") -> None:
        self.events.append(("enter", site))

    def generation_mode(self, mode: str) -> None:
        self.events.append(("mode", mode))

    def step_done(self) -> None:
        self.events.append("step")

    def exit_generate(self) -> None:
        self.events.append("exit")


def fake_transformers(monkeypatch) -> type:
    """Modules named as transformers' generation modules, with the three methods steps wraps."""

    class StoppingCriteriaList:
        def __call__(self, input_ids, scores):
            return input_ids >= 2

    class GenerationConfig:
        def get_generation_mode(self):
            return types.SimpleNamespace(value="greedy_search")

    class GenerationMixin:
        def generate(self):
            GenerationConfig().get_generation_mode()
            criteria = StoppingCriteriaList()
            return [criteria(i, None) for i in range(3)]

    for name, cls in (
        ("stopping_criteria", StoppingCriteriaList),
        ("configuration_utils", GenerationConfig),
        ("utils", GenerationMixin),
    ):
        module = types.ModuleType(f"transformers.generation.{name}")
        setattr(module, cls.__name__, cls)
        monkeypatch.setitem(sys.modules, module.__name__, module)
    return GenerationMixin


def test_each_call_and_step_is_heard_once(monkeypatch):
    mixin = fake_transformers(monkeypatch)
    recorder = Recorder()
    steps.listen(recorder)
    steps.listen(recorder)  # wrapped once: a second listener does not wrap again
    assert mixin().generate() == [False, False, True]  # what generate returns is untouched
    assert recorder.events == [
        ("enter", "chat.py:7"),
        ("mode", "greedy_search"),
        "step",
        "step",
        "step",
        "exit",
    ]


def test_a_failing_generate_still_ends(monkeypatch):
    mixin = fake_transformers(monkeypatch)

    def broken(self):
        raise ValueError("boom")

    monkeypatch.setattr(mixin, "generate", broken)
    recorder = Recorder()
    steps.listen(recorder)
    try:
        mixin().generate()
    except ValueError:
        pass
    assert recorder.events == [("enter", "chat.py:7"), "exit"]
