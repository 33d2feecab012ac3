"""The startup hook's stdlib half: cheap at start-up, waits for torch_npu, never breaks a process.

Every test runs a fresh interpreter whose site directory holds the hook files (the module
``ascend_env_hook``, a copy of ``ascend_env/hook/boot.py``, and its ``.pth``/``.start`` files), so the
``.pth`` line runs exactly as it does in a user's environment. No torch is needed: a fake ``torch_npu``
package stands in, and what the hook does once it appears is recorded, error or not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

import ascend_env
from ascend_env.hook import boot, files

ASCEND_ENV_ROOT = str(Path(ascend_env.__file__).parent.parent)


def run_python(
    site: Path, code: str, *, path: Optional[str] = ASCEND_ENV_ROOT, **env: str
) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (no other site directory) that processes ``site``.

    ``path``, where ascend_env is imported from, comes first on ``sys.path``; None leaves it out.
    """
    prelude = "import sys\n"
    if path is not None:
        prelude += f"sys.path.insert(0, {path!r})\n"
    prelude += f"import site\nsite.addsitedir({str(site)!r})\n"
    environ = {k: v for k, v in os.environ.items() if k != boot.DISABLE_VARIABLE}
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", prelude + code],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
    )


def write_hook(site: Path) -> None:
    for name, data in files.files().items():
        (site / name).write_bytes(data)


def write_fake_torch_npu(root: Path) -> None:
    package = root / "torch_npu"
    package.mkdir()
    (package / "__init__.py").write_text("__version__ = '2.1.0.post6'\nLOADED = True\n")


def hooked_site_with_torch_npu(tmp_path: Path) -> Path:
    """Write the hook into ``tmp_path`` and a fake torch_npu into ``tmp_path/pkgs``; return pkgs."""
    write_hook(tmp_path)
    pkgs = tmp_path / "pkgs"
    pkgs.mkdir()
    write_fake_torch_npu(pkgs)
    return pkgs


REPORT = (
    "import json, sys\n"
    "b = sys.modules.get('ascend_env_hook')\n"
    "print(json.dumps(None if b is None else {'started': b.STATE.started, 'disabled': b.STATE.disabled,"
    " 'events': b.STATE.events, 'errors': b.STATE.errors,"
    " 'finder': any(f is b for f in sys.meta_path)}))\n"
)
# Prints how many times the hook module ``b`` is on sys.meta_path.
COUNT_FINDERS = "print(sum(f is b for f in sys.meta_path))\n"


def test_hook_starts_without_importing_torch(tmp_path: Path):
    write_hook(tmp_path)
    modules = "print('torch' in sys.modules, 'importlib.metadata' in sys.modules)"
    result = run_python(tmp_path, REPORT + modules)
    assert result.returncode == 0, result.stderr
    state_line, modules_line = result.stdout.splitlines()
    state = json.loads(state_line)
    assert state == {"started": True, "disabled": False, "events": [], "errors": [], "finder": True}
    assert modules_line == "False False"
    assert result.stderr == ""


def test_kill_switch_skips_everything(tmp_path: Path):
    write_hook(tmp_path)
    result = run_python(tmp_path, REPORT, ASCEND_ENV_DISABLE="1")
    state = json.loads(result.stdout)
    assert state["disabled"] is True
    assert state["finder"] is False


def test_waits_for_torch_npu_then_notifies_and_steps_aside(tmp_path: Path):
    pkgs = hooked_site_with_torch_npu(tmp_path)
    code = f"sys.path.insert(0, {str(pkgs)!r})\nimport torch_npu\nassert torch_npu.LOADED\n" + REPORT
    result = run_python(tmp_path, code)
    assert result.returncode == 0, result.stderr
    state = json.loads(result.stdout)
    assert state["events"] == ["torch_npu: import"]
    assert state["finder"] is False  # the finder removed itself once torch_npu had executed


# A meta path finder whose loader has only the legacy load_module(), as some packagers' finders do,
# serving torch_npu from a source string.
LEGACY_FINDER = """
import importlib.machinery, sys, types
class LegacyLoader:
    def load_module(self, fullname):
        module = sys.modules.setdefault(fullname, types.ModuleType(fullname))
        module.__loader__ = self
        exec("__version__ = '2.1.0.post6'\\nLOADED = True\\n", module.__dict__)
        return module
class LegacyFinder:
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torch_npu":
            return importlib.machinery.ModuleSpec(fullname, LegacyLoader())
        return None
sys.meta_path.append(LegacyFinder())
"""


