"""Which real torch_npu runs on the emulated CANN (``--cann emulated``), and whether it fits.

One of three, checked before anything runs:

- a wheel given by path (``--torch-npu-wheel PATH``, for machines without network);
- release R's wheel (``--torch-npu R``), fetched once by pip (``pip download --no-deps
  --only-binary=:all: torch_npu==R``, for this Python's tags, with pip's own configuration: its
  index, its proxy), unless the torch_npu installed here is R already;
- the torch_npu installed in this Python.

A wheel is unpacked once into the protected build cache (:mod:`ascend_env.utils.buildcache`:
``torch_npu-wheels/<wheel name>-<hash>/``), whose directory the audited processes get first on
``PYTHONPATH``. A wheel fits when its Python tag is this Python's (torch_npu's wheels are
``cpXY-cpXY``: 3.8 to 3.10 for the releases without an NPU isin) and the torch installed here is
the one its release is built for (the compatibility table's, else the release's first three
numbers: 2.1.0.post6 needs torch 2.1.0). A wheel that does not fit is refused (exit 2) with the
one it needs.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import List, NamedTuple, Optional, Tuple

from packaging.version import InvalidVersion, Version

from ascend_env.checks import tables
from ascend_env.exceptions import EnvironmentProblem, UsageError
from ascend_env.utils import buildcache

__all__ = ["OWNER", "Choice", "check_fit", "choose", "fetch", "needed_torch", "parse_wheel_name", "unpack"]

OWNER = "the torch_npu wheels of the emulated CANN"
_WHEEL = re.compile(
    r"^(?P<name>torch_npu)-(?P<version>[^-]+)(-\d[^-]*)?-(?P<python>[^-]+)-(?P<abi>[^-]+)-(?P<platform>.+)\.whl$"
)
_PIP_SECONDS = 900.0


class Choice(NamedTuple):
    """The torch_npu the audited processes import: its release, where it came from (``wheel``,
    ``fetched`` or ``installed``), the directory to put first on ``PYTHONPATH`` (None: the
    installed one is found as it is) and the wheel file (None where installed)."""

    release: str
    source: str
    path: Optional[Path]
    wheel: Optional[Path]

    @property
    def label(self) -> str:
        """How the report names it: ``2.1.0.post6 (wheel torch_npu-...whl)``."""
        where = {"installed": "installed", "fetched": "fetched by pip", "wheel": "wheel given"}[self.source]
        detail = self.wheel.name if self.wheel is not None else str(self.path or "")
        return f"{self.release} ({where}{': ' + detail if detail else ''})"


def parse_wheel_name(name: str) -> Tuple[str, List[str]]:
    """A torch_npu wheel file name's release and Python tags (``cp38``, ...); UsageError else."""
    found = _WHEEL.match(name)
    if found is None:
        raise UsageError(
            f"{name} is not the name of a torch_npu wheel (torch_npu-RELEASE-PYTHON-ABI-PLATFORM.whl).",
            "give the wheel file as pip downloaded it, under its own name",
        )
    return found.group("version"), found.group("python").split(".")


def needed_torch(release: str) -> str:
    """The torch release torch_npu ``release`` is built for: the compatibility table's, else the
    release's first three numbers (``2.1.0.post6`` -> ``2.1.0``)."""
    from ascend_env.detect import compat

    try:
        row = compat.load().find(release)
    except EnvironmentProblem:
        row = None
    if row is not None:
        return row.torch
    try:
        return ".".join(str(n) for n in Version(release).release[:3])
    except InvalidVersion:
        raise UsageError(
            f"{release!r} is not a torch_npu release number.", "name one such as 2.1.0.post6"
        ) from None


def _installed(name: str) -> Optional[str]:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _python_tag() -> str:
    return f"cp{sys.version_info[0]}{sys.version_info[1]}"


def check_fit(release: str, python_tags: Optional[List[str]], what: str) -> None:
    """Refuse (exit 2) a torch_npu that does not fit this Python and the torch installed here."""
    torch = _installed("torch")
    wanted = needed_torch(release)
    here = f"Python {sys.version_info[0]}.{sys.version_info[1]}"
    if python_tags is not None and _python_tag() not in python_tags:
        raise UsageError(
            f"{what} is built for {', '.join(python_tags)}, and this is {here} ({_python_tag()}): "
            "it cannot be imported here.",
            f"give the torch_npu {release} wheel for {_python_tag()} (pip download --no-deps "
            f"--only-binary=:all: torch_npu=={release} picks it), or run ascend-env on the Python it is for",
        )
    if torch is None:
        raise EnvironmentProblem(
            f"{what} runs on torch {wanted}, and this Python ({sys.executable}) has no torch.",
            f"install torch {wanted} into it (pip install torch=={wanted})",
        )
    try:
        fits = Version(Version(torch).public) == Version(wanted)
    except InvalidVersion:
        fits = False
    if not fits:
        raise UsageError(
            f"{what} is built for torch {wanted}, and this Python has torch {torch}: its binary "
            "cannot load against another torch.",
            f"run it in an environment with torch {wanted}, or name a torch_npu built for torch "
            f"{Version(torch).public if _is_version(torch) else torch} (e.g. --torch-npu with the "
            "release your deployment uses)",
        )


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


