"""Which real torch_npu ``--cann emulated`` runs, and whether it fits: refused before anything runs
(exit 2) where it cannot load here; a wheel unpacked once into the protected cache."""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

import pytest

from ascend_env.checks import tables, torch_npu_wheel
from ascend_env.exceptions import EnvironmentProblem, UsageError

HERE = f"cp{sys.version_info[0]}{sys.version_info[1]}"


def wheel(directory: Path, release: str = "2.1.0.post6", tag: str = HERE) -> Path:
    path = directory / f"torch_npu-{release}-{tag}-{tag}-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("torch_npu/__init__.py", "__version__ = 'x'\n")
        info = zipfile.ZipInfo("torch_npu/lib/libtorch_npu.so")
        info.external_attr = 0o755 << 16
        archive.writestr(info, b"\x7fELF")
        archive.writestr(f"torch_npu-{release}.dist-info/METADATA", f"Name: torch_npu\nVersion: {release}\n")
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("ASCEND_ENV_CACHE_DIR", str(root))
    os.chmod(tmp_path, 0o700)
    return root


def test_a_wheel_name_gives_its_release_and_python_tags():
    name = "torch_npu-2.1.0.post6-cp38-cp38-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    assert torch_npu_wheel.parse_wheel_name(name) == ("2.1.0.post6", ["cp38"])
    with pytest.raises(UsageError, match="not the name of a torch_npu wheel"):
        torch_npu_wheel.parse_wheel_name("torch-2.1.0-cp38-cp38-linux_x86_64.whl")


@pytest.mark.parametrize(
    ("release", "torch"),
    [("2.1.0.post6", "2.1.0"), ("2.1.0.post3", "2.1.0"), ("2.2.0", "2.2.0"), ("2.3.1", "2.3.1")],
)
def test_each_release_needs_the_torch_it_is_built_for(release, torch):
    assert torch_npu_wheel.needed_torch(release) == torch


def test_another_python_or_another_torch_is_refused_with_the_fix(monkeypatch):
    monkeypatch.setattr(torch_npu_wheel, "_installed", lambda name: {"torch": "2.2.0+cpu"}.get(name))
    with pytest.raises(UsageError) as other_python:
        torch_npu_wheel.check_fit("2.2.0", ["cp27"], "the wheel w")
    assert "is built for cp27, and this is Python" in other_python.value.problem
    assert f"torch_npu 2.2.0 wheel for {HERE}" in other_python.value.fix
    torch_npu_wheel.check_fit("2.2.0", [HERE], "the wheel w")  # a local build label is the same torch
    with pytest.raises(UsageError) as other_torch:
        torch_npu_wheel.check_fit("2.1.0.post6", [HERE], "the wheel w")
    assert other_torch.value.problem.startswith(
        "the wheel w is built for torch 2.1.0, and this Python has torch 2.2.0+cpu"
    )
    assert other_torch.value.exit_code == 2
    monkeypatch.setattr(torch_npu_wheel, "_installed", lambda name: None)
    with pytest.raises(EnvironmentProblem, match="has no torch"):
        torch_npu_wheel.check_fit("2.1.0.post6", None, "torch_npu 2.1.0.post6")


def test_a_given_wheel_is_unpacked_once_into_the_private_cache(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(torch_npu_wheel, "_installed", lambda name: {"torch": "2.1.0"}.get(name))
    given = wheel(tmp_path)
    choice = torch_npu_wheel.choose(None, given)
    assert (choice.release, choice.source, choice.wheel) == ("2.1.0.post6", "wheel", given)
    assert choice.path is not None and choice.path.parent == cache / "torch_npu-wheels"
    assert (choice.path / "torch_npu" / "__init__.py").is_file()
    assert os.stat(choice.path / "torch_npu" / "lib" / "libtorch_npu.so").st_mode & 0o777 == 0o755
    assert os.stat(cache / "torch_npu-wheels").st_mode & 0o777 == 0o700
    assert torch_npu_wheel.choose("2.1.0.post6", given).path == choice.path  # once
    with pytest.raises(UsageError, match="disagree"):
        torch_npu_wheel.choose("2.2.0", given)


def test_a_wheel_that_escapes_its_directory_is_refused(tmp_path, cache):
    bad = tmp_path / f"torch_npu-2.1.0.post6-{HERE}-{HERE}-linux_x86_64.whl"
    with zipfile.ZipFile(bad, "w") as archive:
        archive.writestr("../../evil.py", "")
    with pytest.raises(EnvironmentProblem, match="cannot be unpacked"):
        torch_npu_wheel.unpack(bad)
    assert not (tmp_path / "evil.py").exists()


def test_no_torch_npu_named_or_installed_is_a_usage_error(monkeypatch):
    monkeypatch.setattr(tables, "installed_torch_npu", lambda: None)
    with pytest.raises(UsageError, match="none is named or installed"):
        torch_npu_wheel.choose(None, None)


def test_without_an_index_pip_cannot_fetch_and_the_fix_is_the_wheel_option(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(torch_npu_wheel, "_installed", lambda name: {"torch": "2.1.0"}.get(name))
    monkeypatch.setattr(tables, "installed_torch_npu", lambda: None)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))  # an empty directory: nothing to find
    with pytest.raises(EnvironmentProblem) as no_index:
        torch_npu_wheel.choose("2.1.0.post6", None)
    assert no_index.value.problem.startswith("pip could not fetch torch_npu 2.1.0.post6's wheel")
    assert "--torch-npu-wheel PATH" in no_index.value.fix
    # Once a wheel for this Python is in the cache's downloads, it is used without pip.
    downloads = cache / "torch_npu-wheels" / "downloads"
    wheel(downloads)
    assert torch_npu_wheel.choose("2.1.0.post6", None).source == "fetched"
