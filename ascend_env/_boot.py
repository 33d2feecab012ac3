"""The startup hook: wait, cheaply, for torch_npu or the simulator, then register NPU fixes.

``install`` copies this file into site-packages as the top-level module ``ascend_env_hook``
(one import at start-up, not two: no package to import first), and a ``.pth`` line (Python <=
3.14) or a PEP 829 ``.start`` entry point (Python >= 3.15) calls its :func:`main` in every process
of the target interpreter. Start-up must stay cheap, so this module imports nothing beyond
``sys`` and ``os``, and nothing of ascend_env until a backend appears: :func:`main` only puts a
finder at the front of
``sys.meta_path``. When ``torch_npu`` is imported (directly, or autoloaded by ``import torch``
through its ``torch.backends`` entry point), the finder wraps its loader so that, once the module
has run, :func:`notify` registers the fixes of :mod:`ascend_env.runtime`. The simulator calls
:func:`notify` itself at the end of ``ascend_env.sim.enable()``.

Nothing here may break a process: every exception is swallowed and kept in :data:`STATE`, so a
hook left behind by an ascend-env that is gone stays silent. ``ASCEND_ENV_DISABLE=1`` turns the
whole hook off.
"""

import os
import sys

DISABLE_VARIABLE = "ASCEND_ENV_DISABLE"
WATCHED = "torch_npu"


class _State:
    """What the hook did in this process (read by ``ascend_env.runtime.status()``)."""

    def __init__(self):
        self.started = False  # main() ran
        self.disabled = False  # main() ran and the kill switch was set
        self.finder = None
        self.events = []  # sources notified, in order ("torch_npu", "ascend_env.sim")
        self.errors = []  # "Type: message" of every swallowed exception


STATE = _State()


def disabled(environ=os.environ):
    """Whether the kill switch is set (any value but empty, ``0``, ``false``, ``no`` or ``off``)."""
    return environ.get(DISABLE_VARIABLE, "").strip().lower() not in ("", "0", "false", "no", "off")


class _Loader:
    """Wraps the loader of the watched module and calls :func:`notify` once it has run."""

    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        create = getattr(self._loader, "create_module", None)
        return None if create is None else create(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        notify(WATCHED)


class _Finder:
    """A meta path finder that only looks for one name and steps aside once it has seen it."""

    def __init__(self):
        self._searching = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != WATCHED or self._searching:
            return None
        self._searching = True
        try:
            spec = None
            for finder in list(sys.meta_path):
                find_spec = getattr(finder, "find_spec", None)
                if finder is self or find_spec is None:
                    continue
                spec = find_spec(fullname, path, target)
                if spec is not None:
                    break
            if spec is None or spec.loader is None:
                return spec
            spec.loader = _Loader(spec.loader)
            _remove(self)
            return spec
        except Exception as exc:
            STATE.errors.append(f"{type(exc).__name__}: {exc}")
            return None
        finally:
            self._searching = False


def _remove(finder):
    try:
        sys.meta_path.remove(finder)
    except ValueError:
        pass


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
        STATE.finder = _Finder()
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
