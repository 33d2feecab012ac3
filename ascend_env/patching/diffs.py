"""Parsing and strictly applying one-file unified diffs.

A patch file is a block of ``# Key: value`` header lines followed by one git-style
unified diff of one file (``--- a/PATH`` / ``+++ b/PATH``). ``unidiff`` parses the
diff; this module checks it hard (one file, safe relative path, no renames, modes,
binaries or stray lines) and applies it with its own strict rules:

* every context and removed line must match exactly: no fuzz, no whitespace leniency;
* a hunk may move at most ``max_offset`` lines from where its header says, and never
  back over an earlier hunk;
* like ``git apply``, a hunk starting at line 0 or 1 must match at the start of the
  file, and a hunk without trailing context must match at its end;
* lines are compared without their endings, and added lines take the target's
  dominant ending (``\\n`` or ``\\r\\n``), so a CRLF file stays CRLF;
* a missing final newline is honoured on both sides (``\\ No newline at end of file``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Iterator, List, Literal, NoReturn, Optional, Sequence, Tuple

from ascend_env.exceptions import HunkMismatch, PatchError, reinstall

if TYPE_CHECKING:
    import unidiff.patch

__all__ = [
    "HEADER_KEYS",
    "MAX_HUNKS",
    "MAX_OFFSET",
    "MAX_PATCH_CHARS",
    "FilePatch",
    "Hunk",
    "HunkMismatch",
    "Line",
    "LineKind",
    "PatchError",
    "apply_patch",
    "parse_patch",
    "safe_relative_path",
    "split_lines",
    "valid_patch_id",
]

HEADER_KEYS = ("Patch", "Changes", "Why", "Upstream", "Remove-when")
MAX_OFFSET = 200
MAX_PATCH_CHARS = 1_000_000
MAX_HUNKS = 500

_HEADER_LINE = re.compile(r"^# (?P<key>[A-Z][A-Za-z-]*): (?P<value>\S.*)$")
_CONTINUATION = re.compile(r"^#(?:[ \t]{2,}\S.*|\t\S.*)?$")
_PATCH_ID = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
_DIFF_LINES = (
    re.compile(r"^diff --git a/\S+ b/\S+$"),
    re.compile(r"^index [0-9a-f]{4,64}\.\.[0-9a-f]{4,64}( [0-7]{6})?$"),
    re.compile(r"^--- "),
    re.compile(r"^\+\+\+ "),
    re.compile(r"^@@ -\d+(,\d+)? \+\d+(,\d+)? @@"),
    re.compile(r"^[ +-]"),
    re.compile(r"^\\ No newline at end of file$"),
    re.compile(r"^$"),
)
_PATH_PART = re.compile(r"^[A-Za-z0-9_.+-]+$")
_NO_NEWLINE = "\\"

#: A hunk line's kind: context, removed or added, as the diff writes it.
LineKind = Literal[" ", "-", "+"]
_KINDS: Dict[str, LineKind] = {" ": " ", "-": "-", "+": "+"}
_SWAP: Dict[LineKind, LineKind] = {"+": "-", "-": "+", " ": " "}


@dataclass(frozen=True)
class Line:
    """One hunk line: ``kind`` is ``" "``, ``"-"`` or ``"+"``; ``text`` has no line ending."""

    kind: LineKind
    text: bytes
    newline: bool = True


@dataclass(frozen=True)
class Hunk:
    """One ``@@ -a,b +c,d @@`` block."""

    source_start: int
    source_length: int
    target_start: int
    target_length: int
    lines: Tuple[Line, ...]

    @property
    def header(self) -> str:
        return f"@@ -{self.source_start},{self.source_length} +{self.target_start},{self.target_length} @@"

    def before(self) -> List[Line]:
        """The lines the hunk expects (context and removed)."""
        return [line for line in self.lines if line.kind != "+"]

    def after(self) -> List[Line]:
        """The lines the hunk leaves (context and added)."""
        return [line for line in self.lines if line.kind != "-"]

    def reversed(self) -> Hunk:
        """The hunk that undoes this one."""
        return Hunk(
            self.target_start,
            self.target_length,
            self.source_start,
            self.source_length,
            tuple(Line(_SWAP[line.kind], line.text, line.newline) for line in self.lines),
        )


@dataclass(frozen=True)
class FilePatch:
    """A parsed patch file: its header, the one file it changes, and its hunks.

    ``source`` and ``target`` are relative to site-packages, without ``a/``/``b/``.
    """

    name: str
    header: Dict[str, str]
    source: str
    target: str
    hunks: Tuple[Hunk, ...]

    @property
    def id(self) -> str:
        return self.header["Patch"]


def valid_patch_id(text: str) -> bool:
    """Whether ``text`` is a patch id: lowercase letters, digits, '.', '_' or '-', at most 100."""
    return bool(_PATCH_ID.match(text))


def safe_relative_path(path: str) -> bool:
    """Whether ``path`` is a plain relative POSIX path that cannot leave its root."""
    if not path or len(path) > 400 or path.startswith("/"):
        return False
    parts = path.split("/")
    return all(part not in ("", ".", "..") and _PATH_PART.match(part) for part in parts)


def _parse_header(lines: Sequence[str], name: str) -> Dict[str, str]:
    header = _header_fields(lines, name)
    _check_header(header, name)
    return header


def _header_fields(lines: Sequence[str], name: str) -> Dict[str, str]:
    """The ``# Key: value`` lines as a dict, continuation lines joined to their key's value."""
    header: Dict[str, str] = {}
    last: Optional[str] = None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            last = None
            continue
        match = _HEADER_LINE.match(line)
        if match:
            key = match.group("key")
            if key in header:
                raise PatchError(f"{name}: header line {number} repeats '# {key}:'.", "give each key once.")
            header[key] = match.group("value").strip()
            last = key
        elif _CONTINUATION.match(line) and last is not None:
            if line.strip("# \t"):
                header[last] += " " + line.strip("# \t")
        else:
            raise PatchError(
                f"{name}: header line {number} is not '# Key: value': {line[:80]!r}.",
                "start the file with '# Key: value' lines (continuations indented), then the diff.",
            )
    return header


