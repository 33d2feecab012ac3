"""Plan ``install``: the clean files patched, RECORD given their hashes, the startup hook's files
added, and the state to leave; all computed in memory, refused as a whole on any conflict.

An install run over an earlier one keeps what that one recorded (the originals ``restore`` puts
back), and one over a lost state (``.ascend-env`` deleted by hand) adopts the files it left.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List, Literal, Mapping, Optional, Set, Tuple, Union

from ascend_env import __version__
from ascend_env.exceptions import HunkMismatch, UsageError
from ascend_env.patching import bytecode
from ascend_env.patching.inspection import FileStatus, Inspection, inside, inspect_site, unknown_release
from ascend_env.patching.manifest import NothingToDo, UnknownRelease, patches_dir
from ascend_env.patching.plan import Plan, sha256_or_none
from ascend_env.patching.records import (
    Distribution,
    add_rows,
    find_distribution,
    is_record,
    remove_rows,
    rewrite_record,
    sha256_hex,
)
from ascend_env.patching.sites import DISTRIBUTION, isin_falls_back
from ascend_env.patching.state import Entry, State, read_state
from ascend_env.patching.store import file_sha256, read_file
from ascend_env.states import InstallWord, install_word

__all__ = [
    "PATCH_MODES",
    "EntryKind",
    "InstallReport",
    "InstallResult",
    "drop_stale_bytecode",
    "plan_install",
    "startup_hook_files",
]

PATCH_MODES = ("auto", "always", "never")
# ascend_env.states.install_word's words, and "nothing to do" where nothing is asked (no extra files).
InstallResult = Union[InstallWord, Literal["nothing to do"]]
EntryKind = Literal["patch", "record", "extra"]


@dataclass
class InstallReport:
    """What ``install`` did or would do; :meth:`to_dict` is its ``--json`` form."""

    site_packages: str
    transformers: Optional[str]
    patches: str
    reason: str
    files: List[FileStatus] = field(default_factory=list)
    result: InstallResult = "nothing to do"
    changed: List[str] = field(default_factory=list)
    dry_run: bool = False
    bytecode_dropped: List[str] = field(default_factory=list)
    recovered: Optional[str] = None
    adopted: List[str] = field(default_factory=list)  # files a lost state left, now recorded

    def to_dict(self) -> Dict[str, Any]:
        data: Dict[str, Any] = {
            "site_packages": self.site_packages,
            "transformers": self.transformers,
            "patches": self.patches,
            "reason": self.reason,
            "files": [f.to_dict() for f in self.files],
            "result": self.result,
            "changed": list(self.changed),
        }
        if self.dry_run:
            data["dry_run"] = True
        if self.bytecode_dropped:
            data["bytecode_dropped"] = list(self.bytecode_dropped)
        if self.adopted:
            data["adopted"] = list(self.adopted)
        if self.recovered:
            data["recovered"] = self.recovered
        return data


def _decide(site_packages: Path, patches: str, search_sys_path: bool) -> Tuple[bool, str]:
    if patches == "always":
        return True, "--patches always"
    if patches == "never":
        return False, "--hook-only (--patches never): transformers' files are left as they are"
    falls_back = isin_falls_back(site_packages, search_sys_path)
    if falls_back is None:
        return (
            False,
            "torch_npu is not installed, so isin never reaches the NPU: no patch needed (--patches "
            "always patches anyway); the startup hook registers an NPU isin once a torch_npu without "
            "one is installed",
        )
    if falls_back:
        return True, "torch_npu has no native NPU isin: it would fall back to the CPU"
    return False, "torch_npu has a native NPU isin: no patch needed (--patches always patches anyway)"


def _inspect_for_install(site_packages: Path, patches: str, directory: Path) -> Inspection:
    if patches == "never" and find_distribution(site_packages, DISTRIBUTION) is None:
        # The hook alone needs no transformers: it serves whatever calls isin.
        return Inspection(None, NothingToDo("", "transformers is not installed"))
    return inspect_site(site_packages, None, directory)


def _release_reason(inspection: Inspection) -> Optional[str]:
    """Refuse a release the manifest does not know; why a known one needs no patch, if it does not."""
    outcome, dist = inspection.outcome, inspection.distribution
    # Only a hook-only plan (--patches never, no transformers) has no distribution.
    if isinstance(outcome, UnknownRelease):
        assert dist is not None
        raise unknown_release(dist)
    if isinstance(outcome, NothingToDo):
        assert dist is not None
        return f"transformers {dist.version} needs no patch: {outcome.why}"
    return None


def _kept_entries(old: Optional[State], version: Optional[str]) -> Dict[str, Entry]:
    """The entries of the last install that still describe this site-packages."""
    if old is None:
        return {}
    entries = {e.path: e for e in old.entries}
    if old.version != (version or ""):
        # transformers was replaced: entries of the old release's files no longer apply.
        return {p: e for p, e in entries.items() if e.kind == "extra"}
    return entries


def _left_by_lost_state(dist: Distribution, status: FileStatus) -> bool:
    """Whether an applied file with no state entry was patched by an install whose state was lost:
    its RECORD row has the patched hash (install rewrites it; a hand edit does not), the release
    is a plain one (a ``+ascend`` build of patch-wheel ships the patched text as its own), and the
    reverse patch gives the release's text back."""
    if status.status != "applied" or status.original is None or status.current is None:
        return False
    row = dist.record.get(status.path)
    return row is not None and row.matches(status.current) and "+" not in dist.version


