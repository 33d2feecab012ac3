"""``journal.json`` and the one way to change site-packages: a crash-safe transaction.

:func:`transaction` is the entry: it takes the lock, finishes any interrupted run, and hands
over a :class:`Transaction`, whose :meth:`~Transaction.commit` carries out a journal and whose
:meth:`~Transaction.rollback` leaves nothing of a run that has nothing to write.

A commit writes every byte string it will need into ``originals/`` (named by sha256), then
``journal.json`` (the changes, by hash, and the state to leave), then each file with temp file
+ fsync + ``os.replace``, then the state, then removes the journal. :func:`_recover` finishes an
interrupted commit: each file is either still at its ``before`` hash (written now) or already at
its ``after`` hash (kept), so running it again and again converges; a file at neither hash was
changed by someone else and stops it. Tests kill a run at each write point
(:mod:`~ascend_env.patching.faults`).
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, FrozenSet, Iterator, Mapping, Optional, Sequence

from ascend_env.exceptions import EnvironmentProblem
from ascend_env.patching import bytecode
from ascend_env.patching.faults import crash_point
from ascend_env.patching.locking import locked
from ascend_env.patching.owners import make_dir
from ascend_env.patching.problems import not_valid, start_over, write_failed
from ascend_env.patching.records import sha256_hex
from ascend_env.patching.state import Entry, State, check_entry, check_schema, read_document, read_state
from ascend_env.patching.store import (
    JOURNAL_FILE,
    ORIGINALS,
    STATE_FILE,
    TMP,
    clean,
    file_sha256,
    read_blob,
    remove_directory,
    state_dir,
    write_atomic,
)
from ascend_env.utils import atomic

__all__ = [
    "SCHEMA",
    "Change",
    "Journal",
    "Transaction",
    "needs_recovery",
    "read_journal",
    "transaction",
]

SCHEMA = 1


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
            "schema": SCHEMA,
            "action": self.action,
            "changes": [asdict(change) for change in self.changes],
            "state": None if self.state is None else json.loads(self.state.to_json()),
        }
        return (json.dumps(data, indent=2) + "\n").encode("utf-8")

    @classmethod
    def from_json(cls, data: Any, source: str) -> Journal:
        try:
            check_schema(data, SCHEMA)
            changes = [Change(str(c["path"]), c["before"], c["after"]) for c in data["changes"]]
            for change in changes:
                check_entry(Entry(change.path, "extra", change.before, change.after))
            state = None if data["state"] is None else State.from_json(data["state"], source)
            return cls(str(data["action"]), tuple(changes), state)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise not_valid(source, "journal", exc) from None


class Transaction:
    """A change of one site-packages under the lock, any interrupted run finished: either
    :meth:`commit` or :meth:`rollback`."""

    def __init__(self, site_packages: Path, recovered: Optional[str]) -> None:
        self.site_packages = site_packages
        self.recovered = recovered  # the action of the interrupted run finished first, if any

    def commit(self, journal: Journal, blobs: Mapping[str, bytes]) -> None:
        """Carry out ``journal`` (see :func:`_commit`)."""
        _commit(self.site_packages, journal, blobs)

    def rollback(self) -> None:
        """Write nothing; where no state is recorded, remove what taking the lock created."""
        if read_state(self.site_packages) is None:
            remove_directory(self.site_packages)


@contextmanager
def transaction(site_packages: Path) -> Iterator[Transaction]:
    """The one entry for changing ``site_packages``: a damaged journal is refused before the
    lock file is made, then the lock is held with any interrupted run finished."""
    read_journal(site_packages)
    with _locked_and_recovered(site_packages) as recovered:
        yield Transaction(site_packages, recovered)


def _discard(site_packages: Path) -> None:
    """After a failed write before the journal exists: drop what this run stored (best effort)."""
    directory = state_dir(site_packages)
    try:
        if (directory / JOURNAL_FILE).exists():
            return  # the change is recorded: the next run finishes it
        _recover(site_packages)  # no journal: clears temp files and bytes no state refers to
        if not (directory / STATE_FILE).exists():
            remove_directory(site_packages)
    except (OSError, EnvironmentProblem):
        pass


def _store_blob(site_packages: Path, data: bytes) -> str:
    """Keep ``data`` in ``originals/`` under its sha256; returns the hash."""
    digest = sha256_hex(data)
    directory = state_dir(site_packages) / ORIGINALS
    path = directory / digest
    if file_sha256(path) != digest:
        make_dir(directory)
        write_atomic(path, data, state_dir(site_packages) / TMP)
    return digest


def _apply_change(site_packages: Path, change: Change, index: int, written: FrozenSet[Path]) -> None:
    path = site_packages / change.path
    bytecode.drop(path, keep=written)
    current = file_sha256(path)
    if current == change.after:
        return
    if current != change.before:
        raise EnvironmentProblem(
            f"{change.path} changed while an ascend-env run was interrupted "
            f"(sha256 {current or 'missing'}, expected {change.before or 'missing'} or {change.after}).",
            start_over(state_dir(site_packages), " and run install again"),
        )
    try:
        if change.after is None:
            crash_point(f"change-{index}-temp")
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
        raise write_failed(path, exc) from None
    crash_point(f"change-{index}")


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
        crash_point("state")
        (directory / JOURNAL_FILE).unlink()
        atomic.fsync_directory(directory)
        crash_point("commit")
        keep = {entry.before for entry in journal.state.entries if entry.before}
        clean(directory, keep)
    else:
        # Restore: the state goes first, so that a crash leaves the journal to finish from.
        try:
            (directory / STATE_FILE).unlink()
        except FileNotFoundError:
            pass
        crash_point("state")
        (directory / JOURNAL_FILE).unlink()
        atomic.fsync_directory(directory)
        crash_point("commit")
        remove_directory(site_packages)
    crash_point("cleanup")


def _commit(site_packages: Path, journal: Journal, blobs: Mapping[str, bytes]) -> None:
    """Carry out ``journal``; ``blobs`` maps sha256 to bytes for every hash it names.

    Call with the lock held and after :func:`_recover`.
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
            if sha256_hex(blobs[digest]) != digest:
                raise ValueError(f"commit: bytes do not hash to {digest}")
            _store_blob(site_packages, blobs[digest])
            crash_point("blob")
        if needed:
            atomic.fsync_directory(directory / ORIGINALS)
        crash_point("blobs")
        write_atomic(directory / JOURNAL_FILE, journal.to_json(), directory / TMP, label="journal")
        crash_point("journal")
    except OSError as exc:
        _discard(site_packages)
        raise write_failed(directory, exc) from None
    try:
        _finish(site_packages, journal)
    except OSError as exc:  # e.g. a full disk when writing the state: the journal finishes it later
        raise write_failed(directory, exc) from None


