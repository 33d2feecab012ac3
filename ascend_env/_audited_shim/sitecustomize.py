"""Put on PYTHONPATH by ``ascend-env audit``: reports this Python process to the audit.

Every Python process of the audited command runs this at start-up, so it costs little
(``bench/audit_startup.py``): :mod:`ascend_env._audited` writes the process's report and waits for
``torch`` to execute before it enables the simulated NPU. Then it runs any other
``sitecustomize`` on the path.
"""

import os
import sys

__all__: "list[str]" = []


def _run() -> None:
    reports = os.environ.get("ASCEND_ENV_AUDIT_REPORTS")
    if not reports:
        return
    try:
        from ascend_env import _audited
    except ImportError as exc:
        _unaudited(reports, f"this Python ({sys.executable}) cannot import ascend_env ({exc})")
        return
    _audited.start_from_environment()


def _unaudited(reports: str, why: str) -> None:
    """Tell the audit that this process runs outside the simulator, and why."""
    import json

    pid = os.getpid()
    data = {"pid": pid, "ppid": os.getppid(), "argv": sys.argv, "unaudited": why}
    # Named as ascend_env._audited names a report: the process image (pid, start, exec generation).
    try:
        with open("/proc/self/stat", "rb") as stat:
            start = int(stat.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        start = 0
    words = os.environ.get("ASCEND_ENV_AUDIT_EXEC", "").split("-")
    generation = (
        int(words[2]) if len(words) == 3 and words[:2] == [str(pid), str(start)] and words[2].isdigit() else 0
    )
    path = os.path.join(reports, f"{pid}-{start}-{generation}-{os.urandom(4).hex()}.json")
    try:
        with open(path + ".tmp", "w", encoding="ascii") as out:
            json.dump(data, out)
        os.replace(path + ".tmp", path)
    except OSError:
        pass


def _chain() -> None:
    """Import the next ``sitecustomize`` on sys.path, the one this file shadows."""
    from importlib.machinery import PathFinder

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        # importlib.util.module_from_spec is this function, re-exported; importlib.util itself
        # would import contextlib and collections into every audited process that has a vendor
        # sitecustomize (Debian's and Ubuntu's Pythons ship one), more than that Python loads anyway.
        from importlib._bootstrap import module_from_spec

        module = module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_run()
_chain()