def _check_header(header: Dict[str, str], name: str) -> None:
    """Every key present, a well-formed id, and a file name that matches it."""
    missing = [key for key in HEADER_KEYS if key not in header]
    if missing:
        raise PatchError(
            f"{name}: the header lacks {', '.join('# ' + key + ':' for key in missing)}.",
            f"give every patch the header keys {', '.join(HEADER_KEYS)}.",
        )
    patch_id = header["Patch"]
    if not valid_patch_id(patch_id):
        raise PatchError(
            f"{name}: patch id {patch_id!r} is not lowercase letters, digits, '.', '_' or '-'.",
            "name the patch like 'stopping-criteria-eos-v1'.",
        )
    stem = name.rsplit("/", 1)[-1]
    if stem.endswith(".patch") and stem[: -len(".patch")] != patch_id:
        raise PatchError(
            f"{name}: the file name does not match '# Patch: {patch_id}'.",
            f"name the file {patch_id}.patch or fix its header.",
        )


def _strip_prefix(path: str, prefix: str, name: str) -> str:
    path = path.split("\t", 1)[0]
    if not path.startswith(prefix):
        raise PatchError(
            f"{name}: diff path {path[:120]!r} lacks the git prefix {prefix!r}.",
            "write the diff with 'a/' and 'b/' prefixes, paths relative to site-packages.",
        )
    relative = path[len(prefix) :]
    if not safe_relative_path(relative):
        raise PatchError(
            f"{name}: diff path {relative[:120]!r} is not a plain relative path inside site-packages.",
            "use a relative path such as transformers/generation/utils.py, with no '..' or absolute parts.",
        )
    return relative


def _convert_hunk(raw: unidiff.patch.Hunk, name: str, number: int) -> Hunk:
    lines: List[Line] = []
    for item in raw:
        if item.line_type == _NO_NEWLINE:
            if not lines or not lines[-1].newline:
                raise PatchError(f"{name}: hunk {number} has a misplaced '\\ No newline' marker.")
            lines[-1] = Line(lines[-1].kind, lines[-1].text, False)
            continue
        kind = _KINDS.get(item.line_type)
        if kind is None:
            continue  # a blank line after a complete hunk
        text = item.value[:-1] if item.value.endswith("\n") else item.value
        lines.append(Line(kind, text.encode("utf-8")))
    hunk = Hunk(raw.source_start, raw.source_length, raw.target_start, raw.target_length, tuple(lines))
    if not any(line.kind != " " for line in lines):
        raise PatchError(f"{name}: hunk {number} ({hunk.header}) changes nothing.", "remove the empty hunk.")
    return hunk


