"""The audited process's start-up: what ``ascend-env audit`` runs in every Python process of a command.

``_audited_shim/sitecustomize.py``, beside this module, calls :func:`start_from_environment` in
each Python process the audited command starts. Most such processes (a shell helper, pip, a
tokenizer worker) never import torch, so start-up stays light: this module sits outside
:mod:`ascend_env.sim` (whose package imports cost more than a whole Python start) and imports
only what a bare interpreter has loaded, plus :mod:`ascend_env.utils.importhooks` and
:mod:`ascend_env.utils.jsonwrite` (its reports' writer). It

- writes the process's first report at once (a light one: no torch), so that the audit can tell
  an audited process from one that ran outside the simulator (``python -I``, ``-E``, ``-S``);
- makes ``import torch_npu`` find the simulated package (:class:`_SimulatedTorchNpu`), ahead of a
  real torch_npu, which cannot run beside the simulator, and reachable before ``import torch``:
  its ``__init__`` imports torch first;
- enables the simulator once ``torch`` has executed (an :class:`~ascend_env.utils.importhooks.
  ImportWatcher`), by :func:`ascend_env.sim.startup.start`, and reports from then on what
  :mod:`ascend_env.sim.startup` counts;
- keeps the report up to date until the process ends (see :class:`Reporter`).

Audited on the emulated CANN (``$ASCEND_ENV_AUDIT_CANN=emulated``) it runs no simulator: the
real torch_npu is imported, and :class:`_EmulatedCann` puts ``ascend_env.sim.emulated`` under it
first; the last report adds that module's facts (its counters, where fd 2 went).

The audit passes its choices in the environment (:data:`REPORTS` here, the table's in
:mod:`ascend_env.sim.startup`). Each process's report (an ``ascend_env.sim.reports.ProcessReport``),
``<pid>-<start>-<generation>-<random>.json`` in ``$ASCEND_ENV_AUDIT_REPORTS`` (its process
image: ``exec`` keeps the pid, so the image before an exec tells the next its generation in
:data:`EXEC`, and leaves an exec marker ``<image>-<random>.exec`` naming the program it runs),
holds its fallback counts, whether torch ran the simulator there (``torch``), how it
reached torch_npu, and, once it ends, how (``"end"``). It is written at start, again whenever the
counts changed (a thread looks every ``POLL_SECONDS`` in processes that run the simulator or were
forked, so a SIGKILL or a crash loses at most that much), and last at the end: at interpreter
exit, in ``os._exit``, before ``os.execv``/``os.execve``, and on SIGTERM (a handler, installed
where SIGTERM had its default action, writes and then dies of the signal as before). A forked
child (``os.fork``, fork and forkserver multiprocessing, DataLoader workers) inherits the
simulator's counters: it starts its own report and subtracts what it inherited, so no fallback is
counted twice.

Locks: a signal handler may run in the middle of any of this, in the main thread, so the report
is guarded by an RLock only (never a plain Lock, Event or Condition: the handler would wait on
its own thread forever), and the child of a fork never calls into the simulator to start up
(another thread of the parent may have held the simulator's lock when the process was copied).
"""

from __future__ import annotations

import _thread
import atexit
import os
import sys

from ascend_env.utils.jsonwrite import write_json

# No typing at run time: it costs more than the rest of this start-up (mypy takes the name
# TYPE_CHECKING as true).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any, Callable, Dict, Mapping, Optional, Sequence

    from ascend_env.sim.reports import LastFacts, ProcessEnd, ProcessReport

    Counts = Callable[[], Mapping[str, int]]
    #: What a process adds to its last report (``ascend_env.sim.startup.last_facts``: the
    #: dispatch-path model, how the hook heard of torch_npu, whether the process used the npu device).
    Extra = Callable[[], LastFacts]

__all__ = [
    "CANN",
    "EXEC",
    "LABEL",
    "POLL_SECONDS",
    "REPORTS",
    "Reporter",
    "current",
    "install",
    "shim_path",
    "start_from_environment",
]

