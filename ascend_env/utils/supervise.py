"""Run a command in a session of its own and follow its whole process tree (standard library only).

:func:`supervise` starts the command as the leader of a new session (one process group to stop,
and a terminal's Ctrl-C reaches the supervisor, which then stops the command, instead of the
command alone), follows every process it starts (:mod:`ascend_env.utils.proctree`; this process
is their child subreaper, so orphans stay in the tree), stops the tree after a timeout or on
SIGINT/SIGTERM (raising :class:`Interrupted`), and stops what the command leaves running once it
has exited. A watchdog process stops the tree and removes the scratch directory if this process
dies before it could (a SIGKILL, a crash).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import (
    IO,
    Any,
    Callable,
    Iterator,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Set,
    Tuple,
    Union,
)

from ascend_env.utils import proctree

__all__ = [
    "GRACE_SECONDS",
    "LINGER_SECONDS",
    "Interrupted",
    "NotStarted",
    "Output",
    "Supervised",
    "supervise",
]

#: After the command exits, how long the processes it left behind may take to end by themselves.
LINGER_SECONDS = 3.0
#: After SIGTERM, how long processes have to write their reports and end before SIGKILL.
GRACE_SECONDS = 3.0
_TICK = proctree.TICK

#: Where the command's standard output goes: a file, a descriptor, or None (this process's).
Output = Union[None, int, IO[Any]]


class Interrupted(Exception):
    """SIGINT or SIGTERM reached the supervisor; the command and its tree were stopped."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


class NotStarted(Exception):
    """The command could not be started: ``error`` says why (no such program, not executable)."""

    def __init__(self, program: str, error: OSError) -> None:
        self.program = program
        self.error = error
        super().__init__(f"cannot run {program!r}: {error.strerror or error}")


class Supervised(NamedTuple):
    """How the command ran: its pid and exit status, whether it timed out, how many of its
    processes were still running and had to be signalled, and its process tree as last seen."""

    pid: int
    returncode: int
    timed_out: bool
    stopped: int
    tree: proctree.Tree


def _nothing_reported() -> proctree.Reported:
    return proctree.Reported()


def supervise(
    command: Sequence[str],
    env: Mapping[str, str],
    scratch: Path,
    scratch_variable: str,
    timeout: Optional[float] = None,
    stdout: Output = None,
    reported: Callable[[], proctree.Reported] = _nothing_reported,
    exec_variable: Optional[str] = None,
    stderr: Output = None,
) -> Supervised:
    """Run ``command`` with ``env`` (which names ``scratch`` as ``scratch_variable``); stop it after
    ``timeout`` seconds and on SIGINT/SIGTERM; stop what it leaves behind.

    ``reported()`` gives the process images known to report for themselves (their program is not
    read again until they ``exec``); ``exec_variable``, the variable that tells an image's exec
    generation (:func:`ascend_env.utils.proctree.exec_generation`). Raises :class:`NotStarted` if
    the command cannot start, :class:`Interrupted` on a signal (after stopping the tree).
    ``scratch`` is removed only by the watchdog, if this process dies. ``stderr``: where the
    command's standard error goes (default: this process's).
    """
    signals = _Signals()
    was_subreaper = proctree.child_subreaper(True)
    try:
        with signals.installed():
            with signals.holding():  # a signal now is raised once the command can be stopped
                try:
                    # It dies with this process (the watchdog stops the rest of its tree).
                    proc = subprocess.Popen(
                        list(command),
                        env=dict(env),
                        start_new_session=True,
                        stdout=stdout,
                        stderr=stderr,
                        preexec_fn=proctree.death_signal(),
                    )
                except OSError as exc:
                    raise NotStarted(command[0], exc) from None
                watchdog = _Watchdog(scratch, scratch_variable, proc.pid)
                tree = proctree.Tree(
                    os.getpid(),
                    exclude=[watchdog.pid] if watchdog.pid else [],
                    since=proctree.start_time(proc.pid) or 0,
                    exec_variable=exec_variable,
                )
            run = _Run(proc, tree, watchdog, reported, signals)
            try:
                signals.release()
                timed_out = run.follow(timeout)
                stopped = run.stop(0.0 if timed_out else LINGER_SECONDS)
                returncode = proc.wait()
            except BaseException:
                signals.raising = False
                run.stop(0.0)
                raise
            finally:
                watchdog.done()
    finally:
        if was_subreaper is not None:
            proctree.child_subreaper(was_subreaper)
    return Supervised(proc.pid, returncode, timed_out, stopped, tree)


