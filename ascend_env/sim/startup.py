"""The audited process's side of ``ascend-env audit`` (started by ``shim/sitecustomize.py``).

The audit passes its choices in the environment:

- ``ASCEND_ENV_AUDIT_TORCH_NPU``: the torch_npu release whose op table to run, or
- ``ASCEND_ENV_AUDIT_OPLISTS``: a torch_npu package directory whose YAML op lists to run
  (``ASCEND_ENV_AUDIT_LABEL`` names it, ``ASCEND_ENV_AUDIT_FALLBACK_DISABLE=1`` if it honours
  ``TORCH_NPU_FALLBACK_CPU_DISABLE``);
- ``ASCEND_ENV_AUDIT_REPORTS``: a directory where each process writes its report,
  ``<pid>-<random>.json`` (a pid alone is not unique: ``exec`` keeps it).
- ``ASCEND_ENV_AUDIT_PATHS=1``: model torch_npu's dispatch paths (``ascend_env.sim.paths``), with
  the SoC of ``ASCEND_ENV_SIM_SOC``; the model's findings join the last report (``"paths"``).

Each process's report holds its own fallback counts and, once it ends, how (``"end"``). It is
written when the process starts on the simulator, again whenever its counts changed (a thread
looks every ``POLL_SECONDS``, so a SIGKILL or a crash loses at most that much), and last at the
end: at interpreter exit, in ``os._exit``, before ``os.execv``/``os.execve``, and on SIGTERM
(a handler, installed where SIGTERM had its default action, writes and then dies of the signal
as before). A forked child (``os.fork``, fork and forkserver multiprocessing, DataLoader workers)
inherits the simulator's counters: it starts its own report and subtracts what it inherited, so
no fallback is counted twice.

Locks: a signal handler may run in the middle of any of this, in the main thread, so the report
is guarded by an RLock only (never a plain Lock, Event or Condition: the handler would wait on
its own thread forever), and the child of a fork never calls into the simulator to start up
(another thread of the parent may have held the simulator's lock when the process was copied).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, cast

from ascend_env.utils import atomic

TORCH_NPU = "ASCEND_ENV_AUDIT_TORCH_NPU"
OPLISTS = "ASCEND_ENV_AUDIT_OPLISTS"
LABEL = "ASCEND_ENV_AUDIT_LABEL"
FALLBACK_DISABLE = "ASCEND_ENV_AUDIT_FALLBACK_DISABLE"
REPORTS = "ASCEND_ENV_AUDIT_REPORTS"

#: How often a running process looks at its counts and rewrites its report if they changed.
POLL_SECONDS = 0.1
# A report write never waits longer than this for another thread's write (a process must exit).
_LOCK_SECONDS = 2.0

Counts = Callable[[], Mapping[str, int]]


class Reporter:
    """One process's report file, kept up to date with ``counts()`` minus ``baseline``."""

    def __init__(self, directory: Path, counts: Counts, table: Optional[str], origin: str,
                 baseline: Optional[Mapping[str, int]] = None) -> None:
        self.directory = directory
        self.counts = counts
        self.table = table
        self.origin = origin  # "start": a new interpreter; "fork": a forked child
        self.baseline = dict(baseline or {})
        self.pid = os.getpid()
        self.path = directory / f"{self.pid}-{os.urandom(4).hex()}.json"
        self.lock = threading.RLock()
        self.written: Optional[Dict[str, int]] = None
        self.ended: Optional[Dict[str, Any]] = None
        self.fork_baseline: Optional[Dict[str, int]] = None  # the counts when this process last forked

    def own_counts(self) -> Dict[str, int]:
        """This process's fallbacks: the counts since it started or was forked."""
        own = {}
        for name, count in self.counts().items():
            count -= self.baseline.get(name, 0)
            if count > 0:
                own[name] = int(count)
        return dict(sorted(own.items()))

    def write(self, end: Optional[Dict[str, Any]] = None, force: bool = False) -> None:
        """Write the report if the counts changed (or ``force``); ``end`` makes it the last one."""
        if os.getpid() != self.pid or not self.lock.acquire(timeout=_LOCK_SECONDS):
            return
        try:
            if self.ended is not None:
                return
            counts = self.own_counts()
            if end is None and not force and counts == self.written:
                return
            data = {
                "pid": self.pid, "ppid": os.getppid(), "argv": list(sys.argv), "rank": os.environ.get("RANK"),
                "origin": self.origin, "table": self.table, "fallbacks": counts, "end": end,
            }
            if end is not None:
                modelled = _paths_report()
                if modelled is not None:
                    data["paths"] = modelled
            _write(self.path, data)
            self.written = counts
            if end is not None:
                self.ended = end
        except Exception:  # noqa: BLE001 - a report must never break the audited program
            pass
        finally:
            self.lock.release()

    def finish(self, end: Dict[str, Any]) -> None:
        """Write the last report, saying how the process ended (later writes do nothing)."""
        self.write(end=end)

    def start_polling(self) -> None:
        """Rewrite the report every ``POLL_SECONDS`` while the counts change (first time: always)."""
        thread = threading.Thread(target=self._poll, name="ascend-env-audit-report", daemon=True)
        thread.start()

    def _poll(self) -> None:
        while self.ended is None and os.getpid() == self.pid:
            time.sleep(POLL_SECONDS)
            self.write(force=self.written is None)


# The report of this process, set by install() and replaced in a forked child.
_current: Optional[Reporter] = None
_fork_lock_held = False
_real_exit = os._exit
_real_execv = os.execv
_real_execve = os.execve


def current() -> Optional[Reporter]:
    """This process's reporter, or None outside an audit."""
    reporter = _current
    return reporter if reporter is not None and reporter.pid == os.getpid() else None


