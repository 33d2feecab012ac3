"""``__all__`` is the contract of every module: each has one, it names only what exists, and every
public name the package takes from them (``from X import name``, or ``X.name`` of an imported
module) is in it. tests/unit/test_architecture.py checks the same from the source, and says which
modules are outside the contract and why."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ascend_env"
# Outside the contract (test_architecture.ALL_EXEMPT), or run by their import (the audit's
# sitecustomize runs the next one on sys.path).
LEFT_OUT = ("ascend_env.hook.boot", "ascend_env.sim.pkgs", "ascend_env._audited_shim.sitecustomize")


def dotted(path: Path) -> str:
    parts = ["ascend_env", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def every_module() -> List[str]:
    names = (dotted(path) for path in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in path.parts)
    return [name for name in names if not name.startswith(LEFT_OUT)]


MODULES = every_module()


def load(name: str) -> object:
    """The module, or a skip where it needs torch and torch is missing (the unit envs have none; the
    torch env runs this file too)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name != "torch":
            raise
        pytest.skip(f"{name} imports torch, which this environment lacks")


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
                aliases.update(
                    {
                        alias.asname: alias.name
                        for alias in node.names
                        if alias.asname and alias.name in MODULES
                    }
                )
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
                continue
            if node.value.id in aliases and not node.attr.startswith("_"):
                found.append((importer, aliases[node.value.id], node.attr))
    return found


@pytest.mark.parametrize("name", MODULES)
def test_each_module_names_what_it_exports(name):
    module = load(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert sorted(set(exported)) == sorted(exported), "named twice"
    assert [n for n in exported if not hasattr(module, n)] == []


def test_every_name_the_package_takes_from_them_is_exported():
    wrong = set()
    for importer, name, attr in uses():
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:  # needs torch: the torch env checks it
            if error.name != "torch":
                raise
            continue
        submodule = f"{name}.{attr}"
        if submodule in MODULES or (PACKAGE / Path(*submodule.split(".")[1:])).with_suffix(".py").exists():
            continue
        # A name that exists only for type checkers (under ``if TYPE_CHECKING:``) is mypy's to check.
        if attr not in module.__all__ and hasattr(module, attr):
            wrong.add(f"{importer}: {name}.{attr}")
    assert sorted(wrong) == []


def test_a_name_outside_all_is_caught():
    # The check itself: a module of MODULES whose name is used but not exported is reported.
    assert ("ascend_env.checks.audit", "ascend_env.checks.tables", "choose_table") in uses()
    assert "choose_table" in importlib.import_module("ascend_env.checks.tables").__all__
