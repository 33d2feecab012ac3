"""A command's process tree, read from ``/proc`` (Linux): every process it started, which of them
are Python, and how to stop them all. Standard library only: the watchdog runs this file by its
path (``python -I -S proctree.py watch ...``), without ascend_env on its path.

:class:`Tree` polls: each :meth:`Tree.poll` lists ``/proc`` and reads the ``stat`` of processes it
has not met yet; a process whose parent is in the tree (or the root itself, for orphans: the root
is their *child subreaper*, ``PR_SET_CHILD_SUBREAPER``, so a daemon that double-forks or calls
``setsid`` is reparented to it, not to init) joins it. What polling cannot see: a process that
starts and ends between two polls (``TICK`` apart) whose parent is not a reporting Python process.

:func:`watch` is the watchdog (:mod:`ascend_env.utils.supervise` starts it): a process of its own
(its own session, outside the tree), told each member of the tree on its stdin. When the
supervisor ends normally it says ``done``; when its stdin reaches end of file without that, the
supervisor is gone (a SIGKILL, a crash): it stops every member it was told of and every process
whose environment names the scratch directory (``VARIABLE=DIRECTORY``), then removes that
directory.
"""

from __future__ import annotations

import mmap
import os
import re
import shutil
import signal
import stat
import sys
import time
from typing import AbstractSet, Callable, Dict, Iterable, List, NamedTuple, Optional, Set, Tuple

__all__ = [
    "TICK",
    "Image",
    "Member",
    "Reported",
    "Tree",
    "child_subreaper",
    "death_signal",
    "exec_generation",
    "is_python",
    "python_flags",
    "start_time",
    "stop",
    "watch",
]

#: How often the supervisor polls the tree.
TICK = 0.05
# A Python interpreter's file name: python, python3, python3.11, python3.11d, python3.13t.
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?[a-z]?$")
# Options of the python command line that take a value (the next argument, or the rest of this one).
_WITH_VALUE = frozenset("XWQ")
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
# What the program file of a Python interpreter holds, whatever its name: the entry point of
# python's main (3.8+; a program that only embeds Python, as vim or gdb do, does not name it).
_PYTHON_MARKS = (b"Py_BytesMain",)
# A program larger than this is not searched for them (only its name tells).
_MAX_PROGRAM_BYTES = 1 << 30
# Whether a program file is a Python interpreter, by (device, inode, size, mtime).
_programs: Dict[Tuple[int, int, int, int], bool] = {}


class Reported(NamedTuple):
    """What the processes of the tree told of themselves, by process image: ``(pid, start time,
    exec generation)`` of each image that writes a report of its own (``reports``), and of each
    that replaced itself by ``exec`` (``execs``): the image after it must be read again; and the
    pids of reports named by pid alone (``legacy``: an older ascend-env in the command's Python),
    which stand for every image of that pid."""

    reports: AbstractSet[Tuple[int, int, int]] = frozenset()
    execs: AbstractSet[Tuple[int, int, int]] = frozenset()
    legacy: AbstractSet[int] = frozenset()


def exec_generation(value: Optional[str], pid: int, start: int) -> int:
    """The exec generation of the process image ``pid`` (started at ``start``) whose environment
    holds ``value`` (``<pid>-<start>-<generation>``, set by the image before it, which ran
    ``exec``); 0 where it names another process (inherited across a fork) or is missing."""
    words = (value or "").split("-")
    if len(words) == 3 and all(word.isdigit() for word in words):
        if int(words[0]) == pid and int(words[1]) == start:
            return int(words[2])
    return 0


def is_python(exe: str, argv: List[str], program: Optional[str] = None) -> bool:
    """Whether a process runs a Python interpreter: its file name (``python3.11``), else what the
    file ``program`` (default: ``exe``) holds, so that a copy or a link named otherwise counts."""
    name = os.path.basename(exe) if exe else os.path.basename(argv[0] if argv else "")
    if _PYTHON.match(name):
        return True
    return _python_program(program or exe) if (program or exe) else False