#: Where each audited process writes its report: the audit's report directory.
REPORTS = "ASCEND_ENV_AUDIT_REPORTS"
#: ``emulated``: the command runs the real torch_npu on the emulated CANN, not the simulator
#: (``ascend_env.sim.emulated.CANN_VARIABLE``); LABEL names the torch_npu for the report.
CANN = "ASCEND_ENV_AUDIT_CANN"
LABEL = "ASCEND_ENV_AUDIT_LABEL"

#: The exec generation of a process image (``<pid>-<start>-<generation>``): set for the program
#: that an audited image ``exec``s, which keeps its pid (read as
#: ``ascend_env.utils.proctree.exec_generation`` reads it).
EXEC = "ASCEND_ENV_AUDIT_EXEC"

#: How often a running process looks at its counts and rewrites its report if they changed.
POLL_SECONDS = 0.1
# A report write never waits longer than this for another thread's write (a process must exit).
_LOCK_SECONDS = 2.0
# The simulated torch_npu package lives in ascend_env/sim/pkgs (ascend_env.sim.torch_npu_path()).
_PKGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sim", "pkgs")


def shim_path() -> str:
    """The directory whose ``sitecustomize`` runs this start-up in each Python process (first on an
    audited command's ``PYTHONPATH``)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_audited_shim")


def _no_counts() -> Dict[str, int]:
    return {}


class Reporter:
    """One process's report file, kept up to date with ``counts()`` minus ``baseline``."""

    def __init__(
        self,
        directory: Any,
        counts: Counts,
        table: Optional[str],
        origin: str,
        baseline: Optional[Mapping[str, int]] = None,
    ) -> None:
        self.directory = os.fspath(directory)
        self.counts = counts
        self.table = table
        self.origin = origin  # "start": a new interpreter; "fork": a forked child
        self.baseline = dict(baseline or {})
        self.pid = os.getpid()
        # A report names its process image: pid, start time and exec generation (exec keeps the pid).
        self.start = _start_time()
        self.generation = _generation(os.environ.get(EXEC), self.pid, self.start)
        self.image = f"{self.pid}-{self.start}-{self.generation}"
        self.path = os.path.join(self.directory, f"{self.image}-{os.urandom(4).hex()}.json")
        self.lock = _thread.RLock()
        self.written: Optional[Dict[str, int]] = None
        self.ended: Optional[ProcessEnd] = None
        self.fork_baseline: Optional[Dict[str, int]] = None  # the counts when this process last forked
        self.torch = False  # whether the simulator runs in this process
        self.error: Optional[str] = None  # why the simulator could not start here
        self.autoload: Optional[bool] = None  # set once, when the simulator starts
        self.extra: Optional[Extra] = None
        self.polling = False

    def own_counts(self) -> Dict[str, int]:
        """This process's fallbacks: the counts since it started or was forked."""
        own = {}
        for name, count in self.counts().items():
            count -= self.baseline.get(name, 0)
            if count > 0:
                own[name] = int(count)
        return dict(sorted(own.items()))

    def write(self, end: Optional[ProcessEnd] = None, force: bool = False) -> None:
        """Write the report if the counts changed (or ``force``); ``end`` makes it the last one."""
        if os.getpid() != self.pid or not self.lock.acquire(timeout=_LOCK_SECONDS):
            return
        try:
            if self.ended is not None:
                return
            counts = self.own_counts()
            if end is None and not force and counts == self.written:
                return
            data: ProcessReport = {
                "pid": self.pid,
                "start": self.start,
                "generation": self.generation,
                "ppid": os.getppid(),
                "argv": list(sys.argv),
                "rank": os.environ.get("RANK"),
                "origin": self.origin,
                "table": self.table,
                "fallbacks": counts,
                "end": end,
                "torch": self.torch,
                "torch_npu": _torch_npu_kind(),
            }
            if self.autoload is not None:
                data["autoload"] = self.autoload
            if self.error is not None:
                data["error"] = self.error
            if end is not None and self.extra is not None:
                try:
                    data = {**data, **self.extra()}
                except Exception as exc:  # noqa: BLE001 - the counts still count
                    data["extra_error"] = f"{type(exc).__name__}: {exc}"
            write_json(self.path, data)
            self.written = counts
            if end is not None:
                self.ended = end
        except Exception:  # noqa: BLE001 - a report must never break the audited program
            pass
        finally:
            self.lock.release()

    def finish(self, end: ProcessEnd) -> None:
        """Write the last report, saying how the process ended (later writes do nothing)."""
        self.write(end=end)

    def start_polling(self) -> None:
        """Rewrite the report every ``POLL_SECONDS`` while the counts change (first time: always)."""
        if self.polling:
            return
        self.polling = True
        import threading

        thread = threading.Thread(target=self._poll, name="ascend-env-audit-report", daemon=True)
        thread.start()

    def _poll(self) -> None:
        import time

        while self.ended is None and os.getpid() == self.pid:
            time.sleep(POLL_SECONDS)
            self.write(force=self.written is None)