def choose(release: Optional[str], wheel: Optional[Path]) -> Choice:
    """The torch_npu to run (see the module's docstring), checked to fit; fetched and unpacked
    first where it must be."""
    if wheel is not None:
        if not wheel.is_file():
            raise UsageError(
                f"--torch-npu-wheel {wheel}: no such file.", "give the path of a torch_npu .whl file"
            )
        version, tags = parse_wheel_name(wheel.name)
        if release is not None and Version(release) != Version(version):
            raise UsageError(
                f"--torch-npu {release} and --torch-npu-wheel {wheel.name} (torch_npu {version}) disagree.",
                "give one of them, or the wheel of that release",
            )
        check_fit(version, tags, f"the wheel {wheel.name}")
        return Choice(version, "wheel", unpack(wheel), wheel)
    installed = _installed("torch_npu") if tables.installed_torch_npu() is not None else None
    if release is None:
        if installed is None:
            raise UsageError(
                "--cann emulated runs a real torch_npu, and none is named or installed here.",
                "name its release (--torch-npu 2.1.0.post6: pip fetches its wheel once) or give a "
                "wheel (--torch-npu-wheel PATH)",
            )
        check_fit(installed, None, f"the installed torch_npu {installed}")
        return Choice(installed, "installed", None, None)
    if installed is not None and _same(installed, release):
        check_fit(installed, None, f"the installed torch_npu {installed}")
        return Choice(installed, "installed", None, None)
    check_fit(release, None, f"torch_npu {release}")
    fetched = fetch(release)
    version, tags = parse_wheel_name(fetched.name)
    check_fit(version, tags, f"the wheel {fetched.name}")
    return Choice(version, "fetched", unpack(fetched), fetched)


def _same(a: str, b: str) -> bool:
    try:
        return Version(Version(a).public) == Version(Version(b).public)
    except InvalidVersion:
        return a == b


def _wheels_dir() -> Path:
    return buildcache.cache_root() / "torch_npu-wheels"


def fetch(release: str) -> Path:
    """Release ``release``'s wheel for this Python, from the cache, else downloaded once by pip."""
    directory = _wheels_dir() / "downloads"
    buildcache.check_trusted(buildcache.cache_root(), OWNER)
    for cached in sorted(directory.glob(f"torch_npu-{release}-*.whl")) if directory.is_dir() else []:
        try:
            if _python_tag() in parse_wheel_name(cached.name)[1]:
                buildcache.check_private(OWNER, cached)
                return cached
        except UsageError:
            continue
    buildcache.make_private_dirs(directory, OWNER)
    with tempfile.TemporaryDirectory(dir=directory, prefix=".download-") as scratch:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "-d",
            scratch,
            f"torch_npu=={release}",
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=_PIP_SECONDS, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise _fetch_problem(release, str(exc)) from None
        found = sorted(Path(scratch).glob("torch_npu-*.whl"))
        if done.returncode != 0 or not found:
            last = (done.stderr.strip().splitlines() or ["pip gave no reason"])[-1]
            raise _fetch_problem(release, last)
        target = directory / found[0].name
        os.replace(found[0], target)
    return target


def _fetch_problem(release: str, why: str) -> EnvironmentProblem:
    return EnvironmentProblem(
        f"pip could not fetch torch_npu {release}'s wheel for Python {sys.version_info[0]}."
        f"{sys.version_info[1]} ({why}).",
        f"on a machine without network, download it elsewhere (pip download --no-deps "
        f"--only-binary=:all: torch_npu=={release}) and give it with --torch-npu-wheel PATH",
    )


def unpack(wheel: Path) -> Path:
    """The directory that holds ``wheel`` unpacked (``torch_npu/`` and its ``.dist-info``), made
    once in the protected cache: into a temporary directory, then renamed into place."""
    digest = hashlib.sha256()
    with wheel.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    root = _wheels_dir()
    target = root / f"{wheel.name[: -len('.whl')]}-{digest.hexdigest()[:12]}"
    buildcache.check_trusted(buildcache.cache_root(), OWNER)
    if (target / "torch_npu").is_dir():
        buildcache.check_private(OWNER, root, target)
        return target
    buildcache.make_private_dirs(root, OWNER)
    buildcache.check_private(OWNER, root)
    with buildcache.locked(root / "unpack.lock", OWNER):
        if (target / "torch_npu").is_dir():
            return target
        partial = Path(tempfile.mkdtemp(dir=root, prefix=".unpack-"))
        try:
            with zipfile.ZipFile(wheel) as archive:
                _extract(archive, partial)
            os.replace(partial, target)
        except (OSError, zipfile.BadZipFile) as exc:
            raise EnvironmentProblem(
                f"the wheel {wheel} cannot be unpacked ({exc}).",
                "download it again (pip download --no-deps --only-binary=:all: torch_npu==RELEASE)",
            ) from None
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return target


def _extract(archive: zipfile.ZipFile, into: Path) -> None:
    """Every member of ``archive`` under ``into``, none outside it, executables kept executable."""
    base = into.resolve()
    for member in archive.infolist():
        destination = (into / member.filename).resolve()
        if base != destination and base not in destination.parents:
            raise zipfile.BadZipFile(f"member {member.filename!r} points outside the wheel")
        archive.extract(member, into)
        mode = (member.external_attr >> 16) & 0o777
        if mode and not member.is_dir():
            os.chmod(destination, mode & 0o755)
