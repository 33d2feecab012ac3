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
