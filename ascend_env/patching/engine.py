"""Plan and carry out ``install``, ``restore`` and ``status`` on one site-packages directory.

Planning only reads: it finds the installed transformers, looks its version up in the
manifest, classifies each target file by hash as ``clean``, ``applied`` or ``conflict``
(the reverse patch only as a fallback), and computes every new byte string in memory.
Only then, under the lock and after finishing any interrupted run, does
:func:`ascend_env.patching.journal.transaction` write anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any, Callable, Dict, Generic, List, Literal, Mapping, Optional, Set, Tuple, TypeVar, Union

from ascend_env import __version__
from ascend_env.exceptions import AscendEnvError, EnvironmentProblem, PatchError, UsageError, reinstall
from ascend_env.patching import bytecode
from ascend_env.patching.diffs import FilePatch, HunkMismatch, apply_patch, parse_patch, safe_relative_path
from ascend_env.patching.journal import Change, Journal, needs_recovery, read_journal, transaction
from ascend_env.patching.manifest import (
    Manifest,
    NothingToDo,
    Release,
    UnknownRelease,
    load_manifest,
    patches_dir,
    read_patch_text,
)
from ascend_env.patching.records import (
    Distribution,
    add_rows,
    find_distribution,
    is_record,
    remove_rows,
    rewrite_record,
    sha256_hex,
)
from ascend_env.patching.state import Entry, State, drift, read_state
from ascend_env.patching.store import file_sha256, holds_ours, read_blob, read_file
from ascend_env.states import InstallWord, install_word

__all__ = [
    "PATCH_MODES",
    "FileState",
    "FileStatus",
    "InstallReport",
    "Inspection",
    "RestoreReport",
    "RestoredFile",
    "StatusReport",
    "StatusVerdict",
    "default_site_packages",
    "inspect",
    "install",
    "restore",
    "startup_hook_files",
    "status",
]

PATCH_MODES = ("auto", "always", "never")
DISTRIBUTION = "transformers"


# -- where, and whether -------------------------------------------------------------------------


def default_site_packages() -> Path:
    """The site-packages directory that holds the installed transformers distribution (see
    :func:`_site_without_transformers` where there is none)."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution(DISTRIBUTION)
    except PackageNotFoundError:
        return _site_without_transformers()
    return Path(str(dist.locate_file(""))).resolve()


def _site_without_transformers() -> Path:
    """Where transformers is not installed (uninstalled after install, or never there, for a
    hook-only install): the site directory on ``sys.path`` that holds ascend-env's state, else
    this environment's own site-packages (where pip installs)."""
    import sysconfig

    from ascend_env.hook.runtime import installed_sites

    sites = installed_sites()
    return (sites[0] if sites else Path(sysconfig.get_paths()["purelib"])).resolve()


def check_not_shared(site_packages: Path) -> None:
    """Refuse to change, unasked, a site-packages that other environments share: one outside
    this environment's prefix (a ``--system-site-packages`` venv seeing the system's transformers,
    or a user site-packages that every environment of the user sees)."""
    import sys

    prefix = Path(sys.prefix).resolve()
    if prefix == site_packages or prefix in site_packages.parents:
        return
    raise UsageError(
        f"transformers is in {site_packages}, outside this environment ({prefix}): other "
        "environments share that site-packages, and the patches and the startup hook would change "
        "them all (the hook would also be in no RECORD, so pip uninstall ascend-env would leave it).",
        f"install transformers into this environment (pip install transformers), or pass --target "
        f"{site_packages} to change the shared one on purpose.",
    )


def resolve_site_packages(target: Optional[str]) -> Path:
    """``--target`` as an existing directory, or :func:`default_site_packages`."""
    if target is None:
        return default_site_packages()
    path = Path(target)
    try:
        is_dir = path.is_dir()
    except OSError as exc:  # e.g. a parent directory this user may not enter
        raise EnvironmentProblem(
            f"--target {target}: cannot be read ({exc.strerror}).",
            "pass a site-packages directory this user can read, or run as the user that owns it.",
        ) from None
    if not is_dir:
        raise UsageError(f"--target {target}: no such directory.", "pass a site-packages directory.")
    return path.resolve()