def parse_patch(text: str, name: str) -> FilePatch:
    """Parse a patch file's text; ``name`` identifies it in error messages.

    Raises :class:`PatchError` for anything but a header and one plain one-file diff.
    """
    lines = _text_lines(text, name)
    start = _diff_start(lines, name)
    header = _parse_header(lines[:start], name)
    body = lines[start:]
    _check_diff_lines(body, start, name)
    patched = _one_file_diff(body, name)
    source, target = _diff_paths(patched, body, name)
    if not patched or len(patched) > MAX_HUNKS:
        raise PatchError(f"{name}: the diff has {len(patched)} hunks (1 to {MAX_HUNKS} allowed).")
    _check_every_line_used(body, patched, name, start)
    hunks = tuple(_convert_hunk(raw, name, number) for number, raw in enumerate(patched, 1))
    _check_hunk_order(hunks, name)
    return FilePatch(name=name, header=header, source=source, target=target, hunks=hunks)


def _text_lines(text: str, name: str) -> List[str]:
    """The lines of a bounded, NUL-free text, with ``\\r\\n`` read as ``\\n``."""
    if not isinstance(text, str):
        raise PatchError(f"{name}: patch text must be str, not {type(text).__name__}.")
    if len(text) > MAX_PATCH_CHARS:
        raise PatchError(f"{name}: patch is larger than {MAX_PATCH_CHARS} characters.", "split it.")
    if "\x00" in text:
        raise PatchError(f"{name}: patch contains a NUL character.", "patches are text.")
    text = text.replace("\r\n", "\n")
    if text and not text.endswith("\n"):
        text += "\n"
    return text.split("\n")[:-1]


def _diff_start(lines: Sequence[str], name: str) -> int:
    """The index of the diff's first line, after the header."""
    for index, line in enumerate(lines):
        if line.startswith("diff --git ") or line.startswith("--- "):
            return index
    raise PatchError(f"{name}: no unified diff ('--- a/PATH') found.", "append one git-style diff.")


def _check_diff_lines(body: Sequence[str], start: int, name: str) -> None:
    """Refuse any line a plain modification diff does not have (renames, modes, notes)."""
    for offset, line in enumerate(body):
        if not any(pattern.match(line) for pattern in _DIFF_LINES):
            raise PatchError(
                f"{name}: line {start + offset + 1} is not part of a plain unified diff: {line[:80]!r}.",
                "keep one modification diff of one file: no renames, mode changes, binaries or notes.",
            )


def _one_file_diff(body: Sequence[str], name: str) -> unidiff.patch.PatchedFile:
    """The diff parsed by unidiff: exactly one file, neither binary nor changing its mode."""
    from unidiff.errors import UnidiffParseError
    from unidiff.patch import PatchSet

    try:
        patch_set = PatchSet("\n".join(body) + "\n")
    except (UnidiffParseError, ValueError) as exc:
        raise PatchError(
            f"{name}: the diff does not parse: {exc}.", "regenerate it with 'git diff'."
        ) from None
    if len(patch_set) != 1:
        raise PatchError(
            f"{name}: the diff changes {len(patch_set)} files; a patch file changes exactly one.",
            "split it into one patch file per target file.",
        )
    (patched,) = patch_set
    # (source_mode/target_mode exist from unidiff 0.7.6; mode lines are refused above anyway)
    if patched.is_binary_file or getattr(patched, "source_mode", None) != getattr(
        patched, "target_mode", None
    ):
        raise PatchError(f"{name}: binary or mode changes are not allowed.")
    return patched


def _diff_paths(patched: unidiff.patch.PatchedFile, body: Sequence[str], name: str) -> Tuple[str, str]:
    """The source and target paths without ``a/``/``b/``: the same safe path, on every line naming it."""
    source = _strip_prefix(patched.source_file, "a/", name)
    target = _strip_prefix(patched.target_file, "b/", name)
    if source != target:
        raise PatchError(
            f"{name}: the diff renames {source} to {target}.", "patch one file in place, without renaming."
        )
    git_line = body[0] if body[0].startswith("diff --git ") else None
    if git_line is not None and git_line != f"diff --git a/{source} b/{target}":
        raise PatchError(f"{name}: the 'diff --git' line names another file than '--- a/{source}'.")
    return source, target