def _original(previous: Optional[Entry], before: Optional[str]) -> Optional[str]:
    """What restore puts back: what was there before ascend-env first wrote the file (nothing,
    for the hook's files), not bytes someone edited into it since; but a file that another
    installer replaced since (pip rewrote ascend-env's RECORD) has the new bytes as its original."""
    if previous is None or (previous.before is not None and before != previous.after):
        return before
    return previous.before


def _extra_file(site_packages: Path, name: str) -> Path:
    """The path of an extra file, refused where it is not a plain name inside ``site_packages``."""
    file_path = site_packages / name
    cache = file_path.parent.name == "__pycache__" and file_path.parent.parent == site_packages
    if not inside(site_packages, name) or not (file_path.parent.is_dir() or cache):
        raise UsageError(
            f"extra file {name!r} is not a plain file name inside {site_packages} "
            "(a symbolic link, or a path that leaves it).",
            f"remove {file_path} if it is a link, then run the command again.",
        )
    return file_path


class _InstallPlanner:
    """Builds an install plan: its writes, and the state entries the run leaves."""

    def __init__(self, plan: Plan[InstallReport], old: Dict[str, Entry], recorded: Optional[State]) -> None:
        self.plan = plan
        self.site_packages = plan.site_packages
        self.old = old
        self.recorded = recorded  # the state on disk, all of it
        self.entries: Dict[str, Entry] = {}

    def add(
        self, path: str, kind: EntryKind, current: Optional[bytes], new: bytes, patch: Optional[str] = None
    ) -> None:
        before, after = sha256_or_none(current), sha256_hex(new)
        previous = self.old.get(path)
        if before != after:
            self.plan.write(path, current, new)
            self.entries[path] = Entry(path, kind, _original(previous, before), after, patch)
        elif previous is not None:
            self.entries[path] = Entry(path, kind, previous.before, after, patch)
        elif kind == "extra":
            self.entries[path] = Entry(path, kind, None, after, patch)

    def patch_files(self, files: List[FileStatus], dist: Optional[Distribution]) -> None:
        """The clean files patched, the recorded ones kept, those a lost state left adopted, and
        RECORD given their hashes."""
        final: Dict[str, bytes] = {}
        originals: Dict[str, bytes] = {}  # of the adopted files
        for status in files:
            if status.status == "clean":
                assert status.current is not None and status.new is not None
                self.add(status.path, "patch", status.current, status.new, status.patch)
                final[status.path] = status.new
            elif status.path in self.old and status.current is not None:
                self.add(status.path, "patch", status.current, status.current, status.patch)
                final[status.path] = status.current
            elif dist is not None and _left_by_lost_state(dist, status):
                assert status.current is not None and status.original is not None
                self.plan.blobs[sha256_hex(status.original)] = status.original
                before, after = sha256_hex(status.original), sha256_hex(status.current)
                self.entries[status.path] = Entry(status.path, "patch", before, after, status.patch)
                self.plan.report.adopted.append(status.path)
                final[status.path], originals[status.path] = status.current, status.original
        if final:
            assert dist is not None  # the files patched belong to it
            self._amend_record(dist, final, originals)

    def _amend_record(
        self, dist: Distribution, final: Mapping[str, bytes], originals: Mapping[str, bytes]
    ) -> None:
        path = dist.record_path
        current = (self.site_packages / path).read_bytes()
        new = rewrite_record(current, final)
        previous = self.old.get(path)
        if previous is None and originals:
            # Its rows of the adopted files were rewritten by the install whose state was lost.
            original = rewrite_record(current, originals)
            self.plan.blobs[sha256_hex(original)] = original
            if new != current:
                self.plan.write(path, current, new)
            self.entries[path] = Entry(path, "record", sha256_hex(original), sha256_hex(new))
            self.plan.report.adopted.append(path)
            return
        self.add(path, "record", current, new)
        if previous is not None and sha256_hex(current) == previous.after:
            self.entries[path] = Entry(path, "record", previous.before, self.entries[path].after)

    def add_extra_files(self, extra_files: Mapping[str, bytes]) -> None:
        for name, data in sorted(extra_files.items()):
            current = read_file(_extra_file(self.site_packages, name))
            previous = self.old.get(name)
            if previous is None or (previous.before is None and is_record(name)):
                self._adopt(name, current, data, set(extra_files) - {name})
            else:
                self.add(name, "extra", current, data)

    def _adopt(self, name: str, current: Optional[bytes], new: bytes, others: Set[str]) -> None:
        """An extra file the state has no entry for: a first install, or what a lost state left
        (``.ascend-env`` deleted by hand). What restore puts back is nothing for ascend-env's own
        files (the hook's, whatever is there now), and for a RECORD (ascend-env's own) the RECORD
        without the rows of the other extra files, which only an earlier install adds; an old
        state that recorded no original for a RECORD is mended the same way."""
        original = remove_rows(current, others) if current is not None and is_record(name) else None
        if original is not None:
            self.plan.blobs[sha256_hex(original)] = original
        if current != new:
            self.plan.write(name, current, new)
        if current is not None and (original is None or original != current):
            self.plan.report.adopted.append(name)
        self.entries[name] = Entry(name, "extra", sha256_or_none(original), sha256_hex(new))

    def keep_unclaimed(self) -> None:
        for path, entry in self.old.items():
            # An entry that no file of this run claims is kept, unless it is a file ascend-env
            # amended (its own RECORD) that another installer has replaced since: pip owns it now.
            replaced = entry.before is not None and file_sha256(self.site_packages / path) != entry.after
            if path not in self.entries and not (entry.kind == "extra" and replaced):
                self.entries[path] = entry

    def finish(self, dist: Optional[Distribution], wanted: bool, files: List[FileStatus]) -> None:
        """The state to leave and the result, from what the plan writes."""
        plan, report = self.plan, self.plan.report
        entries = tuple(self.entries.values())
        recorded = set(self.recorded.entries) if self.recorded is not None else set()
        prepatched = wanted and bool(files) and all(f.status == "applied" for f in files)
        patched = prepatched or any(entry.kind == "patch" for entry in entries)
        if plan.changes or (entries and set(entries) != recorded):
            # Also without a write: the state records what a lost state left (adopted files).
            name = dist.name if dist is not None else DISTRIBUTION
            plan.state = State(__version__, _now(), name, report.transformers or "", entries)
            report.result = install_word(patched, changed=bool(plan.changes), dry_run=False)
        elif entries or prepatched:
            report.result = install_word(patched, changed=False, dry_run=False)
        if prepatched and not entries:
            report.reason = "the files were patched before (e.g. a +ascend wheel); nothing recorded"
        if not wanted and patched:
            report.reason += "; the patches applied before stay (python -m ascend_env restore removes them)"
        report.changed = [c.path for c in plan.changes]


