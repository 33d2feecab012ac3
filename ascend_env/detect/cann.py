"""The CANN toolkit: where it is installed and which version it is.

CANN <= 8.3 installs under ``<prefix>/ascend-toolkit/<version>`` with a ``latest`` link; CANN >= 8.5
installs under ``<prefix>/cann-<version>`` with a ``cann`` link. Both keep the version in the
``version=`` line of ``<root>/<arch>-linux/ascend_toolkit_install.info``; older trees also carry
``<root>/version.cfg`` (``runtime_running_version=[7.5.0.1.129:8.0.RC3]``).

CANN versions are not PEP 440. :class:`CannVersion` parses ``8.0.RC3``, ``8.0.T6``, ``8.0.0``,
``6.3.RC3.1``, ``8.0.RC3.alpha001``, ``8.0.RC2.beta1`` and ``9.2.0-beta.2`` and orders them
totally; see :meth:`CannVersion.sort_key`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Mapping, Optional, Sequence, Tuple

__all__ = [
    "ENV_VARS",
    "INFO_FILE",
    "MAX_INFO_BYTES",
    "SYSTEM_PREFIX",
    "VERSION_CFG",
    "CannVersion",
    "InvalidCannVersion",
    "Toolkit",
    "candidate_roots",
    "find_toolkit",
    "parse_key_values",
    "parse_version",
    "read_text",
    "set_env_script",
    "shown",
    "version_from_cfg",
]

INFO_FILE = "ascend_toolkit_install.info"
VERSION_CFG = "version.cfg"
ENV_VARS: Tuple[str, ...] = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
SYSTEM_PREFIX = Path("/usr/local/Ascend")
MAX_INFO_BYTES = 1 << 20

_STAGES = {"T": 0, "RC": 1, "": 2}
_SUFFIXES = {"alpha": 0, "beta": 1, "": 2}
_VERSION = re.compile(
    r"""
    (?P<major>\d+)\.(?P<minor>\d+)\.
    (?:(?P<stage>RC|T)(?P<stage_num>\d+)|(?P<patch>\d+))
    (?P<extra>(?:\.\d+)*)
    (?:[.-]?(?P<suffix>alpha|beta)[.-]?(?P<suffix_num>\d+))?
    """,
    re.VERBOSE | re.IGNORECASE,
)


class InvalidCannVersion(ValueError):
    """A string that is not a CANN version."""


@dataclass(frozen=True)
class CannVersion:
    """A parsed CANN version.

    ``stage`` is ``"T"`` (a test build), ``"RC"`` (a release candidate) or ``""`` (a release,
    whose number is the patch level). ``extra`` holds hot-fix numbers (``6.3.RC3.1``).
    ``suffix`` is ``"alpha"``, ``"beta"`` or ``""``: community pre-builds of that exact version.
    """

    major: int
    minor: int
    stage: str
    number: int
    extra: Tuple[int, ...] = ()
    suffix: str = ""
    suffix_number: int = 0

    @classmethod
    def parse(cls, text: str) -> CannVersion:
        """Parse ``text`` (surrounding blanks and a ``CANN`` prefix are ignored)."""
        cleaned = text.strip()
        if cleaned.upper().startswith("CANN"):
            cleaned = cleaned[4:].strip(" -_")
        match = _VERSION.fullmatch(cleaned)
        if match is None:
            raise InvalidCannVersion(f"not a CANN version: {text!r}")
        stage = (match["stage"] or "").upper()
        number = int(match["stage_num"] if stage else match["patch"])
        extra = tuple(int(part) for part in match["extra"].split(".") if part)
        return cls(
            major=int(match["major"]),
            minor=int(match["minor"]),
            stage=stage,
            number=number,
            extra=extra,
            suffix=(match["suffix"] or "").lower(),
            suffix_number=int(match["suffix_num"] or 0),
        )

    @property
    def line(self) -> Tuple[int, int]:
        """The ``major.minor`` release line."""
        return (self.major, self.minor)

    @property
    def release(self) -> CannVersion:
        """This version without its alpha/beta suffix."""
        return CannVersion(self.major, self.minor, self.stage, self.number, self.extra)

    @property
    def is_prerelease(self) -> bool:
        """Whether this is a test build, a release candidate, or an alpha/beta build."""
        return self.stage != "" or self.suffix != ""

    def sort_key(self) -> tuple[Any, ...]:
        """The total order: by line, then T < RC < release, then number, hot fixes, and suffix.

        So ``8.0.T6 < 8.0.RC2 < 8.0.RC3.alpha001 < 8.0.RC3.beta1 < 8.0.RC3 < 8.0.RC3.1 < 8.0.0 <
        8.0.1 < 8.1.RC1``, and ``9.2.0-beta.2 < 9.2.0``.
        """
        return (
            self.major,
            self.minor,
            _STAGES[self.stage],
            self.number,
            self.extra,
            _SUFFIXES[self.suffix],
            self.suffix_number,
        )

    def __lt__(self, other: CannVersion) -> bool:
        return self.sort_key() < other.sort_key()

    def __le__(self, other: CannVersion) -> bool:
        return self.sort_key() <= other.sort_key()

    def __gt__(self, other: CannVersion) -> bool:
        return self.sort_key() > other.sort_key()

    def __ge__(self, other: CannVersion) -> bool:
        return self.sort_key() >= other.sort_key()

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.stage}{self.number}"
        text += "".join(f".{n}" for n in self.extra)
        if self.suffix:
            text += (
                f".{self.suffix}{self.suffix_number:03d}"
                if self.suffix == "alpha"
                else (f".{self.suffix}{self.suffix_number}")
            )
        return text


def parse_version(text: str) -> Optional[CannVersion]:
    """``CannVersion.parse(text)``, or ``None`` when ``text`` is not a CANN version."""
    try:
        return CannVersion.parse(text)
    except InvalidCannVersion:
        return None


def read_text(path: Path) -> str:
    """A small text file's content, undecodable bytes replaced (raises ``OSError``)."""
    with open(path, "rb") as handle:
        data = handle.read(MAX_INFO_BYTES)
    return data.decode("utf-8", errors="replace")