def _isin_falls_back(site_packages: Path, search_sys_path: bool = False) -> Optional[bool]:
    """Whether ``aten::isin`` would fall back to the CPU: None when torch_npu is not installed.

    Looks for torch_npu in ``site_packages`` (then on ``sys.path`` when ``search_sys_path``) and
    reads its op lists as ``detect`` does. Raises when they cannot tell.
    """
    import sys

    from ascend_env.detect.report import read_isin, read_package

    paths = [site_packages] + ([Path(p) for p in sys.path if p] if search_sys_path else [])
    torch_npu = read_package("torch_npu", "torch_npu", paths)
    if not torch_npu.installed:
        return None
    isin = read_isin(torch_npu)
    if isin.falls_back is None:
        raise EnvironmentProblem(
            f"cannot tell whether isin falls back to the CPU: {isin.reason}",
            "reinstall torch_npu, or choose explicitly with --patches always or --patches never.",
        )
    return isin.falls_back


def startup_hook_files(site_packages: Path, compile_guard: bool = True) -> Dict[str, bytes]:
    """The startup hook's files (name relative to site-packages -> bytes) that join each install.

    Their writes share the install's journal and state, and ``restore`` removes them. Where
    ascend-env itself is installed in ``site_packages``, its RECORD gains rows for them, so that
    ``pip uninstall ascend-env`` removes them too.
    """
    from ascend_env.hook import files as hook

    hook_files = {**hook.files(compile_guard), **hook.bytecode(compile_guard)}
    own = find_distribution(site_packages, "ascend-env")
    if own is None:
        return hook_files
    record = (site_packages / own.record_path).read_bytes()
    return {**hook_files, own.record_path: add_rows(record, hook_files)}


# -- classification ------------------------------------------------------------------------------

FileState = Literal["clean", "applied", "conflict"]


@dataclass
class FileStatus:
    """One target file of a release: its patch, its status and the bytes to write."""

    path: str
    patch: str
    status: FileState
    detail: str = ""
    current: Optional[bytes] = None
    new: Optional[bytes] = None
    error: Optional[AscendEnvError] = None
    original: Optional[bytes] = None  # for an applied file: the release's text, by the reverse patch

    def to_dict(self) -> Dict[str, Any]:
        data = {"path": self.path, "patch": self.patch, "status": self.status}
        if self.detail:
            data["detail"] = self.detail
        return data


@dataclass
class Inspection:
    distribution: Optional[Distribution]  # None: transformers is not installed (a hook-only install)
    outcome: Union[Release, NothingToDo, UnknownRelease]
    files: List[FileStatus] = field(default_factory=list)


def _inside(site_packages: Path, relative: str) -> bool:
    """Whether ``relative`` names a path inside ``site_packages``, through no symlink at the end."""
    if not safe_relative_path(relative):
        return False
    path = site_packages / relative
    try:
        return not path.is_symlink() and site_packages.resolve() in (path.resolve(), *path.resolve().parents)
    except OSError:
        return False


def _load_patch(directory: Path, manifest: Manifest, patch_id: str, target: str) -> FilePatch:
    entry = manifest.patches[patch_id]
    patch = parse_patch(read_patch_text(directory, entry), entry.path)
    if patch.id != patch_id or patch.target != target:
        raise PatchError(
            f"{entry.path}: the file patches {patch.target} as {patch.id}, the manifest says {target} "
            f"as {patch_id}.",
            "reinstall ascend-env, or regenerate the manifest with tools/check_patches.py.",
        )
    return patch


def _check_target(site_packages: Path, dist: Distribution, target: str, patch: FilePatch) -> None:
    """Refuse a patch whose target is not a file of ``dist`` inside ``site_packages``."""
    if target not in dist.record or not _inside(site_packages, target):
        raise PatchError(
            f"patch {patch.id} targets {target}, which is not a file of {dist.name} {dist.version} "
            f"(not in {dist.record_path}, or outside {site_packages}).",
            "a patch may only change files listed in the distribution's RECORD; reinstall ascend-env.",
        )


