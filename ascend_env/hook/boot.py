"""The startup hook: wait, cheaply, for torch_npu or the simulator, then register NPU fixes.

``install`` copies this file into site-packages as the top-level module ``ascend_env_hook``. A
``.pth`` line (Python <= 3.14) imports it, and imported under that name it calls :func:`main`
itself; a PEP 829 ``.start`` entry point (Python >= 3.15) imports it and calls :func:`main`, which
does nothing the second time.

Every process loads it, so it holds only what start-up needs (``bench/startup.py``): the record,
the kill switch ``ASCEND_ENV_DISABLE``, and :func:`find_spec`, which makes this module a meta path
finder that answers for ``torch_npu`` alone. When ``torch_npu`` is imported (directly, after
``find_spec`` probes, by a submodule import, or autoloaded by ``import torch``),
:mod:`ascend_env._watch` does the rest. Every exception is
swallowed and kept in :data:`STATE`, so a hook left behind by an ascend-env that is gone stays
silent.
"""

import sys

# Types in comments, and their names imported for mypy alone (it takes MYPY as true): at run time
# the hook imports nothing more (no typing), and a comment costs nothing at start-up.
MYPY = False
if MYPY:  # (ruff does not read type comments: F401)
    from importlib.machinery import ModuleSpec  # noqa: F401
    from types import ModuleType, SimpleNamespace  # noqa: F401
    from typing import Optional, Sequence  # noqa: F401

DISABLE_VARIABLE = "ASCEND_ENV_DISABLE"
WATCHED = "torch_npu"
#: Whether to apply the compile-mode guard (``ascend_env.hook.compile_guard``) once torch_npu comes up;
#: ``install --no-compile-guard`` writes this module with False here.
COMPILE_GUARD = True

#: What the hook did in this process (read by ``ascend_env.hook.runtime.status()``): ``started``
#: (:func:`main` ran), ``disabled`` (with the kill switch set), ``finder`` (what it put on
#: ``sys.meta_path``), ``events`` (how each backend reached the hook, in order, e.g.
#: ``"torch_npu: import after 1 probe"``: a probe is a spec the hook handed out that did not
#: import it, a ``find_spec`` call; a failed import is said apart), ``errors`` (``"Type:
#: message"`` of every swallowed exception), ``searching`` (the threads asking the other
#: finders, so this one does not answer them), ``specs`` (how many specs of torch_npu it handed
#: out), ``failed`` (how many imports of it raised; set by ``_watch``), ``heard`` (the backends
#: notified) and ``noticing`` (looking at a torch_npu imported past the hook). A
#: ``types.SimpleNamespace``, taken from ``sys.implementation`` so as not to import ``types``.
# sys.implementation's class is types.SimpleNamespace at run time; typeshed gives it a class of
# its own, with sys.implementation's fields only.
STATE = type(sys.implementation)(  # type: ignore[call-arg, assignment]
    started=False,
    disabled=False,
    finder=None,
    events=[],
    errors=[],
    searching=set(),
    specs=0,
    heard=[],
    noticing=False,
)  # type: SimpleNamespace


def find_spec(fullname, path=None, target=None):
    # type: (str, Optional[Sequence[str]], Optional[ModuleType]) -> Optional[ModuleSpec]
    """The meta path finder's one method: ``None`` for every name but :data:`WATCHED`.

    It stays on ``sys.meta_path`` until torch_npu has executed: a ``find_spec`` probe throws its
    spec away, and the import that follows asks again. A torch_npu that another finder supplied
    (one ahead of this one, or a legacy ``find_module`` finder) is noticed in ``sys.modules`` at
    the next import after it has executed.
    """
    if fullname != WATCHED:
        if WATCHED in sys.modules and not STATE.noticing:  # imported past the hook
            STATE.noticing = True  # the imports below come here too
            try:
                from ascend_env import _watch

                _watch.imported_past(STATE, WATCHED)
            except Exception as exc:  # an older ascend_env, or a broken one: step aside, silently
                STATE.errors.append(f"{type(exc).__name__}: {exc}")
                if STATE.finder in sys.meta_path:
                    sys.meta_path.remove(STATE.finder)
            finally:
                STATE.noticing = False
        return None
    try:
        from ascend_env import _watch

        return _watch.find_and_wrap(STATE, fullname, path, target)
    except Exception as exc:  # ascend_env gone or broken: step aside, silently
        STATE.errors.append(f"{type(exc).__name__}: {exc}")
        if STATE.finder in sys.meta_path:
            sys.meta_path.remove(STATE.finder)
        return None


def main():
    # type: () -> None
    """Install the hook in this process, unless the kill switch is set to anything but empty,
    ``0``, ``false``, ``no`` or ``off``. Calling it again does nothing."""
    try:
        if STATE.started:
            return
        STATE.started = True
        import os  # not a global: the finder's globals live until exit, and shutdown would pay

        if os.environ.get(DISABLE_VARIABLE, "").strip().lower() not in ("", "0", "false", "no", "off"):
            STATE.disabled = True
        elif WATCHED in sys.modules:
            from ascend_env import _watch

            _watch.notify(STATE, WATCHED, "imported before the hook started")
        else:
            STATE.finder = sys.modules[__name__]
            sys.meta_path.insert(0, STATE.finder)
    except Exception as exc:  # never break start-up
        STATE.errors.append(f"{type(exc).__name__}: {exc}")


if __name__ == "ascend_env_hook":  # imported as the installed hook: start it
    main()