def _start_time() -> int:
    """When this process started, in clock ticks since boot (``/proc/self/stat``); 0 if unknown."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            data = handle.read()
        return int(data[data.rfind(b")") + 2 :].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


def _generation(value: Optional[str], pid: int, start: int) -> int:
    """``ascend_env.utils.proctree.exec_generation`` (whose imports a start-up cannot afford)."""
    words = (value or "").split("-")
    if len(words) == 3 and all(word.isdigit() for word in words):
        if int(words[0]) == pid and int(words[1]) == start:
            return int(words[2])
    return 0


def _torch_npu_kind() -> Optional[str]:
    """``"simulated"`` or ``"real"``: the torch_npu this process imported; None if none."""
    module = sys.modules.get("torch_npu")
    if module is None:
        return None
    return "simulated" if getattr(module, "ASCEND_ENV_SIMULATED", False) else "real"


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


def install(directory: Any, counts: Counts, table: Optional[str], poll: bool = True) -> Reporter:
    """Report ``counts()`` to ``directory`` from this process and every process forked from it.

    ``counts()`` returns the process's counts so far (a forked child inherits them, and they only
    grow). ``poll``: start the thread that rewrites the report as the counts change. Call once
    per process.
    """
    global _current
    if _current is not None:
        raise RuntimeError("the audit report is already installed in this process")
    _current = Reporter(directory, counts, table, "start")
    _current.write(force=True)  # the audit now knows a Python process ran, whatever happens next
    if poll:
        _current.start_polling()
    atexit.register(_at_exit)
    os.register_at_fork(
        before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child
    )
    # Looked up on the os module at each call (multiprocessing's workers end in os._exit).
    os._exit = _exit  # type: ignore[assignment]
    os.execv = _execv  # type: ignore[assignment]
    os.execve = _execve  # type: ignore[assignment]
    _install_sigterm()
    return _current


# The signal module imports enum, which a bare interpreter has not loaded; _signal has what the
# handler needs (typeshed has no stubs for it).
_signal: Any = __import__("_signal")


def _install_sigterm() -> None:
    # Only where SIGTERM still kills silently: a program's own handler (or SIG_IGN) stays.
    if _thread.get_ident() != _main_thread_id():
        return
    try:
        if _signal.getsignal(_signal.SIGTERM) == _signal.SIG_DFL:
            _signal.signal(_signal.SIGTERM, _on_sigterm)
    except (OSError, ValueError):
        pass


def _main_thread_id() -> int:
    threading = sys.modules.get("threading")
    if threading is None:  # nothing imported threading: this is the only thread there is
        return _thread.get_ident()
    return int(threading.main_thread().ident or 0)


def _on_sigterm(signum: int, frame: object) -> None:
    try:
        reporter = current()
        if reporter is not None:
            reporter.finish({"how": "signal", "signal": "SIGTERM"})
    finally:
        _signal.signal(signum, _signal.SIG_DFL)
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
        code: int = int(status)  # type: ignore[call-overload]  # any object: int() raises on the rest
        return code
    except (TypeError, ValueError):
        return None


def _exit(status: int) -> None:
    """``os._exit``, after the last report."""
    try:
        reporter = current()
        if reporter is not None:
            reporter.finish({"how": "os._exit", "code": _exit_status(status)})
    finally:
        _real_exit(status)


def _execv(path: Any, argv: Any) -> None:
    """``os.execv``, after the last report: the next image is told its exec generation."""
    reporter = current()
    if reporter is None:
        _real_execv(path, argv)
        return
    marker = _before_exec(reporter, path, argv)
    before = os.environ.get(EXEC)
    os.environ[EXEC] = _next_image(reporter)
    try:
        _real_execv(path, argv)
    except BaseException:
        if before is None:
            os.environ.pop(EXEC, None)
        else:
            os.environ[EXEC] = before
        _exec_failed(reporter, marker)
        raise


def _execve(path: Any, argv: Any, env: Any) -> None:
    """``os.execve``, after the last report: the next image is told its exec generation (where
    its environment still names the audit's reports)."""
    reporter = current()
    if reporter is None:
        _real_execve(path, argv, env)
        return
    marker = _before_exec(reporter, path, argv)
    try:
        _real_execve(path, argv, _with_next_image(reporter, env))
    except BaseException:
        _exec_failed(reporter, marker)
        raise


def _next_image(reporter: Reporter) -> str:
    return f"{reporter.pid}-{reporter.start}-{reporter.generation + 1}"


def _with_next_image(reporter: Reporter, env: Any) -> Any:
    try:
        changed = dict(env)
        if REPORTS in changed:
            changed[EXEC] = _next_image(reporter)
        elif REPORTS.encode() in changed:
            changed[EXEC.encode()] = _next_image(reporter).encode()
        else:
            return env
        return changed
    except Exception:  # noqa: BLE001 - exec as the program asked: the audit reads the new image
        return env


def _before_exec(reporter: Reporter, path: Any, argv: Any) -> Optional[str]:
    """The last report, and the exec marker ``<image>-<random>.exec``: the program the next image
    runs (the audit reads it if that image writes no report). Returns the marker's path."""
    reporter.finish({"how": "exec"})
    marker = os.path.join(reporter.directory, f"{reporter.image}-{os.urandom(4).hex()}.exec")
    try:
        program = os.path.abspath(os.fsdecode(path))
        command = [os.fsdecode(arg) for arg in argv]
        write_json(marker, {"pid": reporter.pid, "start": reporter.start, "path": program, "argv": command})
    except Exception:  # noqa: BLE001 - a report must never break the audited program
        return None
    return marker


def _exec_failed(reporter: Reporter, marker: Optional[str]) -> None:
    """exec raised: this image goes on, and reports on."""
    if marker is not None:
        try:
            os.unlink(marker)
        except OSError:
            pass
    with reporter.lock:
        reporter.ended = None
    reporter.write(force=True)


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
    child = Reporter(parent.directory, parent.counts, parent.table, "fork", baseline)
    child.torch, child.error, child.extra = parent.torch, parent.error, parent.extra
    child.autoload = parent.autoload
    _current = child
    # No report yet: a child forked by subprocess (preexec_fn) execs at once and must not count
    # as a process. The report thread writes the first one after POLL_SECONDS, or the end does.
    child.start_polling()


# ------------------------------------------------------------------------------- start-up


class _SimulatedTorchNpu:
    """A meta path finder that answers ``torch_npu`` with the simulated package.

    It goes just before the path finder, so that the startup hook's finder (first on
    ``sys.meta_path``) still asks it and wraps the loader, as it would a real torch_npu's: the
    hook hears of the simulated package by its import. A real torch_npu installed here is not
    found: it cannot run beside the simulator (PrivateUse1 is taken; without CANN it fails on
    ``libhccl.so``).
    """

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]] = None, target: Optional[ModuleType] = None
    ) -> Optional[ModuleSpec]:
        if fullname != "torch_npu":
            return None
        from importlib.machinery import PathFinder

        return PathFinder.find_spec(fullname, [_PKGS])


