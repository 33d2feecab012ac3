"""The startup hook: wait, cheaply, for torch_npu or the simulator, then register NPU fixes.

``install`` copies this file into site-packages as the top-level module ``ascend_env_hook``
(one import at start-up, not two: no package to import first). In every process of the target
interpreter, a ``.pth`` line (Python <= 3.14) imports it, and imported under that name it calls
:func:`main` itself; a PEP 829 ``.start`` entry point (Python >= 3.15) imports it and calls
:func:`main`, which does nothing the second time. The ``.pth`` line is only ``import
ascend_env_hook``: site compiles it each time it reads the file, twice in a virtual environment.

Start-up must stay cheap (``bench/startup.py``), so at import this module defines a few functions
and one record, and :func:`main` only puts the module itself at the front of ``sys.meta_path``:
its :func:`find_spec` makes it a finder that answers for one name. No class is created, nothing is
imported beyond ``sys`` (``os`` only inside a function), and nothing of ascend_env until a backend
appears. When ``torch_npu`` is imported (directly, or autoloaded by ``import torch`` through its
``torch.backends`` entry point), the finder steps aside and wraps its loader so that, once the
module has run, :func:`notify` registers the fixes of :mod:`ascend_env.runtime`. The simulator
calls :func:`notify` itself at the end of ``ascend_env.sim.enable()``.

Nothing here may break a process: every exception is swallowed and kept in :data:`STATE`, so a
hook left behind by an ascend-env that is gone stays silent. ``ASCEND_ENV_DISABLE=1`` turns the
whole hook off.
"""

import sys

DISABLE_VARIABLE = "ASCEND_ENV_DISABLE"
WATCHED = "torch_npu"

#: What the hook did in this process (read by ``ascend_env.runtime.status()``): ``started``
#: (:func:`main` ran), ``disabled`` (it ran with the kill switch set), ``finder`` (what it put on
#: ``sys.meta_path``), ``events`` (backends notified, in order: ``"torch_npu"``,
#: ``"ascend_env.sim"``), ``errors`` (``"Type: message"`` of every swallowed exception) and
#: ``searching`` (the finder is asking the other finders, so it does not answer itself).
#: A ``types.SimpleNamespace``, taken from ``sys.implementation`` so as not to import ``types``.
STATE = type(sys.implementation)(
    started=False, disabled=False, finder=None, events=[], errors=[], searching=False
)


def disabled(environ=None):
    """Whether the kill switch is set in ``environ`` (default ``os.environ``): any value but empty,
    ``0``, ``false``, ``no`` or ``off``."""
    if environ is None:
        # Not a module global: with os among the globals of the finder, which lives until exit,
        # interpreter shutdown ran about 0.4M instructions more (callgrind, Python 3.11).
        import os

        environ = os.environ
    return environ.get(DISABLE_VARIABLE, "").strip().lower() not in ("", "0", "false", "no", "off")


def find_spec(fullname, path=None, target=None):
    """The meta path finder's one method: ``None`` for every name but :data:`WATCHED`."""
    if fullname != WATCHED or STATE.searching:
        return None
    return _watch(fullname, path, target)


def _watch(fullname, path, target):
    """Find the watched module with the other finders, step aside, and wrap its loader."""
    STATE.searching = True
    try:
        spec = None
        for finder in list(sys.meta_path):
            method = getattr(finder, "find_spec", None)
            if finder is STATE.finder or method is None:
                continue
            spec = method(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _wrap(spec.loader)
        try:
            sys.meta_path.remove(STATE.finder)
        except ValueError:
            pass
        return spec
    except Exception as exc:
        STATE.errors.append(f"{type(exc).__name__}: {exc}")
        return None
    finally:
        STATE.searching = False


def _wrap(loader):
    """``loader``, calling :func:`notify` once it has run the module (defined only when needed)."""

    class Loader:
        def __getattr__(self, name):
            return getattr(loader, name)

        def create_module(self, spec):
            create = getattr(loader, "create_module", None)
            return None if create is None else create(spec)

        def exec_module(self, module):
            loader.exec_module(module)
            notify(WATCHED)

    return Loader()


def main():
    """Install the hook in this process. Calling it again does nothing."""
    try:
        if STATE.started:
            return
        STATE.started = True
        if disabled():
            STATE.disabled = True
            return
        if WATCHED in sys.modules:
            notify(WATCHED)
            return
        STATE.finder = sys.modules[__name__]
        sys.meta_path.insert(0, STATE.finder)
    except Exception as exc:  # never break start-up
        STATE.errors.append(f"{type(exc).__name__}: {exc}")


def notify(source):
    """An NPU backend (``torch_npu`` or ``ascend_env.sim``) is ready: register what it lacks."""
    if not STATE.started or STATE.disabled:
        return
    STATE.events.append(source)
    try:
        from ascend_env import runtime

        runtime.activate(source)
    except Exception as exc:
        STATE.errors.append(f"{type(exc).__name__}: {exc}")


if __name__ == "ascend_env_hook":  # imported as the installed hook: start it
    main()