def _python_program(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
            if key in _programs:
                return _programs[key]
            found = False
            if 0 < info.st_size <= _MAX_PROGRAM_BYTES and stat.S_ISREG(info.st_mode):
                with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                    found = any(data.find(mark) >= 0 for mark in _PYTHON_MARKS)
            _programs[key] = found
            return found
    except (OSError, ValueError):
        return False


class Image:
    """One program a process ran (``exec`` replaces it, and keeps the pid): its file, command
    line, environment and exec generation (:func:`exec_generation`)."""

    def __init__(self, exe: str, argv: List[str], environ: Dict[str, str], generation: int) -> None:
        self.exe = exe
        self.argv = argv
        self.environ = environ
        self.generation = generation
        self.python = False


class Member:
    """One process of the tree, as last seen, and each program it ran (``images``)."""

    def __init__(self, pid: int, start: int, ppid: int, exec_variable: Optional[str] = None) -> None:
        self.pid = pid
        self.start = start
        self.ppid = ppid
        self.exe = ""
        self.argv: List[str] = []
        self.environ: Dict[str, str] = {}
        self.state = "R"
        self.ended = False
        self.exec_variable = exec_variable
        self.images: List[Image] = []

    @property
    def generation(self) -> int:
        """The exec generation of the image last seen."""
        return self.images[-1].generation if self.images else 0

    @property
    def python(self) -> bool:
        """Whether the process runs a Python interpreter (as last seen: ``exec`` changes it)."""
        return self.images[-1].python if self.images else is_python(self.exe, self.argv)

    def look(self, again: bool = False) -> None:
        """Read the process's program and command line again (an ``exec`` changes them), and its
        environment when they changed or when ``again`` (the image ran ``exec``, which may run
        the same program with the same command line: only the environment then tells)."""
        exe = _readlink(f"/proc/{self.pid}/exe")
        data = _read(f"/proc/{self.pid}/cmdline")
        argv = [part.decode("utf-8", "surrogateescape") for part in (data or b"").split(b"\0")[:-1]]
        if not exe or not argv:  # exiting (its memory is gone) or not ours to read: keep what was seen
            return
        if exe == self.exe and argv == self.argv and self.environ and not again:
            return
        raw = _read(f"/proc/{self.pid}/environ")
        environ = self.environ
        if raw is not None:
            environ = dict(_pair(entry) for entry in raw.split(b"\0") if b"=" in entry)
        if exe == self.exe and argv == self.argv and environ == self.environ and self.images:
            return
        self.exe, self.argv, self.environ = exe, argv, environ
        value = environ.get(self.exec_variable) if self.exec_variable else None
        generation = exec_generation(value, self.pid, self.start)
        if again and self.images and generation <= self.images[-1].generation:
            # It ran exec with an environment that does not tell (replaced): the next one all the same.
            generation = self.images[-1].generation + 1
        image = Image(exe, argv, environ, generation)
        image.python = is_python(exe, argv, f"/proc/{self.pid}/exe")
        self.images.append(image)


def _pair(entry: bytes) -> Tuple[str, str]:
    key, _, value = entry.partition(b"=")
    return key.decode("utf-8", "surrogateescape"), value.decode("utf-8", "surrogateescape")


class Tree:
    """The processes descended from ``root`` (the supervisor), but for those of ``exclude`` (the
    watchdog); orphans reparented to ``root`` join if they started after ``since`` (the
    command's start, in clock ticks since boot). ``exec_variable``: the environment variable that
    holds an image's exec generation (:func:`exec_generation`)."""

    def __init__(
        self, root: int, exclude: Iterable[int] = (), since: int = 0, exec_variable: Optional[str] = None
    ) -> None:
        self.root = root
        self.exclude = set(exclude)
        self.since = since
        self.exec_variable = exec_variable
        self.members: Dict[int, Member] = {}
        self._outside: Dict[int, int] = {}  # pid -> start of processes that are not ours
        self.available = os.path.isdir("/proc")

    def poll(self, reported: Optional[Reported] = None) -> None:
        """Look at ``/proc`` again. ``reported``: the process images known to run a reporter of
        their own (their program is read once, not again, until they ``exec``)."""
        if not self.available:
            return
        reported = Reported() if reported is None else reported
        try:
            listed = {int(name) for name in os.listdir("/proc") if name.isdigit()}
        except OSError:
            return
        for pid in list(self._outside):
            if pid not in listed:
                del self._outside[pid]
        new = []
        for pid in listed:
            member = self.members.get(pid)
            if pid in self._outside or pid == self.root or pid in self.exclude:
                continue
            found = _stat(pid)
            if member is not None:
                if found is None or found[4] != member.start:  # gone (its pid may be reused)
                    member.ended = True
                    if found is not None:
                        self.members.pop(pid)
                        new.append((pid, found))
                    continue
                member.state, member.ppid = found[0], found[1]
                continue
            if found is not None:
                new.append((pid, found))
        joined = True
        while new and joined:  # a parent met in this poll may come after its child: until nothing joins
            joined = False
            for pid, found in list(new):
                state, ppid, start = found[0], found[1], found[4]
                if (ppid in self.members and not self.members[ppid].ended) or (
                    ppid == self.root and start >= self.since
                ):
                    member = Member(pid, start, ppid, self.exec_variable)
                    member.state = state
                    self.members[pid] = member
                    new.remove((pid, found))
                    joined = True
        for pid, found in new:
            self._outside[pid] = found[4]
        for member in self.members.values():
            if member.ended or member.state in ("Z", "X"):
                continue
            image = (member.pid, member.start, member.generation)
            if image in reported.execs:  # it ran exec: what runs now is read until it is seen
                member.look(again=True)
            # A reporter's program is read once all the same: one that reported before the first
            # poll met it would keep no command line, and its forks would not be known as forks.
            elif (image not in reported.reports and member.pid not in reported.legacy) or not member.argv:
                member.look()
        for pid, member in self.members.items():
            if not member.ended and pid not in listed:
                member.ended = True

    def alive(self) -> List[Member]:
        """Members still running (not ended, not zombies)."""
        return [m for m in self.members.values() if not m.ended and m.state not in ("Z", "X")]

    def zombie_orphans(self, keep: int) -> List[int]:
        """Zombies whose parent is the root (reparented orphans), but for ``keep`` (the command,
        which subprocess reaps)."""
        return [
            m.pid
            for m in self.members.values()
            if not m.ended and m.state == "Z" and m.ppid == self.root and m.pid != keep
        ]


def _read(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def _readlink(path: str) -> str:
    try:
        target = os.readlink(path)
    except OSError:
        return ""
    return target[: -len(" (deleted)")] if target.endswith(" (deleted)") else target


def _stat(pid: int) -> Optional[Tuple[str, int, int, int, int]]:
    """(state, ppid, process group, session, start time in clock ticks) of ``pid``; None if gone."""
    data = _read(f"/proc/{pid}/stat")
    if data is None:
        return None
    text = data.decode("ascii", "replace")
    fields = text[text.rfind(")") + 2 :].split()  # after "pid (comm) "; comm may hold spaces
    try:
        return fields[0], int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])
    except (IndexError, ValueError):
        return None


