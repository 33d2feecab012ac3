"""Hear of a module once it has been imported, however the program finds it (stdlib only).

A meta path finder that answers ``find_spec`` with the spec the other finders give, watched
(:func:`wrap_loader`) to call back once the module has executed. A finder that steps aside after its first
answer misses the most common real path: ``importlib.util.find_spec(name)`` first (a probe, as
transformers' ``is_torch_npu_available()`` and accelerate's ``is_npu_available()`` do), whose spec
is thrown away, then ``import name``, which asks the finders again. So the finder here stays on
``sys.meta_path``, watching every spec it hands out, until the module has run.

Used by the startup hook (:mod:`ascend_env.hook.watch`, for ``torch_npu``), the audit's start-up
(for ``torch``) and the dispatch-path model (for transformers' generation modules).
"""

from __future__ import annotations

import _thread
import sys

# No typing (nor threading, which imports functools and collections) at run time: the audit's
# start-up imports this module in every Python process of the audited command, and they cost
# more than the rest of that start-up (mypy takes the name TYPE_CHECKING as true).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any, Callable, Dict, Optional, Sequence

    #: Called with the module once it has executed, and how many specs the watcher had handed
    #: out for it by then (1: the import asked once; more: ``find_spec`` probes came first).
    Callback = Callable[["ModuleType", int], None]

__all__ = ["ImportWatcher", "NotifyingLoader", "find_spec_after", "watched", "wrap_loader"]


def find_spec_after(
    finder: object, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
) -> Optional[ModuleSpec]:
    """``fullname``'s spec from the finders on ``sys.meta_path`` other than ``finder``, asked as the
    import system asks them: ``find_spec``, else (Python < 3.12) a legacy ``find_module``."""
    for other in list(sys.meta_path):
        if other is finder:
            continue
        method = getattr(other, "find_spec", None)
        if method is None:
            spec = _legacy_spec(other, fullname, path)
        else:
            spec = method(fullname, path, target)
        if spec is not None:
            return spec
    return None


def _legacy_spec(finder: object, fullname: str, path: Optional[Sequence[str]]) -> Optional[ModuleSpec]:
    """The spec the import system makes of a legacy finder's ``find_module`` (Python < 3.12 asks
    it; later releases do not, and neither does this)."""
    find_module = getattr(finder, "find_module", None)
    if find_module is None or sys.version_info >= (3, 12):
        return None
    loader = find_module(fullname, path)
    if loader is None:
        return None
    from importlib.util import spec_from_loader

    return spec_from_loader(fullname, loader)


def wrap_loader(
    spec: ModuleSpec, done: Callable[[ModuleType], None], failed: Optional[Callable[[], None]] = None
) -> None:
    """Call ``done(module)`` once the module of ``spec`` has executed (``failed()`` if its
    execution raised); the module then has its own loader (``__loader__``, ``__spec__.loader``).

    A plain ``ModuleSpec`` becomes a :class:`_WatchedSpec` (a ``ModuleSpec`` again once told): an
    import hears of the end from the import system itself and runs the original loader, so a
    failing import's traceback holds no frame of ours; anything else that runs the spec's loader
    (``importlib.util.LazyLoader``, the "approximating import" recipe) gets a
    :class:`NotifyingLoader`. A spec of another class gets the wrapper alone; a loader with only
    the legacy ``load_module()`` (which the import system calls without that flag) its legacy twin.
    """
    legacy = getattr(spec.loader, "exec_module", None) is None
    wrapper = (_LegacyNotifyingLoader if legacy else NotifyingLoader)(spec.loader, done, spec, failed)
    if legacy or type(spec) is not _ModuleSpec:
        spec.loader = wrapper  # type: ignore[assignment]
        return
    spec.__dict__[_WATCH] = wrapper
    spec.__class__ = _WatchedSpec