def parse_key_values(text: str) -> dict[str, Any]:
    """``key=value`` lines as a dict (first occurrence wins; other lines are ignored)."""
    values: dict[str, Any] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if sep and key and key not in values:
            values[key] = value.strip()
    return values


def version_from_cfg(text: str) -> Optional[str]:
    """The CANN version in a ``version.cfg``: ``runtime_running_version=[7.5.0.1.129:8.0.RC3]``."""
    value = parse_key_values(text).get("runtime_running_version", "")
    match = re.fullmatch(r"\[?\s*[^:\]]*:\s*([^\]\s]+)\s*\]?", value)
    return match.group(1) if match else None


def shown(text: str, limit: int = 60) -> str:
    """``text`` for a message: one line, printable, short."""
    flat = "".join(ch if ch.isprintable() else "?" for ch in text.replace("\n", " "))
    return repr(flat if len(flat) <= limit else flat[:limit] + "...")


@dataclass
class Toolkit:
    """The CANN toolkit that was found (``root is None`` when none was)."""

    root: Optional[Path] = None
    origin: str = ""
    version: Optional[str] = None
    parsed: Optional[CannVersion] = None
    version_source: Optional[Path] = None
    searched: List[str] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return self.root is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "found": self.found,
            "root": None if self.root is None else str(self.root),
            "origin": self.origin or None,
            "version": self.version,
            "version_source": None if self.version_source is None else str(self.version_source),
            "searched": list(self.searched),
            "problems": list(self.problems),
        }


def _versioned_dirs(prefix: Path) -> List[Path]:
    """``<prefix>/cann-*`` directories, newest version first."""
    try:
        found = [p for p in prefix.glob("cann-*") if p.is_dir()]
    except OSError:
        return []

    def key(path: Path) -> tuple[Any, ...]:
        parsed = parse_version(path.name[len("cann-") :])
        return (parsed is not None, parsed.sort_key() if parsed else (), path.name)

    return sorted(found, key=key, reverse=True)