def start_time(pid: int) -> Optional[int]:
    """When ``pid`` started, in clock ticks since boot (with the pid, it names one process)."""
    found = _stat(pid)
    return None if found is None else found[4]


def stop(targets: Iterable[Tuple[int, int]], sig: int) -> int:
    """Send ``sig`` to each (pid, start time) still that process; how many were sent."""
    sent = 0
    for pid, start in targets:
        found = _stat(pid)
        if found is None or found[4] != start or found[0] in ("Z", "X"):
            continue
        try:
            os.kill(pid, sig)
            sent += 1
        except OSError:
            pass
    return sent


def python_flags(argv: List[str]) -> str:
    """The one-letter options of a python command line (``-IS -X dev`` gives ``"IS"``)."""
    flags = ""
    index = 1
    while index < len(argv):
        arg = argv[index]
        if arg == "--" or not arg.startswith("-") or arg == "-" or arg.startswith("--"):
            break
        letters = arg[1:]
        for position, letter in enumerate(letters):
            if letter in ("c", "m"):
                return flags
            if letter in _WITH_VALUE:
                if position == len(letters) - 1:
                    index += 1  # the value is the next argument
                break
            flags += letter
        index += 1
    return flags


def child_subreaper(on: bool) -> Optional[bool]:
    """Make this process the child subreaper of its descendants (``on``) or not; returns what it
    was before, or None where prctl is not available (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        before = ctypes.c_int(0)
        if libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(before), 0, 0, 0) != 0:
            return None
        if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0) != 0:
            return None
        return bool(before.value)
    except (OSError, AttributeError):
        return None


def death_signal(sig: int = signal.SIGKILL) -> Optional[Callable[[], None]]:
    """A ``preexec_fn`` that makes the child receive ``sig`` when the parent thread ends
    (``PR_SET_PDEATHSIG``), so that the command does not outlive a killed supervisor; None where prctl
    is not available. libc is looked up here, in the parent: the child only makes the call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def set_death_signal() -> None:
        prctl(1, sig, 0, 0, 0)  # PR_SET_PDEATHSIG

    return set_death_signal


# ------------------------------------------------------------------------------- the watchdog


def watch(scratch: str, variable: str, group: int, lines: Iterable[str], grace: float = 1.0) -> bool:
    """Read ``lines`` (``<pid> <start>`` per tree member, ``done`` at a normal end); if they end
    without ``done``, stop the tree (the members told, the process group ``group`` and every
    process whose environment holds ``variable=scratch``) and remove the directory ``scratch``.
    Returns whether it had to."""
    told: Set[Tuple[int, int]] = set()
    for line in lines:
        words = line.split()
        if words == ["done"]:
            return False
        if len(words) == 2 and words[0].isdigit() and words[1].isdigit():
            told.add((int(words[0]), int(words[1])))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        targets = told | _naming(f"{variable}={scratch}")
        try:
            os.killpg(group, sig)
        except OSError:
            pass
        if not stop(targets, sig):
            break
        time.sleep(grace)
    shutil.rmtree(scratch, ignore_errors=True)
    return True


def _naming(entry: str) -> Set[Tuple[int, int]]:
    """Live processes whose environment holds ``entry`` (``NAME=value``)."""
    marker = entry.encode("utf-8", "surrogateescape")
    found = set()
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not name.isdigit() or int(name) == os.getpid():
            continue
        environ = _read(f"/proc/{name}/environ")
        if environ is None:
            continue
        if marker in environ.split(b"\0"):
            start = start_time(int(name))
            if start is not None:
                found.add((int(name), start))
    return found


def _main(argv: List[str]) -> int:
    if len(argv) != 4 or argv[0] != "watch":
        sys.stderr.write("usage: proctree.py watch DIRECTORY VARIABLE GROUP\n")
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the supervisor's to handle
    watch(argv[1], argv[2], int(argv[3]), sys.stdin)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