def install(directory: Path, counts: Counts, table: Optional[str]) -> Reporter:
    """Report ``counts()`` to ``directory`` from this process and every process forked from it.

    ``counts()`` returns the process's counts so far (a forked child inherits them, and they only
    grow). Call once per process.
    """
    global _current
    if _current is not None:
        raise RuntimeError("the audit report is already installed in this process")
    _current = Reporter(directory, counts, table, "start")
    _current.write(force=True)  # the audit now knows a Python process ran, whatever happens next
    _current.start_polling()
    atexit.register(_at_exit)
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)
    # Looked up on the os module at each call (multiprocessing's workers end in os._exit).
    os._exit = _exit  # type: ignore[assignment]
    os.execv = _execv  # type: ignore[assignment]
    os.execve = _execve  # type: ignore[assignment]
    _install_sigterm()
    return _current


def _install_sigterm() -> None:
    # Only where SIGTERM still kills silently: a program's own handler (or SIG_IGN) stays.
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
    except (OSError, ValueError):
        pass


def _on_sigterm(signum: int, frame: object) -> None:
    try:
        reporter = current()
        if reporter is not None:
            reporter.finish({"how": "signal", "signal": signal.Signals(signum).name})
    finally:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _at_exit() -> None:
    reporter = current()
    if reporter is None:
        return
    # The interpreter sets sys.last_value when an uncaught exception ends the script.
    last = getattr(sys, "last_value", None)
    if last is not None:
        reporter.finish({"how": "exception", "exception": type(last).__name__})
    else:
        reporter.finish({"how": "exit"})


# The wrappers end the process whatever happens while reporting (a KeyboardInterrupt included).


def _exit_status(status: object) -> Optional[int]:
    try:
        return int(cast(Any, status))  # any object: int() raises on what it cannot convert
    except (TypeError, ValueError):
        return None


@functools.wraps(_real_exit)
def _exit(status: int) -> None:
    try:
        reporter = current()
        if reporter is not None:
            reporter.finish({"how": "os._exit", "code": _exit_status(status)})
    finally:
        _real_exit(status)


@functools.wraps(_real_execv)
def _execv(path: Any, argv: Any) -> None:
    reporter = current()
    if reporter is not None:
        reporter.finish({"how": "exec"})
    _real_execv(path, argv)


@functools.wraps(_real_execve)
def _execve(path: Any, argv: Any, env: Any) -> None:
    reporter = current()
    if reporter is not None:
        reporter.finish({"how": "exec"})
    _real_execve(path, argv, env)


def _before_fork() -> None:
    # The parent's report thread must not be inside counts() (the simulator's lock) or a write
    # when the process is copied: the child would inherit the held lock. The counts now are what
    # the child inherits; read here, in the parent, where the simulator's lock is safe to take.
    global _fork_lock_held
    reporter = current()
    _fork_lock_held = reporter is not None and reporter.lock.acquire(timeout=_LOCK_SECONDS)
    if reporter is not None:
        try:
            reporter.fork_baseline = dict(reporter.counts())
        except Exception:  # noqa: BLE001 - the child then subtracts its parent's own baseline
            reporter.fork_baseline = None


def _after_fork_in_parent() -> None:
    global _fork_lock_held
    reporter = current()
    if _fork_lock_held and reporter is not None:
        reporter.lock.release()
    _fork_lock_held = False


def _after_fork_in_child() -> None:
    global _current, _fork_lock_held
    parent = _current
    _fork_lock_held = False
    if parent is None:
        return
    baseline = parent.fork_baseline if parent.fork_baseline is not None else parent.baseline
    _current = Reporter(parent.directory, parent.counts, parent.table, "fork", baseline)
    # No report yet: a child forked by subprocess (preexec_fn) execs at once and must not count
    # as a process. The report thread writes the first one after POLL_SECONDS, or the end does.
    _current.start_polling()


def enable(table: Mapping[str, str]) -> None:
    """Enable the simulated NPU that ``table`` names (the variables that
    :func:`ascend_env.checks.audit.choose_table` picks: a release's table, or an installed
    torch_npu's op lists), and make ``import torch_npu`` find the simulated package."""
    from ascend_env import sim

    if table.get(OPLISTS):
        from ascend_env.detect import npu_oplists as oplists

        ops = oplists.read_torch_npu(Path(table[OPLISTS]))
        sim.enable_ops(table.get(LABEL, table[OPLISTS]), ops, table.get(FALLBACK_DISABLE) == "1")
    else:
        sim.enable(table.get(TORCH_NPU) or None)
    sim.add_torch_npu_to_path()


def start_from_environment(environ: Optional[Mapping[str, str]] = None) -> None:
    """Enable the simulator as the audit asked and report this process's fallbacks."""
    environ = os.environ if environ is None else environ
    reports = environ.get(REPORTS)
    if not reports:
        return
    try:
        from ascend_env import sim

        enable(environ)
        from ascend_env.sim import paths

        paths.start_from_environment(environ)
    except Exception as exc:  # reported to the audit, which fails with it
        path = Path(reports, f"{os.getpid()}-{os.urandom(4).hex()}.json")
        try:
            _write(path, {"pid": os.getpid(), "argv": sys.argv, "error": str(exc)})
        except OSError:
            pass
        sys.stderr.write(f"ascend-env audit: the simulated NPU could not start: {exc}\n")
        return
    install(Path(reports), sim.fallbacks, sim.enabled_table())


def _paths_report() -> Optional[Dict[str, Any]]:
    """The dispatch-path model's findings in this process, if it was started."""
    paths = sys.modules.get("ascend_env.sim.paths")
    return None if paths is None else paths.report()


def _write(path: Path, data: dict[str, Any]) -> None:
    with atomic.replacing(path) as partial:
        partial.write_text(json.dumps(data), encoding="utf-8")