def _patched(patch: FilePatch, target: str, current: bytes, after: str) -> bytes:
    """``current`` patched, checked against the manifest's hash of the result."""
    new = apply_patch(patch, current)
    if sha256_hex(new) != after:
        raise PatchError(
            f"patch {patch.id} turns {target} into bytes whose sha256 differs from the manifest's.",
            "reinstall ascend-env, or regenerate the manifest with tools/check_patches.py.",
        )
    return new


def _classify(
    site_packages: Path, dist: Distribution, target: str, patch: FilePatch, before: str, after: str
) -> FileStatus:
    """``target`` by its hash: ``before`` is clean, ``after`` applied; anything else by its hunks."""
    _check_target(site_packages, dist, target, patch)
    try:
        current = (site_packages / target).read_bytes()
    except OSError as exc:
        detail = f"cannot be read ({exc.strerror})"
        error = EnvironmentProblem(
            f"{target}: {detail}.", f"reinstall transformers: {reinstall('transformers', dist.version)}."
        )
        return FileStatus(target, patch.id, "conflict", detail, error=error)
    digest = sha256_hex(current)
    if digest == before:
        new = _patched(patch, target, current, after)
        return FileStatus(target, patch.id, "clean", current=current, new=new)
    if digest == after:
        original = _unpatched(patch, current, before)
        return FileStatus(target, patch.id, "applied", current=current, original=original)
    return _classify_edited(dist, target, patch, current, before)


def _unpatched(patch: FilePatch, current: bytes, before: str) -> Optional[bytes]:
    """``current`` (the patched text) with ``patch`` reversed, where that gives the release's
    text (sha256 ``before``); else None."""
    try:
        original = apply_patch(patch, current, reverse=True)
    except HunkMismatch:
        return None
    return original if sha256_hex(original) == before else None


def _classify_edited(
    dist: Distribution, target: str, patch: FilePatch, current: bytes, before: str
) -> FileStatus:
    """A file that is neither the wheel's nor the patched one: applied if the patch reverses on
    it (the rest of the file was edited), else a conflict."""
    status = FileStatus(target, patch.id, "conflict", current=current)
    try:
        apply_patch(patch, current, reverse=True)
    except HunkMismatch:
        pass
    else:
        status.status, status.detail = "applied", "patched, but the rest of the file differs from the wheel"
        return status
    try:
        apply_patch(patch, current)
    except HunkMismatch as exc:
        status.detail, status.error = "neither the original nor the patched text", exc
        return status
    digest = sha256_hex(current)
    status.detail = "differs from the wheel's file (sha256 " + digest + ")"
    status.error = EnvironmentProblem(
        f"{target} differs from transformers {dist.version}'s file (sha256 {digest}, expected {before}).",
        f"reinstall it: {reinstall('transformers', dist.version)}.",
    )
    return status


def inspect(
    site_packages: Path, manifest: Optional[Manifest] = None, directory: Optional[Path] = None
) -> Inspection:
    """Find transformers in ``site_packages`` and classify each file its release needs patched."""
    directory = patches_dir() if directory is None else directory
    manifest = load_manifest(directory) if manifest is None else manifest
    dist = find_distribution(site_packages, manifest.distribution)
    if dist is None:
        raise EnvironmentProblem(
            f"{manifest.distribution} is not installed in {site_packages}.",
            f"install it (pip install {manifest.distribution}), or pass --target with its site-packages.",
        )
    outcome = manifest.lookup(dist.version)
    inspection = Inspection(dist, outcome)
    if isinstance(outcome, Release):
        for target, change in sorted(outcome.changes.items()):
            patch = _load_patch(directory, manifest, change.patch, target)
            inspection.files.append(
                _classify(site_packages, dist, target, patch, change.before, change.after)
            )
    return inspection