def test_a_legacy_load_module_loader_still_imports_and_notifies(tmp_path: Path):
    write_hook(tmp_path)
    code = LEGACY_FINDER + "import warnings\nwarnings.simplefilter('ignore', ImportWarning)\n"
    code += "import torch_npu\nassert torch_npu.LOADED and torch_npu.__version__ == '2.1.0.post6'\n" + REPORT
    result = run_python(tmp_path, code)
    assert result.returncode == 0, result.stderr
    state = json.loads(result.stdout.splitlines()[-1])
    assert state["events"] == ["torch_npu: import"] and state["finder"] is False


def test_an_exception_after_torch_npu_loads_is_recorded_not_raised(tmp_path: Path):
    # Without torch in this interpreter's path, registering the fixes fails: the import of
    # torch_npu must still succeed, silently, with the error kept in the record.
    pkgs = hooked_site_with_torch_npu(tmp_path)
    (pkgs / "torch").mkdir()
    (pkgs / "torch" / "__init__.py").write_text("raise RuntimeError('broken torch for the test')\n")
    code = f"sys.path.insert(0, {str(pkgs)!r})\nimport torch_npu\n" + REPORT
    result = run_python(tmp_path, code)
    assert result.returncode == 0, result.stderr
    state = json.loads(result.stdout)
    assert state["events"] == ["torch_npu: import"]
    assert any("broken torch for the test" in error for error in state["errors"])
    assert result.stderr == ""


def test_calling_main_twice_is_harmless(tmp_path: Path):
    write_hook(tmp_path)
    code = "import ascend_env_hook as b\nb.main(); b.main()\n" + COUNT_FINDERS
    result = run_python(tmp_path, code)
    assert result.stdout.strip() == "1"


def test_hook_left_behind_without_ascend_env_is_silent(tmp_path: Path):
    # ascend-env removed without `restore`: the self-contained hook module still starts, and when
    # torch_npu appears its failure to import ascend_env is recorded, not printed; torch_npu loads
    # as if there were no hook, and the finder steps aside so that it is not asked again.
    pkgs = hooked_site_with_torch_npu(tmp_path)
    code = f"sys.path.insert(0, {str(pkgs)!r})\nimport torch_npu\nassert torch_npu.LOADED\n" + REPORT
    result = run_python(tmp_path, code + "print('ascend_env' in sys.modules)", path=None)
    assert result.returncode == 0
    assert result.stderr == ""
    state_line, imported = result.stdout.splitlines()
    state = json.loads(state_line)
    assert state["events"] == []
    assert state["finder"] is False
    assert [error for error in state["errors"] if "ascend_env" in error] == state["errors"] != []
    assert imported == "False"


def test_broken_ascend_env_is_silent(tmp_path: Path):
    write_hook(tmp_path)
    broken = tmp_path / "broken"
    (broken / "ascend_env").mkdir(parents=True)
    (broken / "ascend_env" / "__init__.py").write_text("raise ImportError('half-removed')\n")
    write_fake_torch_npu(broken)
    code = "import torch_npu\n" + REPORT
    result = run_python(tmp_path, code, path=str(broken))
    assert result.returncode == 0
    assert "Traceback" not in result.stderr
    assert any("half-removed" in error for error in json.loads(result.stdout)["errors"])


def test_start_file_names_the_entry_point():
    # PEP 829: `<name>.start` holds `pkg.mod:callable` lines and shares the .pth file's name.
    start = files.files()[files.START_FILE].decode()
    entries = [line for line in start.splitlines() if line and not line.startswith("#")]
    assert entries == ["ascend_env_hook:main"]
    assert Path(files.PTH_FILE).stem == Path(files.START_FILE).stem == Path(files.MODULE_FILE).stem


def test_the_installed_module_is_the_boot_source():
    assert files.files()[files.MODULE_FILE] == Path(boot.__file__).read_bytes()


