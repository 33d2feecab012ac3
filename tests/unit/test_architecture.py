"""docs/architecture.md matches the code: it names every module, and each arrow is a real import."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

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
    return {target for _, target in import_targets(relative)}


def import_targets(relative: str, source: Optional[str] = None) -> List[Tuple[int, str]]:
    """(line, dotted name) of each ascend_env module or name ``relative`` imports (``source``: its
    text, else the file's): ``import x``, ``from x import y`` (as ``x`` and ``x.y``), relative
    imports, and the names looked up as strings (``sys.modules.get("ascend_env.x")``,
    ``sys.modules["ascend_env.x"]``, ``importlib.import_module("ascend_env.x." + name)``)."""
    text = (PACKAGE / relative).read_text(encoding="utf-8") if source is None else source
    package = dotted(relative) if relative.endswith("__init__.py") else dotted(relative).rsplit(".", 1)[0]
    found: List[Tuple[int, str]] = []
    for node in ast.walk(ast.parse(text)):
        names: List[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Call) and node.args and _looks_up_a_module(node.func):
            names = [_constant_prefix(node.args[0])]
        elif isinstance(node, ast.Subscript) and _is_sys_modules(node.value):
            key = node.slice.value if type(node.slice).__name__ == "Index" else node.slice  # Python 3.8
            names = [_constant_prefix(key)]
        found += [(node.lineno, name) for name in names if name.startswith("ascend_env.")]
    return found


def _is_sys_modules(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "modules"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def _looks_up_a_module(func: ast.AST) -> bool:
    """``sys.modules.get``, ``importlib.import_module`` or ``import_module``."""
    if isinstance(func, ast.Attribute):
        return (func.attr == "get" and _is_sys_modules(func.value)) or func.attr == "import_module"
    return isinstance(func, ast.Name) and func.id == "import_module"


def _constant_prefix(node: ast.AST) -> str:
    """The module name a string expression starts with: ``"ascend_env.commands." + name`` gives
    ``ascend_env.commands``; "" where it starts with no literal."""
    while isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        node = node.left
    value = node.value if isinstance(node, ast.Constant) else None
    return value.rstrip(".") if isinstance(value, str) else ""


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


# The layer contract. The packages form levels, lowest first: a module imports modules of its own
# level and of the levels below, never of one above. The top-level modules are outside the levels:
# BASE ones (the version, exceptions, output, states, origin) import no package and every level
# may use them; any other (cli.py, __main__.py and the shims kept at old paths: _watch.py,
# _audited.py, ops.py, runtime.py, smoke.py) stands for what it imports, so that an import of
# ``_audited.py`` from ``checks/`` counts as imports of ``sim/`` and ``utils/``.
LEVELS = ("utils", "kernels", "detect", "patching", "hook", "cann", "sim", "checks", "commands")
BASE = ("__init__.py", "exceptions.py", "output.py", "states.py", "origin.py")
# The shims kept at their first paths for callers outside the package (users, hooks already
# installed): the package imports the module each one stands for, so a level's import of one is an
# arrow up to the face, however low what the shim imports.
SHIMS = ("_watch.py", "ops.py", "runtime.py", "smoke.py")
# Upward arrows that stay, (importer, imported module) -> why; at most two.
UPWARD_ALLOWED: Dict[Tuple[str, str], str] = {
    ("hook/boot.py", "ascend_env._watch"): (
        "hook/boot.py's bytes are the installed hook's (ascend_env_hook.py), and hooks that earlier "
        "releases installed import ascend_env._watch by that name: importing hook/watch.py here "
        "instead would make every installed hook stale, and the shim must stay for the old ones anyway"
    ),
}


def level(relative: str) -> Optional[int]:
    """The level of a module (``detect/report.py``), None for a top-level one."""
    top = relative.split("/")[0]
    return LEVELS.index(top) if top in LEVELS else None


def target_module(name: str) -> Optional[str]:
    """The module file (relative to ``ascend_env/``) that the dotted ``name`` reaches: the module,
    else its package, else the nearest one above (``ascend_env.__version__`` is ``__init__.py``)."""
    parts = name.split(".")[1:]
    while parts:
        base = "/".join(parts)
        for candidate in (f"{base}.py", f"{base}/__init__.py"):
            if (PACKAGE / candidate).is_file():
                return candidate
        parts = parts[:-1]
    return "__init__.py"


def levels_reached(name: str, seen: Optional[Set[str]] = None) -> Set[int]:
    """The levels an import of ``name`` reaches: its own, or through a top-level module that is not
    BASE, the levels of what that module imports."""
    module = target_module(name)
    if module is None or module in BASE:
        return set()
    own = level(module)
    if own is not None:
        return {own}
    seen = set() if seen is None else seen
    if module in seen:
        return set()
    seen.add(module)
    return {found for _, target in import_targets(module) for found in levels_reached(target, seen)}


def upward(
    relative: str, source: Optional[str] = None, allowed: Optional[Set[Tuple[str, str]]] = None
) -> List[str]:
    """Every import in ``relative`` (``source``: its text) that reaches a level above its own, or
    a shim (:data:`SHIMS`), and is not in ``allowed`` (default: UPWARD_ALLOWED)."""
    own = level(relative)
    allowed = set(UPWARD_ALLOWED) if allowed is None else allowed
    wrong = []
    for line, target in import_targets(relative, source):
        if own is None or (relative, target) in allowed:
            continue
        above = sorted(LEVELS[i] for i in levels_reached(target) if i > own)
        if target_module(target) in SHIMS:
            above.append(f"the shim {target_module(target)}")
        if above:
            wrong.append(f"{relative}:{line} -> {target} ({', '.join(above)} above {LEVELS[own]})")
    return wrong


def package_arrows() -> Dict[str, Set[str]]:
    """Package -> the other packages its modules import (through the top-level modules too)."""
    found: Dict[str, Set[str]] = {name: set() for name in LEVELS}
    for module in modules():
        own = level(module)
        if own is not None:
            reached = {i for _, target in import_targets(module) for i in levels_reached(target)}
            found[LEVELS[own]].update(LEVELS[i] for i in reached if i != own)
    return found


def circles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Each circle of ``graph``, as the packages on it from its smallest name."""
    found: Set[Tuple[str, ...]] = set()

    def walk(path: List[str]) -> Iterator[List[str]]:
        for following in sorted(graph.get(path[-1], ())):
            if following == path[0]:
                yield path
            elif following not in path and following > path[0]:
                yield from walk([*path, following])

    for start in sorted(graph):
        found.update(tuple(circle) for circle in walk([start]))
    return [list(circle) for circle in sorted(found)]


def test_no_module_imports_a_level_above_its_own():
    # Every import, at module level or in a function, ``from`` or plain, absolute or relative, or a
    # module looked up by its name.
    checked = [m for m in modules() if level(m) is not None]
    wrong = [arrow for module in checked for arrow in upward(module)]
    assert len(checked) > 80 and wrong == []


def test_the_packages_import_one_another_without_a_circle():
    arrows = package_arrows()
    assert "kernels" in arrows["detect"] and "patching" in arrows["hook"] and circles(arrows) == []


def test_the_base_modules_import_no_package():
    assert [m for m in BASE if any(levels_reached(t) for _, t in import_targets(m))] == []


def test_each_allowed_upward_arrow_is_needed_and_has_a_reason():
    assert len(UPWARD_ALLOWED) <= 2
    for (module, target), why in UPWARD_ALLOWED.items():
        assert why and target in imports(module), f"{module} -> {target} is no longer imported"
        # Needed: without its entry, the rule reports it.
        assert any(f" -> {target} (" in arrow for arrow in upward(module, allowed=set())), (module, target)


def test_a_level_importing_a_shim_is_caught():
    planted = (
        "from ascend_env import ops\nimport ascend_env.runtime\nfrom ascend_env import _audited, states\n"
    )
    assert upward("checks/verdict.py", planted) == [
        "checks/verdict.py:1 -> ascend_env.ops (the shim ops.py above checks)",
        "checks/verdict.py:2 -> ascend_env.runtime (the shim runtime.py above checks)",
    ]
    # _audited.py is no shim: it stands for what it imports (sim/, utils/), as the page says.
    assert upward("sim/startup.py", "from ascend_env import _audited\n") == []


def test_a_planted_upward_arrow_is_caught():
    # The check itself: each way a module can reach a level above its own is reported.
    planted = (
        "import sys\n"
        "from ascend_env.detect import socs\n"
        "from ascend_env import _audited\n"
        "def later():\n"
        "    import ascend_env.checks.verdict\n"
        "    from ..hook import runtime\n"
        "    return sys.modules.get('ascend_env.commands.audit'), sys.modules['ascend_env.sim.steps']\n"
    )
    assert upward("detect/report.py", planted) == [
        "detect/report.py:3 -> ascend_env._audited (sim above detect)",
        "detect/report.py:5 -> ascend_env.checks.verdict (checks above detect)",
        "detect/report.py:6 -> ascend_env.hook (hook above detect)",
        "detect/report.py:6 -> ascend_env.hook.runtime (hook above detect)",
        "detect/report.py:7 -> ascend_env.commands.audit (commands above detect)",
        "detect/report.py:7 -> ascend_env.sim.steps (sim above detect)",
    ]
    assert upward("commands/audit.py", planted) == []
    assert circles({"detect": {"hook", "utils"}, "hook": {"sim"}, "sim": {"detect"}, "utils": set()}) == [
        ["detect", "hook", "sim"]
    ]


# ``import torch_npu`` is no arrow: it names the user's torch_npu, wherever sys.path finds it. The
# simulated one under ``sim/pkgs/`` is on sys.path only in a simulated process (put there by
# ``sim.add_torch_npu_to_path()`` or the audit's start-up), so a drawing that resolves the name
# against the source tree shows ``hook/runtime.py -> sim/pkgs/torch_npu/__init__.py``, an arrow up
# from hook/ that no import makes: only ``ascend_env.*`` names count.


def test_import_torch_npu_is_not_an_arrow_to_the_simulated_package():
    runtime = ast.parse((PACKAGE / "hook" / "runtime.py").read_text(encoding="utf-8"))
    imported = {
        alias.name for node in ast.walk(runtime) if isinstance(node, ast.Import) for alias in node.names
    }
    assert "torch_npu" in imported and (PACKAGE / "sim" / "pkgs" / "torch_npu" / "__init__.py").is_file()
    assert upward("hook/runtime.py", "import torch_npu\nfrom torch_npu import npu\n") == []
    # The simulated package reached by its own name is an arrow, and an upward one.
    assert upward("hook/runtime.py", "import ascend_env.sim.pkgs.torch_npu\n") == [
        "hook/runtime.py:1 -> ascend_env.sim.pkgs.torch_npu (sim above hook)"
    ]


def test_the_page_lists_the_levels_in_order():
    text = PAGE.read_text(encoding="utf-8")
    listed = re.search(r"^`utils/`.*$", text, re.M)
    assert listed is not None
    assert re.findall(r"`(\w+)/`", listed.group(0)) == list(LEVELS)


# Every module keeps ``__all__`` as its contract: it names every public name the module defines,
# only names the module has, and everything another module, a test or a tool imports from it.
# Outside the contract, with the reason (a path ending in / stands for every module under it):
ALL_EXEMPT = {
    "hook/boot.py": "the installed hook's source byte for byte (ascend_env_hook.py): a change would make "
    "every installed hook stale",
    "sim/pkgs/": "the simulated torch_npu: its names are torch_npu's, not ascend-env's",
}
# Modules whose ``__all__`` is another package's list, so it need not name every public name:
ALL_OF_ANOTHER_API = {
    "sim/device.py": "its __all__ is torch_npu.npu's, which transfer_to_npu copies onto torch.cuda",
}


def declared_all(relative: str) -> List[str]:
    """The names in the module's ``__all__`` (a literal list), or ``["<none>"]`` where it has none."""
    for node in ast.parse((PACKAGE / relative).read_text(encoding="utf-8")).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == "__all__":
            return [element.value for element in node.value.elts]
    return ["<none>"]


def _module_level(body: List[ast.stmt], checking: bool = False) -> Iterator[Tuple[ast.stmt, bool]]:
    """Each statement run at module level (inside ``if`` and ``try`` too), and whether it is only
    for type checkers (under ``if TYPE_CHECKING:``)."""
    for node in body:
        yield node, checking
        if isinstance(node, ast.If):
            only = checking or (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
            yield from _module_level(node.body, only)
            yield from _module_level(node.orelse, checking)
        elif isinstance(node, ast.Try):
            handlers = [handler.body for handler in node.handlers]
            for block in (node.body, *handlers, node.orelse, node.finalbody):
                yield from _module_level(block, checking)


def bound_names(relative: str) -> Tuple[Set[str], Set[str]]:
    """The public module-level names ``relative`` defines itself, and every name it has: those it
    defines (``__version__`` too) and imports (type checkers' included: a module's ``__getattr__``
    may provide them)."""
    defined: Set[str] = set()
    imported: Set[str] = set()
    tree = ast.parse((PACKAGE / relative).read_text(encoding="utf-8"))
    for node, checking in _module_level(tree.body):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imported.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif checking:
            continue
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                elements = target.elts if isinstance(target, ast.Tuple) else [target]
                defined.update(e.id for e in elements if isinstance(e, ast.Name))
    # TYPE_CHECKING = False: typing's flag without importing typing, not a name to export.
    public = {name for name in defined if not name.startswith("_") and name != "TYPE_CHECKING"}
    return public, defined | imported


def exempt(relative: str) -> bool:
    return any(relative == path or (path.endswith("/") and relative.startswith(path)) for path in ALL_EXEMPT)


def contract_modules() -> List[str]:
    return [m for m in modules() if not exempt(m)]


def test_every_module_has_all_but_the_exempt_ones():
    assert [m for m in contract_modules() if declared_all(m) == ["<none>"]] == []
    assert {"hook/boot.py", "sim/pkgs/torch_npu/__init__.py"} <= {m for m in modules() if exempt(m)}


def test_all_names_every_public_name_and_only_names_the_module_has():
    wrong = []
    for module in contract_modules():
        names = declared_all(module)
        defined, imported = bound_names(module)
        if module not in ALL_OF_ANOTHER_API:
            wrong += [f"{module}: {name} is not in __all__" for name in sorted(defined - set(names))]
        wrong += [f"{module}: __all__ names {name}" for name in names if name not in defined | imported]
        wrong += [f"{module}: __all__ names {name} twice" for name in set(names) if names.count(name) > 1]
    assert len(contract_modules()) > 80 and wrong == []


def _expecting_import_error(tree: ast.AST) -> Set[int]:
    """The ids of the imports inside ``with pytest.raises(ImportError)``: meant to fail."""
    found: Set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.With) and any("ImportError" in ast.dump(i.context_expr) for i in node.items):
            found.update(id(inner) for inner in ast.walk(node) if isinstance(inner, ast.ImportFrom))
    return found


def taken_names(source: str) -> List[Tuple[str, str]]:
    """(module, name) for each ``from ascend_env[.<package>].<module> import name`` in ``source``
    that names no submodule."""
    tree = ast.parse(source)
    failing = _expecting_import_error(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module or id(node) in failing:
            continue
        parts = node.module.split(".")
        if parts[0] != "ascend_env":
            continue
        base = "/".join(parts[1:])
        if not base:
            module = "__init__.py"
        else:
            module = f"{base}.py" if (PACKAGE / f"{base}.py").is_file() else f"{base}/__init__.py"
        for alias in node.names:
            submodule = PACKAGE / base / alias.name
            if not submodule.with_name(f"{alias.name}.py").is_file() and not submodule.is_dir():
                found.append((module, alias.name))
    return found


def test_what_is_imported_from_a_module_is_in_its_all():
    # Every ``from ascend_env.<package>.<module> import name``, in the package, its tests and tools.
    places = [ROOT / "ascend_env", ROOT / "tests", ROOT / "tools", ROOT / "bench"]
    wrong = []
    for path in sorted(p for place in places for p in place.rglob("*.py")):
        for module, name in taken_names(path.read_text(encoding="utf-8")):
            if not exempt(module) and name not in declared_all(module):
                wrong.append(f"{path.relative_to(ROOT)}: {name} from {module}")
    assert wrong == []


def test_a_name_missing_from_all_is_caught():
    # The check itself: what each import takes, and from which module; an import meant to fail is
    # left out. A name outside the module's __all__ is then reported.
    planted = (
        "from ascend_env.patching.engine import install, _plan\n"
        "from ascend_env import __version__\n"
        "from ascend_env.hook import files\n"
        "with pytest.raises(ImportError):\n"
        "    from ascend_env.detect import no_such_name\n"
    )
    assert taken_names(planted) == [
        ("patching/engine.py", "install"),
        ("patching/engine.py", "_plan"),
        ("__init__.py", "__version__"),
    ]
    exported = declared_all("patching/engine.py")
    assert "install" in exported and "_plan" not in exported


# No import aliases: each ascend_env module (or name) is imported under its own name, so that a
# name reads the same in every file. An alias stays only where it must, with the reason:
ALIAS_ALLOWED = {
    (
        "ascend_env/sim/pkgs/torch_npu/__init__.py",
        "ascend_env.sim",
        "_sim",
    ): "the simulated torch_npu's names are torch_npu's: ascend_env.sim stays private there",
    (
        "ascend_env/sim/pkgs/torch_npu/__init__.py",
        "ascend_env.sim.device",
        "npu",
    ): "the simulated torch_npu's names are torch_npu's: ascend_env.sim.device is its torch_npu.npu",
}
ALIAS_PLACES = ("ascend_env", "tests", "tools", "bench")


def aliases(relative: str, source: Optional[str] = None) -> List[Tuple[int, str, str]]:
    """(line, dotted name, alias) of each ``import ascend_env.x as y``, ``from ascend_env.x import m
    as y`` and relative import ``as y`` of ascend_env in ``relative`` (a path from the repository
    root; ``source``: its text, else the file's), at module level or inside functions."""
    text = (ROOT / relative).read_text(encoding="utf-8") if source is None else source
    parts = relative[: -len(".py")].split("/")
    package = parts[:-1]
    found: List[Tuple[int, str, str]] = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            named = [(alias.name, alias.asname) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - (node.level - 1)] + ([base] if base else []))
            named = [(f"{base}.{alias.name}", alias.asname) for alias in node.names]
        else:
            continue
        found += [
            (node.lineno, name, asname)
            for name, asname in named
            if asname and (name == "ascend_env" or name.startswith("ascend_env."))
        ]
    return found


def all_aliases() -> List[Tuple[str, int, str, str]]:
    """(path, line, dotted name, alias) of every alias of ascend_env in the package, tests, tools, bench."""
    paths = sorted(
        p for place in ALIAS_PLACES for p in (ROOT / place).rglob("*.py") if "__pycache__" not in p.parts
    )
    return [
        (path.relative_to(ROOT).as_posix(), *found)
        for path in paths
        for found in aliases(path.relative_to(ROOT).as_posix())
    ]


def test_no_module_of_ours_is_imported_under_another_name():
    wrong = [
        f"{path}:{line}: {name} as {asname}"
        for path, line, name, asname in all_aliases()
        if (path, name, asname) not in ALIAS_ALLOWED
    ]
    assert wrong == [], "import them under their own names, or allow the alias (with why) in ALIAS_ALLOWED"


def test_each_allowed_alias_is_still_there_and_has_a_reason():
    found = {(path, name, asname) for path, _, name, asname in all_aliases()}
    for key, why in ALIAS_ALLOWED.items():
        assert why and key in found, f"{key} is no longer imported so: drop it from ALIAS_ALLOWED"


def test_a_planted_alias_is_caught():
    # The check itself: each way to import ascend_env under another name is reported; imports under
    # the own name, and aliases of other packages, are not.
    planted = (
        "import numpy as np\n"
        "import ascend_env.hook.files as hook\n"
        "from ascend_env.hook import files, runtime\n"
        "from ascend_env.patching import store as journal, engine\n"
        "def later():\n"
        "    from ascend_env.detect.report import detect as run_detect\n"
        "    from ..kernels import registry as fixes\n"
        "    from . import cann as cann_mod\n"
        "    import ascend_env as ae\n"
    )
    assert aliases("ascend_env/detect/report.py", planted) == [
        (2, "ascend_env.hook.files", "hook"),
        (4, "ascend_env.patching.store", "journal"),
        (6, "ascend_env.detect.report.detect", "run_detect"),
        (7, "ascend_env.kernels.registry", "fixes"),
        (8, "ascend_env.detect.cann", "cann_mod"),
        (9, "ascend_env", "ae"),
    ]
    assert aliases("tests/unit/test_x.py", "from . import helpers as h\n") == []


# A module holds one noun: past this many lines (as ruff format writes them), split it by noun.
MODULE_LINES = 600


def test_no_module_is_over_the_house_limit():
    sizes = {m: len((PACKAGE / m).read_text(encoding="utf-8").splitlines()) for m in modules()}
    assert len(sizes) > 90 and {m: n for m, n in sizes.items() if n > MODULE_LINES} == {}