def read_journal(site_packages: Path) -> Optional[Journal]:
    """The journal of an interrupted run, or None."""
    path = state_dir(site_packages) / JOURNAL_FILE

    def problem(exc: Exception) -> EnvironmentProblem:
        return EnvironmentProblem(f"cannot read the journal {path} ({exc}).", start_over(path.parent))

    return read_document(path, Journal.from_json, problem)


def _recover(site_packages: Path) -> Optional[str]:
    """Finish an interrupted run, if any; returns its action ("install", "restore"), else None.

    Call with the lock held. Also clears leftovers of a run killed before its journal.
    """
    journal = read_journal(site_packages)
    directory = state_dir(site_packages)
    if journal is None:
        if directory.is_dir():
            state = read_state(site_packages)
            keep = [entry.before for entry in state.entries if entry.before] if state else []
            clean(directory, keep)
        return None
    try:
        _finish(site_packages, journal)
    except OSError as exc:
        raise write_failed(directory, exc) from None
    return journal.action


@contextmanager
def _locked_and_recovered(site_packages: Path) -> Iterator[Optional[str]]:
    """Hold the lock with any interrupted run finished; yields that run's action, or None.

    Finishing an interrupted restore removes ``.ascend-env/`` and the lock file in it; the lock
    is then taken again, so that writes never happen under a lock another run cannot see.
    """
    recovered: Optional[str] = None
    while True:
        with locked(state_dir(site_packages)) as lock:
            inode = os.stat(lock).st_ino
            recovered = _recover(site_packages) or recovered
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
