"""The one owner of ``<site-packages>/.ascend-env/``: its layout, state, journal, blobs and lock.

Everything lives in ``.ascend-env/``: ``state.json`` (the files changed, with sha256 before
and after, the tool version and the time), ``journal.json`` (only while a change is in
flight or was interrupted), ``originals/<sha256>`` (the bytes ``restore`` puts back),
``tmp/`` and ``lock``. Other modules ask this one; none builds a path inside it.

State: :func:`read_state` parses ``state.json`` (the only place that does), :func:`drift`
compares it with the files. The startup hook calls :func:`drift` and :func:`has_state`, so this
module imports only the standard library and ascend_env's exceptions, owners, atomic and jsontext.

Lock: one ascend-env run at a time per site-packages directory (``fcntl.flock`` on
``.ascend-env/lock``). ``restore`` removes the directory while holding the lock; a waiter that
then gets the lock on the removed file sees that its inode is no longer the one at the path,
and tries again.

Journal: :func:`commit` writes every byte string it will need into ``originals/`` (named by
sha256), then ``journal.json`` (the changes, by hash, and the state to leave), then each file
with temp file + fsync + ``os.replace``, then the state, then removes the journal.
:func:`recover` finishes an interrupted commit: each file is either still at its ``before``
hash (written now) or already at its ``after`` hash (kept), so running it again and again
converges; a file at neither hash was changed by someone else and stops it.

For tests, ``ASCEND_ENV_CRASH_AT=<label>`` kills the process with ``os._exit(137)`` at
that write point; the labels are listed in :data:`CRASH_POINTS`.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, FrozenSet, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from ascend_env.exceptions import EnvironmentProblem, reinstall
from ascend_env.patching import bytecode
from ascend_env.patching.owners import give_fd, make_dir, match_owner, owner_for
from ascend_env.utils import atomic, jsontext

__all__ = [
    "CRASH_ENV", "CRASH_POINTS", "Change", "Entry", "Journal", "State", "commit", "drift",
    "file_sha256", "has_state", "holds_ours", "locked", "locked_and_recovered", "read_state", "recover",
    "state_dir",
]

DIRECTORY = ".ascend-env"
STATE_FILE = "state.json"
JOURNAL_FILE = "journal.json"
ORIGINALS = "originals"
TMP = "tmp"
LOCK_FILE = "lock"
SCHEMA = 1
KINDS = ("patch", "record", "extra")
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def state_dir(site_packages: Path) -> Path:
    """``<site-packages>/.ascend-env``."""
    return Path(site_packages) / DIRECTORY


def read_file(path: Path) -> Optional[bytes]:
    """The bytes of the file at ``path``, or None when there is no such file.

    One read, no separate existence check: another run may remove the file at any moment.
    """
    try:
        return path.read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def file_sha256(path: Path) -> Optional[str]:
    """The sha256 hex of the file at ``path``, or None when there is no such file."""
    data = read_file(path)
    return None if data is None else hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Entry:
    """One file ascend-env changed: ``before`` is None when it did not exist."""

    path: str  # relative to site-packages
    kind: str  # "patch", "record" or "extra"
    before: Optional[str]
    after: Optional[str]
    patch: Optional[str] = None


@dataclass(frozen=True)
class State:
    tool_version: str
    applied_at: str
    distribution: str
    version: str
    entries: Tuple[Entry, ...] = field(default_factory=tuple)
    schema: int = SCHEMA

    def to_json(self) -> bytes:
        data = asdict(self)
        data["entries"] = [asdict(entry) for entry in self.entries]
        return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")

    @classmethod
    def from_json(cls, data: Any, source: str) -> State:
        try:
            if data.get("schema") != SCHEMA:
                raise ValueError(f"schema {data.get('schema')!r}")
            entries = []
            for item in data["entries"]:
                entry = Entry(
                    path=str(item["path"]),
                    kind=str(item["kind"]),
                    before=None if item["before"] is None else str(item["before"]),
                    after=None if item["after"] is None else str(item["after"]),
                    patch=None if item.get("patch") is None else str(item["patch"]),
                )
                _check_entry(entry)
                entries.append(entry)
            return cls(
                tool_version=str(data["tool_version"]),
                applied_at=str(data["applied_at"]),
                distribution=str(data["distribution"]),
                version=str(data["version"]),
                entries=tuple(entries),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise _not_valid(source, "state file", exc) from None


def _start_over(directory: Path, then: str = "") -> str:
    """The fix for a damaged or foreign ``.ascend-env``: transformers as its wheel has it, and the
    directory gone (the version pinned: a newer transformers may need other patches)."""
    command = reinstall("transformers", "<version>")
    return f"reinstall transformers ({command}), then delete {directory}{then}."


def _not_valid(source: str, what: str, exc: Exception) -> EnvironmentProblem:
    """``state.json`` or ``journal.json`` cannot be read: the way back is a clean reinstall."""
    return EnvironmentProblem(
        f"{source} is not a valid ascend-env {what} ({exc}).",
        _start_over(Path(source).parent),
    )


def _check_entry(entry: Entry) -> None:
    from ascend_env.patching.diffs import safe_relative_path

    if entry.kind not in KINDS:
        raise ValueError(f"unknown kind {entry.kind!r}")
    if not safe_relative_path(entry.path) or entry.path.split("/", 1)[0] == DIRECTORY:
        raise ValueError(f"unsafe path {entry.path!r}")
    for digest in (entry.before, entry.after):
        if digest is not None and (len(digest) != 64 or digest.strip("0123456789abcdef")):
            raise ValueError(f"bad sha256 {digest!r}")


def read_state(site_packages: Path) -> Optional[State]:
    """The state file's content, or None when nothing is applied."""
    path = state_dir(site_packages) / STATE_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise EnvironmentProblem(
            f"cannot read {path} ({exc}).", "check the directory's permissions."
        ) from None
    try:
        data = jsontext.loads(text)
    except json.JSONDecodeError as exc:
        raise EnvironmentProblem(
            f"{path} is not JSON ({exc.msg}).",
            _start_over(path.parent),
        ) from None
    return State.from_json(data, str(path))


