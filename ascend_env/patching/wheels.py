"""Writing a patched copy of a transformers wheel: ``transformers-X+ascend.N``.

The copy holds the same files as the original wheel, with the manifest's patches applied, its
``.dist-info`` directory and ``METADATA`` renamed to the local version ``X+ascend.N``, and a fresh
``RECORD``. A local version satisfies ``transformers==X`` (PEP 440 ignores the local label when the
specifier has none) and sorts above ``X``, so pip installs it over the original, and an index that
holds both serves the patched build to ``transformers==X`` pins. ``N`` numbers the builds of one
release: raise it whenever a new build's content differs.

Only the standard library's ``zipfile`` is used; every entry keeps its timestamp and attributes,
so that the same input gives the same bytes.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import re
import zipfile
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from ascend_env.exceptions import EnvironmentProblem, UsageError
from ascend_env.patching.diffs import apply_patch, parse_patch
from ascend_env.patching.manifest import (
    FileChange,
    Manifest,
    NothingToDo,
    Release,
    load_manifest,
    patches_dir,
    read_patch_text,
)
from ascend_env.patching.records import RecordEntry, record_digest, record_hash, sha256_hex
from ascend_env.patching.wheel_members import SIGNATURES, MemberHash, check_layout, tampered
from ascend_env.utils import atomic

__all__ = ["LOCAL_PREFIX", "MEMBER_LIMIT", "TOTAL_LIMIT", "PatchedWheel", "patch_wheel"]

LOCAL_PREFIX = "ascend"


@dataclass(frozen=True)
class _Source:
    """The wheel being patched: its path, project and version, the open archive, and its members
    (``infos`` in the archive's order, ``members`` by name)."""

    wheel: Path
    project: str
    version: str
    archive: zipfile.ZipFile
    infos: List[zipfile.ZipInfo]
    members: Dict[str, zipfile.ZipInfo]
    rows: Dict[str, RecordEntry] = field(default_factory=dict)  # the wheel's RECORD, once checked

    def read(self, name: str) -> bytes:
        """The bytes of member ``name``, checked against its RECORD row."""
        data = _read(self.archive, self.wheel, self.members[name])
        digest = MemberHash(name, self.rows[name])
        digest.update(data)
        digest.check(self.wheel, self.project, self.version)
        return data

    def hasher(self, name: str) -> MemberHash:
        return MemberHash(name, self.rows[name])


@dataclass(frozen=True)
class PatchedWheel:
    """What :func:`patch_wheel` wrote: ``changes`` maps each patched file to its patch and hashes."""

    path: Path
    version: str
    original_version: str
    changes: Dict[str, FileChange] = field(default_factory=dict)

    @property
    def files(self) -> Dict[str, Dict[str, str]]:
        """``changes`` as JSON: target -> patch, before, after."""
        return {
            target: {"patch": change.patch, "before": change.before, "after": change.after}
            for target, change in self.changes.items()
        }

    def to_dict(self) -> Dict[str, Any]:
        return {
            "wheel": str(self.path),
            "version": self.version,
            "original_version": self.original_version,
            "files": self.files,
        }


def _local_version(version: str, build: int) -> str:
    """``X+ascend.N`` for release ``X`` and build number ``N``."""
    return f"{version}+{LOCAL_PREFIX}.{build}"


def _split_name(wheel: Path) -> Tuple[str, Version, str]:
    try:
        name, version, _build, _tags = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename as exc:
        raise UsageError(
            f"{wheel.name} is not a wheel file name ({exc}).",
            "pass a file named like transformers-4.46.3-py3-none-any.whl.",
        ) from None
    tags = wheel.name[: -len(".whl")].split("-")[-3:]
    return str(name), version, "-".join(tags)


def _dist_info(names: List[str], project: str) -> str:
    wanted = canonicalize_name(project)
    found = sorted(
        {
            name.split("/", 1)[0]
            for name in names
            if name.split("/", 1)[0].endswith(".dist-info") and name.count("/") == 1
        }
    )
    matching = [d for d in found if canonicalize_name(d[: -len(".dist-info")].rsplit("-", 1)[0]) == wanted]
    if len(matching) != 1:
        raise EnvironmentProblem(
            f"the wheel holds {len(matching)} {project} .dist-info directories "
            f"({', '.join(found) or 'none'}).",
            "pass an unmodified wheel as downloaded from the package index.",
        )
    return matching[0]


def _set_version(metadata: bytes, version: str) -> bytes:
    text = metadata.decode("utf-8")
    new, count = re.subn(
        r"(?m)^Version: .*?(\r?)$", lambda m: f"Version: {version}{m.group(1)}", text, count=1
    )
    if count != 1:
        raise EnvironmentProblem("the wheel's METADATA has no Version field.", "pass an unmodified wheel.")
    return new.encode("utf-8")


def _record(entries: List[Tuple[str, str, int]], record_name: str) -> bytes:
    """RECORD's text for ``(name, record hash, size)`` rows, then its own row."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for row in entries:
        writer.writerow(row)
    writer.writerow([record_name, "", ""])
    return buffer.getvalue().encode("utf-8")


def _release(manifest: Manifest, project: str, version: Version) -> Release:
    if canonicalize_name(project) != canonicalize_name(manifest.distribution):
        raise UsageError(
            f"the wheel is {project}, not {manifest.distribution}.",
            f"pass a {manifest.distribution} wheel.",
        )
    if version.local is not None:
        raise UsageError(
            f"{project} {version} is a local build (already patched, or built elsewhere).",
            f"pass the released wheel: pip download --no-deps {project}=={version.public}.",
        )
    outcome = manifest.lookup(str(version))
    if isinstance(outcome, NothingToDo):
        raise UsageError(
            f"{project} {version} needs no patch: {outcome.why}.",
            "use the original wheel as it is.",
        )
    if not isinstance(outcome, Release):
        raise EnvironmentProblem(
            f"{project} {version} is not a release this ascend-env has patches for.",
            "pass a listed release (ascend-env status shows them), or upgrade ascend-env.",
        )
    return outcome


def patch_wheel(
    wheel: Path,
    output_dir: Path,
    *,
    build: int = 1,
    manifest: Optional[Manifest] = None,
    directory: Optional[Path] = None,
) -> PatchedWheel:
    """Write the patched copy of ``wheel`` into ``output_dir`` and describe it.

    ``manifest`` and ``directory`` (the patches directory) default to the shipped ones. Members are
    streamed from the wheel into the copy, except the few that change; a member larger than
    :data:`MEMBER_LIMIT`, members that add up to more than :data:`TOTAL_LIMIT`, or a member that
    does not decompress cleanly refuse the wheel.
    """
    if build < 1:
        raise UsageError(f"build number {build} is not a positive integer.", "pass --build 1 or more.")
    directory = patches_dir() if directory is None else directory
    manifest = load_manifest(directory) if manifest is None else manifest
    project, version, tags = _split_name(wheel)
    release = _release(manifest, project, version)
    new_version = _local_version(str(version), build)
    archive = _open(wheel, project, str(version))
    stem = wheel.name.split("-", 1)[0]
    path = output_dir / f"{stem}-{new_version}-{tags}.whl"
    with archive:
        source = _source(wheel, project, str(version), archive)
        old_info = _dist_info(list(source.members), project)
        new_info = old_info[: -len(".dist-info")].rsplit("-", 1)[0] + f"-{new_version}.dist-info"
        source = _checked(source, old_info, {target.split("/", 1)[0] for target in release.changes})
        changed = _patched_members(source, release, manifest, directory)
        changed.update(_new_metadata(source, old_info, new_version))
        _write_wheel(path, lambda out: _write_members(source, out, changed, old_info, new_info))
    return PatchedWheel(path, new_version, str(version), dict(sorted(release.changes.items())))


def _open(wheel: Path, project: str, version: str) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(wheel)
    except UnicodeDecodeError as exc:  # a name flagged UTF-8 (bit 11) that is not
        what = f"a member's name is marked UTF-8 but is not ({exc.reason} at byte {exc.start})"
        raise tampered(wheel, project, version, what) from None
    except (OSError, zipfile.BadZipFile) as exc:
        raise EnvironmentProblem(f"cannot read {wheel}: {exc}.", "pass a complete wheel file.") from None


# A zip member's general purpose flag bit 0: encrypted (no released wheel is).
_ENCRYPTED = 0x1


def _source(wheel: Path, project: str, version: str, archive: zipfile.ZipFile) -> _Source:
    """The wheel's files (not its directory entries), once their declared sizes pass the limits
    and none is encrypted."""
    infos = [info for info in archive.infolist() if not info.is_dir()]
    encrypted = [info.filename for info in archive.infolist() if info.flag_bits & _ENCRYPTED]
    if encrypted:
        what = f"{encrypted[0]} is encrypted" + (
            f" (and {len(encrypted) - 1} more)" if len(encrypted) > 1 else ""
        )
        raise tampered(wheel, project, version, what)
    _check_sizes(wheel, infos)
    return _Source(wheel, project, version, archive, infos, {info.filename: info for info in infos})


def _checked(source: _Source, old_info: str, packages: Set[str]) -> _Source:
    """``source`` with its RECORD rows, once its members' names, kinds and places are a
    release's and its RECORD lists exactly its files (see :func:`check_layout`)."""
    metadata, record = f"{old_info}/METADATA", f"{old_info}/RECORD"
    if metadata not in source.members or record not in source.members:
        raise EnvironmentProblem(f"the wheel has no {metadata} or RECORD.", "pass an unmodified wheel.")
    rows = check_layout(
        source.wheel,
        source.project,
        source.version,
        source.archive.infolist(),
        _read(source.archive, source.wheel, source.members[record]),
        old_info,
        packages,
    )
    return replace(source, rows=rows)


def _new_metadata(source: _Source, old_info: str, new_version: str) -> Dict[str, bytes]:
    """``METADATA`` with the local version."""
    metadata = f"{old_info}/METADATA"
    return {metadata: _set_version(source.read(metadata), new_version)}


def _write_wheel(path: Path, write: Callable[[zipfile.ZipFile], None]) -> None:
    """Create ``path`` with what ``write`` puts into a new zip file: written under a temporary name
    in the same directory and renamed over ``path``, so that ``path`` is whole or untouched (and
    the directories made for it are removed again when ``write`` fails)."""
    made = [parent for parent in (path.parent, *path.parent.parents) if not parent.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic.replacing(path, suffix=".whl") as temporary:
            with zipfile.ZipFile(temporary, "w") as out:
                write(out)
            # A file made to be shared (an index, an image), as pip and build write wheels: 0666
            # less the umask, not the temporary file's 0600.
            os.chmod(temporary, 0o666 & ~_umask())
    except BaseException:
        for directory in made:  # deepest first
            try:
                directory.rmdir()
            except OSError:
                break
        raise


#: The largest wheel member that patch-wheel reads (transformers' largest file is under 1 MiB).
MEMBER_LIMIT = 64 << 20
#: The most that all members of a wheel may add up to, uncompressed.
TOTAL_LIMIT = 1 << 30


def _check_sizes(wheel: Path, infos: List[zipfile.ZipInfo]) -> None:
    """Refuse a wheel whose members declare more than the limits (a zip bomb, or not a wheel of
    Python files); decompression never yields more than a member declares."""
    for info in infos:
        if info.file_size > MEMBER_LIMIT:
            raise EnvironmentProblem(
                f"{info.filename} in {wheel} unpacks to {info.file_size} bytes, more than "
                f"patch-wheel reads ({MEMBER_LIMIT}).",
                "pass the wheel as released: pip download --no-deps transformers==<version>.",
            )
    total = sum(info.file_size for info in infos)
    if total > TOTAL_LIMIT:
        raise EnvironmentProblem(
            f"{wheel} unpacks to {total} bytes, more than patch-wheel reads ({TOTAL_LIMIT}).",
            "pass the wheel as released: pip download --no-deps transformers==<version>.",
        )


def _read(archive: zipfile.ZipFile, wheel: Path, info: zipfile.ZipInfo) -> bytes:
    """The bytes of one member; a damaged member (bad CRC, corrupt deflate data, truncated, an
    unknown compression) is a clear error."""
    try:
        with archive.open(info) as member:
            return member.read(info.file_size + 1)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError, OSError) as exc:
        raise _damaged(wheel, info, exc) from None


def _damaged(wheel: Path, info: zipfile.ZipInfo, exc: BaseException) -> EnvironmentProblem:
    return EnvironmentProblem(
        f"{info.filename} in {wheel} is damaged ({type(exc).__name__}: {exc}).",
        "download the wheel again: pip download --no-deps transformers==<version>.",
    )


def _patched_members(
    source: _Source, release: Release, manifest: Manifest, directory: Path
) -> Dict[str, bytes]:
    """The new bytes of each member that the release's patches change."""
    changed: Dict[str, bytes] = {}
    for target, change in sorted(release.changes.items()):
        if target not in source.members:
            raise EnvironmentProblem(
                f"the wheel has no {target}, which {source.project} {source.version} has.",
                "pass an unmodified wheel.",
            )
        original = source.read(target)
        _check_original(source, target, original, change)
        entry = manifest.patches[change.patch]
        patched = apply_patch(parse_patch(read_patch_text(directory, entry), entry.path), original)
        if sha256_hex(patched) != change.after:
            raise EnvironmentProblem(
                f"patch {change.patch} gives {target} another text than the manifest records.",
                "reinstall ascend-env, or regenerate the manifest with tools/check_patches.py.",
            )
        changed[target] = patched
    return changed


def _check_original(source: _Source, target: str, original: bytes, change: FileChange) -> None:
    if sha256_hex(original) != change.before:
        project, version = source.project, source.version
        raise EnvironmentProblem(
            f"{target} in the wheel differs from {project} {version}'s file "
            f"(sha256 {sha256_hex(original)}, expected {change.before}).",
            f"pass the wheel as released: pip download --no-deps {project}=={version}.",
        )


def _write_members(
    source: _Source, out: zipfile.ZipFile, changed: Dict[str, bytes], old_info: str, new_info: str
) -> None:
    """Every member into ``out``, in the wheel's order: the changed ones from ``changed``, the
    others streamed; the ``.dist-info`` renamed; a fresh RECORD last (signatures dropped)."""
    rows: List[Tuple[str, str, int]] = []
    for info in source.infos:
        top, _, rest = info.filename.partition("/")
        if top == old_info and rest in ("RECORD", *SIGNATURES):
            continue
        name = f"{new_info}/{rest}" if top == old_info else info.filename
        if info.filename in changed:
            data = changed[info.filename]
            out.writestr(_copy_info(info, name), data)
            rows.append((name, record_hash(data), len(data)))
        else:
            rows.append((name, *_copy_member(source, info, out, _copy_info(info, name))))
    record_name = f"{new_info}/RECORD"
    record = next(i for i in source.infos if i.filename == f"{old_info}/RECORD")
    out.writestr(_copy_info(record, record_name), _record(rows, record_name))


def _copy_member(
    source: _Source, info: zipfile.ZipInfo, out: zipfile.ZipFile, new: zipfile.ZipInfo
) -> Tuple[str, int]:
    """Stream one member into ``out`` in blocks; its RECORD hash and size."""
    digest = hashlib.sha256()
    recorded = source.hasher(info.filename)
    size = 0
    try:
        with source.archive.open(info) as member, out.open(new, "w") as target:
            for block in iter(lambda: member.read(1 << 20), b""):
                digest.update(block)
                recorded.update(block)
                size += len(block)
                target.write(block)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as exc:
        raise _damaged(source.wheel, info, exc) from None
    recorded.check(source.wheel, source.project, source.version)
    return record_digest(digest.digest()), size


def _copy_info(info: zipfile.ZipInfo, name: str) -> zipfile.ZipInfo:
    new = zipfile.ZipInfo(name, date_time=info.date_time)
    new.compress_type = zipfile.ZIP_DEFLATED
    new.external_attr = info.external_attr
    new.create_system = info.create_system
    return new


def _umask() -> int:
    """The process's umask (read by setting it, and at once setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