def plan_install(
    site_packages: Path,
    *,
    patches: str = "auto",
    directory: Optional[Path] = None,
    extra_files: Optional[Mapping[str, bytes]] = None,
    search_sys_path: bool = False,
) -> Plan[InstallReport]:
    """Everything ``install`` would write, computed in memory; raises on any refusal."""
    if patches not in PATCH_MODES:
        raise UsageError(f"--patches {patches}: not one of {', '.join(PATCH_MODES)}.")
    wanted, reason = _decide(site_packages, patches, search_sys_path)
    old = read_state(site_packages)
    directory = patches_dir() if directory is None else directory
    inspection = _inspect_for_install(site_packages, patches, directory)
    dist = inspection.distribution
    version = dist.version if dist is not None else None
    report = InstallReport(str(site_packages), version, patches, reason, inspection.files)
    planner = _InstallPlanner(Plan(site_packages, report), _kept_entries(old, version), old)
    files = inspection.files if wanted else []
    if wanted:
        report.reason = _release_reason(inspection) or report.reason
    _refuse_conflicts(files)
    planner.patch_files(files, dist)
    planner.add_extra_files(extra_files or {})
    planner.keep_unclaimed()
    planner.finish(dist, wanted, files)
    return planner.plan


def _refuse_conflicts(files: List[FileStatus]) -> None:
    bad = [f for f in files if f.status == "conflict"]
    if not bad:
        return
    first = bad[0].error
    names = ", ".join(f.path for f in bad)
    assert first is not None
    raise type(first)(
        f"{len(bad)} file(s) conflict, nothing was changed: {names}.\n  {first.problem}",
        first.fix,
        **(
            {k: getattr(first, k) for k in ("path", "hunk", "line", "expected", "found")}
            if isinstance(first, HunkMismatch)
            else {}
        ),
    )


