"""The startup hook's second half, imported only once an NPU backend appears.

:mod:`ascend_env.hook.boot` (installed as ``ascend_env_hook``) stays small because every process
loads it. What it needs once ``torch_npu`` is imported lives here: :func:`find_and_wrap` finds
the module with the other finders, takes the hook's finder off ``sys.meta_path`` and wraps the
module's loader, so that :func:`notify` runs once the module has been executed; :func:`notify`
registers the fixes of :mod:`ascend_env.hook.runtime`, and the simulator calls it too. Both take the
hook's record (``ascend_env_hook.STATE``): :func:`notify` keeps every exception in it, and the
hook's ``find_spec`` keeps those of :func:`find_and_wrap`. Its two steps, :func:`find_spec_after`
and :func:`wrap_loader`, also serve the simulator's dispatch-path model (``ascend_env.sim.paths``),
which waits for transformers' generation modules the same way.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, cast

if TYPE_CHECKING:
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec
    from types import ModuleType, SimpleNamespace


def find_and_wrap(
    state: SimpleNamespace,
    fullname: str,
    path: Optional[Sequence[str]],
    target: Optional[ModuleType],
) -> Optional[ModuleSpec]:
    """``fullname``'s spec from the finders after the hook's (``state.finder``), its loader wrapped
    to call :func:`notify` for it; the hook's finder leaves ``sys.meta_path`` once it is found."""
    state.searching = True
    try:
        spec = find_spec_after(state.finder, fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        wrap_loader(spec, lambda: notify(state, fullname))
        if state.finder in sys.meta_path:
            sys.meta_path.remove(state.finder)
        return spec
    finally:
        state.searching = False


def find_spec_after(
    finder: object, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
) -> Optional[ModuleSpec]:
    """``fullname``'s spec from the finders on ``sys.meta_path`` other than ``finder``."""
    for other in list(sys.meta_path):
        method = getattr(other, "find_spec", None)
        if other is finder or method is None:
            continue
        spec: Optional[ModuleSpec] = method(fullname, path, target)
        if spec is not None:
            return spec
    return None


def wrap_loader(spec: ModuleSpec, done: Callable[[], None]) -> None:
    """Make ``spec``'s loader call ``done()`` once it has executed the module."""
    # A loader with only the legacy load_module() (some packagers' finders): the import system
    # calls load_module where a loader has no exec_module, so its wrapper must have none either.
    legacy = getattr(spec.loader, "exec_module", None) is None
    # The wrappers stand in for any loader by delegation, not by subclassing importlib.abc.Loader.
    wrapper = (_LegacyNotifyingLoader if legacy else NotifyingLoader)(spec.loader, done)
    spec.loader = cast("Loader", wrapper)


class NotifyingLoader:
    """``loader``, calling ``done()`` once it has executed the module; anything else it is asked,
    the wrapped loader answers."""

    def __init__(self, loader: Any, done: Callable[[], None]) -> None:
        self._loader = loader
        self._done = done

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def create_module(self, spec: ModuleSpec) -> Optional[ModuleType]:
        create = getattr(self._loader, "create_module", None)
        return None if create is None else create(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._done()


class _LegacyNotifyingLoader:
    """A ``load_module()``-only ``loader``, calling ``done()`` once it has loaded the module. It
    has no ``exec_module`` or ``create_module`` (the import system then takes the legacy path);
    anything else it is asked, the wrapped loader answers."""

    def __init__(self, loader: Any, done: Callable[[], None]) -> None:
        self._loader = loader
        self._done = done

    def __getattr__(self, name: str) -> Any:
        if name in ("exec_module", "create_module"):
            raise AttributeError(name)
        return getattr(self._loader, name)

    def load_module(self, fullname: str) -> ModuleType:
        module: ModuleType = self._loader.load_module(fullname)
        self._done()
        return module


def notify(state: SimpleNamespace, source: str) -> None:
    """An NPU backend (``torch_npu`` or ``ascend_env.sim``) is ready: register what it lacks,
    unless the hook did not start in this process or its kill switch is set."""
    if not state.started or state.disabled:
        return
    state.events.append(source)
    try:
        from ascend_env.hook import runtime

        runtime.activate(source)
    except Exception as exc:
        state.errors.append(f"{type(exc).__name__}: {exc}")
