"""The startup hook's second half, imported only once torch_npu is looked for.

:mod:`ascend_env.hook.boot` (installed as ``ascend_env_hook``) stays small because every process
loads it. What it needs once ``torch_npu`` is looked for lives here: :func:`find_and_wrap` finds
the module with the other finders and watches the spec it hands out
(:func:`ascend_env.utils.importhooks.wrap_loader`), so that :func:`notify` runs once the module
has been executed. The hook's finder stays on
``sys.meta_path`` until then: ``importlib.util.find_spec("torch_npu")`` (transformers' and
accelerate's availability checks) throws its spec away, and the import that follows asks again.
:func:`notify` registers the fixes of :mod:`ascend_env.hook.runtime`, once per process. Both take
the hook's record (``ascend_env_hook.STATE``): :func:`notify` keeps every exception in it, and the
hook's ``find_spec`` keeps those of :func:`find_and_wrap`. A record written by an older hook
module (``searching`` a bool; no ``specs`` or ``heard``) works too.
"""

from __future__ import annotations

import _thread
import sys
from typing import TYPE_CHECKING, Optional, Sequence

from ascend_env.utils.importhooks import ImportWatcher, find_spec_after, watched, wrap_loader

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType, SimpleNamespace
    from typing import Callable

__all__ = ["find_and_wrap", "imported_past", "notify"]


def find_and_wrap(
    state: SimpleNamespace,
    fullname: str,
    path: Optional[Sequence[str]],
    target: Optional[ModuleType],
) -> Optional[ModuleSpec]:
    """``fullname``'s spec from the finders after the hook's (``state.finder``), watched to call
    :func:`notify` once the module has executed (a failed import is counted apart from the
    probes); None while this thread is already asking."""
    searching = state.searching
    me = _thread.get_ident()
    if searching is True or (isinstance(searching, set) and me in searching):
        return None
    if isinstance(searching, set):
        searching.add(me)
    else:  # an older hook module's record: one flag for every thread
        state.searching = True
    try:
        spec = find_spec_after(state.finder, fullname, path, target)
    finally:
        if isinstance(searching, set):
            searching.discard(me)
        else:
            state.searching = False
    if spec is None or spec.loader is None:
        return spec
    handed_out = getattr(state, "specs", 0) + 1
    state.specs = handed_out
    wrap_loader(spec, lambda module: _executed(state, fullname, handed_out), lambda: _failed(state))
    return spec


def _failed(state: SimpleNamespace) -> None:
    """An import of the module raised (its traceback holds no frame of the hook's): it was no
    probe, and the next import is heard as usual."""
    state.failed = getattr(state, "failed", 0) + 1


def imported_past(state: SimpleNamespace, fullname: str) -> None:
    """``fullname`` is in ``sys.modules`` from a spec the hook never handed out (a finder ahead of
    the hook's: typeguard's import hook, pytest's assertion rewriter; or a legacy ``find_module``
    finder): once it has executed, stop watching, say by which loader in the event, and notify.
    While it is still executing (its own imports come here), wait for a later import."""
    module = sys.modules.get(fullname)
    if module is None:
        return
    spec = getattr(module, "__spec__", None)
    # Still executing: the import system sets __spec__ (for a legacy loader, after load_module)
    # and clears _initializing once the module has run; a spec the hook watches (a module run by
    # hand, or lazily) tells the hook itself.
    if spec is None or getattr(spec, "_initializing", False) or watched(spec):
        return
    if state.finder in sys.meta_path:
        sys.meta_path.remove(state.finder)
    loader = getattr(spec, "loader", None) or getattr(module, "__loader__", None)
    by = "no loader" if loader is None else f"{type(loader).__module__}.{type(loader).__qualname__}"
    notify(state, fullname, f"imported past the hook by {by} (not wrapped: heard at a later import)")


def _executed(state: SimpleNamespace, fullname: str, handed_out: int) -> None:
    """``fullname`` ran from the ``handed_out``-th spec the hook gave: stop watching, notify."""
    if state.finder in sys.meta_path:
        sys.meta_path.remove(state.finder)
    failed = getattr(state, "failed", 0)
    probes = handed_out - 1 - failed
    how = "import"
    if probes > 0:
        how += f" after {probes} probe{'s' if probes > 1 else ''}"
    if failed > 0:
        how += f"{' and' if probes > 0 else ' after'} {failed} failed import{'s' if failed > 1 else ''}"
    notify(state, fullname, how)


def notify(state: SimpleNamespace, source: str, how: Optional[str] = None) -> None:
    """``source`` (``torch_npu``) is ready: register what it lacks, once per process, unless the
    hook did not start in this process or its kill switch is set. ``how`` it reached the hook goes
    into the event (and says when the module is the simulator's stand-in)."""
    if not state.started or state.disabled:
        return
    heard = getattr(state, "heard", None)
    if heard is None:
        heard = state.heard = []
    if source in heard:
        return
    heard.append(source)
    if _simulated(source):
        how = f"{how or 'import'} (simulated)"
    state.events.append(source if how is None else f"{source}: {how}")
    try:
        from ascend_env.hook import runtime

        runtime.activate(source)
        _await(state, runtime.awaited_imports())
    except Exception as exc:
        state.errors.append(f"{type(exc).__name__}: {exc}")


def _await(state: SimpleNamespace, names: Sequence[str]) -> None:
    """Notify again once each of ``names`` (``torchvision``, whose import defines ops a fix
    registers) has been imported, on every import path (:class:`ImportWatcher`): at once for one
    imported already. Nothing is watched before the backend is up, so start-up pays nothing."""
    waiting = [name for name in names if name not in state.heard]
    if waiting:
        ImportWatcher({name: _notifier(state, name) for name in waiting}).install()


def _notifier(state: SimpleNamespace, name: str) -> Callable[[ModuleType, int], None]:
    """The watcher's callback for ``name``: how it was imported, then :func:`notify`."""

    def executed(module: ModuleType, specs: int) -> None:
        if specs == 0:
            how = "imported before the backend"
        else:
            probes = specs - 1
            how = "import" if probes == 0 else f"import after {probes} probe{'s' if probes > 1 else ''}"
        notify(state, name, how)

    return executed


def _simulated(source: str) -> bool:
    """Whether the module ``source`` is ascend-env's simulated stand-in (``ascend_env/sim/pkgs``)."""
    return bool(getattr(sys.modules.get(source), "ASCEND_ENV_SIMULATED", False))
