"""Where transformers' ``generate()`` calls and their decoding steps begin and end, as they happen:
the hooks the dispatch-path model (:mod:`ascend_env.sim.dispatch_model`) listens with.

The decoding loops call ``StoppingCriteriaList.__call__`` once per iteration
(``unfinished_sequences & ~stopping_criteria(input_ids, scores)`` in transformers 4.46.3's
``_sample``, ``generation/utils.py``; the same line ends the loop of ``_greedy_search`` / ``_sample``
in the 4.40 releases), so each return from it inside ``GenerationMixin.generate`` closes one step.
``GenerationConfig.get_generation_mode`` (transformers >= 4.39: ``generate`` calls it once) names
the decoding mode. Importing this module imports neither torch nor transformers.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Callable, Protocol

from ascend_env.utils import importhooks

__all__ = ["Listener", "caller_site", "listen"]


def caller_site() -> str:
    """The innermost calling frame outside torch and ascend-env, as the listeners name a
    ``generate()`` call: ``file:line``, the file relative to site-packages."""
    roots = tuple(_package_root(name) for name in ("torch", "ascend_env"))
    frame: Any = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(roots) and not filename.startswith("<"):
            marker = os.sep + "site-packages" + os.sep
            short = filename.split(marker, 1)[1] if marker in filename else filename
            return f"{short}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


def _package_root(name: str) -> str:
    where = getattr(sys.modules.get(name), "__file__", None) or ""
    return os.path.dirname(where) + os.sep if where else "\0"


class Listener(Protocol):
    """What hears of the calls and steps (:class:`ascend_env.sim.dispatch_model.Model`)."""

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


def _wrap_method(module: Any, class_name: str, name: str, wrapper: Callable[[Any], Any]) -> None:
    """Replace ``module.<class_name>.<name>`` with ``wrapper(original)`` (with the original's name
    and docstring), once: nothing where the class or the method is missing or already wrapped."""
    cls = getattr(module, class_name, None)
    if cls is None or not hasattr(cls, name):
        return
    original = getattr(cls, name)
    if getattr(original, "_ascend_env_paths", False):
        return
    wrapped = functools.wraps(original)(wrapper(original))
    wrapped._ascend_env_paths = True  # type: ignore[attr-defined]
    setattr(cls, name, wrapped)


def _wrap_stopping(model: Listener, module: Any) -> None:
    def wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return original(self, *args, **kwargs)
            finally:
                model.step_done()

        return call

    _wrap_method(module, "StoppingCriteriaList", "__call__", wrapper)


def _wrap_generate(model: Listener, module: Any) -> None:
    def wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
        def generate(self: Any, *args: Any, **kwargs: Any) -> Any:
            model.enter_generate(model.site())
            try:
                return original(self, *args, **kwargs)
            finally:
                model.exit_generate()

        return generate

    _wrap_method(module, "GenerationMixin", "generate", wrapper)


def _wrap_mode(model: Listener, module: Any) -> None:
    """Record the decoding mode of each ``generate()`` call from ``GenerationConfig.get_generation_mode``
    (transformers >= 4.39: ``generate`` calls it once; older releases leave the mode unknown)."""

    def wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
        def get_generation_mode(self: Any, *args: Any, **kwargs: Any) -> Any:
            mode = original(self, *args, **kwargs)
            model.generation_mode(str(getattr(mode, "value", mode)))
            return mode

        return get_generation_mode

    _wrap_method(module, "GenerationConfig", "get_generation_mode", wrapper)