def _check_hunk_order(hunks: Sequence[Hunk], name: str) -> None:
    previous_end = 0
    for number, hunk in enumerate(hunks, 1):
        if hunk.source_start < previous_end:
            raise PatchError(
                f"{name}: hunk {number} ({hunk.header}) overlaps or precedes hunk {number - 1}.",
                "order hunks by line and keep them apart.",
            )
        previous_end = hunk.source_start + hunk.source_length


def _check_every_line_used(
    body: Sequence[str], patched: unidiff.patch.PatchedFile, name: str, start: int
) -> None:
    # unidiff keeps lines it does not understand as "patch info"; a patch file has none.
    used = set()
    for raw in patched:
        numbers = [line.diff_line_no for line in raw if line.diff_line_no is not None]
        if numbers:
            used.add(numbers[0] - 1)  # the hunk header
            used.update(numbers)
    first_hunk = min(used, default=len(body) + 1)
    prelude = [line for line in body[: first_hunk - 1] if line]
    kinds = [line.split(" ", 1)[0] for line in prelude]
    if kinds not in (["---", "+++"], ["diff", "---", "+++"], ["diff", "index", "---", "+++"]):
        raise PatchError(
            f"{name}: the diff must start with ['diff --git' and 'index' lines,] '---' and '+++'.",
            "keep one plain modification diff of one file.",
        )
    for number, line in enumerate(body[first_hunk - 1 :], first_hunk):
        is_marker = line.startswith("\\")
        if line and number not in used and not is_marker:
            raise PatchError(
                f"{name}: line {start + number} lies outside every hunk: {line[:80]!r}.",
                "fix the hunk's line counts or remove the stray line.",
            )


def split_lines(data: bytes) -> List[Tuple[bytes, bytes]]:
    """``data`` as ``(content, ending)`` pairs; the ending is ``b"\\n"``, ``b"\\r\\n"`` or ``b""``."""
    result: List[Tuple[bytes, bytes]] = []
    for chunk in _split_lf(data):
        if chunk.endswith(b"\r\n"):
            result.append((chunk[:-2], b"\r\n"))
        elif chunk.endswith(b"\n"):
            result.append((chunk[:-1], b"\n"))
        else:
            result.append((chunk, b""))
    return result


def _split_lf(data: bytes) -> List[bytes]:
    # Only "\n" ends a line: a lone "\r" (or "\x0c" etc.) is content, as for git.
    chunks = data.split(b"\n")
    out = [chunk + b"\n" for chunk in chunks[:-1]]
    if chunks[-1]:
        out.append(chunks[-1])
    return out


def _dominant_ending(lines: Sequence[Tuple[bytes, bytes]]) -> bytes:
    crlf = sum(1 for _, ending in lines if ending == b"\r\n")
    lf = sum(1 for _, ending in lines if ending == b"\n")
    return b"\r\n" if crlf > lf else b"\n"


def _matches(lines: Sequence[Tuple[bytes, bytes]], pos: int, expected: Sequence[Line]) -> bool:
    if pos < 0 or pos + len(expected) > len(lines):
        return False
    for (content, ending), want in zip(lines[pos : pos + len(expected)], expected):
        if content != want.text or bool(ending) != want.newline:
            return False
    return True


def _show(content: bytes, newline: bool) -> str:
    text = content.decode("utf-8", errors="backslashreplace")
    return text if newline else text + "  [no newline at end of file]"


def _candidates(expected: int, floor: int, ceiling: int, max_offset: int) -> Iterator[int]:
    yield expected
    for delta in range(1, max_offset + 1):
        for pos in (expected + delta, expected - delta):
            if floor <= pos <= ceiling:
                yield pos


@dataclass(frozen=True)
class _Placement:
    """Where a hunk may match: the lines it expects, the 0-based line its header names, and
    whether it is tied to the start of the file (it starts at line 0 or 1) or to its end (it has no
    trailing context)."""

    before: Tuple[Line, ...]
    declared: int
    anchor_start: bool
    anchor_end: bool


def _placement(hunk: Hunk) -> _Placement:
    declared = hunk.source_start - 1 if hunk.source_length else hunk.source_start
    return _Placement(
        before=tuple(hunk.before()),
        declared=max(declared, 0),
        anchor_start=hunk.source_start <= 1,
        anchor_end=hunk.lines[-1].kind != " ",
    )


