"""``__all__`` is the contract of the audit's modules: each has one, it names only what exists, and
every public name the package takes from them (``from X import name``, or ``X.name`` of an
imported module) is in it. Widen MODULES as other packages adopt the contract."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ascend_env"
MODULES = [
    "ascend_env._audited", "ascend_env.checks.audit", "ascend_env.checks.audit_text",
    "ascend_env.checks.findings", "ascend_env.checks.paths_report", "ascend_env.checks.process_reports",
    "ascend_env.checks.tables", "ascend_env.commands.audit", "ascend_env.sim", "ascend_env.sim.paths",
    "ascend_env.sim.reports", "ascend_env.sim.startup", "ascend_env.sim.steps", "ascend_env.utils.proctree",
    "ascend_env.utils.supervise",
]


def dotted(path: Path) -> str:
    parts = ["ascend_env", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources() -> Iterator[Tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if "__pycache__" not in path.parts:
            yield dotted(path), ast.parse(path.read_text(encoding="utf-8"))


def uses() -> List[Tuple[str, str, str]]:
    """(importer, module, name) for each public name taken from a module of MODULES."""
    found = []
    for importer, tree in sources():
        aliases: Dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if full in MODULES:
                        aliases[alias.asname or alias.name] = full
                    elif node.module in MODULES:
                        found.append((importer, node.module, alias.name))
            elif isinstance(node, ast.Import):
                aliases.update({alias.asname: alias.name for alias in node.names
                                if alias.asname and alias.name in MODULES})
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
                continue
            if node.value.id in aliases and not node.attr.startswith("_"):
                found.append((importer, aliases[node.value.id], node.attr))
    return found


@pytest.mark.parametrize("name", MODULES)
def test_each_module_names_what_it_exports(name):
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported, f"{name} has no __all__"
    assert sorted(set(exported)) == sorted(exported), "named twice"
    assert [n for n in exported if not hasattr(module, n)] == []


def test_every_name_the_package_takes_from_them_is_exported():
    wrong = set()
    for importer, name, attr in uses():
        module = importlib.import_module(name)
        submodule = f"{name}.{attr}"
        if submodule in MODULES or (PACKAGE / Path(*submodule.split(".")[1:])).with_suffix(".py").exists():
            continue
        if attr not in module.__all__:
            wrong.add(f"{importer}: {name}.{attr}")
    assert sorted(wrong) == []


def test_a_name_outside_all_is_caught():
    # The check itself: a module of MODULES whose name is used but not exported is reported.
    assert ("ascend_env.checks.audit", "ascend_env.checks.tables", "choose_table") in uses()
    assert "choose_table" in importlib.import_module("ascend_env.checks.tables").__all__
