"""The emulated CANN's counters per decoding step of ``generate()``: what the real torch_npu binary
asked of CANN in each step, measured, for ``audit --paths --cann emulated``.

A :class:`Steps` listens as the dispatch-path model does (:mod:`ascend_env.sim.steps`: each
``generate()`` call and each of its decoding steps) and, at each boundary, waits for the stream
(``torch.npu.synchronize()``: aclnn kernels run on torch_npu's task-queue thread) and takes the
emulated CANN's counters (:func:`ascend_env.sim.emulated.report`). A step's counts are what changed
in between:

- ``compiles``: ``aclopCompileAndExecute`` calls with a key (op type, inputs, attributes) the
  process had not run before: what a real NPU compiles online (the emulated CANN's ``aclop_compile``);
- ``aclop``: every ``aclopCompileAndExecute`` call; ``aclnn``: every aclnn kernel launched;
- ``compiles_by_type``: the compiles by op type (``Cast``, ``MatMul``, ...).

Step 0 holds ``generate()``'s set-up and the prompt's forward pass, as in the model; what runs after
the last step is reported apart. Started by :func:`ascend_env.sim.emulated.enable` in a process the
audit asked for paths (``$ASCEND_ENV_AUDIT_PATHS``). Imports no torch until a step ends.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping

from ascend_env.sim import steps
from ascend_env.sim.reports import MeasuredRun, MeasuredStep

__all__ = ["Steps", "counters_of", "difference"]


_Counters = Dict[str, Dict[str, int]]


def difference(before: _Counters, after: _Counters) -> MeasuredStep:
    """What the counters ``after`` add to ``before``."""

    def grown(kind: str) -> Dict[str, int]:
        old = before.get(kind, {})
        return {
            name: n - old.get(name, 0)
            for name, n in sorted(after.get(kind, {}).items())
            if n > old.get(name, 0)
        }

    compiles = grown("aclop_compile")
    return {
        "compiles": sum(compiles.values()),
        "aclop": sum(grown("aclop").values()),
        "aclnn": sum(grown("aclnn").values()),
        "compiles_by_type": dict(sorted(compiles.items(), key=lambda item: (-item[1], item[0]))),
    }


class Steps:
    """The process's measured steps (a :class:`ascend_env.sim.steps.Listener`). ``counters``: the
    emulated CANN's counters now (``{kind: {name: n}}``); ``synchronize``: waits for the device."""

    def __init__(self, counters: Callable[[], _Counters], synchronize: Callable[[], None]) -> None:
        self._counters = counters
        self._synchronize = synchronize
        self._depth = 0
        self._last: _Counters = {}
        self.runs: List[MeasuredRun] = []

    def _now(self) -> _Counters:
        self._synchronize()
        return self._counters()

    def site(self) -> str:
        """The first Python frame outside torch and ascend-env, as the model names it: ``file:line``."""
        return steps.caller_site()

    def enter_generate(self, site: str = "<unknown>") -> None:
        self._depth += 1
        if self._depth == 1:
            self.runs.append({"site": site, "mode": None, "steps": [], "after": None})
            self._last = self._now()

    def generation_mode(self, mode: str) -> None:
        if self._depth >= 1 and self.runs and self.runs[-1]["mode"] is None:
            self.runs[-1]["mode"] = mode

    def step_done(self) -> None:
        if self._depth >= 1 and self.runs:
            now = self._now()
            self.runs[-1]["steps"].append(difference(self._last, now))
            self._last = now

    def exit_generate(self) -> None:
        self._depth -= 1
        if self._depth == 0 and self.runs:
            now = self._now()
            self.runs[-1]["after"] = difference(self._last, now)
            self._last = now

    def report(self) -> List[MeasuredRun]:
        return list(self.runs)


def counters_of(document: Mapping[str, Any]) -> _Counters:
    """The ``counters`` of an emulated CANN report, as plain ints."""
    found = document.get("counters")
    if not isinstance(found, Mapping):
        return {}
    return {
        str(kind): {str(name): int(n) for name, n in names.items()}
        for kind, names in found.items()
        if isinstance(names, Mapping)
    }