def apply_patch(
    patch: FilePatch, original: bytes, *, reverse: bool = False, max_offset: int = MAX_OFFSET
) -> bytes:
    """Return ``original`` with ``patch`` applied (or undone, with ``reverse``).

    Raises :class:`HunkMismatch` naming the file, the hunk, and the expected and found
    lines when a hunk does not match exactly within ``max_offset`` lines.
    """
    lines = split_lines(original)
    ending = _dominant_ending(lines)
    hunks = [hunk.reversed() for hunk in patch.hunks] if reverse else list(patch.hunks)
    out: List[bytes] = []
    floor = 0  # first original line not yet consumed
    shift = 0  # offset at which the previous hunk matched, carried forward like GNU patch
    for number, hunk in enumerate(hunks, 1):
        place = _placement(hunk)
        pos = _locate(lines, place, floor, shift, max_offset)
        if pos is None:
            _mismatch(patch, hunk, number, lines, place, max_offset=max_offset, reverse=reverse)
        shift = pos - place.declared
        out.extend(content + end for content, end in lines[floor:pos])
        floor = pos + len(place.before)
        out.extend(_replace(hunk, lines[pos:floor], ending))
    out.extend(content + end for content, end in lines[floor:])
    return b"".join(out)


def _locate(
    lines: Sequence[Tuple[bytes, bytes]], place: _Placement, floor: int, shift: int, max_offset: int
) -> Optional[int]:
    """The first line at or after ``floor`` where the hunk matches, or None."""
    last = len(lines) - len(place.before)
    if place.anchor_start:
        choices: Iterator[int] = iter([0])
    elif place.anchor_end:
        choices = iter([last])
    else:
        choices = _candidates(place.declared + shift, floor, last, max_offset)
    for pos in choices:
        if pos >= floor and (not place.anchor_end or pos == last) and _matches(lines, pos, place.before):
            return pos
    return None


def _replace(hunk: Hunk, matched: Sequence[Tuple[bytes, bytes]], ending: bytes) -> Iterator[bytes]:
    """The hunk's result for the ``matched`` lines: context kept as found (with its own ending),
    removed lines dropped, added lines given ``ending``."""
    found = iter(matched)
    for line in hunk.lines:
        if line.kind == " ":
            content, end = next(found)
            yield content + end
        elif line.kind == "-":
            next(found)
        else:
            yield line.text + (ending if line.newline else b"")


def _mismatch(
    patch: FilePatch,
    hunk: Hunk,
    number: int,
    lines: Sequence[Tuple[bytes, bytes]],
    place: _Placement,
    *,
    max_offset: int,
    reverse: bool,
) -> NoReturn:
    before = place.before
    at = _shown_at(place, len(lines))
    found_lines = lines[at : at + len(before)]
    expected = tuple(_show(line.text, line.newline) for line in before)
    found = tuple(_show(content, bool(end)) for content, end in found_lines)
    first = _first_difference(before, found_lines)
    got = found[first] if first < len(found) else "<end of file>"
    direction = "be undone from" if reverse else "apply to"
    raise HunkMismatch(
        f"{patch.id}: hunk {number} of {len(patch.hunks)} ({hunk.header}) does not {direction} "
        f"{patch.target} {_where(place, max_offset)}. First difference at line {at + first + 1}: "
        f"expected {expected[first]!r}, found {got!r}.",
        "the file is not the text this patch was written for: restore the original transformers files "
        f"({reinstall('transformers', '<version>')}) or update the patch.",
        path=patch.target,
        hunk=number,
        line=at + 1,
        expected=expected,
        found=found,
    )


def _shown_at(place: _Placement, count: int) -> int:
    """The line a mismatch report shows: where the hunk had to match, or where it says it goes."""
    if place.anchor_start:
        return 0
    if place.anchor_end:
        return max(count - len(place.before), 0)
    return place.declared


def _where(place: _Placement, max_offset: int) -> str:
    if place.anchor_start:
        return "at the start of the file"
    if place.anchor_end:
        return "at the end of the file"
    return f"within {max_offset} lines of line {place.declared + 1}"


def _first_difference(before: Sequence[Line], found: Sequence[Tuple[bytes, bytes]]) -> int:
    """The index of the first expected line that the found lines lack or differ on (0 if none)."""
    seen = [(content, bool(end)) for content, end in found]
    return next(
        (i for i, want in enumerate(before) if i >= len(seen) or seen[i] != (want.text, want.newline)),
        0,
    )
