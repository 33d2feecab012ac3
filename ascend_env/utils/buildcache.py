"""A build cache that only its user can change: where a compiled library is built, checked and loaded.

A library in the cache runs as whoever loads it, root included, so nothing there is used or
written unless no other user could have put it there or could swap a directory on its way:

- every directory on the cache's path, walked *lexically* from ``/`` (each component ``lstat``-ed,
  as OpenSSH's ``StrictModes`` walks a path, never the resolved path alone), belongs to root or
  to this user and is writable by no one else: writable by others only with the sticky bit (as
  ``/tmp``), by its group only with the sticky bit or where that group is its owner's private
  group (Debian's and Ubuntu's accounts, umask 002). A symbolic link on the way must be root's or
  this user's, and its target is walked the same way. So a cache in another user's home (sudo
  without ``-H``), under a ``~/.cache`` that is that user's link, or below a shared directory at
  any depth is refused;
- the directories the cache makes are made one at a time, mode 0700, after the walk, so root
  never creates a directory inside another user's tree;
- the cache's own directories and files are this user's, no symbolic link, writable by no one else;
- the build log is written through the checked build directory's descriptor (``openat``,
  ``O_NOFOLLOW``), the lock file is opened without following a link, and the library is loaded
  from the descriptor that was checked (``/proc/self/fd/N``).
"""

from __future__ import annotations

import errno
import fcntl
import grp
import os
import pwd
import shlex
import signal
import stat
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, List, Optional

from ascend_env.exceptions import EnvironmentProblem
from ascend_env.utils import atomic, progress

__all__ = [
    "COMPILER_MEMORY",
    "Build",
    "cache_root",
    "check_private",
    "check_trusted",
    "ensure_built",
    "killed",
    "locked",
    "make_private_dirs",
    "opened_checked",
]

#: The compiler's peak memory building the simulator's backend, rounded up: g++ 12.2 peaked at 610
#: MB with torch 2.1.0's headers and 880 MB with torch 2.13.0's (resident set size, measured).
COMPILER_MEMORY = "1 GB"

#: The most symbolic links followed on one path (the kernel's own limit, ELOOP, is 40).
_MAX_LINKS = 40

_PRIVATE_FIX = (
    "set ASCEND_ENV_CACHE_DIR to a directory of your own that only you can write (mkdir -m 700 DIR)"
)


