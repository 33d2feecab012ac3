"""Plan and carry out ``install``, ``restore`` and ``status`` on one site-packages directory.

Planning only reads: it finds the installed transformers, looks its version up in the
manifest, classifies each target file by hash as ``clean``, ``applied`` or ``conflict``
(the reverse patch only as a fallback), and computes every new byte string in memory.
Only then, under the lock and after finishing any interrupted run, does
:func:`ascend_env.patching.store.commit` write anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from ascend_env import __version__
from ascend_env.exceptions import AscendEnvError, EnvironmentProblem, PatchError, UsageError, reinstall
from ascend_env.patching.diffs import FilePatch, HunkMismatch, apply_patch, parse_patch, safe_relative_path
from ascend_env.patching.manifest import (
    Manifest,
    NothingToDo,
    Release,
    UnknownRelease,
    load_manifest,
    patches_dir,
    read_patch_text,
)
from ascend_env.patching.records import Distribution, add_rows, find_distribution, rewrite_record, sha256_hex
from ascend_env.patching.store import (
    Change,
    Entry,
    Journal,
    State,
    commit,
    drift,
    drop_bytecode,
    file_sha256,
    locked_and_recovered,
    needs_recovery,
    read_blob,
    read_file,
    read_journal,
    read_state,
    state_dir,
    unchecked_stale_bytecode,
)

__all__ = [
    "PATCH_MODES",
    "FileStatus",
    "Inspection",
    "default_site_packages",
    "inspect",
    "install",
    "isin_falls_back",
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


def isin_falls_back(site_packages: Path, search_sys_path: bool = False) -> Optional[bool]:
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


@dataclass
class FileStatus:
    """One target file of a release: its patch, its status and the bytes to write."""

    path: str
    patch: str
    status: str  # "clean", "applied" or "conflict"
    detail: str = ""
    current: Optional[bytes] = None
    new: Optional[bytes] = None
    error: Optional[AscendEnvError] = None

    def to_dict(self) -> dict[str, Any]:
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


def _classify(
    site_packages: Path, dist: Distribution, target: str, patch: FilePatch, before: str, after: str
) -> FileStatus:
    if target not in dist.record or not _inside(site_packages, target):
        raise PatchError(
            f"patch {patch.id} targets {target}, which is not a file of {dist.name} {dist.version} "
            f"(not in {dist.record_path}, or outside {site_packages}).",
            "a patch may only change files listed in the distribution's RECORD; reinstall ascend-env.",
        )
    status = FileStatus(target, patch.id, "conflict")
    try:
        status.current = (site_packages / target).read_bytes()
    except OSError as exc:
        status.detail = f"cannot be read ({exc.strerror})"
        status.error = EnvironmentProblem(
            f"{target}: {status.detail}.",
            f"reinstall transformers: {reinstall('transformers', dist.version)}.",
        )
        return status
    digest = sha256_hex(status.current)
    if digest == before:
        status.new = apply_patch(patch, status.current)
        if sha256_hex(status.new) != after:
            raise PatchError(
                f"patch {patch.id} turns {target} into bytes whose sha256 differs from the manifest's.",
                "reinstall ascend-env, or regenerate the manifest with tools/check_patches.py.",
            )
        status.status = "clean"
        return status
    if digest == after:
        status.status = "applied"
        return status
    try:
        apply_patch(patch, status.current, reverse=True)
    except HunkMismatch:
        pass
    else:
        status.status, status.detail = "applied", "patched, but the rest of the file differs from the wheel"
        return status
    try:
        apply_patch(patch, status.current)
    except HunkMismatch as exc:
        status.detail, status.error = "neither the original nor the patched text", exc
    else:
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


def _unknown(dist: Distribution, manifest_dir: Optional[Path]) -> EnvironmentProblem:
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


# -- install ---------------------------------------------------------------------------------------


@dataclass
class Plan:
    site_packages: Path
    changes: List[Change] = field(default_factory=list)
    blobs: Dict[str, bytes] = field(default_factory=dict)
    state: Optional[State] = None
    report: dict[str, Any] = field(default_factory=dict)


def _settled(plan: Callable[[], Plan]) -> Plan:
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


def _decide(site_packages: Path, patches: str, search_sys_path: bool) -> Tuple[bool, str]:
    if patches == "always":
        return True, "--patches always"
    if patches == "never":
        return False, "--patches never"
    falls_back = isin_falls_back(site_packages, search_sys_path)
    if falls_back is None:
        return (
            False,
            "torch_npu is not installed, so isin never reaches the NPU: nothing to patch "
            "(--patches always patches anyway)",
        )
    if falls_back:
        return True, "torch_npu has no native NPU isin: it would fall back to the CPU"
    return False, "torch_npu has a native NPU isin: nothing to patch (--patches always patches anyway)"


def plan_install(
    site_packages: Path,
    *,
    patches: str = "auto",
    directory: Optional[Path] = None,
    extra_files: Optional[Mapping[str, bytes]] = None,
    search_sys_path: bool = False,
) -> Plan:
    """Everything ``install`` would write, computed in memory; raises on any refusal."""
    if patches not in PATCH_MODES:
        raise UsageError(f"--patches {patches}: not one of {', '.join(PATCH_MODES)}.")
    plan = Plan(site_packages)
    wanted, reason = _decide(site_packages, patches, search_sys_path)
    old = read_state(site_packages)
    directory = patches_dir() if directory is None else directory
    if patches == "never" and find_distribution(site_packages, DISTRIBUTION) is None:
        # The hook alone needs no transformers: it serves whatever calls isin.
        inspection = Inspection(None, NothingToDo("", "transformers is not installed"))
    else:
        inspection = inspect(site_packages, None, directory)
    dist = inspection.distribution
    version = dist.version if dist is not None else None
    plan.report.update(
        site_packages=str(site_packages),
        transformers=version,
        patches=patches,
        reason=reason,
    )
    old_entries: Dict[str, Entry] = {e.path: e for e in old.entries} if old else {}
    if old is not None and old.version != (version or ""):
        # transformers was replaced: entries of the old release's files no longer apply.
        old_entries = {p: e for p, e in old_entries.items() if e.kind == "extra"}
    entries: Dict[str, Entry] = {}

    def add(path: str, kind: str, current: Optional[bytes], new: bytes, patch: Optional[str] = None) -> None:
        before = None if current is None else sha256_hex(current)
        after = sha256_hex(new)
        previous = old_entries.get(path)
        if before != after:
            plan.changes.append(Change(path, before, after))
            plan.blobs[after] = new
            if current is not None:
                assert before is not None  # the digest of current
                plan.blobs[before] = current
            # What restore puts back: what was there before ascend-env first wrote the file
            # (nothing, for the hook's files), not bytes someone edited into it since; but a file
            # that another installer replaced since (pip rewrote ascend-env's RECORD) has the new
            # bytes as its original.
            if previous is None or (previous.before is not None and before != previous.after):
                original = before
            else:
                original = previous.before
            entries[path] = Entry(path, kind, original, after, patch)
        elif previous is not None:
            entries[path] = Entry(path, kind, previous.before, after, patch)
        elif kind == "extra":
            entries[path] = Entry(path, kind, None, after, patch)

    outcome = inspection.outcome
    files: List[FileStatus] = inspection.files if wanted else []
    # Only a hook-only plan (--patches never, no transformers) has no distribution.
    if wanted and isinstance(outcome, UnknownRelease):
        assert dist is not None
        raise _unknown(dist, directory)
    if wanted and isinstance(outcome, NothingToDo):
        assert dist is not None
        plan.report["reason"] = f"transformers {dist.version} needs no patch: {outcome.why}"
    _refuse_conflicts(files)
    final: Dict[str, bytes] = {}
    for status in files:
        if status.status == "clean":
            assert status.current is not None and status.new is not None
            add(status.path, "patch", status.current, status.new, status.patch)
            final[status.path] = status.new
        elif status.path in old_entries and status.current is not None:
            add(status.path, "patch", status.current, status.current, status.patch)
            final[status.path] = status.current
    if final:
        assert dist is not None  # the files patched belong to it
        record_file = site_packages / dist.record_path
        current_record = record_file.read_bytes()
        add(dist.record_path, "record", current_record, rewrite_record(current_record, final))
        previous = old_entries.get(dist.record_path)
        if previous is not None and sha256_hex(current_record) == previous.after:
            entries[dist.record_path] = Entry(
                dist.record_path, "record", previous.before, entries[dist.record_path].after
            )
    for name, data in sorted((extra_files or {}).items()):
        file_path = site_packages / name
        cache = file_path.parent.name == "__pycache__" and file_path.parent.parent == site_packages
        if not _inside(site_packages, name) or not (file_path.parent.is_dir() or cache):
            raise UsageError(
                f"extra file {name!r} is not a plain file name inside {site_packages} "
                "(a symbolic link, or a path that leaves it).",
                f"remove {file_path} if it is a link, then run the command again.",
            )
        current = read_file(file_path)
        add(name, "extra", current, data)
    for path, entry in old_entries.items():
        # An entry that no file of this run claims is kept, unless it is a file ascend-env amended
        # (its own RECORD) that another installer has replaced since: pip owns it now.
        replaced = entry.before is not None and file_sha256(site_packages / path) != entry.after
        if path not in entries and not (entry.kind == "extra" and replaced):
            entries[path] = entry
    plan.report["files"] = [f.to_dict() for f in inspection.files]
    if plan.changes:
        name = dist.name if dist is not None else DISTRIBUTION
        plan.state = State(__version__, _now(), name, version or "", tuple(entries.values()))
        plan.report["result"] = "applied"
    elif entries:
        plan.report["result"] = "already applied"
    elif wanted and files and all(f.status == "applied" for f in files):
        plan.report["result"] = "already applied"
        plan.report["reason"] = "the files were patched before (e.g. a +ascend wheel); nothing recorded"
    else:
        plan.report["result"] = "nothing to do"
    plan.report["changed"] = [c.path for c in plan.changes]
    return plan


def install(
    site_packages: Path,
    *,
    patches: str = "auto",
    dry_run: bool = False,
    directory: Optional[Path] = None,
    extra_files: Optional[Mapping[str, bytes]] = None,
    search_sys_path: bool = False,
) -> dict[str, Any]:
    """Patch transformers in ``site_packages`` (see :func:`plan_install`); returns the report."""
    kwargs: Dict[str, Any] = dict(
        patches=patches, directory=directory, extra_files=extra_files, search_sys_path=search_sys_path
    )
    plan = _settled(lambda: plan_install(site_packages, **kwargs))
    if dry_run:
        if plan.report["result"] == "applied":
            plan.report["result"] = "would apply"
        plan.report["dry_run"] = True
        return plan.report
    if not plan.changes and not needs_recovery(site_packages):
        dropped = _drop_stale_bytecode(site_packages)
        if dropped:
            plan.report["bytecode_dropped"] = dropped
        return plan.report
    read_journal(site_packages)  # a damaged journal is refused before the lock file is made
    with locked_and_recovered(site_packages) as recovered:
        plan = plan_install(site_packages, **kwargs)  # again: another run may have changed things
        if plan.changes:
            commit(site_packages, Journal("install", tuple(plan.changes), plan.state), plan.blobs)
        elif read_state(site_packages) is None:
            from ascend_env.patching.store import remove_directory

            remove_directory(site_packages)
    if recovered:
        plan.report["recovered"] = f"finished an interrupted {recovered}"
    return plan.report


def _drop_stale_bytecode(site_packages: Path) -> List[str]:
    """Drop the bytecode of each patched file that holds ascend-env's text but has unchecked
    bytecode compiled from other text (which would run instead); the paths whose bytecode went."""
    state = read_state(site_packages)
    dropped = []
    for entry in state.entries if state is not None else ():
        path = site_packages / entry.path
        data = read_file(path)
        if data is not None and sha256_hex(data) == entry.after and unchecked_stale_bytecode(path, data):
            drop_bytecode(path)
            dropped.append(entry.path)
    return dropped


# -- restore ----------------------------------------------------------------------------------------


def plan_restore(site_packages: Path) -> Plan:
    """The writes that put back every recorded original; raises on files changed by others."""
    plan = Plan(site_packages)
    state = read_state(site_packages)
    plan.report.update(site_packages=str(site_packages), files=[])
    if state is None:
        plan.report["result"] = "nothing to restore"
        return plan
    dist = find_distribution(site_packages, state.distribution)
    same_release = dist is not None and dist.version == state.version
    originals: Dict[str, bytes] = {}
    conflicts = []
    skipped = []
    record_entries = []
    for entry in state.entries:
        current_path = site_packages / entry.path
        current = read_file(current_path)
        digest = None if current is None else sha256_hex(current)
        if entry.kind == "record":
            record_entries.append((entry, current, digest))
            continue
        if digest == entry.before:
            action = "original"
        elif digest == entry.after:
            action = "restore"
            original = None if entry.before is None else read_blob(site_packages, entry.before)
            plan.changes.append(Change(entry.path, digest, entry.before))
            if original is not None:
                assert entry.before is not None  # original was read from its blob
                plan.blobs[entry.before] = original
                if entry.kind == "patch":
                    originals[entry.path] = original
            if current is not None:
                assert digest is not None  # the digest of current
                plan.blobs[digest] = current
        elif entry.kind == "patch" and not same_release:
            action = "skipped: belongs to a transformers release that was replaced"
            skipped.append(entry.path)
        elif entry.kind == "extra" and entry.before is None:
            # A file install created (a hook file) that was edited since: it is ascend-env's own
            # name, so restore removes it all the same, edits included.
            action = "removed (edited since install)"
            plan.changes.append(Change(entry.path, digest, None))
            # digest differs from entry.before (None), so the file exists: current is its bytes.
            assert digest is not None and current is not None
            plan.blobs[digest] = current
        elif entry.kind == "extra":
            # A file install amended (ascend-env's own RECORD) that another installer has
            # replaced or removed since (pip install of another ascend-env build): it is theirs now.
            action = "left alone: replaced by another installer since install"
        else:
            action = "conflict"
            conflicts.append(entry.path)
        plan.report["files"].append({"path": entry.path, "kind": entry.kind, "action": action})
    if conflicts:
        version = state.version
        raise EnvironmentProblem(
            f"{', '.join(conflicts)} changed since install (neither the original nor the patched bytes); "
            "restore would overwrite them, so nothing was changed.",
            f"reinstall transformers ({reinstall('transformers', version)}), "
            "then run restore again.",
        )
    for entry, current, digest in record_entries:
        if current is None or not same_release:
            action = "skipped"
        elif digest == entry.before:
            action = "original"
        elif digest == entry.after and entry.before is not None:
            assert digest is not None  # current is not None here
            plan.changes.append(Change(entry.path, digest, entry.before))
            plan.blobs[entry.before] = read_blob(site_packages, entry.before)
            plan.blobs[digest] = current
            action = "restore"
        else:
            # pip rewrote RECORD (e.g. a reinstall): give the restored files their hashes there.
            try:
                desired = rewrite_record(current, originals)
            except EnvironmentProblem:
                desired = current
            action = "original"
            if desired != current:
                assert digest is not None  # current is not None here
                plan.changes.append(Change(entry.path, digest, sha256_hex(desired)))
                plan.blobs[sha256_hex(desired)] = desired
                plan.blobs[digest] = current
                action = "rewritten"
        plan.report["files"].append({"path": entry.path, "kind": entry.kind, "action": action})
    plan.report["result"] = "restored"
    return plan


def restore(site_packages: Path, *, dry_run: bool = False) -> dict[str, Any]:
    """Put back the recorded original bytes and remove ascend-env's files and state."""
    plan = _settled(lambda: plan_restore(site_packages))
    if dry_run:
        if plan.report["result"] == "restored":
            plan.report["result"] = "would restore"
        plan.report["dry_run"] = True
        return plan.report
    if plan.report["result"] == "nothing to restore" and not state_dir(site_packages).exists():
        return plan.report
    read_journal(site_packages)  # a damaged journal is refused before the lock file is made
    with locked_and_recovered(site_packages) as recovered:
        plan = plan_restore(site_packages)
        if read_state(site_packages) is not None:
            commit(site_packages, Journal("restore", tuple(plan.changes), None), plan.blobs)
        else:
            from ascend_env.patching.store import remove_directory

            remove_directory(site_packages)
    if recovered:
        plan.report["recovered"] = f"finished an interrupted {recovered}"
    return plan.report