@pytest.mark.parametrize(
    "value, disabled",
    [
        ("1", True),
        ("yes", True),
        (" TRUE ", True),
        ("", False),
        ("0", False),
        ("false", False),
        ("No", False),
        (" off ", False),
    ],
)
def test_kill_switch_values(tmp_path: Path, value: str, disabled: bool):
    write_hook(tmp_path)
    state = json.loads(run_python(tmp_path, REPORT, ASCEND_ENV_DISABLE=value).stdout)
    assert (state["disabled"], state["finder"]) == (disabled, not disabled)


# -- start-up cost: what the hook does at start-up, structurally (bench/startup.py times it) -------

MODULES = "print(json.dumps(sorted(sys.modules)))\n"


def test_start_up_imports_only_the_hook_module(tmp_path: Path):
    # The same interpreter with and without the hook files: the hook adds one module, itself.
    # The baseline also reads a .pth file (a comment only): Python 3.9 imports _bootlocale for that.
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "other.pth").write_text("# no hook here\n")
    hooked = tmp_path / "hooked"
    hooked.mkdir()
    write_hook(hooked)
    without = json.loads(run_python(plain, "import json\n" + MODULES, path=None).stdout)
    with_ = json.loads(run_python(hooked, "import json\n" + MODULES, path=None).stdout)
    assert sorted(set(with_) - set(without)) == [files.NAME]
    assert set(without) <= set(with_)


def test_the_hook_module_holds_two_functions_no_class_and_no_module_but_sys(tmp_path: Path):
    # Each class costs a class creation at every start-up, each function about 27k instructions to
    # load (callgrind), and a module kept in the finder's globals until exit (os, measured) slows
    # interpreter shutdown: the installed module holds the finder and main, the rest is in
    # ascend_env._watch, loaded once torch_npu is imported.
    write_hook(tmp_path)
    code = (
        "import types\nb = sys.modules['ascend_env_hook']\n"
        "print(sorted(k for k, v in vars(b).items() if isinstance(v, types.FunctionType)),"
        " sorted(k for k, v in vars(b).items() if isinstance(v, type)),"
        " sorted(k for k, v in vars(b).items() if isinstance(v, types.ModuleType)))"
    )
    result = run_python(tmp_path, code, path=None)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['find_spec', 'main'] [] ['sys']"


def test_the_pth_line_only_imports_the_module_which_starts_itself():
    lines = [line for line in files.PTH_TEXT.splitlines() if not line.startswith("#")]
    assert lines == [f"import {files.NAME}"]


