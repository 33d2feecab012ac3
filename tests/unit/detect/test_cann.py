"""CANN versions (parsing, total order) and finding the toolkit in fixture trees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_env.detect import cann
from ascend_env.detect.cann import CannVersion

INFO_830 = (
    "package_name=Ascend-cann-toolkit\nversion=8.0.RC3\ninnerversion=V100R001C19SPC001B120\n"
    "compatible_version=[V100R001C15],[V100R001C18],[V100R001C19]\narch=aarch64\nos=linux\n"
    "path=/usr/local/Ascend/ascend-toolkit/8.0.RC3/aarch64-linux\n"
)
VERSION_CFG = (
    "runtime_acc_version=[]\nruntime_running_version=[7.5.0.1.129:8.0.RC3]\n"
    "runtime_upgrade_version=[7.5.0.1.129:8.0.RC3]\n"
)


# -- versions ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, fields",
    [
        ("8.0.RC3", (8, 0, "RC", 3, (), "", 0)),
        ("8.0.T6", (8, 0, "T", 6, (), "", 0)),
        ("8.0.0", (8, 0, "", 0, (), "", 0)),
        ("8.0.RC3.alpha001", (8, 0, "RC", 3, (), "alpha", 1)),
        ("8.0.RC2.beta1", (8, 0, "RC", 2, (), "beta", 1)),
        ("9.2.0-beta.2", (9, 2, "", 0, (), "beta", 2)),
        ("8.5.0.alpha001", (8, 5, "", 0, (), "alpha", 1)),
        ("6.3.RC3.1", (6, 3, "RC", 3, (1,), "", 0)),
        ("8.0.rc3", (8, 0, "RC", 3, (), "", 0)),
        (" CANN 8.1.RC1\n", (8, 1, "RC", 1, (), "", 0)),
    ],
)
def test_parse(text, fields):
    v = CannVersion.parse(text)
    assert (v.major, v.minor, v.stage, v.number, v.extra, v.suffix, v.suffix_number) == fields


@pytest.mark.parametrize(
    "text",
    ["", "8", "8.0", "8.0.RC", "8.0.X1", "V100R001C19", "8.0.RC3 junk", "\ufffd\ufffd", "8.0.0.gamma1"],
)
def test_parse_rejects(text):
    with pytest.raises(cann.InvalidCannVersion):
        CannVersion.parse(text)
    assert cann.parse_version(text) is None


ORDERED = [
    "7.0.RC1",
    "7.0.0",
    "8.0.T6",
    "8.0.T13",
    "8.0.RC1",
    "8.0.RC2.alpha001",
    "8.0.RC2.beta1",
    "8.0.RC2",
    "8.0.RC3",
    "8.0.RC3.1",
    "8.0.0",
    "8.0.1",
    "8.1.RC1",
    "8.3.RC1",
    "8.5.0.alpha001",
    "8.5.0",
    "9.2.0-beta.2",
    "9.2.0",
    "10.0.RC1",
]


def test_total_order():
    parsed = [CannVersion.parse(t) for t in ORDERED]
    for lower, higher in zip(parsed, parsed[1:]):
        assert lower < higher and higher > lower and lower <= higher and lower != higher
    assert sorted(reversed(parsed)) == parsed


def test_release_and_line():
    v = CannVersion.parse("8.0.RC2.beta1")
    assert v.release == CannVersion.parse("8.0.RC2")
    assert v.line == (8, 0)
    assert v.is_prerelease and not CannVersion.parse("8.0.0").is_prerelease


versions = st.builds(
    CannVersion,
    major=st.integers(0, 20),
    minor=st.integers(0, 9),
    stage=st.sampled_from(["T", "RC", ""]),
    number=st.integers(0, 30),
    extra=st.lists(st.integers(0, 5), max_size=2).map(tuple),
    suffix=st.sampled_from(["alpha", "beta", ""]),
    suffix_number=st.integers(0, 20),
).map(lambda v: v if v.suffix else CannVersion(v.major, v.minor, v.stage, v.number, v.extra))


@settings(deadline=None)  # behaviour, not timing: loaded CI machines are slow
@given(versions)
def test_str_round_trips(v):
    assert CannVersion.parse(str(v)) == v


@settings(deadline=None)  # behaviour, not timing: loaded CI machines are slow
@given(versions, versions)
def test_order_is_total_and_consistent(a, b):
    assert sum([a < b, a == b, a > b]) == 1
    assert (a == b) == (a.sort_key() == b.sort_key())


# -- small readers -------------------------------------------------------------------------------


def test_version_from_cfg():
    assert cann.version_from_cfg(VERSION_CFG) == "8.0.RC3"
    assert cann.version_from_cfg("runtime_running_version=[garbage]") is None
    assert cann.version_from_cfg("") is None


# -- fixture trees ------------------------------------------------------------------------------


def write(path: Path, content, mode: str = "w") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def toolkit_le_83(prefix: Path, version: str = "8.0.RC3", arch: str = "aarch64") -> Path:
    """CANN <= 8.3: <prefix>/ascend-toolkit/<version> with a 'latest' link."""
    root = prefix / "ascend-toolkit" / version
    write(root / f"{arch}-linux" / cann.INFO_FILE, INFO_830.replace("8.0.RC3", version))
    write(root / "version.cfg", VERSION_CFG.replace("8.0.RC3", version))
    write(prefix / "ascend-toolkit" / "set_env.sh", "export ASCEND_HOME_PATH=...\n")
    os.symlink(version, prefix / "ascend-toolkit" / "latest")
    return root


def toolkit_ge_85(prefix: Path, version: str = "8.5.0", arch: str = "x86_64", link: bool = True) -> Path:
    """CANN >= 8.5: <prefix>/cann-<version> with a 'cann' link."""
    root = prefix / f"cann-{version}"
    write(root / f"{arch}-linux" / cann.INFO_FILE, f"package_name=Ascend-cann-toolkit\nversion={version}\n")
    write(root / "set_env.sh", "export ASCEND_HOME_PATH=...\n")
    if link:
        os.symlink(f"cann-{version}", prefix / "cann")
    return root


def test_layout_up_to_8_3(tmp_path):
    root = toolkit_le_83(tmp_path / "usr")
    tk = cann.find_toolkit({}, [tmp_path / "usr"], "aarch64")
    assert tk.found and tk.root == root.resolve()
    assert tk.version == "8.0.RC3" and tk.parsed == CannVersion.parse("8.0.RC3")
    assert tk.version_source == root.resolve() / "aarch64-linux" / cann.INFO_FILE
    assert tk.problems == []
    assert cann.set_env_script(tk.root) == (tmp_path / "usr" / "ascend-toolkit" / "set_env.sh").resolve()


def test_layout_from_8_5(tmp_path):
    root = toolkit_ge_85(tmp_path / "usr")
    tk = cann.find_toolkit({}, [tmp_path / "usr"], "x86_64")
    assert tk.root == root.resolve() and tk.version == "8.5.0" and tk.problems == []
    assert cann.set_env_script(tk.root) == root.resolve() / "set_env.sh"


def test_layout_from_8_5_without_link_takes_newest(tmp_path):
    toolkit_ge_85(tmp_path, "8.5.0", link=False)
    toolkit_ge_85(tmp_path, "9.2.0-beta.2", link=False)
    toolkit_ge_85(tmp_path, "8.5.1", link=False)
    tk = cann.find_toolkit({}, [tmp_path], "x86_64")
    assert tk.version == "9.2.0-beta.2"


def test_non_root_install_under_home(tmp_path):
    toolkit_le_83(tmp_path / "home" / "Ascend", "8.1.RC1")
    # the default prefixes: /usr/local/Ascend (absent in tests unless CANN is really there), then $HOME
    prefixes = [tmp_path / "none", tmp_path / "home" / "Ascend"]
    tk = cann.find_toolkit({"HOME": str(tmp_path / "home")}, prefixes, "aarch64")
    assert tk.version == "8.1.RC1"
    roots = [str(r) for r, _ in cann.candidate_roots({"HOME": "/home/u"})]
    assert roots[:2] == ["/usr/local/Ascend/ascend-toolkit/latest", "/usr/local/Ascend/cann"]
    assert "/home/u/Ascend/ascend-toolkit/latest" in roots and "/home/u/Ascend/cann" in roots


def test_environment_variables_come_first(tmp_path):
    default = toolkit_le_83(tmp_path / "usr", "8.0.RC2")
    home_path = toolkit_ge_85(tmp_path / "a", "8.5.0")
    toolkit_home = toolkit_ge_85(tmp_path / "b", "8.5.1")
    env = {"ASCEND_HOME_PATH": str(home_path), "ASCEND_TOOLKIT_HOME": str(toolkit_home)}
    tk = cann.find_toolkit(env, [tmp_path / "usr"], "x86_64")
    assert tk.version == "8.5.0" and tk.origin == "$ASCEND_HOME_PATH"
    del env["ASCEND_HOME_PATH"]
    assert cann.find_toolkit(env, [tmp_path / "usr"], "x86_64").version == "8.5.1"
    assert cann.find_toolkit({}, [tmp_path / "usr"], "aarch64").root == default.resolve()


def test_environment_variable_pointing_nowhere_is_reported(tmp_path):
    toolkit_le_83(tmp_path / "usr")
    tk = cann.find_toolkit({"ASCEND_HOME_PATH": str(tmp_path / "gone")}, [tmp_path / "usr"], "aarch64")
    assert tk.version == "8.0.RC3"
    assert any("$ASCEND_HOME_PATH" in p and "not a directory" in p for p in tk.problems)


def test_missing_cann(tmp_path):
    tk = cann.find_toolkit({}, [tmp_path], "aarch64")
    assert not tk.found and tk.version is None
    assert str(tmp_path / "ascend-toolkit" / "latest") in tk.searched
    assert tk.to_dict()["found"] is False


def test_other_arch_directory_is_used(tmp_path):
    toolkit_le_83(tmp_path, arch="x86_64")
    assert cann.find_toolkit({}, [tmp_path], "aarch64").version == "8.0.RC3"


def test_info_without_version_falls_back_to_version_cfg(tmp_path):
    root = toolkit_le_83(tmp_path)
    write(root / "aarch64-linux" / cann.INFO_FILE, "package_name=Ascend-cann-toolkit\n")
    tk = cann.find_toolkit({}, [tmp_path], "aarch64")
    assert tk.version == "8.0.RC3" and tk.version_source == root.resolve() / "version.cfg"
    assert any("has no 'version=' line" in p for p in tk.problems)


@pytest.mark.parametrize(
    "cfg, message",
    [
        ("runtime_running_version=[7.5.0.1.129:]\n", "runtime_running_version"),
        ("runtime_running_version=[7.5.0.1.129:8.0.XX]\n", "is not a CANN version"),
        ("", "is empty"),
        (b"\x00\xff\xfe\x89PNG\r\n\x1a\n\x00\x00", "runtime_running_version"),
    ],
)
def test_broken_version_cfg(tmp_path, cfg, message):
    root = tmp_path / "ascend-toolkit" / "8.0.RC3"
    write(root / "version.cfg", cfg)
    os.symlink("8.0.RC3", tmp_path / "ascend-toolkit" / "latest")
    tk = cann.find_toolkit({}, [tmp_path], "aarch64")
    assert tk.found and tk.version is None
    assert any(message in p for p in tk.problems), tk.problems
    assert any("the CANN version at" in p for p in tk.problems)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "is empty"),
        (b"version=\xff\xfe\x00garbage\x1b[31m\n", "is not a CANN version"),
        (bytes(range(256)) * 4, "has no 'version=' line"),
        (b"version=" + b"9" * 5000 + b"\n", "is not a CANN version"),
    ],
)
def test_garbage_and_empty_info_files(tmp_path, content, message):
    root = tmp_path / "cann-8.5.0"
    write(root / "aarch64-linux" / cann.INFO_FILE, content)
    tk = cann.find_toolkit({}, [tmp_path], "aarch64")
    assert tk.found and tk.version is None
    assert any(message in p for p in tk.problems), tk.problems
    # messages stay short and printable
    assert all(len(p) < 400 and p.isprintable() for p in tk.problems)