# -- status ------------------------------------------------------------------------------------------


def status(
    site_packages: Path, *, directory: Optional[Path] = None, search_sys_path: bool = False
) -> Tuple[dict[str, Any], int]:
    """What is applied; returns the report and the exit code (0 fine, 1 act, 2 error)."""
    report: dict[str, Any] = {"site_packages": str(site_packages)}
    journal = read_journal(site_packages)
    state = read_state(site_packages)
    if find_distribution(site_packages, DISTRIBUTION) is None and journal is None:
        return _status_without_transformers(report, site_packages, state)
    inspection = inspect(site_packages, None, directory)
    dist = inspection.distribution
    assert dist is not None
    report["transformers"] = dist.version
    report["files"] = [f.to_dict() for f in inspection.files]
    if state is not None:
        report["applied_at"] = state.applied_at
        report["tool_version"] = state.tool_version
    if journal is not None:
        report.update(
            status="interrupted",
            run="ascend-env install (or ascend-env restore)",
            detail=f"an ascend-env {journal.action} was interrupted",
        )
        return report, 1
    if state is not None:
        lines = drift(site_packages)
        if lines:
            report.update(
                status="drifted", drift=lines, run="ascend-env install (re-applies), or ascend-env restore"
            )
            return report, 1
        if any(entry.kind == "patch" for entry in state.entries):
            report["status"] = "applied"
            return report, 0
        # Only the startup hook was installed: the release's files say the rest.
    outcome = inspection.outcome
    if isinstance(outcome, NothingToDo):
        report.update(status="nothing to do", detail=f"transformers {dist.version}: {outcome.why}")
        return report, 0
    if isinstance(outcome, UnknownRelease):
        raise _unknown(dist, directory)
    kinds = {f.status for f in inspection.files}
    if kinds == {"applied"}:
        detail = "patched outside ascend-env (no state recorded for them)"
        report.update(status="applied", detail=detail)
        return report, 0
    if kinds == {"clean"}:
        needed = isin_falls_back(site_packages, search_sys_path)
        report["status"] = "not applied"
        if needed:
            report.update(detail="torch_npu has no native NPU isin", run="ascend-env install")
            return report, 1
        return report, 0
    report.update(
        status="partly applied" if "conflict" not in kinds else "conflict",
        run=f"{reinstall('transformers', dist.version)}, then ascend-env install",
    )
    return report, 1


def _status_without_transformers(
    report: dict[str, Any], site_packages: Path, state: Optional[State]
) -> Tuple[dict[str, Any], int]:
    """status where transformers is not installed: a hook-only install, nothing at all, or files
    kept for a transformers that was uninstalled after install (restore cleans them up)."""
    report.update(transformers=None, files=[])
    if state is not None:
        report.update(applied_at=state.applied_at, tool_version=state.tool_version)
        if any(entry.kind in ("patch", "record") for entry in state.entries):
            report.update(
                status="transformers removed",
                detail=f"transformers {state.version} was uninstalled after install; ascend-env still "
                "records its patched files and keeps their originals",
                run="ascend-env restore (removes that record and the startup hook; install --hook-only "
                "puts the hook back)",
            )
            return report, 1
        lines = drift(site_packages)
        if lines:
            run = "ascend-env install --hook-only, or ascend-env restore"
            report.update(status="drifted", drift=lines, run=run)
            return report, 1
        detail = "transformers is not installed; the startup hook serves any caller"
        report.update(status="hook only", detail=detail)
        return report, 0
    report.update(status="nothing to do", detail="transformers is not installed here")
    return report, 0
