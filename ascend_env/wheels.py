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
import io
import os
import re
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from ascend_env.diffs import apply_patch, parse_patch
from ascend_env.exceptions import EnvironmentProblem, UsageError
from ascend_env.manifest import Manifest, NothingToDo, Release, load_manifest, patches_dir, read_patch_text
from ascend_env.records import record_hash, sha256_hex

__all__ = ["LOCAL_PREFIX", "PatchedWheel", "local_version", "patch_wheel"]

LOCAL_PREFIX = "ascend"
_SIGNATURES = ("RECORD.jws", "RECORD.p7s")


@dataclass
class PatchedWheel:
    """What :func:`patch_wheel` wrote."""

    path: Path
    version: str
    original_version: str
    files: Dict[str, Dict[str, str]] = field(default_factory=dict)  # target -> patch, before, after

    def to_dict(self) -> dict:
        return {
            "wheel": str(self.path),
            "version": self.version,
            "original_version": self.original_version,
            "files": self.files,
        }


def local_version(version: str, build: int) -> str:
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


def _dist_info(names: List[str], project: str, version: str) -> str:
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


def _record(entries: List[Tuple[str, bytes]], record_name: str) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for name, data in entries:
        writer.writerow([name, record_hash(data), len(data)])
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

    ``manifest`` and ``directory`` (the patches directory) default to the shipped ones.
    """
    if build < 1:
        raise UsageError(f"build number {build} is not a positive integer.", "pass --build 1 or more.")
    directory = patches_dir() if directory is None else directory
    manifest = load_manifest(directory) if manifest is None else manifest
    project, version, tags = _split_name(wheel)
    release = _release(manifest, project, version)
    new_version = local_version(str(version), build)
    try:
        archive = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise EnvironmentProblem(f"cannot read {wheel}: {exc}.", "pass a complete wheel file.") from None
    with archive:
        infos = archive.infolist()
        old_info = _dist_info([i.filename for i in infos], project, str(version))
        new_info = old_info[: -len(".dist-info")].rsplit("-", 1)[0] + f"-{new_version}.dist-info"
        contents = {info.filename: archive.read(info) for info in infos if not info.is_dir()}

    stem = wheel.name.split("-", 1)[0]
    result = PatchedWheel(output_dir / f"{stem}-{new_version}-{tags}.whl", new_version, str(version))
    for target, change in sorted(release.changes.items()):
        original = contents.get(target)
        if original is None:
            raise EnvironmentProblem(
                f"the wheel has no {target}, which {project} {version} has.", "pass an unmodified wheel."
            )
        if sha256_hex(original) != change.before:
            raise EnvironmentProblem(
                f"{target} in the wheel differs from {project} {version}'s file "
                f"(sha256 {sha256_hex(original)}, expected {change.before}).",
                f"pass the wheel as released: pip download --no-deps {project}=={version}.",
            )
        entry = manifest.patches[change.patch]
        patched = apply_patch(parse_patch(read_patch_text(directory, entry), entry.path), original)
        if sha256_hex(patched) != change.after:
            raise EnvironmentProblem(
                f"patch {change.patch} gives {target} another text than the manifest records.",
                "reinstall ascend-env, or regenerate the manifest with tools/check_patches.py.",
            )
        contents[target] = patched
        result.files[target] = {"patch": change.patch, "before": change.before, "after": change.after}

    metadata = f"{old_info}/METADATA"
    if metadata not in contents:
        raise EnvironmentProblem(f"the wheel has no {metadata}.", "pass an unmodified wheel.")
    contents[metadata] = _set_version(contents[metadata], new_version)

    written: List[Tuple[zipfile.ZipInfo, bytes]] = []
    record_name = f"{new_info}/RECORD"
    for info in infos:
        if info.is_dir():
            continue
        top, _, rest = info.filename.partition("/")
        if top == old_info and rest in ("RECORD", *_SIGNATURES):
            continue
        name = f"{new_info}/{rest}" if top == old_info else info.filename
        written.append((_copy_info(info, name), contents[info.filename]))
    record_info = _copy_info(next(i for i in infos if i.filename == f"{old_info}/RECORD"), record_name)
    record = _record([(info.filename, data) for info, data in written], record_name)
    written.append((record_info, record))

    output_dir.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".patch-wheel-", suffix=".whl", dir=output_dir)
    os.close(handle)
    try:
        with zipfile.ZipFile(temporary, "w") as out:
            for info, data in written:
                out.writestr(info, data)
        os.replace(temporary, result.path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return result


def _copy_info(info: zipfile.ZipInfo, name: str) -> zipfile.ZipInfo:
    new = zipfile.ZipInfo(name, date_time=info.date_time)
    new.compress_type = zipfile.ZIP_DEFLATED
    new.external_attr = info.external_attr
    new.create_system = info.create_system
    return new