def _unknown(dist: Distribution) -> EnvironmentProblem:
    return EnvironmentProblem(
        f"transformers {dist.version} is not a release this ascend-env has patches for "
        f"(a development or local build, or a release newer than its manifest).",
        "install a listed release (e.g. pip install transformers==4.46.3), upgrade ascend-env, or run "
        "with --patches never to install only the startup hook.",
    )


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


# -- plans -----------------------------------------------------------------------------------------

_Report = TypeVar("_Report")
_T = TypeVar("_T")


def _digest(data: Optional[bytes]) -> Optional[str]:
    return None if data is None else sha256_hex(data)


@dataclass
class Plan(Generic[_Report]):
    """The writes of one run, computed in memory, and the report it gives."""

    site_packages: Path
    report: _Report
    changes: List[Change] = field(default_factory=list)
    blobs: Dict[str, bytes] = field(default_factory=dict)
    state: Optional[State] = None

    def write(self, path: str, current: Optional[bytes], new: Optional[bytes]) -> None:
        """Set ``path`` from ``current`` to ``new`` (None: absent); the journal keeps both."""
        before, after = _digest(current), _digest(new)
        self.changes.append(Change(path, before, after))
        for digest, data in ((after, new), (before, current)):
            if digest is not None and data is not None:
                self.blobs[digest] = data


def _settled(plan: Callable[[], _T]) -> _T:
    """``plan()`` outside the lock, tried once more if it fails.

    A run holding the lock may change what the plan reads while it reads it (a finishing
    ``restore`` removes ``.ascend-env`` and its stored bytes). A second failure is real.
    """
    try:
        return plan()
    except AscendEnvError:
        return plan()


def _now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def _recovered(action: Optional[str]) -> Optional[str]:
    return f"finished an interrupted {action}" if action else None


# -- install ---------------------------------------------------------------------------------------

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
    falls_back = _isin_falls_back(site_packages, search_sys_path)
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
    return inspect(site_packages, None, directory)


def _release_reason(inspection: Inspection) -> Optional[str]:
    """Refuse a release the manifest does not know; why a known one needs no patch, if it does not."""
    outcome, dist = inspection.outcome, inspection.distribution
    # Only a hook-only plan (--patches never, no transformers) has no distribution.
    if isinstance(outcome, UnknownRelease):
        assert dist is not None
        raise _unknown(dist)
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
    if not _inside(site_packages, name) or not (file_path.parent.is_dir() or cache):
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
        before, after = _digest(current), sha256_hex(new)
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
        self.entries[name] = Entry(name, "extra", _digest(original), sha256_hex(new))

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
            report.reason += "; the patches applied before stay (ascend-env restore removes them)"
        report.changed = [c.path for c in plan.changes]


def _plan_install(
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


def install(
    site_packages: Path,
    *,
    patches: str = "auto",
    dry_run: bool = False,
    directory: Optional[Path] = None,
    extra_files: Optional[Mapping[str, bytes]] = None,
    search_sys_path: bool = False,
) -> InstallReport:
    """Patch transformers in ``site_packages`` (see :func:`_plan_install`); what it did or would do."""
    replan = partial(
        _plan_install,
        site_packages,
        patches=patches,
        directory=directory,
        extra_files=extra_files,
        search_sys_path=search_sys_path,
    )
    return _install(site_packages, replan, dry_run)


def _install(site_packages: Path, replan: Callable[[], Plan[InstallReport]], dry_run: bool) -> InstallReport:
    """:func:`install`, with ``replan`` planning from what is on disk at the call."""
    plan = _settled(replan)
    if dry_run:
        if plan.report.result in ("applied", "hook installed"):
            patched = plan.report.result == "applied"
            plan.report.result = install_word(patched, changed=True, dry_run=True)
        plan.report.dry_run = True
        return plan.report
    if plan.state is None and not needs_recovery(site_packages):
        plan.report.bytecode_dropped = _drop_stale_bytecode(site_packages)
        return plan.report
    with transaction(site_packages) as change:
        plan = replan()  # again: another run may have changed things
        if plan.state is not None:
            change.commit(Journal("install", tuple(plan.changes), plan.state), plan.blobs)
        else:
            change.rollback()
    plan.report.recovered = _recovered(change.recovered)
    return plan.report


def _drop_stale_bytecode(site_packages: Path) -> List[str]:
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


# -- restore ----------------------------------------------------------------------------------------

RestoreResult = Literal["restored", "would restore", "nothing to restore"]
RestoreAction = Literal[
    "original",
    "restore",
    "rewritten",
    "removed (edited since install)",
    "skipped",
    "skipped: belongs to a transformers release that was replaced",
    "left alone: replaced by another installer since install",
    "left alone: removed by another installer since install",
    "conflict",
]


@dataclass(frozen=True)
class RestoredFile:
    """What restore does with one recorded file."""

    path: str
    kind: str
    action: RestoreAction

    def to_dict(self) -> Dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "action": self.action}


