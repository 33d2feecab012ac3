"""The per-release table of every fixed op in docs/kernels.md, generated from the fix registry.

``python tools/fixes_doc.py`` rewrites the section between the markers; ``--check`` exits 1 when
the page differs from what the registry says (``tests/unit/test_fixes_doc.py`` runs it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
# This checkout's ascend_env (its fix registry is what the page says), installed or not.
sys.path.insert(0, str(ROOT))

from ascend_env.kernels.registry import FIXES, Fix  # noqa: E402
from ascend_env.sim import optables  # noqa: E402

PAGE = ROOT / "docs" / "kernels.md"
BEGIN = "<!-- generated:fixes (tools/fixes_doc.py) -->"
END = "<!-- /generated:fixes -->"


def _releases(fix: Fix, releases: Sequence[str]) -> str:
    """The releases whose table lacks one of ``fix``'s overloads, listed or as "all but"."""
    lacking = [release for release in releases if fix.needed_by(release)]
    if fix.namespace != "aten":
        return f"every release (torch_npu registers no `{fix.namespace}::` op)"
    if not lacking:
        return "none of the tables (registered only for a build that lacks it)"
    if len(lacking) == len(releases):
        return f"all {len(releases)}"
    having = [release for release in releases if release not in lacking]
    if len(having) < len(lacking):
        return f"{len(lacking)} of {len(releases)}: all but {', '.join(having)}"
    return f"{len(lacking)} of {len(releases)}: {', '.join(lacking)}"


def render() -> str:
    """The generated section, markers included."""
    releases = optables.releases()
    lines: List[str] = [
        BEGIN,
        "",
        f"| fix | overloads | releases lacking it (of the {len(releases)} op tables) | host reads | module |",
        "|---|---|---|---|---|",
    ]
    for fix in FIXES:
        overloads = ", ".join(f"`{op.qualified_name}`" for op in fix.ops)
        reads = "; ".join(fix.host_reads) or "none"
        module = f"`{fix.module.replace('.', '/')}.py`"
        lines.append(f"| `{fix.name}` | {overloads} | {_releases(fix, releases)} | {reads} | {module} |")
    lines += ["", END]
    return "\n".join(lines)


def _page_with(section: str, page: str) -> str:
    if BEGIN not in page:
        raise SystemExit(f"{PAGE}: no {BEGIN} marker")
    head, rest = page.split(BEGIN, 1)
    return head + section + rest.split(END, 1)[1]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the page is out of date")
    args = parser.parse_args(argv)
    page = PAGE.read_text(encoding="utf-8")
    wanted = _page_with(render(), page)
    if args.check:
        if wanted != page:
            print(f"{PAGE.relative_to(ROOT)} is out of date: run python tools/fixes_doc.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