def test_imported_under_its_package_name_it_does_not_start(tmp_path: Path):
    # ascend_env.hook.boot is the source of the hook; importing it (as tests and hook.files() do)
    # must not put a finder into the importing process.
    code = (
        "from ascend_env.hook import boot\nprint(boot.STATE.started, any(f is boot for f in sys.meta_path))"
    )
    result = run_python(tmp_path, code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False False"


def test_an_older_pth_line_that_also_calls_main_is_harmless(tmp_path: Path):
    # Hooks written by earlier releases ran "import ascend_env_hook; ascend_env_hook.main()".
    write_hook(tmp_path)
    (tmp_path / files.PTH_FILE).write_text("import ascend_env_hook; ascend_env_hook.main()\n")
    result = run_python(tmp_path, REPORT + COUNT_FINDERS)
    assert result.returncode == 0, result.stderr
    state_line, count = result.stdout.splitlines()
    state = json.loads(state_line)
    assert state["started"] and state["finder"] and state["errors"] == []
    assert count == "1"


def test_the_start_entry_point_after_the_import_is_harmless(tmp_path: Path):
    # PEP 829: Python >= 3.15 imports the module named in the .start file, then calls main().
    write_hook(tmp_path)
    (tmp_path / files.PTH_FILE).unlink()
    code = (
        f"sys.path.insert(0, {str(tmp_path)!r})\nimport ascend_env_hook as b\nb.main()\n"
        "print(b.STATE.started)\n" + COUNT_FINDERS
    )
    result = run_python(tmp_path, code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "1"]


# ----------------------------------------------------------- every path to torch_npu, heard once

PROBE = "import importlib.util\n"
FIND = "importlib.util.find_spec('torch_npu')"


def _events_after(tmp_path: Path, body: str, *, subpackage: bool = False) -> dict:
    """Run ``body`` with a stand-in torch_npu on the path; the hook's record afterwards."""
    pkgs = hooked_site_with_torch_npu(tmp_path)
    if subpackage:
        (pkgs / "torch_npu" / "contrib").mkdir()
        contrib = pkgs / "torch_npu" / "contrib" / "__init__.py"
        contrib.write_text("import torch_npu\nPARENT = torch_npu.LOADED\n")
    code = f"sys.path.insert(0, {str(pkgs)!r})\n{body}\nimport torch_npu\nassert torch_npu.LOADED\n" + REPORT
    result = run_python(tmp_path, code)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.parametrize(
    ("body", "event"),
    [
        ("", "torch_npu: import"),
        (PROBE + f"assert {FIND} is not None", "torch_npu: import after 1 probe"),
        (PROBE + f"for _ in range(3): {FIND}", "torch_npu: import after 3 probes"),
        ("import importlib\nimportlib.import_module('torch_npu')", "torch_npu: import"),
        (
            PROBE + f"{FIND}\nimport importlib\nimportlib.import_module('torch_npu')",
            "torch_npu: import after 1 probe",
        ),
        ("__import__('torch_npu')", "torch_npu: import"),
    ],
    ids=["plain", "one-probe", "three-probes", "import_module", "probe-then-import_module", "__import__"],
)
def test_the_hook_hears_of_torch_npu_on_every_import_path(tmp_path: Path, body: str, event: str):
    # transformers' is_torch_npu_available() and accelerate's is_npu_available() probe with
    # importlib.util.find_spec first and throw the spec away: the import after must still be heard.
    state = _events_after(tmp_path, body)
    assert state["events"] == [event]
    assert state["finder"] is False


@pytest.mark.parametrize(
    "body",
    [
        "import torch_npu.contrib\nassert torch_npu.contrib.PARENT",
        PROBE + "assert importlib.util.find_spec('torch_npu.contrib') is not None",
        PROBE + "importlib.util.find_spec('torch_npu')\nimport torch_npu.contrib",
    ],
    ids=["submodule-import", "submodule-probe", "probe-then-submodule"],
)
def test_a_submodule_first_is_heard_as_its_package(tmp_path: Path, body: str):
    state = _events_after(tmp_path, body, subpackage=True)
    assert len(state["events"]) == 1 and state["events"][0].startswith("torch_npu: import")
    assert state["finder"] is False


def test_a_probe_that_finds_nothing_leaves_the_hook_waiting(tmp_path: Path):
    write_hook(tmp_path)
    code = PROBE + "assert importlib.util.find_spec('torch_npu') is None\n" + REPORT
    result = run_python(tmp_path, code)
    assert result.returncode == 0, result.stderr
    state = json.loads(result.stdout)
    assert state["events"] == [] and state["finder"] is True


def test_an_import_from_another_thread_is_heard_once(tmp_path: Path):
    body = (
        "import threading\n"
        "threads = [threading.Thread(target=__import__, args=('torch_npu',)) for _ in range(4)]\n"
        "for t in threads: t.start()\n"
        "for t in threads: t.join()"
    )
    state = _events_after(tmp_path, body)
    assert len(state["events"]) == 1 and state["events"][0].startswith("torch_npu: import")


# A finder after the hook's that, asked for torch_npu by the thread named "prober", holds it until
# the main thread has imported torch_npu: the hook must answer the main thread meanwhile.
SLOW_PROBE = """
import importlib.util, threading
imported = threading.Event()
class Slow:
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torch_npu" and threading.current_thread().name == "prober":
            imported.wait(30)
        return None
sys.meta_path.append(Slow())
prober = threading.Thread(target=importlib.util.find_spec, args=("torch_npu",), name="prober")
prober.start()
import time; time.sleep(0.2)
import torch_npu
imported.set(); prober.join()
"""


def test_a_probe_in_another_thread_does_not_hide_the_import(tmp_path: Path):
    state = _events_after(tmp_path, SLOW_PROBE)
    assert len(state["events"]) == 1 and state["events"][0].startswith("torch_npu: import")


def test_a_failed_import_then_a_good_one_is_heard_once(tmp_path: Path):
    pkgs = hooked_site_with_torch_npu(tmp_path)
    (pkgs / "torch_npu" / "__init__.py").write_text(
        "import os\nif os.environ.pop('FAIL_ONCE', None): raise ImportError('libhccl.so: cannot open')\n"
        "LOADED = True\n"
    )
    code = (
        f"sys.path.insert(0, {str(pkgs)!r})\n"
        "try:\n    import torch_npu\nexcept ImportError:\n    pass\n"
        "import torch_npu\nimport importlib\nimportlib.reload(torch_npu)\n" + REPORT
    )
    result = run_python(tmp_path, code, FAIL_ONCE="1")
    assert result.returncode == 0, result.stderr
    state = json.loads(result.stdout)
    # A failed import is no probe (issue 42, item 12): it is said as what it was.
    assert state["events"] == ["torch_npu: import after 1 failed import"] and state["finder"] is False


def test_torch_npu_imported_before_the_hook_started_is_said_so(tmp_path: Path):
    # site runs .pth files in name order: this one imports torch_npu before the hook's starts.
    pkgs = hooked_site_with_torch_npu(tmp_path)
    first = f"import sys; sys.path.insert(0, {str(pkgs)!r}); import torch_npu\n"
    (tmp_path / "a_first.pth").write_text(first)
    result = run_python(tmp_path, REPORT)
    assert result.returncode == 0, result.stderr
    state = json.loads(result.stdout)
    assert state["events"] == ["torch_npu: imported before the hook started"] and state["finder"] is False


# torch_npu supplied by a finder the hook never hears from (issue 42, item 3): one put ahead of
# the hook after it started, as typeguard's install_import_hook() and pytest's assertion rewriter
# do, or a legacy find_module() finder. The hook notices torch_npu in sys.modules at the next
# import (or at runtime.status()), and says by which loader.
AHEAD_FINDERS = {
    # typeguard: PathFinder's spec, its loader replaced by a SourceFileLoader subclass
    "typeguard-like": """
import importlib.machinery, sys
class TypeguardLoader(importlib.machinery.SourceFileLoader):
    pass
class TypeguardFinder:
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split('.')[0] != 'torch_npu':
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None:
            spec.loader = TypeguardLoader(spec.loader.name, spec.loader.path)
        return spec
sys.meta_path.insert(0, TypeguardFinder())
""",
    # pytest's AssertionRewritingHook: the finder is the loader (create_module/exec_module)
    "rewriter-like": """
import importlib.machinery, importlib.util, sys
class AssertionRewritingHook:
    def find_spec(self, fullname, path=None, target=None):
        if fullname != 'torch_npu':
            return None
        found = importlib.machinery.PathFinder.find_spec(fullname, path)
        if found is None:
            return None
        self.origin = found.origin
        return importlib.util.spec_from_file_location(fullname, found.origin, loader=self,
                                                      submodule_search_locations=found.submodule_search_locations)
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        exec(compile(open(self.origin).read(), self.origin, 'exec'), module.__dict__)
sys.meta_path.insert(0, AssertionRewritingHook())
""",
}
LEGACY_ONLY = """
import importlib.machinery, sys, types
class OldLoader:
    def load_module(self, fullname):
        module = sys.modules.setdefault(fullname, types.ModuleType(fullname))
        module.__loader__ = self
        exec("LOADED = True\\nimport json\\n", module.__dict__)
        return module
class OldFinder:  # find_module only: Python < 3.12 asks it
    def find_module(self, fullname, path=None):
        return OldLoader() if fullname == 'torch_npu' else None
sys.meta_path.{where}
"""


@pytest.mark.parametrize("finder", sorted(AHEAD_FINDERS))
@pytest.mark.parametrize("then", ["a later import", "runtime.status()"])
def test_torch_npu_from_a_finder_ahead_of_the_hook_is_noticed(tmp_path: Path, finder, then):
    pkgs = hooked_site_with_torch_npu(tmp_path)
    (pkgs / "torch_npu" / "sub.py").write_text("X = 1\n")
    (pkgs / "torch_npu" / "__init__.py").write_text("LOADED = True\nfrom torch_npu import sub\n")
    code = f"sys.path.insert(0, {str(pkgs)!r})\n" + AHEAD_FINDERS[finder] + "import torch_npu\n"
    if then == "a later import":
        code += "import json\n"
    else:
        code += "from ascend_env.hook import runtime\nrecord = runtime.status()\n"
    result = run_python(tmp_path, code + REPORT)
    assert result.returncode == 0, result.stderr
    state = json.loads(result.stdout.splitlines()[-1])
    (event,) = state["events"]
    loader = "TypeguardLoader" if finder == "typeguard-like" else "AssertionRewritingHook"
    assert event.startswith("torch_npu: imported past the hook by ") and loader in event, event
    assert state["finder"] is False  # it stopped waiting


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="Python 3.12 no longer asks find_module()")
@pytest.mark.parametrize("where", ["insert(0, OldFinder())", "append(OldFinder())"])
def test_torch_npu_from_a_legacy_find_module_finder_is_heard(tmp_path: Path, where):
    write_hook(tmp_path)
    code = LEGACY_ONLY.replace("{where}", where)
    code += "import warnings\nwarnings.simplefilter('ignore', ImportWarning)\nimport torch_npu\n"
    code += "assert torch_npu.LOADED\nimport base64\n"
    result = run_python(tmp_path, code + REPORT)
    assert result.returncode == 0, result.stderr
    state = json.loads(result.stdout.splitlines()[-1])
    (event,) = state["events"]
    if where.startswith("append"):  # after the hook: asked by it, so its loader is wrapped
        assert event == "torch_npu: import"
    else:
        assert event.startswith("torch_npu: imported past the hook by ") and "OldLoader" in event
    assert state["finder"] is False