@dataclass
class RestoreReport:
    """What ``restore`` did or would do; :meth:`to_dict` is its ``--json`` form."""

    site_packages: str
    files: List[RestoredFile] = field(default_factory=list)
    result: RestoreResult = "restored"
    dry_run: bool = False
    recovered: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        data: Dict[str, Any] = {
            "site_packages": self.site_packages,
            "files": [f.to_dict() for f in self.files],
            "result": self.result,
        }
        if self.dry_run:
            data["dry_run"] = True
        if self.recovered:
            data["recovered"] = self.recovered
        return data


class _RestorePlanner:
    """Builds a restore plan, one recorded file at a time."""

    def __init__(self, plan: Plan[RestoreReport], same_release: bool, extras: Set[str]) -> None:
        self.plan = plan
        self.same_release = same_release  # the recorded transformers release is still installed
        self.extras = extras  # the paths of the extra files install wrote (the hook's)
        self.originals: Dict[str, bytes] = {}  # the patched files' restored bytes, for RECORD
        self.conflicts: List[str] = []

    def file(self, entry: Entry, current: Optional[bytes]) -> None:
        action = self._file_action(entry, current)
        self.plan.report.files.append(RestoredFile(entry.path, entry.kind, action))

    def record(self, entry: Entry, current: Optional[bytes]) -> None:
        action = self._record_action(entry, current)
        self.plan.report.files.append(RestoredFile(entry.path, entry.kind, action))

    def _file_action(self, entry: Entry, current: Optional[bytes]) -> RestoreAction:
        digest = _digest(current)
        if entry.kind == "extra" and entry.before is None and is_record(entry.path):
            return self._unrecorded_record(entry, current)
        if digest == entry.before:
            return "original"
        if digest == entry.after:
            self._put_back(entry, current)
            return "restore"
        if entry.kind == "patch" and not self.same_release:
            return "skipped: belongs to a transformers release that was replaced"
        if entry.kind == "extra" and entry.before is None:
            # A file install created (a hook file) that was edited since: it is ascend-env's own
            # name, so restore removes it all the same, edits included.
            self.plan.write(entry.path, current, None)
            return "removed (edited since install)"
        if entry.kind == "extra" and current is None:
            # A file install amended (ascend-env's own RECORD) that another installer has removed
            # since (pip uninstall ascend-env): there is nothing to put back.
            return "left alone: removed by another installer since install"
        if entry.kind == "extra":
            # A file install amended (ascend-env's own RECORD) that another installer has
            # replaced since (pip install of another ascend-env build): it is theirs now.
            return "left alone: replaced by another installer since install"
        self.conflicts.append(entry.path)
        return "conflict"

    def _unrecorded_record(self, entry: Entry, current: Optional[bytes]) -> RestoreAction:
        """A RECORD that an older ascend-env recorded with no original (it adopted one that a lost
        state had amended): never removed, only the rows of the extra files taken out."""
        if current is None:
            return "left alone: removed by another installer since install"
        original = remove_rows(current, self.extras - {entry.path})
        if original == current:
            return "original"
        self.plan.write(entry.path, current, original)
        return "rewritten"

    def _put_back(self, entry: Entry, current: Optional[bytes]) -> None:
        original = None if entry.before is None else read_blob(self.plan.site_packages, entry.before)
        self.plan.write(entry.path, current, original)
        if original is not None and entry.kind == "patch":
            self.originals[entry.path] = original

    def _record_action(self, entry: Entry, current: Optional[bytes]) -> RestoreAction:
        if current is None or not self.same_release:
            return "skipped"
        digest = sha256_hex(current)
        if digest == entry.before:
            return "original"
        if digest == entry.after and entry.before is not None:
            self.plan.write(entry.path, current, read_blob(self.plan.site_packages, entry.before))
            return "restore"
        # pip rewrote RECORD (e.g. a reinstall): give the restored files their hashes there.
        try:
            desired = rewrite_record(current, self.originals)
        except EnvironmentProblem:
            return "original"
        if desired == current:
            return "original"
        self.plan.write(entry.path, current, desired)
        return "rewritten"

    def refuse_conflicts(self, version: str) -> None:
        if not self.conflicts:
            return
        raise EnvironmentProblem(
            f"{', '.join(self.conflicts)} changed since install (neither the original nor the patched "
            "bytes); restore would overwrite them, so nothing was changed.",
            f"reinstall transformers ({reinstall('transformers', version)}), then run restore again.",
        )


