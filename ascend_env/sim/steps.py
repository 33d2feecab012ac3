"""Where transformers' ``generate()`` calls and their decoding steps begin and end, as they happen:
the hooks the dispatch-path model (:mod:`ascend_env.sim.paths`) listens with.

The decoding loops call ``StoppingCriteriaList.__call__`` once per iteration
(``unfinished_sequences & ~stopping_criteria(input_ids, scores)`` in transformers 4.46.3's
``_sample``, ``generation/utils.py``; the same line ends the loop of ``_greedy_search`` / ``_sample``
in the 4.40 releases), so each return from it inside ``GenerationMixin.generate`` closes one step.
``GenerationConfig.get_generation_mode`` (transformers >= 4.39: ``generate`` calls it once) names
the decoding mode. Importing this module imports neither torch nor transformers.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable, Protocol

from ascend_env.utils import importhooks

__all__ = ["Listener", "listen"]


class Listener(Protocol):
    """What hears of the calls and steps (:class:`ascend_env.sim.paths.Model`)."""

    def site(self) -> str:
        """Where ``generate()`` was called from: ``file:line``."""

    def enter_generate(self, site: str = "<unknown>") -> None:
        """A ``generate()`` call begins (calls may nest: only the outer one counts)."""

    def generation_mode(self, mode: str) -> None:
        """The decoding mode transformers chose for the call running now."""

    def step_done(self) -> None:
        """A decoding step ended."""

    def exit_generate(self) -> None:
        """A ``generate()`` call ended."""


def listen(model: Listener) -> None:
    """Tell ``model`` of each ``generate()`` call and decoding step from now on: wrap
    ``StoppingCriteriaList.__call__``, ``GenerationMixin.generate`` and
    ``GenerationConfig.get_generation_mode`` now if transformers is imported, else as soon as their
    modules are."""
    targets = {
        "transformers.generation.stopping_criteria": functools.partial(_wrap_stopping, model),
        "transformers.generation.utils": functools.partial(_wrap_generate, model),
        "transformers.generation.configuration_utils": functools.partial(_wrap_mode, model),
    }
    pending = {}
    for name, wrap in targets.items():
        module = sys.modules.get(name)
        if module is not None:
            wrap(module)
        else:
            pending[name] = wrap
    if pending:
        importhooks.ImportWatcher({name: _ignoring_specs(wrap) for name, wrap in pending.items()}).install()


def _ignoring_specs(wrap: Callable[[Any], None]) -> importhooks.Callback:
    """An import watcher's callback that wraps the module, whatever the count of specs."""
    return lambda module, _specs: wrap(module)


def _wrap_stopping(model: Listener, module: Any) -> None:
    cls = getattr(module, "StoppingCriteriaList", None)
    if cls is None or getattr(cls.__call__, "_ascend_env_paths", False):
        return
    original = cls.__call__

    @functools.wraps(original)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(self, *args, **kwargs)
        finally:
            model.step_done()

    call._ascend_env_paths = True  # type: ignore[attr-defined]
    cls.__call__ = call


def _wrap_generate(model: Listener, module: Any) -> None:
    cls = getattr(module, "GenerationMixin", None)
    if cls is None or getattr(cls.generate, "_ascend_env_paths", False):
        return
    original = cls.generate

    @functools.wraps(original)
    def generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        model.enter_generate(model.site())
        try:
            return original(self, *args, **kwargs)
        finally:
            model.exit_generate()

    generate._ascend_env_paths = True  # type: ignore[attr-defined]
    cls.generate = generate


def _wrap_mode(model: Listener, module: Any) -> None:
    """Record the decoding mode of each ``generate()`` call from ``GenerationConfig.get_generation_mode``
    (transformers >= 4.39: ``generate`` calls it once; older releases leave the mode unknown)."""
    cls = getattr(module, "GenerationConfig", None)
    if cls is None or not hasattr(cls, "get_generation_mode"):
        return
    if getattr(cls.get_generation_mode, "_ascend_env_paths", False):
        return
    original = cls.get_generation_mode

    @functools.wraps(original)
    def get_generation_mode(self: Any, *args: Any, **kwargs: Any) -> Any:
        mode = original(self, *args, **kwargs)
        model.generation_mode(str(getattr(mode, "value", mode)))
        return mode

    get_generation_mode._ascend_env_paths = True  # type: ignore[attr-defined]
    cls.get_generation_mode = get_generation_mode
