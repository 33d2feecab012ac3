"""The runtime hook's drift warning: one line when the installed patches no longer hold."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from fake_site import STOP_PATH, make_patches, make_site

from ascend_env.hook import runtime
from ascend_env.patching import engine


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = make_site(tmp_path)
    engine.install(site, patches="always", directory=make_patches(tmp_path))
    return site


def test_no_warning_while_the_patches_hold(site, record):
    stream = io.StringIO()
    assert runtime.warn_on_drift(stream, [str(site)]) == []
    assert stream.getvalue() == ""


def test_one_line_once_when_a_patched_file_is_replaced(site, record):
    (site / STOP_PATH).write_text("# reinstalled by pip\n")
    stream = io.StringIO()
    lines = runtime.warn_on_drift(stream, [str(site)])
    assert lines == [f"{site}: {STOP_PATH} changed since ascend-env install"]
    runtime.warn_on_drift(stream, [str(site)])
    output = stream.getvalue()
    assert output.count("\n") == 1
    assert STOP_PATH in output and "python -m ascend_env install" in output
    assert record.drift == lines


def test_sites_without_state_are_ignored(tmp_path: Path, site):
    assert runtime.installed_sites([str(tmp_path), "", str(site)]) == [site]


def test_after_transformers_was_uninstalled_the_line_advises_restore(site, record):
    import shutil

    for path in list(site.iterdir()):
        if path.name.startswith("transformers"):
            shutil.rmtree(path)
    stream = io.StringIO()
    assert runtime.warn_on_drift(stream, [str(site)])
    assert "transformers was uninstalled since; run: python -m ascend_env restore" in stream.getvalue()
