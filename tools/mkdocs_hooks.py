"""MkDocs hooks (``hooks:`` in mkdocs.yml): benchmark tables rendered from ``bench/results/``.

A page asks for a table with a line ``<!-- bench-table: NAME -->``; the build replaces it with the
table of ``bench/results/NAME.json``, as ``bench/bench_tables.py`` renders it, so the manual shows
what a benchmark run wrote (``--json``), never a pasted copy. A name without its file, or a file
that is not a benchmark result, stops the build.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

from mkdocs.exceptions import PluginError

MARKER = re.compile(r"^<!-- bench-table: ([a-z0-9_-]+) -->$", re.MULTILINE)


def _root(config: Any) -> Path:
    return Path(config["config_file_path"]).resolve().parent


def _tables(root: Path) -> ModuleType:
    """bench/bench_tables.py, loaded by path (bench/ is scripts, not a package)."""
    spec = importlib.util.spec_from_file_location("bench_tables", root / "bench" / "bench_tables.py")
    if spec is None or spec.loader is None:
        raise PluginError(f"cannot load {root / 'bench' / 'bench_tables.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def render_markers(markdown: str, root: Path, page_name: str) -> str:
    """``markdown`` with each bench-table marker replaced by its table."""
    if MARKER.search(markdown) is None:
        return markdown
    tables = _tables(root)

    def table(match: re.Match) -> str:
        path = root / "bench" / "results" / f"{match.group(1)}.json"
        if not path.is_file():
            raise PluginError(f"{page_name}: no results file {path} for {match.group(0)}")
        try:
            return str(tables.render_file(path))
        except tables.ResultError as error:
            raise PluginError(f"{page_name}: {error}") from error

    return MARKER.sub(table, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return render_markers(markdown, _root(config), page.file.src_path)
