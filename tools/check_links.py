"""Check that every relative link of a Markdown file resolves: the file exists, and an anchor names
a heading of the Markdown file it points into (GitHub's heading ids).

    python tools/check_links.py [FILE ...]      # default: README.md, CONTRIBUTING.md, docs/*.md

A code span that names a path in the repository (`tests/...`, `tools/...`, ...) must name one
that exists, so that the text never sends a reader to a file that was renamed. Web links
(``scheme:``) are not followed: this runs offline. Links inside code are not links.
Links between the pages of ``docs/`` are also checked by ``mkdocs build --strict``
(``validation:`` in mkdocs.yml); the README, which GitHub and PyPI show outside the manual, only
here. Exit 1 lists each broken link or path with its line.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import List, Optional, Set, Tuple

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target "title") and ![alt](target); text may hold one level of brackets or code.
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:[ \t]*<?(\S+?)>?(?:[ \t]+.*)?$", re.MULTILINE)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
# A code span naming a path in one of these folders: `tests/torch/test_verify_end_to_end.py`.
REPO_DIRS = ("ascend_env", "bench", "docs", "patches", "tests", "tools", ".ci")
REPO_PATH = re.compile(r"`((?:" + "|".join(re.escape(d) for d in REPO_DIRS) + r")/[\w./-]*)`")
HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")


def _prose(text: str) -> str:
    """``text`` with fenced code emptied and code spans blanked, line numbers kept."""
    kept = []
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            kept.append("")
        else:
            kept.append("" if fenced else CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line))
    return "\n".join(kept)


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def links(text: str) -> List[Tuple[int, str]]:
    """(line number, target) of each link in ``text``; a link's text may span lines."""
    prose = _prose(text)
    found = [(_line(prose, m.start()), m.group(1)) for m in INLINE.finditer(prose)]
    found += [(_line(prose, m.start()), m.group(1)) for m in REFERENCE.finditer(prose)]
    return sorted(found)


def code_paths(text: str) -> List[Tuple[int, str]]:
    """(line number, path) of each code span outside fenced code that names a file or folder of
    this repository (it starts with one of ``REPO_DIRS``)."""
    found = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
        elif not fenced:
            found += [(number, m.group(1)) for m in REPO_PATH.finditer(line)]
    return found


def slug(heading: str) -> str:
    """GitHub's id for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|__", "", heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> Set[str]:
    """The heading ids of a Markdown text, duplicates numbered as GitHub numbers them."""
    seen: Set[str] = set()
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        heading = None if fenced else HEADING.match(line)
        if heading is None:
            continue
        base = slug(heading.group(1))
        name, count = base, 0
        while name in seen:
            count += 1
            name = f"{base}-{count}"
        seen.add(name)
    return seen


def problem(source: Path, target: str) -> Optional[str]:
    """Why ``target``, linked from ``source``, does not resolve; None when it does."""
    if SCHEME.match(target) or target.startswith("//"):
        return None
    path_part, _, anchor = target.partition("#")
    if path_part.startswith("/"):
        return f"{target}: absolute path (use a path relative to {source.name})"
    resolved = (source.parent / path_part).resolve() if path_part else source.resolve()
    if not resolved.exists():
        return f"{target}: {resolved} does not exist"
    if anchor and resolved.is_file() and resolved.suffix == ".md":
        if anchor not in anchors(resolved.read_text(encoding="utf-8")):
            return f"{target}: no heading with id '{anchor}' in {resolved.name}"
    return None


def broken_links(source: Path, root: Path = ROOT) -> List[str]:
    """``FILE:LINE: why`` for each link of ``source`` that does not resolve, and for each
    repository path in a code span that does not exist under ``root``."""
    text = source.read_text(encoding="utf-8")
    found = []
    for number, target in links(text):
        why = problem(source, target)
        if why is not None:
            found.append(f"{source.name}:{number}: {why}")
    for number, path in code_paths(text):
        if not (root / path).exists():
            found.append(f"{source.name}:{number}: `{path}` does not exist in the repository")
    return found


def default_files() -> List[Path]:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]


def main(argv: Optional[List[str]] = None) -> int:
    files = [Path(name) for name in (sys.argv[1:] if argv is None else argv)] or default_files()
    broken = [line for path in files for line in broken_links(path)]
    for line in broken:
        print(line, file=sys.stderr)
    texts = [path.read_text(encoding="utf-8") for path in files]
    checked = sum(len(links(text)) + len(code_paths(text)) for text in texts)
    print(f"{len(files)} files, {checked} links and paths checked, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