def drift(site_packages: Path) -> List[str]:
    """One line per file that no longer holds what ascend-env wrote; empty when all hold.

    Cheap: reads the state file and hashes the few files it lists. Never raises for a
    missing or unreadable state; that is reported as a line.
    """
    try:
        state = read_state(Path(site_packages))
    except EnvironmentProblem as exc:
        return [exc.problem]
    if state is None:
        return []
    lines = []
    for entry in state.entries:
        path = Path(site_packages) / entry.path
        data = read_file(path)
        found = None if data is None else hashlib.sha256(data).hexdigest()
        if found != entry.after:
            what = "is missing" if found is None else "changed since ascend-env install"
            lines.append(f"{entry.path} {what}")
        elif data is not None:
            lines.extend(
                f"{entry.path}: its bytecode {_where(path, pyc)} runs other code and is never checked "
                "against it"
                for pyc in bytecode.unchecked_stale(path, data)
            )
    return lines


def _where(source: Path, pyc: Path) -> str:
    """``pyc``'s name where it sits in ``__pycache__`` beside ``source``, else its full path."""
    return pyc.name if pyc.parent == source.parent / "__pycache__" else str(pyc)


def has_state(site_packages: Path) -> bool:
    """Whether ascend-env has changed ``site_packages`` (its ``state.json`` exists)."""
    return (state_dir(site_packages) / STATE_FILE).is_file()


def _sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()

# -- the lock -------------------------------------------------------------------------------------