def test_torch_npu_still_executing_is_not_noticed_before_it_ran(tmp_path: Path):
    # Its own imports reach the hook while it executes: the hook hears of it only once it has run.
    pkgs = hooked_site_with_torch_npu(tmp_path)
    (pkgs / "torch_npu" / "__init__.py").write_text(
        "import sys\nimport json\nb = sys.modules['ascend_env_hook']\nEARLY = list(b.STATE.events)\n"
    )
    code = f"sys.path.insert(0, {str(pkgs)!r})\n" + AHEAD_FINDERS["typeguard-like"]
    code += "import torch_npu\nimport base64\nprint(torch_npu.EARLY)\n"
    result = run_python(tmp_path, code + REPORT)
    assert result.returncode == 0, result.stderr
    early, report = result.stdout.splitlines()
    assert early == "[]" and len(json.loads(report)["events"]) == 1


def _pkg_resources_path() -> Optional[str]:
    """Where pkg_resources can be imported from (this environment, or the base interpreter's)."""
    import glob
    import importlib.util

    found = importlib.util.find_spec("pkg_resources")
    if found is not None and found.origin:
        return str(Path(found.origin).parent.parent)
    for candidate in glob.glob(f"{sys.base_prefix}/lib/python3*/site-packages/pkg_resources"):
        return str(Path(candidate).parent)
    return None