# The spec class of the import system (importlib.machinery.ModuleSpec, which this start-up does not
# import), and where a watched spec keeps the wrapper of its loader.
_ModuleSpec: Any = type(sys.__spec__)
_WATCH = "_ascend_env_watch"


class _WatchedSpec(_ModuleSpec):  # type: ignore[misc]
    """A spec that calls back once its module has executed. The import system sets
    ``spec._initializing`` before it executes the module and clears it after, the module in
    ``sys.modules`` only if it ran (``importlib._bootstrap._load_unlocked``, Python 3.8 to 3.13);
    while it is set, ``loader`` is the original loader (no frame of ours), and else the wrapper
    (:class:`NotifyingLoader`), for whatever runs the loader itself. Told, it is a plain
    ``ModuleSpec`` again; copied, deep-copied or pickled (a probe's spec), it is one."""

    @property
    def loader(self) -> Any:
        current = self.__dict__.get("loader")
        wrapper = self.__dict__.get(_WATCH)
        if wrapper is not None and current is wrapper._loader and not self.__dict__.get("_initializing"):
            return wrapper
        return current

    @loader.setter
    def loader(self, value: Any) -> None:
        self.__dict__["loader"] = value

    @property
    def _initializing(self) -> bool:
        return bool(self.__dict__.get("_initializing", False))

    @_initializing.setter
    def _initializing(self, value: bool) -> None:
        self.__dict__["_initializing"] = value
        wrapper = self.__dict__.get(_WATCH)
        if value or wrapper is None:
            return
        module = sys.modules.get(self.name)
        _settle(self)
        if module is None:
            if wrapper._failed is not None:
                wrapper._failed()
            return
        _give_back(wrapper, module)
        wrapper._done(module)

    def __reduce_ex__(self, protocol: Any) -> Any:
        from operator import itemgetter

        plain = _ModuleSpec.__new__(_ModuleSpec)
        plain.__dict__.update((k, v) for k, v in self.__dict__.items() if k != _WATCH)
        return itemgetter(0), ([plain],)


def watched(spec: Any) -> bool:
    """Whether ``spec`` is watched by :func:`wrap_loader` and not told yet (its module has not run
    to its end)."""
    return type(spec) is _WatchedSpec or isinstance(getattr(spec, "loader", None), _Wrapper)


def _settle(spec: Any) -> None:
    """A watched spec, told: a plain ``ModuleSpec`` with the original loader."""
    if type(spec) is _WatchedSpec:
        wrapper: Any = spec.__dict__.pop(_WATCH, None)
        spec.__class__ = _ModuleSpec
        if wrapper is not None and spec.__dict__.get("loader") is wrapper:
            spec.__dict__["loader"] = getattr(wrapper, "_loader", None)


class _Wrapper:
    """What both wrappers share: the original loader answers what they do not, and a copy, a deep
    copy or a pickle of one (a probe's spec) is the original loader."""

    def __init__(
        self,
        loader: Any,
        done: Callable[[ModuleType], None],
        spec: Optional[ModuleSpec] = None,
        failed: Optional[Callable[[], None]] = None,
    ) -> None:
        self._loader = loader
        self._done = done
        self._spec = spec
        self._failed = failed

    def __getattr__(self, name: str) -> Any:
        # Never for the wrapper's own fields: a copy made without __init__ has none (and would
        # ask itself for ever).
        if name in ("_loader", "_done", "_spec", "_failed"):
            raise AttributeError(name)
        return getattr(self._loader, name)

    def __reduce_ex__(self, protocol: Any) -> Any:
        # Rebuilt as the original loader: itemgetter(0)([loader]) (standard library only, so that
        # a pickle of it loads where ascend_env is not).
        from operator import itemgetter

        return itemgetter(0), ([self._loader],)