def _cannot_create(directory: Path, exc: OSError) -> EnvironmentProblem:
    """The problem and fix for an OSError while creating ``directory`` or its lock file."""
    where = directory.parent
    if exc.errno == errno.EROFS:
        return EnvironmentProblem(
            f"cannot write in {where}: its file system is mounted read-only, so nothing was changed.",
            "run ascend-env where that file system is writable (in a Dockerfile: a RUN step of the "
            "image build), or use a virtual environment on a writable one.",
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return EnvironmentProblem(
            f"cannot write in {where} ({exc.strerror}): site-packages is read-only for this user.",
            "run as the user that owns the environment, or use a writable virtual environment.",
        )
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return EnvironmentProblem(
            f"cannot create {directory} ({exc.strerror}): its file system has no free space or inodes "
            "left, or the user's quota is used up, so nothing was changed.",
            f"free space and inodes there (df -h {where}; df -i {where}), then run the command again.",
        )
    return EnvironmentProblem(
        f"cannot create {directory} or its lock file ({exc.strerror}), so nothing was changed.",
        f"check {where} (permissions, free space: df -h {where}), then run the command again.",
    )


def _symlinked(directory: Path) -> EnvironmentProblem:
    return EnvironmentProblem(
        f"{directory} is a symbolic link (to {os.readlink(directory)}): ascend-env keeps its state "
        "only in a real directory inside site-packages, so nothing was changed.",
        f"remove the link (rm {directory}) and run the command again.",
    )


def _not_a_directory(directory: Path) -> EnvironmentProblem:
    return EnvironmentProblem(
        f"{directory} is a file, not ascend-env's state directory, so nothing was changed.",
        f"move it away (mv {directory} {directory}.bak) and run the command again.",
    )


def _held_too_long(path: Path, timeout: float) -> EnvironmentProblem:
    return EnvironmentProblem(
        f"another ascend-env run has held {path} for over {timeout:.0f} s.",
        "wait for it to finish; if no ascend-env process is running, run the command again.",
    )


def _open_lock_file(directory: Path, path: Path) -> Optional[int]:
    """A descriptor of the lock file, creating ``directory``; None when a concurrent run removed it.

    Where the lock file cannot be created (no inode left, say), a directory this call made is
    removed again: a refused run leaves nothing behind."""
    made = not directory.is_dir()
    try:
        make_dir(directory)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except FileNotFoundError:
        return None  # removed between mkdir and open
    except FileExistsError:
        if directory.exists() and not directory.is_dir():
            raise _not_a_directory(directory) from None
        return None  # another run removed the directory while mkdir looked at it
    except OSError as exc:
        if made:
            _remove_empty(directory)
        raise _cannot_create(directory, exc) from None
    match_owner(path, directory)  # never raises: where chown is refused, the file stays as it is
    return fd


def _try_flock(fd: int, path: Path, deadline: float, timeout: float) -> bool:
    """Lock ``fd`` without waiting; when another run holds it, close ``fd`` and say False.

    Raises :class:`EnvironmentProblem` once ``deadline`` (a ``time.monotonic()``) has passed.
    """
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        if time.monotonic() > deadline:
            raise _held_too_long(path, timeout) from None
        return False
    return True


def _still_linked(path: Path, fd: int) -> bool:
    """Whether ``fd`` is still the file at ``path`` (a finishing restore removes the directory)."""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _acquire(directory: Path, path: Path, timeout: float) -> int:
    """An open descriptor of ``path``, exclusively locked, that is still the file at ``path``."""
    deadline = time.monotonic() + timeout
    while True:
        fd = _open_lock_file(directory, path)
        if fd is None:
            continue
        if not _try_flock(fd, path, deadline, timeout):
            time.sleep(0.05)
            continue
        if _still_linked(path, fd):
            return fd
        os.close(fd)  # locked a file another run has unlinked: a new one may be locked meanwhile


@contextmanager
def locked(directory: Path, timeout: float = 120.0) -> Iterator[Path]:
    """Hold an exclusive lock on ``directory/lock``, creating ``directory`` if needed."""
    if directory.is_symlink():
        raise _symlinked(directory)
    path = directory / LOCK_FILE
    fd = _acquire(directory, path, timeout)
    try:
        yield path
    finally:
        os.close(fd)


# -- the journal ----------------------------------------------------------------------------------

CRASH_ENV = "ASCEND_ENV_CRASH_AT"
# "change-N-temp" and "change-N" exist for every change N (0-based) of a commit.
CRASH_POINTS = (
    "blob",
    "blobs",
    "journal-temp",
    "journal",
    "change-N-temp",
    "change-N",
    "state",
    "commit",
    "cleanup",
)


def _crash_point(label: str) -> None:
    """Die at once, as ``kill -9`` would, when ``ASCEND_ENV_CRASH_AT`` names ``label`` (tests only)."""
    if os.environ.get(CRASH_ENV) == label:
        os._exit(137)


@dataclass(frozen=True)
class Change:
    """Set ``path`` (relative to site-packages) from ``before`` to ``after`` (sha256 hex; None: absent)."""

    path: str
    before: Optional[str]
    after: Optional[str]


@dataclass(frozen=True)
class Journal:
    action: str
    changes: Sequence[Change]
    state: Optional[State]  # the state to leave; None removes ascend-env's directory

    def to_json(self) -> bytes:
        data = {
            "schema": 1,
            "action": self.action,
            "changes": [asdict(change) for change in self.changes],
            "state": None if self.state is None else json.loads(self.state.to_json()),
        }
        return (json.dumps(data, indent=2) + "\n").encode("utf-8")

    @classmethod
    def from_json(cls, data: Any, source: str) -> Journal:
        try:
            changes = [Change(str(c["path"]), c["before"], c["after"]) for c in data["changes"]]
            for change in changes:
                _check_entry(Entry(change.path, "extra", change.before, change.after))
            state = None if data["state"] is None else State.from_json(data["state"], source)
            return cls(str(data["action"]), tuple(changes), state)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise _not_valid(source, "journal", exc) from None



def write_atomic(path: Path, data: bytes, tmp_dir: Path, label: Optional[str] = None) -> None:
    """Replace ``path`` with ``data`` via a temp file in ``tmp_dir``, fsynced, keeping the file's mode."""
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    owner = owner_for(path)
    make_dir(tmp_dir)
    try:
        _write_through(path, data, tmp_dir, mode, owner, label)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        # tmp_dir is on another file system: stage next to the target instead.
        _write_through(path, data, path.parent, mode, owner, label)


def _write_through(
    path: Path, data: bytes, staging: Path, mode: int, owner: Optional[Tuple[int, int]], label: Optional[str]
) -> None:
    with atomic.replacing(path, staging=staging, durable=True) as temporary:
        with open(temporary, "wb") as handle:
            handle.write(data)
            os.fchmod(handle.fileno(), mode)
            give_fd(handle.fileno(), owner)  # root writing another user's environment: keep it theirs
        if label:
            _crash_point(label + "-temp")


def _write_failed(path: Path, exc: OSError) -> EnvironmentProblem:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = f"free space and inodes on the file system of {path} (df -h, df -i), then run the command again"
    elif exc.errno == errno.EROFS:
        fix = (
            f"remount the file system of {path} writable (or run where it is: in a Dockerfile, a RUN "
            "step of the image build), then run the command again"
        )
    else:
        fix = (
            "make site-packages writable for this user (or use a virtual environment), "
            "then run the command again"
        )
    return EnvironmentProblem(
        f"cannot write {path} ({exc.strerror}).",
        fix + ": it finishes an interrupted change, or starts afresh.",
    )


def _discard(site_packages: Path) -> None:
    """After a failed write before the journal exists: drop what this run stored (best effort)."""
    directory = state_dir(site_packages)
    try:
        if (directory / JOURNAL_FILE).exists():
            return  # the change is recorded: the next run finishes it
        recover(site_packages)  # no journal: clears temp files and bytes no state refers to
        if not (directory / STATE_FILE).exists():
            remove_directory(site_packages)
    except (OSError, EnvironmentProblem):
        pass


def _store_blob(site_packages: Path, data: bytes) -> str:
    """Keep ``data`` in ``originals/`` under its sha256; returns the hash."""
    digest = _sha256_hex(data)
    directory = state_dir(site_packages) / ORIGINALS
    path = directory / digest
    if file_sha256(path) != digest:
        make_dir(directory)
        write_atomic(path, data, state_dir(site_packages) / TMP)
    return digest


def read_blob(site_packages: Path, digest: str) -> bytes:
    """The bytes stored under ``digest``; raises when missing or corrupt."""
    path = state_dir(site_packages) / ORIGINALS / digest
    try:
        data = path.read_bytes()
    except OSError:
        data = None
    if data is None or _sha256_hex(data) != digest:
        raise EnvironmentProblem(
            f"the recorded bytes {path} are missing or damaged.",
            _start_over(path.parent.parent),
        )
    return data


def _apply_change(site_packages: Path, change: Change, index: int, written: FrozenSet[Path]) -> None:
    path = site_packages / change.path
    drop_bytecode(path, keep=written)
    current = file_sha256(path)
    if current == change.after:
        return
    if current != change.before:
        raise EnvironmentProblem(
            f"{change.path} changed while an ascend-env run was interrupted "
            f"(sha256 {current or 'missing'}, expected {change.before or 'missing'} or {change.after}).",
            _start_over(state_dir(site_packages), " and run install again"),
        )
    try:
        if change.after is None:
            _crash_point(f"change-{index}-temp")
            path.unlink()
            atomic.fsync_directory(path.parent)
        else:
            if path.parent.name == "__pycache__":  # the hook's .pyc: site-packages may have none
                make_dir(path.parent)
            write_atomic(
                path,
                read_blob(site_packages, change.after),
                state_dir(site_packages) / TMP,
                label=f"change-{index}",
            )
    except OSError as exc:
        raise _write_failed(path, exc) from None
    _crash_point(f"change-{index}")


def drop_bytecode(path: Path, keep: FrozenSet[Path] = frozenset()) -> None:
    """Remove the cached bytecode of ``path`` (a ``.py`` file), for every interpreter and
    optimisation level, in ``__pycache__`` and under any bytecode prefix in force
    (``PYTHONPYCACHEPREFIX``), before its source changes: a ``.pyc`` compiled with
    ``--invalidation-mode unchecked-hash`` (common in images) is never checked against its
    source, so the old code would go on running. Python writes a fresh one at the next import.
    ``keep`` names bytecode that the same run writes."""
    if path.suffix != ".py":
        return
    removed = set()
    for pyc in bytecode.cached(path):
        if pyc in keep:
            continue
        try:
            pyc.unlink()
        except FileNotFoundError:  # another process removed it
            continue
        except OSError as exc:
            raise _write_failed(pyc.parent, exc) from None
        removed.add(pyc.parent)
    for directory in sorted(removed):
        atomic.fsync_directory(directory)


def _finish(site_packages: Path, journal: Journal) -> None:
    directory = state_dir(site_packages)
    # Bytecode that the journal writes or the state keeps (the hook's .pyc) is not stale bytecode
    # to drop: a .pyc a lost state left, adopted as it is, must still be there afterwards.
    kept = [entry.path for entry in journal.state.entries if entry.after] if journal.state else []
    written = frozenset(
        site_packages / path
        for path in [change.path for change in journal.changes if change.after] + kept
        if path.endswith(".pyc")
    )
    for index, change in enumerate(journal.changes):
        _apply_change(site_packages, change, index, written)
    if journal.state is not None:
        write_atomic(directory / STATE_FILE, journal.state.to_json(), directory / TMP)
        _crash_point("state")
        (directory / JOURNAL_FILE).unlink()
        atomic.fsync_directory(directory)
        _crash_point("commit")
        keep = {entry.before for entry in journal.state.entries if entry.before}
        _clean(directory, keep)
    else:
        # Restore: the state goes first, so that a crash leaves the journal to finish from.
        try:
            (directory / STATE_FILE).unlink()
        except FileNotFoundError:
            pass
        _crash_point("state")
        (directory / JOURNAL_FILE).unlink()
        atomic.fsync_directory(directory)
        _crash_point("commit")
        remove_directory(site_packages)
    _crash_point("cleanup")


def _ours(path: Path) -> bool:
    """Whether ascend-env wrote ``path`` (inside ``.ascend-env``): its state, journal and lock,
    stored bytes (named by their sha256) and temporary files (named ``.<random>``)."""
    parent = path.parent.name
    if parent == ORIGINALS:
        return bool(_DIGEST.match(path.name))
    if parent == TMP:
        return path.name.startswith(".")
    return path.name in (STATE_FILE, JOURNAL_FILE, LOCK_FILE) or path.name.startswith(".")


def _clean(directory: Path, keep: Iterable[str]) -> None:
    """Remove stored bytes no state names and temporary files; what ascend-env did not write stays."""
    keep = set(keep)
    for sub in (ORIGINALS, TMP):
        for path in _files(directory / sub):
            if _ours(path) and path.name not in keep:
                path.unlink()
    _remove_empty(directory / TMP)


def _files(directory: Path) -> List[Path]:
    """The plain files in ``directory`` (none where it is not a directory)."""
    try:
        return [path for path in directory.iterdir() if path.is_file() and not path.is_symlink()]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _remove_empty(directory: Path) -> None:
    try:
        directory.rmdir()
    except OSError:  # not empty (a file ascend-env did not write), or gone
        pass


def remove_directory(site_packages: Path) -> None:
    """Remove what ascend-env wrote in ``.ascend-env/``, the lock file last (so waiters notice
    it went), and the directory once empty. A file ascend-env did not write stays, and with it
    the directory."""
    directory = state_dir(site_packages)
    for sub in (ORIGINALS, TMP):
        for path in _files(directory / sub):
            if _ours(path):
                path.unlink()
        _remove_empty(directory / sub)
    lock = directory / LOCK_FILE
    for path in _files(directory):
        if _ours(path) and path != lock:
            path.unlink()
    try:
        lock.unlink()
    except FileNotFoundError:
        pass
    _remove_empty(directory)


def holds_ours(site_packages: Path) -> bool:
    """Whether ``.ascend-env/`` holds a file ascend-env wrote; an empty one is removed (a run
    refused for want of an inode left it in older releases)."""
    directory = state_dir(site_packages)
    places = (directory, directory / ORIGINALS, directory / TMP)
    found = any(_ours(path) for place in places for path in _files(place))
    if not found:
        _remove_empty(directory)
    return found


def commit(site_packages: Path, journal: Journal, blobs: Mapping[str, bytes]) -> None:
    """Carry out ``journal``; ``blobs`` maps sha256 to bytes for every hash it names.

    Call with the lock held and after :func:`recover`.
    """
    directory = state_dir(site_packages)
    needed = {c.after for c in journal.changes if c.after} | {c.before for c in journal.changes if c.before}
    # The originals the state names: new ones come in ``blobs`` (a file adopted without a write),
    # the others are stored already.
    originals = {e.before for e in journal.state.entries if e.before} if journal.state else set()
    stored = {d for d in originals - set(blobs) if file_sha256(directory / ORIGINALS / d) == d}
    missing = sorted(digest for digest in needed | originals if digest not in blobs and digest not in stored)
    if missing:
        raise ValueError(f"commit: no bytes for {missing}")
    needed |= originals - stored
    try:
        for digest in sorted(needed):
            if _sha256_hex(blobs[digest]) != digest:
                raise ValueError(f"commit: bytes do not hash to {digest}")
            _store_blob(site_packages, blobs[digest])
            _crash_point("blob")
        if needed:
            atomic.fsync_directory(directory / ORIGINALS)
        _crash_point("blobs")
        write_atomic(directory / JOURNAL_FILE, journal.to_json(), directory / TMP, label="journal")
        _crash_point("journal")
    except OSError as exc:
        _discard(site_packages)
        raise _write_failed(directory, exc) from None
    try:
        _finish(site_packages, journal)
    except OSError as exc:  # e.g. a full disk when writing the state: the journal finishes it later
        raise _write_failed(directory, exc) from None


def read_journal(site_packages: Path) -> Optional[Journal]:
    """The journal of an interrupted run, or None."""
    path = state_dir(site_packages) / JOURNAL_FILE
    try:
        data = jsontext.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise EnvironmentProblem(
            f"cannot read the journal {path} ({exc}).",
            _start_over(path.parent),
        ) from None
    return Journal.from_json(data, str(path))


def recover(site_packages: Path) -> Optional[str]:
    """Finish an interrupted run, if any; returns its action ("install", "restore"), else None.

    Call with the lock held. Also clears leftovers of a run killed before its journal.
    """
    journal = read_journal(site_packages)
    directory = state_dir(site_packages)
    if journal is None:
        if directory.is_dir():
            state = read_state(site_packages)
            keep = [entry.before for entry in state.entries if entry.before] if state else []
            _clean(directory, keep)
        return None
    try:
        _finish(site_packages, journal)
    except OSError as exc:
        raise _write_failed(directory, exc) from None
    return journal.action


@contextmanager
def locked_and_recovered(site_packages: Path) -> Iterator[Optional[str]]:
    """Hold the lock with any interrupted run finished; yields that run's action, or None.

    Finishing an interrupted restore removes ``.ascend-env/`` and the lock file in it; the lock
    is then taken again, so that writes never happen under a lock another run cannot see.
    """
    recovered: Optional[str] = None
    while True:
        with locked(state_dir(site_packages)) as lock:
            inode = os.stat(lock).st_ino
            recovered = recover(site_packages) or recovered
            try:
                kept = os.stat(lock).st_ino == inode  # our open lock file keeps its inode unused
            except FileNotFoundError:
                kept = False
            if kept:
                yield recovered
                return


def needs_recovery(site_packages: Path) -> bool:
    """Whether an interrupted run left a journal, temp files or unreferenced bytes behind."""
    directory = state_dir(site_packages)
    if (directory / JOURNAL_FILE).exists() or (directory / TMP).exists():
        return True
    originals = directory / ORIGINALS
    if not originals.is_dir():
        return False
    try:
        state = read_state(site_packages)
    except EnvironmentProblem:
        return True
    if state is None:
        return True
    keep = {entry.before for entry in state.entries if entry.before}
    try:
        return any(path.name not in keep for path in originals.iterdir())
    except FileNotFoundError:  # a finishing restore removed it meanwhile
        return False