def plan_restore(site_packages: Path) -> Plan[RestoreReport]:
    """The writes that put back every recorded original; raises on files changed by others."""
    plan = Plan(site_packages, RestoreReport(str(site_packages)))
    state = read_state(site_packages)
    if state is None:
        plan.report.result = "nothing to restore"
        return plan
    dist = find_distribution(site_packages, state.distribution)
    extras = {entry.path for entry in state.entries if entry.kind == "extra"}
    planner = _RestorePlanner(plan, dist is not None and dist.version == state.version, extras)
    records = []
    for entry in state.entries:
        current = read_file(site_packages / entry.path)
        if entry.kind == "record":
            records.append((entry, current))  # after the files: it takes their restored hashes
        else:
            planner.file(entry, current)
    planner.refuse_conflicts(state.version)
    for entry, current in records:
        planner.record(entry, current)
    return plan


def restore(site_packages: Path, *, dry_run: bool = False) -> RestoreReport:
    """Put back the recorded original bytes and remove ascend-env's files and state; what it did
    or would do."""
    plan = _settled(lambda: plan_restore(site_packages))
    if dry_run:
        if plan.report.result == "restored":
            plan.report.result = "would restore"
        plan.report.dry_run = True
        return plan.report
    if plan.report.result == "nothing to restore" and not holds_ours(site_packages):
        return plan.report
    with transaction(site_packages) as change:
        plan = plan_restore(site_packages)
        if plan.report.result == "nothing to restore":  # no state recorded
            change.rollback()
        else:
            change.commit(Journal("restore", tuple(plan.changes), None), plan.blobs)
    plan.report.recovered = _recovered(change.recovered)
    return plan.report


# -- status ------------------------------------------------------------------------------------------

StatusName = Literal[
    "applied",
    "not applied",
    "partly applied",
    "conflict",
    "drifted",
    "interrupted",
    "nothing to do",
    "transformers removed",
    "hook only",
]


@dataclass(frozen=True)
class StatusVerdict:
    """The status, its exit code (0 fine, 1 act) and what explains it."""

    status: StatusName
    code: int
    detail: Optional[str] = None
    drift: Optional[List[str]] = None
    run: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        data: Dict[str, Any] = {"status": self.status}
        # An interrupted run names what to run before why; the JSON keeps that key order.
        order = ("run", "detail") if self.status == "interrupted" else ("detail", "drift", "run")
        for key in order:
            value = getattr(self, key)
            if value is not None:
                data[key] = value
        return data


@dataclass
class StatusReport:
    """What ``status`` found; :meth:`to_dict` is its ``--json`` form."""

    site_packages: str
    transformers: Optional[str]
    files: List[FileStatus]
    state: Optional[State]
    verdict: StatusVerdict

    @property
    def code(self) -> int:
        """The exit code: 0 fine, 1 act."""
        return self.verdict.code

    def to_dict(self) -> Dict[str, Any]:
        data: Dict[str, Any] = {
            "site_packages": self.site_packages,
            "transformers": self.transformers,
            "files": [f.to_dict() for f in self.files],
        }
        if self.state is not None:
            data.update(applied_at=self.state.applied_at, tool_version=self.state.tool_version)
        data.update(self.verdict.to_dict())
        return data