_SIMULATED_TORCH_NPU = _SimulatedTorchNpu()


def _add_simulated_torch_npu() -> None:
    if _SIMULATED_TORCH_NPU in sys.meta_path:
        return
    from importlib.machinery import PathFinder

    where = sys.meta_path.index(PathFinder) if PathFinder in sys.meta_path else len(sys.meta_path)
    sys.meta_path.insert(where, _SIMULATED_TORCH_NPU)


def start_from_environment(environ: Optional[Mapping[str, str]] = None) -> Optional[Reporter]:
    """Report this process to the audit, and run the simulator here once torch has executed (or,
    audited on the emulated CANN, the real torch_npu on it once torch_npu is looked for)."""
    environ = os.environ if environ is None else environ
    reports = environ.get(REPORTS)
    if not reports:
        return None
    # The light report: no thread until torch runs the simulator (or this process forks).
    reporter = install(reports, _no_counts, None, poll=False)
    if environ.get(CANN) == "emulated":
        _add_emulated_cann(environ.get(LABEL))
        return reporter
    _add_simulated_torch_npu()
    from ascend_env.utils.importhooks import ImportWatcher

    table = dict(environ)
    ImportWatcher({"torch": lambda module, specs: _torch_executed(table)}).install()
    return reporter


def _torch_executed(environ: Mapping[str, str]) -> None:
    """torch has executed in this process: run the simulator (never raises: torch is imported)."""
    reporter = current()
    if reporter is None:
        return
    try:
        from ascend_env.sim import startup

        started = startup.start(environ)
        with reporter.lock:
            reporter.counts = startup.counts
            reporter.table = started.table
            reporter.torch = True
            reporter.autoload = started.autoload
            reporter.extra = startup.last_facts
        reporter.write(force=True)
        reporter.start_polling()
        startup.autoload(started)
    except Exception as exc:  # noqa: BLE001 - the audit reports it (and fails with it)
        reporter.error = f"{type(exc).__name__}: {exc}"
        reporter.write(force=True)


