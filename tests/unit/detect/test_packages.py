"""Reading installed distributions from fake site-packages built with real metadata."""

from __future__ import annotations

import shutil
import warnings
from importlib import metadata
from pathlib import Path

from ascend_env.detect import packages
from ascend_env.patching import records

DIST_INFO = Path(__file__).resolve().parents[1] / "data" / "dist-info"


def install(site: Path, fixture: str, version: str = "", package: str = "") -> Path:
    """Copy a real dist-info from the fixtures into ``site`` (optionally with another version)."""
    name, _, real_version = fixture.partition("-")
    version = version or real_version
    target = site / f"{name}-{version}.dist-info"
    shutil.copytree(DIST_INFO / fixture, target)
    meta = target / "METADATA"
    meta.write_text(meta.read_text().replace(f"Version: {real_version}\n", f"Version: {version}\n"))
    if package:
        (site / package).mkdir(parents=True, exist_ok=True)
        (site / package / "__init__.py").write_text("")
    return target


def test_find_reads_real_metadata(tmp_path):
    install(tmp_path, "torch_npu-2.1.0.post6", package="torch_npu")
    install(tmp_path, "torch-2.13.0+cpu", package="torch")
    dist = packages.find("torch_npu", [tmp_path])
    assert dist is not None and packages.version(dist) == "2.1.0.post6"
    assert packages.find("torch-npu", [tmp_path]) is not None  # normalized names
    assert packages.location(dist) == tmp_path.resolve()
    assert packages.package_dir(dist, "torch_npu") == tmp_path / "torch_npu"
    assert packages.top_level(dist) == ["torch_npu"]
    assert str(packages.requirement_on(dist, "torch")) == "torch==2.1.0"
    assert packages.requirement_on(dist, "numpy") is None
    torch = packages.find("torch", [tmp_path])
    assert packages.version(torch) == "2.13.0+cpu"
    assert packages.find("transformers", [tmp_path]) is None


def test_extras_are_not_requirements(tmp_path):
    install(tmp_path, "transformers-4.46.3")
    dist = packages.find("transformers", [tmp_path])
    # transformers lists torch only under extras
    assert packages.requirement_on(dist, "torch") is None
    assert packages.requirements(dist)


def test_first_path_wins(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    install(first, "torch_npu-2.1.0.post6", "2.1.0.post8")
    install(second, "torch_npu-2.1.0.post6")
    found = packages.find_all("torch_npu", [first, second])
    assert [packages.version(d) for d in found] == ["2.1.0.post8", "2.1.0.post6"]


def test_broken_metadata_does_not_raise(tmp_path):
    (tmp_path / "empty-1.0.dist-info").mkdir()
    (tmp_path / "binary-1.0.dist-info").mkdir()
    (tmp_path / "binary-1.0.dist-info" / "METADATA").write_bytes(b"\xff\xfe\x00Name: x\x80\n")
    (tmp_path / "noversion-1.0.dist-info").mkdir()
    (tmp_path / "noversion-1.0.dist-info" / "METADATA").write_text("Name: torch_npu\n")
    dist = packages.find("torch_npu", [tmp_path])
    assert dist is not None and packages.version(dist) is None
    assert packages.find("binary", [tmp_path]) is None


def test_missing_fields_read_without_warnings(tmp_path):
    """Python 3.12+ warns when a missing METADATA field is read by key (and will raise later):
    both readers of the metadata ask with get()."""
    (tmp_path / "noversion-1.0.dist-info").mkdir()
    (tmp_path / "noversion-1.0.dist-info" / "METADATA").write_text("Summary: no name, no version\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = next(iter(metadata.distributions(path=[str(tmp_path)])))
        assert packages.name_of(dist) == "" and packages.version(dist) is None
        assert records.find_distribution(tmp_path, "noversion") is None
    assert not [str(w.message) for w in caught]


def test_site_packages_of_this_interpreter():
    paths = packages.site_packages()
    assert paths and all(p.is_dir() for p in paths)
    assert len(paths) == len(set(paths))
    assert packages.search_path(None)  # sys.path


def _with_listed_egg_info(site: Path, listed: bool) -> None:
    """torch_npu's wheel layout: a dist-info plus a ``torch_npu.egg-info`` that its RECORD may list."""
    dist_info = install(site, "torch_npu-2.1.0.post6", package="torch_npu")
    egg = site / "torch_npu.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: torch-npu\nVersion: 2.1.0.post6\n")
    rows = ["torch_npu/__init__.py,,", f"{dist_info.name}/METADATA,,", f"{dist_info.name}/RECORD,,"]
    if listed:
        rows.append("torch_npu.egg-info/PKG-INFO,,")
    (dist_info / "RECORD").write_text("\n".join(rows) + "\n")


def test_egg_info_listed_in_record_is_not_another_install(tmp_path):
    _with_listed_egg_info(tmp_path, listed=True)
    found = packages.find_all("torch_npu", [tmp_path])
    assert [packages.metadata_dir(d).name for d in found] == ["torch_npu-2.1.0.post6.dist-info"]


def test_unlisted_egg_info_is_still_another_install(tmp_path):
    _with_listed_egg_info(tmp_path, listed=False)
    found = packages.find_all("torch_npu", [tmp_path])
    assert sorted(packages.metadata_dir(d).name for d in found) == [
        "torch_npu-2.1.0.post6.dist-info",
        "torch_npu.egg-info",
    ]


def test_listed_egg_info_elsewhere_on_the_path_is_dropped_too(tmp_path):
    """The egg-info is dropped wherever the search meets it, the listing dist-info found later."""
    _with_listed_egg_info(tmp_path, listed=True)
    found = packages.find_all("torch_npu", [tmp_path, tmp_path])
    assert {packages.metadata_dir(d).name for d in found} == {"torch_npu-2.1.0.post6.dist-info"}