def cache_root() -> Path:
    """The directory under which ascend-env caches builds: ``$ASCEND_ENV_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/ascend-env``, else ``~/.cache/ascend-env``."""
    explicit = os.environ.get("ASCEND_ENV_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ascend-env"


@dataclass(frozen=True)
class Build:
    """One library built once into the cache. ``owner`` names what it is for in messages ("the
    simulated NPU"); ``command(output)`` is the compiler command that writes it to ``output``."""

    directory: Path
    library: str
    command: Callable[[Path], List[str]]
    owner: str
    what: str
    note: str


def ensure_built(build: Build) -> Path:
    """The path of ``build``'s library, building it first (under the lock, into a temporary file
    renamed into place) if no finished one is cached. Raises :class:`EnvironmentProblem` where the
    cache is not safe to use, or the build fails."""
    root = cache_root()
    library = build.directory / build.library
    check_trusted(root, build.owner)
    if _exists(library, build.owner):
        check_private(build.owner, root, build.directory, library)
        return library
    make_private_dirs(build.directory, build.owner)
    check_private(build.owner, root, build.directory)
    with locked(build.directory / "build.lock", build.owner):
        if library.exists():  # another process finished it while we waited
            check_private(build.owner, library)
            return library
        with progress.step(build.what, note=build.note), atomic.replacing(library, suffix=".so") as partial:
            _compile(build, partial)
            os.chmod(partial, 0o755)
    return library


def check_trusted(path: Path, owner: str) -> None:
    """Refuse ``path`` if a directory or link on its way (the lexical path from ``/``, and the
    target of every link on it) could be changed by another user; components that do not exist
    yet are not checked (:func:`make_private_dirs` makes them)."""
    _walk(Path(os.path.abspath(path)), path, owner, links=0, last=False)


def make_private_dirs(directory: Path, owner: str) -> None:
    """Make the missing directories up to ``directory``, each mode 0700 (whatever the umask), once
    the existing ones have passed :func:`check_trusted`."""
    check_trusted(directory, owner)
    missing: List[Path] = []
    current = Path(os.path.abspath(directory))
    while not os.path.lexists(current):
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass  # made meanwhile: checked below like any other
        except OSError as exc:
            raise EnvironmentProblem(
                f"cannot create {owner}'s build cache {path}: {exc.strerror}.",
                "set ASCEND_ENV_CACHE_DIR to a writable directory",
            ) from None
        check_private(owner, path)


def check_private(owner: str, *paths: Path) -> None:
    """Refuse a path of the cache itself that is a symbolic link, another user's, or writable by
    anyone else."""
    for path in paths:
        _check_private_file(owner, path, os.lstat(path))


@contextmanager
def opened_checked(library: Path, owner: str) -> Iterator[str]:
    """Open ``library`` without following a link, check the open file, and yield a path to load
    that names the checked file itself (``/proc/self/fd/N``; the path where there is no /proc), so
    that a file swapped in at ``library`` after the check is never the one loaded."""
    fd = os.open(library, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        _check_private_file(owner, library, os.fstat(fd))
        by_descriptor = f"/proc/self/fd/{fd}"
        yield by_descriptor if os.path.exists(by_descriptor) else str(library)
    finally:
        os.close(fd)


@contextmanager
def locked(path: Path, owner: str) -> Iterator[None]:
    """Hold the build lock ``path`` (opened without following a link), saying so while another
    process holds it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        reason = "is a symbolic link" if exc.errno == errno.ELOOP else f"cannot be opened: {exc.strerror}"
        raise EnvironmentProblem(
            f"{owner}'s build lock {path} {reason}.",
            f"remove it (rm {shlex.quote(str(path))}), or set ASCEND_ENV_CACHE_DIR to a directory "
            "of your own",
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress.say(f"waiting for another process that is building {owner}'s backend in {path.parent}")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# What the compiler drivers print when the kernel killed the compiler proper they started: g++
# >= 8 "fatal error: Killed signal terminated program cc1plus", older g++ "internal compiler
# error: Killed (program cc1plus)", clang++ "error: unable to execute command: Killed".
_KILLED = (
    "Killed signal terminated program",
    "internal compiler error: Killed",
    "unable to execute command: Killed",
)


def killed(returncode: int, output: str) -> bool:
    """Whether the compiler (the driver, or the compiler proper it started) died of SIGKILL, as
    the kernel's out-of-memory killer ends it: a negative return code from ``subprocess`` (-9), a
    shell's 137, or the driver's own words for its child's death."""
    return returncode in (-signal.SIGKILL, 128 + signal.SIGKILL) or any(s in output for s in _KILLED)


def _exists(library: Path, owner: str) -> bool:
    """Whether the cached library is there; a cache this user cannot read (another user's, built
    under sudo or through a shared ASCEND_ENV_CACHE_DIR) is an :class:`EnvironmentProblem`."""
    try:
        return library.exists()
    except OSError as exc:
        whose = next((f" (it belongs to uid {p.stat().st_uid})" for p in library.parents if _stats(p)), "")
        raise EnvironmentProblem(
            f"{owner}'s build cache {library.parent} cannot be read by this user (uid "
            f"{os.geteuid()}): {exc.strerror}{whose}; another user built it.",
            _PRIVATE_FIX,
        ) from None


def _stats(path: Path) -> bool:
    try:
        path.stat()
    except OSError:
        return False
    return True


def _compile(build: Build, output: Path) -> None:
    command = build.command(output)
    progress.say(f"compiler command: {shlex.join(command)}", verbose=True)
    result = subprocess.run(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )
    if result.returncode == 0:
        return
    log = build.directory / "build.log"
    _write_log(build, log, shlex.join(command) + "\n\n" + result.stdout)
    tail = "\n".join(result.stdout.strip().splitlines()[-15:])
    if killed(result.returncode, result.stdout):
        raise EnvironmentProblem(
            f"building {build.owner} backend failed: the C++ compiler was killed (exit "
            f"{result.returncode}), most likely by the kernel for want of memory; it needs about "
            f"{COMPILER_MEMORY} (full log: {log}):\n{tail}",
            "free memory (close other programs, or give the container more), then run the "
            "command again; the backend is built once and cached",
        )
    raise EnvironmentProblem(
        f"building {build.owner} backend failed (full log: {log}):\n{tail}",
        "check that the C++ compiler supports C++17 and matches the one torch was built for",
    )


def _write_log(build: Build, log: Path, text: str) -> None:
    """Write the build log through the build directory's descriptor, checked again, never through
    a link planted at the log's name (it is replaced, not followed)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    directory = os.open(build.directory, flags)
    try:
        _check_private_file(build.owner, build.directory, os.fstat(directory))
        try:
            os.unlink(log.name, dir_fd=directory)
        except FileNotFoundError:
            pass
        fd = os.open(
            log.name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=directory,
        )
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
    finally:
        os.close(directory)


def _walk(path: Path, given: Path, owner: str, links: int, last: bool) -> None:
    """Check each component of ``path`` from ``/``; ``last``: its final component too (a link's
    target), else that is the cache's own directory, which :func:`check_private` checks."""
    current = Path(path.anchor or "/")
    _check_directory(current, os.lstat(current), given, owner)
    for name in path.parts[1:]:
        candidate = current / name
        try:
            info = os.lstat(candidate)
        except FileNotFoundError:
            return  # the rest is made by make_private_dirs
        except OSError as exc:
            raise EnvironmentProblem(
                f"{owner}'s build cache {given}: cannot check {candidate}: {exc.strerror}.", _PRIVATE_FIX
            ) from None
        if stat.S_ISLNK(info.st_mode):
            if links >= _MAX_LINKS:
                raise EnvironmentProblem(
                    f"{owner}'s build cache {given}: too many symbolic links on its path.", _PRIVATE_FIX
                )
            _refuse_if(_foreign_owner(info), given, candidate, "a symbolic link that ", owner)
            target = Path(os.path.realpath(candidate))
            _walk(target, given, owner, links + 1, last=True)
            current = target
            continue
        if last or candidate != path:
            _check_directory(candidate, info, given, owner)
        current = candidate


def _check_directory(directory: Path, info: os.stat_result, given: Path, owner: str) -> None:
    _refuse_if(_foreign_owner(info) or _writable_by_others(info), given, directory, "", owner)


def _foreign_owner(info: os.stat_result) -> Optional[str]:
    if info.st_uid in (0, os.geteuid()):
        return None
    return f"belongs to another user (uid {info.st_uid})"


def _writable_by_others(info: os.stat_result) -> Optional[str]:
    sticky = bool(info.st_mode & stat.S_ISVTX)
    if info.st_mode & 0o002 and not sticky:
        return "is writable by other users"
    if info.st_mode & 0o020 and not sticky and not _private_group(info.st_uid, info.st_gid):
        return f"is writable by its group (gid {info.st_gid}), which is not its owner's private group"
    return None


def _private_group(uid: int, gid: int) -> bool:
    """Whether ``gid`` is the private group of user ``uid``: the user's primary group, of the
    user's own name, with no other member listed (useradd's USERGROUPS_ENAB)."""
    try:
        user = pwd.getpwuid(uid)
        group = grp.getgrgid(gid)
    except KeyError:
        return False
    return user.pw_gid == gid and group.gr_name == user.pw_name and set(group.gr_mem) <= {user.pw_name}


def _refuse_if(problem: Optional[str], given: Path, directory: Path, kind: str, owner: str) -> None:
    if problem is None:
        return
    raise EnvironmentProblem(
        f"{owner}'s build cache {given} is inside {directory}, {kind or 'which '}{problem}: "
        "they could replace the cache with their own, and a library planted there would run "
        "as you, so it is not used.",
        _PRIVATE_FIX,
    )


def _check_private_file(owner: str, path: Path, info: os.stat_result) -> None:
    if stat.S_ISLNK(info.st_mode):
        problem = "is a symbolic link"
    elif info.st_uid != os.geteuid():
        problem = f"belongs to another user (uid {info.st_uid})"
    elif info.st_mode & 0o002 or (info.st_mode & 0o020 and not _private_group(info.st_uid, info.st_gid)):
        problem = "is writable by other users"
    else:
        return
    raise EnvironmentProblem(
        f"{owner}'s build cache {path} {problem}: a library planted there would run as you, "
        "so it is not used.",
        _PRIVATE_FIX,
    )