class _EmulatedCann:
    """A meta path finder, first on ``sys.meta_path``, that puts the emulated CANN under the real
    torch_npu the first time anything looks for it (a ``find_spec`` probe or the import), before
    its module exists: ``ascend_env.sim.emulated.enable`` loads the libraries torch_npu links. It
    finds nothing itself; the real torch_npu is found where it is installed (or where the audit
    unpacked the wheel, first on ``PYTHONPATH``)."""

    def __init__(self, label: Optional[str]) -> None:
        self.label = label
        self.busy = False

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]] = None, target: Optional[ModuleType] = None
    ) -> Optional[ModuleSpec]:
        if fullname != "torch_npu" or self.busy or "torch_npu" in sys.modules:
            return None
        reporter = current()
        if reporter is None or reporter.torch or reporter.error is not None:
            return None
        self.busy = True
        try:
            from ascend_env.sim import emulated

            emulated.enable()
            with reporter.lock:
                reporter.table = self.label
                reporter.torch = True
                reporter.extra = emulated.last_facts
            reporter.write(force=True)
        except Exception as exc:  # noqa: BLE001 - the audit reports it (and fails with it)
            reporter.error = f"{type(exc).__name__}: {exc}"
            reporter.write(force=True)
        finally:
            self.busy = False
        return None


def _add_emulated_cann(label: Optional[str]) -> None:
    if not any(isinstance(finder, _EmulatedCann) for finder in sys.meta_path):
        sys.meta_path.insert(0, _EmulatedCann(label))
