"""Put on PYTHONPATH by ``ascend-env audit``: runs this Python process on the simulated NPU.

It enables the simulator with the table the audit chose, arranges for the fallbacks to be
reported when the process exits, and then runs any other ``sitecustomize`` on the path.
"""

import os
import sys


def _run() -> None:
    try:
        from ascend_env.sim import startup
    except ImportError as exc:
        sys.stderr.write(
            f"ascend-env audit: this Python ({sys.executable}) cannot import ascend_env ({exc}); "
            "fix: install ascend-env into it, or run the audit with it (python -m ascend_env audit ...)\n"
        )
        return
    startup.start_from_environment()


def _chain() -> None:
    """Import the next ``sitecustomize`` on sys.path, the one this file shadows."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_run()
_chain()