class NotifyingLoader(_Wrapper):
    """``loader``, calling ``done(module)`` once it has executed the module, and then giving the
    module and its spec the original loader back (``pkg_resources`` picks its provider by the
    loader's type); anything else it is asked, the wrapped loader answers. Only for a spec of a
    class of its own (:func:`wrap_loader` watches a plain ``ModuleSpec`` instead)."""

    def create_module(self, spec: ModuleSpec) -> Optional[ModuleType]:
        create = getattr(self._loader, "create_module", None)
        return None if create is None else create(spec)

    def exec_module(self, module: ModuleType) -> None:
        try:
            self._loader.exec_module(module)
        except BaseException:
            if self._failed is not None:
                self._failed()
            raise
        _give_back(self, module)
        self._done(module)


class _LegacyNotifyingLoader(_Wrapper):
    """A ``load_module()``-only ``loader``, calling ``done(module)`` once it has loaded the module.
    It has no ``exec_module`` or ``create_module`` (the import system then takes the legacy path);
    anything else it is asked, the wrapped loader answers."""

    def __getattr__(self, name: str) -> Any:
        if name in ("exec_module", "create_module"):
            raise AttributeError(name)
        return super().__getattr__(name)

    def load_module(self, fullname: str) -> ModuleType:
        try:
            module: ModuleType = self._loader.load_module(fullname)
        except BaseException:
            if self._failed is not None:
                self._failed()
            raise
        _give_back(self, module)
        self._done(module)
        return module


def _give_back(wrapper: _Wrapper, module: ModuleType) -> None:
    """The module has executed: where its loader is ``wrapper``, the original again."""
    original = wrapper._loader
    for holder in (wrapper._spec, getattr(module, "__spec__", None)):
        _settle(holder)
        if holder is not None and getattr(holder, "loader", None) is wrapper:
            holder.loader = original
    if getattr(module, "__loader__", None) is wrapper:
        try:
            module.__loader__ = original
        except AttributeError:
            pass


class ImportWatcher:
    """A meta path finder that finds nothing itself and calls ``callbacks[name](module, specs)``
    once ``name`` has been imported; it leaves ``sys.meta_path`` when every name has been.

    Every spec it hands out for a name is wrapped, so a probe's thrown-away spec changes nothing.
    A name whose import fails stays watched: a later import may succeed. Thread-safe: a callback
    runs once, in the thread whose import executed the module, after it executed.
    """

    def __init__(self, callbacks: Dict[str, Callback]) -> None:
        self._callbacks = dict(callbacks)
        self._handed_out: Dict[str, int] = {}
        self._lock = _thread.RLock()
        self._searching = _thread._local()  # threading.local: set while this thread asks the other finders

    @property
    def pending(self) -> Sequence[str]:
        """The names not imported yet."""
        with self._lock:
            return sorted(self._callbacks)

    def install(self) -> None:
        """Go first on ``sys.meta_path``; call at once for names already imported."""
        for name in self.pending:
            module = sys.modules.get(name)
            if module is not None:
                self._executed(name, module)
        with self._lock:
            if self._callbacks and self not in sys.meta_path:
                sys.meta_path.insert(0, self)

    def remove(self) -> None:
        """Stop watching (the callbacks not run yet never will)."""
        with self._lock:
            self._callbacks.clear()
            if self in sys.meta_path:
                sys.meta_path.remove(self)

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[ModuleSpec]:
        if fullname not in self._callbacks or getattr(self._searching, "on", False):
            return None
        self._searching.on = True
        try:
            spec = find_spec_after(self, fullname, path, target)
        finally:
            self._searching.on = False
        if spec is None or spec.loader is None:
            return spec
        with self._lock:
            self._handed_out[fullname] = self._handed_out.get(fullname, 0) + 1
        wrap_loader(spec, lambda module: self._executed(fullname, module))
        return spec

    def _executed(self, name: str, module: ModuleType) -> None:
        with self._lock:
            callback = self._callbacks.pop(name, None)
            specs = self._handed_out.pop(name, 0)
            if not self._callbacks and self in sys.meta_path:
                sys.meta_path.remove(self)
        if callback is not None:
            callback(module, specs)
