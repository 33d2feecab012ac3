"""docs/architecture.md matches the code: it names every module, and each arrow is a real import."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import List, Set, Tuple

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ascend_env"
PAGE = ROOT / "docs" / "architecture.md"
ARROW = re.compile(r"^\s*([\w/]+\.py) -> ([\w/]+\.py)\b", re.M)
NAMED = re.compile(r"`([\w/]+\.py)`")


def modules() -> List[str]:
    """Every module of the package, as a path relative to ``ascend_env/``."""
    return sorted(
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "__pycache__" not in path.parts
    )


def dotted(relative: str) -> str:
    parts = ["ascend_env", *relative[: -len(".py")].split("/")]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(relative: str) -> Set[str]:
    """The ascend_env modules ``relative`` imports, at module level or inside functions."""
    found: Set[str] = set()
    for node in ast.walk(ast.parse((PACKAGE / relative).read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def arrows(text: str) -> List[Tuple[str, str]]:
    return ARROW.findall(text)


def test_the_page_names_every_module_of_every_package():
    named = set(NAMED.findall(PAGE.read_text(encoding="utf-8")))
    missing = [module for module in modules() if module not in named]
    assert missing == [], f"docs/architecture.md does not name: {missing}"


def test_every_file_the_page_names_exists():
    # Package modules are named relative to ascend_env/, other files relative to the repository;
    # ascend_env_hook.py is the name hook/boot.py is installed under in site-packages.
    named = set(NAMED.findall(PAGE.read_text(encoding="utf-8"))) - {"ascend_env_hook.py"}
    stale = [name for name in named if not (PACKAGE / name).is_file() and not (ROOT / name).is_file()]
    assert stale == []


def test_each_arrow_is_an_import():
    found = arrows(PAGE.read_text(encoding="utf-8"))
    assert len(found) >= 30, "the diagram of install, verify and audit has lost its arrows"
    wrong = [f"{a} -> {b}" for a, b in found if dotted(b) not in imports(a)]
    assert wrong == [], f"arrows that are not imports in the code: {wrong}"


def test_a_wrong_arrow_is_caught():
    # The check itself: an arrow the code does not have is reported.
    assert dotted("patching/engine.py") not in imports("checks/audit.py")
    assert dotted("sim/__init__.py") == "ascend_env.sim"
    assert arrows("  checks/audit.py -> patching/engine.py   (why)\n") == [
        ("checks/audit.py", "patching/engine.py")
    ]


def test_the_diagram_covers_install_verify_and_audit():
    text = PAGE.read_text(encoding="utf-8")
    starts = {a for a, _ in arrows(text)}
    assert {"commands/install.py", "commands/verify.py", "commands/audit.py"} <= starts


def test_the_lower_rooms_do_not_import_the_upper_ones():
    # What the page says under the diagram: detect/, kernels/ and utils/ never import patching/,
    # checks/ or commands/.
    upper = ("ascend_env.patching", "ascend_env.checks", "ascend_env.commands")
    lower = [m for m in modules() if m.split("/")[0] in ("detect", "kernels", "utils")]
    wrong = [(m, i) for m in lower for i in sorted(imports(m)) if i.startswith(upper)]
    assert lower and wrong == []


# The packages whose modules keep ``__all__`` as their contract; the others join as they are reworked.
ALL_CONTRACT = ("patching",)


def declared_all(relative: str) -> List[str]:
    """The names in the module's ``__all__`` (a literal list), or ``["<none>"]`` where it has none."""
    for node in ast.parse((PACKAGE / relative).read_text(encoding="utf-8")).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == "__all__":
            return [element.value for element in node.value.elts]
    return ["<none>"]


def bound_names(relative: str) -> Tuple[Set[str], Set[str]]:
    """The module-level names ``relative`` defines itself (public ones), and those it imports."""
    defined: Set[str] = set()
    imported: Set[str] = set()
    for node in ast.parse((PACKAGE / relative).read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined.add(node.target.id)
        elif isinstance(node, ast.ImportFrom):
            imported.update(alias.asname or alias.name for alias in node.names)
    return {name for name in defined if not name.startswith("_")}, imported


def contract_modules() -> List[str]:
    return [m for m in modules() if m.split("/")[0] in ALL_CONTRACT]


def test_all_names_every_public_name_and_only_names_the_module_has():
    wrong = []
    for module in contract_modules():
        names = declared_all(module)
        defined, imported = bound_names(module)
        wrong += [f"{module}: {name} is not in __all__" for name in sorted(defined - set(names))]
        wrong += [f"{module}: __all__ names {name}" for name in names if name not in defined | imported]
    assert contract_modules() and wrong == []


def test_what_is_imported_from_a_module_is_in_its_all():
    # Every ``from ascend_env.<package>.<module> import name``, in the package, its tests and tools.
    places = [ROOT / "ascend_env", ROOT / "tests", ROOT / "tools", ROOT / "bench"]
    wrong = []
    for path in sorted(p for place in places for p in place.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            parts = node.module.split(".")
            if parts[0] != "ascend_env" or len(parts) < 2 or parts[1] not in ALL_CONTRACT:
                continue
            base = "/".join(parts[1:])
            module = f"{base}.py" if (PACKAGE / f"{base}.py").is_file() else f"{base}/__init__.py"
            for alias in node.names:
                submodule = (PACKAGE / base / f"{alias.name}.py").is_file()
                if not submodule and alias.name not in declared_all(module):
                    wrong.append(f"{path.relative_to(ROOT)}: {alias.name} from {node.module}")
    assert wrong == []