# The hook's loader wrapper was observable (issue 42, item 9): copy and deepcopy recursed, pickle
# failed, pkg_resources had no provider for it. A probe's spec (still wrapped) and the imported
# module (its loader given back) must both behave as without the hook.
TRANSPARENT = """
import copy, importlib.machinery, importlib.util, pickle
probe = importlib.util.find_spec('torch_npu')
assert type(probe.loader).__name__ == 'NotifyingLoader'  # for whatever runs it by hand
assert isinstance(probe, importlib.machinery.ModuleSpec)
for thing in (probe.loader, probe):
    copy.copy(thing); copy.deepcopy(thing)
assert type(pickle.loads(pickle.dumps(probe.loader))) is importlib.machinery.SourceFileLoader
assert copy.copy(probe.loader).get_filename('torch_npu') == probe.origin
import torch_npu
for loader in (torch_npu.__loader__, torch_npu.__spec__.loader):
    assert type(loader) is importlib.machinery.SourceFileLoader, loader  # given back
copy.deepcopy(torch_npu.__spec__); pickle.dumps(torch_npu.__spec__.loader)
if PKG_RESOURCES:
    sys.path.append(PKG_RESOURCES)
    import warnings
    warnings.simplefilter('ignore')
    import pkg_resources
    assert pkg_resources.resource_exists('torch_npu', '__init__.py')
    assert '__init__.py' in pkg_resources.resource_listdir('torch_npu', '')
    assert not pkg_resources.resource_isdir('torch_npu', '__init__.py')
    print('pkg_resources checked')
"""


def test_the_loader_wrapper_is_transparent_and_given_back(tmp_path: Path):
    pkgs = hooked_site_with_torch_npu(tmp_path)
    where = _pkg_resources_path()
    code = f"sys.path.insert(0, {str(pkgs)!r})\nPKG_RESOURCES = {where!r}\n" + TRANSPARENT + REPORT
    result = run_python(tmp_path, code)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1])["events"] == ["torch_npu: import after 1 probe"]
    assert ("pkg_resources checked" in result.stdout) == (where is not None)


