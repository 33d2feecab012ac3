"""docs/kernels.md lists every fix of the registry per release, as tools/fixes_doc.py generates it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from ascend_env.kernels import registry

TOOL = Path(__file__).resolve().parents[2] / "tools" / "fixes_doc.py"
spec = importlib.util.spec_from_file_location("fixes_doc", TOOL)
fixes_doc = importlib.util.module_from_spec(spec)
sys.modules["fixes_doc"] = fixes_doc
spec.loader.exec_module(fixes_doc)


def test_the_page_is_what_the_registry_says():
    assert fixes_doc.main(["--check"]) == 0


def test_the_section_has_a_row_per_fix_with_its_releases():
    section = fixes_doc.render()
    for fix in registry.FIXES:
        (row,) = [line for line in section.splitlines() if line.startswith(f"| `{fix.name}` |")]
        for op in fix.ops:
            assert f"`{op.qualified_name}`" in row
    assert "| `isin` |" in section and "2.1.0.post3, 2.1.0.post6, 2.2.0, 2.2.0.post2, 2.3.1 |" in section


def test_a_stale_page_is_caught(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "kernels.md"
    stale.write_text(fixes_doc.PAGE.read_text(encoding="utf-8").replace("| `polar` |", "| `polar2` |"))
    monkeypatch.setattr(fixes_doc, "PAGE", stale)
    monkeypatch.setattr(fixes_doc, "ROOT", tmp_path)
    assert fixes_doc.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().err
    assert fixes_doc.main([]) == 0 and fixes_doc.main(["--check"]) == 0