class _Run:
    """The command being supervised: its leader, its tree and the watchdog."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        tree: proctree.Tree,
        watchdog: _Watchdog,
        reported: Callable[[], proctree.Reported],
        signals: _Signals,
    ) -> None:
        self.proc = proc
        self.tree = tree
        self.watchdog = watchdog
        self.reported = reported
        self.signals = signals

    def follow(self, timeout: Optional[float]) -> bool:
        """Poll the tree until the command exits (False) or ``timeout`` passes (True)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.look()
            if self.proc.poll() is not None:
                return False
            if deadline is not None and time.monotonic() >= deadline:
                return True
            time.sleep(_TICK)

    def look(self) -> None:
        """One poll of the tree: tell the watchdog what is new, reap reparented orphans."""
        self.tree.poll(self.reported())
        self.watchdog.tell(self.tree.alive())
        for pid in self.tree.zombie_orphans(self.proc.pid):
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass

    def stop(self, linger: float) -> int:
        """Let what is left of the command end within ``linger`` seconds, then SIGTERM, then SIGKILL it.

        Returns how many processes were still running and had to be signalled.
        """
        group = self.proc.pid  # the session leader's pid is the process group's id
        deadline = time.monotonic() + linger
        left = self.left(group)
        while left and time.monotonic() < deadline and not self.signals.hurry:
            time.sleep(_TICK)
            left = self.left(group)
        stopped = len(left)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not left:
                break
            _kill(os.killpg, group, sig)
            proctree.stop(((m.pid, m.start) for m in self.tree.alive()), sig)
            deadline = time.monotonic() + GRACE_SECONDS
            while left and time.monotonic() < deadline:
                if self.signals.hurry and sig == signal.SIGTERM:
                    break
                time.sleep(_TICK)
                left = self.left(group)
        return stopped

    def left(self, group: int) -> Set[int]:
        """The command's processes still running: its tree (where /proc tells it), else its group."""
        self.proc.poll()  # reap the leader, so that it is not counted as a zombie member
        self.look()
        if self.tree.available:
            return {m.pid for m in self.tree.alive()}
        try:
            os.killpg(group, 0)
        except OSError:
            return set()
        return {group}


def _kill(send: Callable[[int, int], None], target: int, sig: int) -> None:
    try:
        send(target, sig)
    except OSError:  # already gone
        pass


class _Signals:
    """SIGINT and SIGTERM while the command runs: the first raises Interrupted, later ones hurry.

    A signal this process ignores (SIGINT in a shell's background job) stays ignored.
    """

    def __init__(self) -> None:
        self.raising = True
        self.hurry = False
        self.held = False
        self.pending: Optional[int] = None

    def handle(self, signum: int, frame: object) -> None:
        if self.held:  # the command is being started: raise once it can be stopped
            self.pending = signum if self.pending is None else self.pending
            return
        if self.raising:
            self.raising = False
            raise Interrupted(signum)
        self.hurry = True

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Keep a signal until the block ends; :meth:`release` raises it then."""
        self.held = True
        try:
            yield
        finally:
            self.held = False

    def release(self) -> None:
        if self.pending is not None and self.raising:
            self.raising = False
            raise Interrupted(self.pending)

    @contextlib.contextmanager
    def installed(self) -> Iterator[_Signals]:
        if threading.current_thread() is not threading.main_thread():
            yield self  # signal handlers can only be set in the main thread
            return
        previous = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(sig) != signal.SIG_IGN:
                previous[sig] = signal.signal(sig, self.handle)
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class _Watchdog:
    """The process that stops the command's tree and removes the scratch directory if this
    process dies (:func:`ascend_env.utils.proctree.watch`); told each member of the tree as it is
    seen."""

    def __init__(self, scratch: Path, variable: str, group: int) -> None:
        self.proc: Optional[subprocess.Popen[str]] = None
        self.told: Set[Tuple[int, int]] = set()
        command: List[str] = [
            sys.executable,
            "-I",
            "-S",
            proctree.__file__,
            "watch",
            str(scratch),
            variable,
            str(group),
        ]
        try:
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
            )
        except OSError:  # no watchdog: a killed supervisor then leaves what a killed command leaves
            self.proc = None

    @property
    def pid(self) -> Optional[int]:
        return None if self.proc is None else self.proc.pid

    def tell(self, members: Sequence[proctree.Member]) -> None:
        if self.proc is None or self.proc.stdin is None:
            return
        new = {(m.pid, m.start) for m in members} - self.told
        if not new:
            return
        try:
            self.proc.stdin.write("".join(f"{pid} {start}\n" for pid, start in sorted(new)))
            self.proc.stdin.flush()
        except OSError:
            return
        self.told |= new

    def done(self) -> None:
        if self.proc is None or self.proc.stdin is None:
            return
        try:
            self.proc.stdin.write("done\n")
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