def status(
    site_packages: Path, *, directory: Optional[Path] = None, search_sys_path: bool = False
) -> StatusReport:
    """What is applied; the report's :attr:`~StatusReport.code` is the exit code (0 fine, 1 act).

    Raises where it cannot tell (exit code 2).
    """
    journal = read_journal(site_packages)
    state = read_state(site_packages)
    where = str(site_packages)
    if find_distribution(site_packages, DISTRIBUTION) is None and journal is None:
        return StatusReport(where, None, [], state, _without_transformers(site_packages, state))
    inspection = inspect(site_packages, None, directory)
    dist = inspection.distribution
    assert dist is not None
    if journal is not None:
        verdict = StatusVerdict(
            "interrupted",
            1,
            detail=f"an ascend-env {journal.action} was interrupted",
            run="ascend-env install (or ascend-env restore)",
        )
    else:
        recorded = _recorded(site_packages, state)
        verdict = recorded or _by_release(site_packages, inspection, search_sys_path)
    return StatusReport(where, dist.version, inspection.files, state, verdict)


def _recorded(site_packages: Path, state: Optional[State]) -> Optional[StatusVerdict]:
    """The status that the recorded state gives; None where the release's files must say it."""
    if state is None:
        return None
    lines = drift(site_packages)
    if lines:
        return StatusVerdict(
            "drifted", 1, drift=lines, run="ascend-env install (re-applies), or ascend-env restore"
        )
    if any(entry.kind == "patch" for entry in state.entries):
        return StatusVerdict("applied", 0)
    return None  # only the startup hook was installed


def _by_release(site_packages: Path, inspection: Inspection, search_sys_path: bool) -> StatusVerdict:
    """The status that the release and its files give, with nothing recorded for them."""
    outcome, dist = inspection.outcome, inspection.distribution
    assert dist is not None
    if isinstance(outcome, NothingToDo):
        return StatusVerdict("nothing to do", 0, detail=f"transformers {dist.version}: {outcome.why}")
    if isinstance(outcome, UnknownRelease):
        raise _unknown(dist)
    kinds = {f.status for f in inspection.files}
    if kinds == {"applied"}:
        return StatusVerdict("applied", 0, detail="patched outside ascend-env (no state recorded for them)")
    if kinds == {"clean"}:
        if _isin_falls_back(site_packages, search_sys_path):
            detail = "torch_npu has no native NPU isin"
            return StatusVerdict("not applied", 1, detail=detail, run="ascend-env install")
        return StatusVerdict("not applied", 0)
    return StatusVerdict(
        "partly applied" if "conflict" not in kinds else "conflict",
        1,
        run=f"{reinstall('transformers', dist.version)}, then ascend-env install",
    )


def _without_transformers(site_packages: Path, state: Optional[State]) -> StatusVerdict:
    """status where transformers is not installed: a hook-only install, nothing at all, or files
    kept for a transformers that was uninstalled after install (restore cleans them up)."""
    if state is None:
        return StatusVerdict("nothing to do", 0, detail="transformers is not installed here")
    if any(entry.kind in ("patch", "record") for entry in state.entries):
        return StatusVerdict(
            "transformers removed",
            1,
            detail=f"transformers {state.version} was uninstalled after install; ascend-env still "
            "records its patched files and keeps their originals",
            run="ascend-env restore (removes that record and the startup hook; install --hook-only "
            "puts the hook back)",
        )
    lines = drift(site_packages)
    if lines:
        run = "ascend-env install --hook-only, or ascend-env restore"
        return StatusVerdict("drifted", 1, drift=lines, run=run)
    detail = "transformers is not installed; the startup hook serves any caller"
    return StatusVerdict("hook only", 0, detail=detail)
