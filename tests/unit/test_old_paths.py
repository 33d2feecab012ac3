"""The import paths users and installed hooks already use keep working after the move to subpackages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import ascend_env
from ascend_env.hook import files, runtime, watch

ROOT = Path(__file__).resolve().parents[2]


def test_the_watch_forwarder_gives_installed_hooks_what_they_call():
    # Every hook written into site-packages, by this release or an earlier one, runs
    # "from ascend_env import _watch" and calls these two functions.
    from ascend_env import _watch

    assert _watch.find_and_wrap is watch.find_and_wrap
    assert _watch.notify is watch.notify
    assert _watch.imported_past is watch.imported_past  # this release's hook calls it too
    source = files.files()[files.MODULE_FILE].decode()
    assert source.count("from ascend_env import _watch") == 3
    assert "_watch.find_and_wrap(" in source and "_watch.notify(" in source
    assert "_watch.imported_past(" in source


def test_the_watch_forwarder_is_light():
    # The hook imports it in every process that imports torch_npu: it must not load the report,
    # the patching engine or torch.
    code = (
        "import sys; from ascend_env import _watch; "
        "print(sorted(m for m in sys.modules if m.startswith('ascend_env')), 'torch' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=str(ROOT)
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("] ")[1].strip() == "False"
    loaded = (
        "['ascend_env', 'ascend_env._watch', 'ascend_env.hook', 'ascend_env.hook.watch', 'ascend_env.utils', "
        "'ascend_env.utils.importhooks']"
    )
    assert done.stdout.startswith(loaded)


def test_detect_stays_importable_from_the_package():
    from ascend_env.detect import Report, detect, report

    assert detect is report.detect and Report is report.Report
    with pytest.raises(ImportError):
        from ascend_env.detect import no_such_name  # noqa: F401


def test_runtime_status_and_sim_enable_keep_their_paths():
    from ascend_env import runtime, sim  # ascend_env.runtime, not the module's ascend_env.hook.runtime

    assert runtime.status is ascend_env.hook.runtime.status
    assert callable(sim.enable)


def test_ops_isin_keeps_its_path():
    pytest.importorskip("torch")
    from ascend_env import ops
    from ascend_env.kernels import isin

    assert ops.isin is isin.isin and ops.ATEN_KERNELS is isin.ATEN_KERNELS


def test_the_smoke_module_still_runs_under_its_first_name():
    for name in ("ascend_env.smoke", "ascend_env.checks.smoke"):
        done = subprocess.run(
            [sys.executable, "-m", name, "--help"], capture_output=True, text=True, timeout=60, cwd=str(ROOT)
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("usage: python -m ascend_env.checks.smoke")


def test_the_package_is_typed():
    assert (Path(ascend_env.__file__).parent / "py.typed").is_file()


def test_a_record_written_by_an_older_hook_module_still_works(tmp_path, monkeypatch):
    # An older ascend_env_hook.py (left in site-packages until the next install) keeps a record with
    # "searching" as one flag and no "specs" or "heard": the watcher must take it as it is.
    import importlib.util
    import types

    (tmp_path / "torch_npu").mkdir()
    (tmp_path / "torch_npu" / "__init__.py").write_text("LOADED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch_npu", raising=False)
    activated = []
    monkeypatch.setattr(runtime, "activate", activated.append)
    state = types.SimpleNamespace(
        started=True, disabled=False, finder=object(), events=[], errors=[], searching=False
    )
    spec = watch.find_and_wrap(state, "torch_npu", None, None)
    assert spec is not None and state.searching is False
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "torch_npu", module)
    spec.loader.exec_module(module)
    watch.notify(state, "torch_npu")  # an older hook's second call: heard once
    assert module.LOADED and state.events == ["torch_npu: import"] and state.heard == ["torch_npu"]
    assert activated == ["torch_npu"]