def candidate_roots(
    environ: Mapping[str, str], prefixes: Optional[Sequence[Path]] = None
) -> List[Tuple[Path, str]]:
    """Where to look for the toolkit, in order, each with where the idea came from.

    ``prefixes`` defaults to ``/usr/local/Ascend`` and then ``$HOME/Ascend`` (non-root installs).
    """
    roots: List[Tuple[Path, str]] = []
    for var in ENV_VARS:
        value = environ.get(var, "").strip()
        if value:
            roots.append((Path(value), f"${var}"))
    if prefixes is None:
        prefixes = [SYSTEM_PREFIX]
        home = environ.get("HOME", "").strip()
        if home:
            prefixes.append(Path(home) / "Ascend")
    for prefix in prefixes:
        roots.append((prefix / "ascend-toolkit" / "latest", "default path"))
        roots.append((prefix / "cann", "default path"))
        roots.extend((path, "default path") for path in _versioned_dirs(prefix))
    return roots


def _info_files(root: Path, arch: Optional[str]) -> List[Path]:
    """``<root>/<arch>-linux/ascend_toolkit_install.info``, then any other ``*-linux`` one."""
    files: List[Path] = []
    if arch:
        files.append(root / f"{arch}-linux" / INFO_FILE)
    try:
        others = sorted(root.glob(f"*-linux/{INFO_FILE}"))
    except OSError:
        others = []
    files.extend(path for path in others if path not in files)
    return files


def _read_version(root: Path, arch: Optional[str], toolkit: Toolkit) -> None:
    """Fill ``toolkit.version`` from the info file, else from ``version.cfg``; note what failed."""
    for path in _info_files(root, arch):
        if not path.is_file():
            continue
        try:
            text = read_text(path)
        except OSError as exc:
            toolkit.problems.append(f"cannot read {path}: {exc.strerror or exc}.")
            continue
        raw = parse_key_values(text).get("version")
        if raw is None:
            what = "is empty" if not text.strip() else "has no 'version=' line"
            toolkit.problems.append(f"{path} {what}.")
            continue
        if _accept(raw, path, toolkit):
            return
    cfg = root / VERSION_CFG
    if cfg.is_file():
        try:
            text = read_text(cfg)
        except OSError as exc:
            toolkit.problems.append(f"cannot read {cfg}: {exc.strerror or exc}.")
            return
        raw = version_from_cfg(text)
        if raw is None:
            what = "is empty" if not text.strip() else "has no readable 'runtime_running_version=[...:X]'"
            toolkit.problems.append(f"{cfg} {what}.")
        elif _accept(raw, cfg, toolkit):
            return
    if toolkit.version is None:
        toolkit.problems.append(
            f"the CANN version at {root} is unknown: no readable <arch>-linux/{INFO_FILE} or {VERSION_CFG}."
        )


def _accept(raw: str, source: Path, toolkit: Toolkit) -> bool:
    parsed = parse_version(raw)
    if parsed is None:
        toolkit.problems.append(f"{source}: version {shown(raw)} is not a CANN version.")
        return False
    toolkit.version = raw.strip()
    toolkit.parsed = parsed
    toolkit.version_source = source
    return True


def find_toolkit(
    environ: Mapping[str, str],
    prefixes: Optional[Sequence[Path]] = None,
    arch: Optional[str] = None,
) -> Toolkit:
    """The first toolkit root that exists, with its version (never raises for broken trees)."""
    toolkit = Toolkit()
    for root, origin in candidate_roots(environ, prefixes):
        toolkit.searched.append(str(root))
        if not root.is_dir():
            if origin != "default path":
                toolkit.problems.append(f"{origin} is {root}, which is not a directory.")
            continue
        toolkit.root = _resolved(root)
        toolkit.origin = origin if origin != "default path" else f"default path {root}"
        _read_version(toolkit.root, arch, toolkit)
        return toolkit
    return toolkit


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path


def set_env_script(root: Path) -> Optional[Path]:
    """The ``set_env.sh`` that sets up ``root``: in it (>= 8.5) or next to it (<= 8.3)."""
    for candidate in (root / "set_env.sh", root.parent / "set_env.sh"):
        if candidate.is_file():
            return candidate
    return None