def startup_hook_files(site_packages: Path, hook_files: Mapping[str, bytes]) -> Dict[str, bytes]:
    """The startup hook's files ``hook_files`` (name relative to site-packages -> bytes, as
    :func:`ascend_env.hook.files.written` gives them) as they join each install.

    Their writes share the install's journal and state, and ``restore`` removes them. Where
    ascend-env itself is installed in ``site_packages``, its RECORD gains rows for them, so that
    ``pip uninstall ascend-env`` removes them too.
    """
    own = find_distribution(site_packages, "ascend-env")
    if own is None:
        return dict(hook_files)
    record = (site_packages / own.record_path).read_bytes()
    return {**hook_files, own.record_path: add_rows(record, hook_files)}


def drop_stale_bytecode(site_packages: Path) -> List[str]:
    """Drop the bytecode of each patched file that holds ascend-env's text but has unchecked
    bytecode compiled from other text (which would run instead); the paths whose bytecode went."""
    state = read_state(site_packages)
    dropped = []
    for entry in state.entries if state is not None else ():
        path = site_packages / entry.path
        data = read_file(path)
        if data is not None and sha256_hex(data) == entry.after and bytecode.unchecked_stale(path, data):
            bytecode.drop(path)
            dropped.append(entry.path)
    return dropped


def _now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()