def test_a_legacy_loader_is_given_back_too(tmp_path: Path):
    write_hook(tmp_path)
    code = LEGACY_FINDER + "import warnings\nwarnings.simplefilter('ignore', ImportWarning)\n"
    code += "import copy, pickle\nimport torch_npu\n"
    code += "assert type(torch_npu.__spec__.loader).__name__ == 'LegacyLoader', torch_npu.__spec__.loader\n"
    code += (
        "assert type(torch_npu.__loader__).__name__ == 'LegacyLoader'\ncopy.deepcopy(torch_npu.__spec__)\n"
    )
    result = run_python(tmp_path, code + REPORT)
    assert result.returncode == 0, result.stderr


# A failing import of torch_npu: its traceback gained a frame of ascend-env's import hook
# (issue 42, item 12). Raised at its top level, in a submodule, and as a non-ImportError.
FAILING = {
    "ImportError": "raise ImportError('libhccl.so: cannot open shared object file')\n",
    "in a submodule": "from torch_npu import broken\n",
    "RuntimeError": "raise RuntimeError('no NPU')\n",
}


@pytest.mark.parametrize("how", sorted(FAILING))
def test_a_failing_import_has_no_frame_of_the_hook(tmp_path: Path, how):
    pkgs = hooked_site_with_torch_npu(tmp_path)
    (pkgs / "torch_npu" / "__init__.py").write_text(FAILING[how])
    (pkgs / "torch_npu" / "broken.py").write_text("raise ImportError('broken submodule')\n")
    code = (
        f"sys.path.insert(0, {str(pkgs)!r})\nimport importlib.util\nimportlib.util.find_spec('torch_npu')\n"
    )
    code += "import torch_npu\n"
    result = run_python(tmp_path, code)
    assert result.returncode == 1
    frames = [line for line in result.stderr.splitlines() if line.strip().startswith("File ")]
    assert not any("ascend_env" in frame or "ascend_env_hook" in frame for frame in frames), result.stderr
    assert any("torch_npu" in frame for frame in frames)


# Whatever runs the spec's loader itself is heard too, once the module has run: LazyLoader and the
# "approximating import" recipe of importlib's documentation.
RUN_BY_HAND = {
    "LazyLoader": (
        "import importlib.util\nspec = importlib.util.find_spec('torch_npu')\n"
        "loader = importlib.util.LazyLoader(spec.loader)\nspec.loader = loader\n"
        "module = importlib.util.module_from_spec(spec)\nsys.modules['torch_npu'] = module\n"
        "loader.exec_module(module)\nb = sys.modules['ascend_env_hook']\nbefore = list(b.STATE.events)\n"
        "assert module.LOADED\n"
    ),
    "approximating import": (
        "import importlib.util\nspec = importlib.util.find_spec('torch_npu')\n"
        "module = importlib.util.module_from_spec(spec)\nsys.modules['torch_npu'] = module\n"
        "b = sys.modules['ascend_env_hook']\nbefore = list(b.STATE.events)\n"
        "spec.loader.exec_module(module)\nassert module.LOADED\n"
    ),
}


@pytest.mark.parametrize("how", sorted(RUN_BY_HAND))
def test_a_loader_run_by_hand_is_heard_once_it_has_run(tmp_path: Path, how):
    pkgs = hooked_site_with_torch_npu(tmp_path)
    (pkgs / "torch_npu" / "__init__.py").write_text(
        "import sys, json\nEARLY = list(sys.modules['ascend_env_hook'].STATE.events)\nLOADED = True\n"
    )
    code = f"sys.path.insert(0, {str(pkgs)!r})\n" + RUN_BY_HAND[how]
    code += "import torch_npu\nassert torch_npu.EARLY == [] and before == [], (torch_npu.EARLY, before)\n"
    result = run_python(tmp_path, code + REPORT)
    assert result.returncode == 0, result.stderr
    state = json.loads(result.stdout.splitlines()[-1])
    assert len(state["events"]) == 1 and state["events"][0].startswith("torch_npu: import"), state
    assert state["finder"] is False
