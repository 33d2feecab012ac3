"""Classify the files a transformers release needs patched: ``clean``, ``applied`` or ``conflict``.

Each target file is classified by its hash against the manifest's ``before`` and ``after``
(the reverse patch only as a fallback, for a file edited elsewhere), and the patched bytes are
computed in memory. Only reads: nothing here writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional, Union

from ascend_env.exceptions import AscendEnvError, EnvironmentProblem, PatchError, reinstall
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
from ascend_env.patching.records import Distribution, find_distribution, sha256_hex

__all__ = ["FileState", "FileStatus", "Inspection", "inside", "inspect_site", "unknown_release"]

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


def inside(site_packages: Path, relative: str) -> bool:
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
    if target not in dist.record or not inside(site_packages, target):
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


def inspect_site(
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


def unknown_release(dist: Distribution) -> EnvironmentProblem:
    return EnvironmentProblem(
        f"transformers {dist.version} is not a release this ascend-env has patches for "
        f"(a development or local build, or a release newer than its manifest).",
        "install a listed release (e.g. pip install transformers==4.46.3), upgrade ascend-env, or run "
        "with --patches never to install only the startup hook.",
    )
