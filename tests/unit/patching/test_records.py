"""RECORD hashing and rewriting, manifest validation and lookup, and the lock."""

from __future__ import annotations

import base64
import copy
import errno
import hashlib
import json
import os
import threading
import time

import pytest
from fake_site import make_patches, make_site

from ascend_env.exceptions import EnvironmentProblem
from ascend_env.patching.locking import locked
from ascend_env.patching.manifest import NothingToDo, Release, UnknownRelease, load_manifest, parse_manifest
from ascend_env.patching.records import find_distribution, parse_record, record_hash, rewrite_record


def test_record_hash_is_urlsafe_base64_without_padding():
    data = b"\xfb\xff" * 100
    expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")
    assert record_hash(data) == "sha256=" + expected
    assert "=" not in record_hash(data)[len("sha256=") :]
    assert record_hash(b"") == "sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"


def test_rewrite_record_changes_only_named_rows():
    record = (
        b"a/x.py,sha256=old,3\r\n"
        b'"a/with,comma.py",sha256=old,3\r\n'
        b"a/y.py,sha256=keep,4\r\n"
        b"pkg-1.dist-info/RECORD,,\r\n"
    )
    new = rewrite_record(record, {"a/x.py": b"new bytes", "a/with,comma.py": b"z"})
    lines = new.decode().splitlines(keepends=True)
    assert lines[0] == f"a/x.py,{record_hash(b'new bytes')},9\r\n"
    assert lines[1] == f'"a/with,comma.py",{record_hash(b"z")},1\r\n'
    assert lines[2:] == ["a/y.py,sha256=keep,4\r\n", "pkg-1.dist-info/RECORD,,\r\n"]
    # Undo gives the same bytes back.
    rows = {e.path: e for e in parse_record(new.decode())}
    assert rows["a/x.py"].matches(b"new bytes") and not rows["a/x.py"].matches(b"other")


def test_rewrite_record_refuses_unlisted_path():
    with pytest.raises(EnvironmentProblem, match="no row"):
        rewrite_record(b"a.py,sha256=x,1\n", {"b.py": b""})


def test_find_distribution_reads_version_and_record(tmp_path):
    site = make_site(tmp_path)
    dist = find_distribution(site, "Transformers")
    assert dist is not None and dist.version == "4.46.3"
    assert dist.record_path == "transformers-4.46.3.dist-info/RECORD"
    assert "transformers/pytorch_utils.py" in dist.record
    assert find_distribution(site, "torch_npu") is None


def test_two_dist_infos_of_one_name_are_refused(tmp_path):
    site = make_site(tmp_path)
    (site / "transformers-4.40.0.dist-info").mkdir()
    (site / "transformers-4.40.0.dist-info/METADATA").write_text("Name: transformers\nVersion: 4.40.0\n")
    with pytest.raises(EnvironmentProblem, match="2 transformers distributions"):
        find_distribution(site, "transformers")


def test_a_dist_info_without_record_is_refused(tmp_path):
    site = make_site(tmp_path)
    (site / "transformers-4.46.3.dist-info/RECORD").unlink()
    with pytest.raises(EnvironmentProblem) as info:
        find_distribution(site, "transformers")
    assert info.value.problem.startswith("transformers-4.46.3.dist-info has no RECORD file")
    # pip cannot uninstall it, so --force-reinstall fails; writing over it works (see test_lost_state)
    assert info.value.fix == (
        "put its files back without uninstalling: "
        "pip install --ignore-installed --no-deps transformers==4.46.3."
    )


def test_a_record_that_is_not_text_is_refused(tmp_path):
    site = make_site(tmp_path)
    (site / "transformers-4.46.3.dist-info/RECORD").write_bytes(b"\xff\xfe\x00")
    problem = r"^transformers-4.46.3.dist-info/RECORD cannot be read as text \("
    with pytest.raises(EnvironmentProblem, match=problem):
        find_distribution(site, "transformers")


def test_dist_infos_without_name_or_version_are_skipped(tmp_path):
    site = make_site(tmp_path)
    for name, metadata in (("a-1.dist-info", "Name: transformers\n"), ("b-1.dist-info", "Version: 1\n")):
        (site / name).mkdir()
        (site / name / "METADATA").write_text(metadata)
    (site / "c-1.dist-info").mkdir()  # no METADATA at all
    dist = find_distribution(site, "transformers")
    assert dist is not None and dist.dist_info == "transformers-4.46.3.dist-info"


@pytest.fixture
def manifest_data(tmp_path):
    return json.loads((make_patches(tmp_path, versions=("4.46.3", "4.41.2")) / "manifest.json").read_text())


def test_manifest_lookup(manifest_data):
    manifest = parse_manifest(manifest_data)
    assert isinstance(manifest.lookup("4.46.3"), Release)
    assert isinstance(manifest.lookup("4.41.2"), Release)
    assert manifest.lookup("4.41.2+ascend.1") == manifest.lookup("4.41.2")  # a patch-wheel build
    for version in ("4.39.3", "4.40.0rc1", "5.1.0", "6.0"):
        assert isinstance(manifest.lookup(version), NothingToDo), version
    for version in ("4.45.0", "4.46.3.dev0", "4.46.3+local", "5.1.0rc1", "not a version"):
        assert isinstance(manifest.lookup(version), UnknownRelease), version


def _break(data, path, value):
    data = copy.deepcopy(data)
    node = data
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


@pytest.mark.parametrize(
    "path,value",
    [
        (("schema",), 2),
        (("distribution",), KeyError),
        (("nothing_to_do", "below"), "6.0"),
        (("nothing_to_do", "from"), "soon"),
        (("patches", "isin-mps-friendly-v1", "path"), "../../etc/passwd.patch"),
        (("patches", "isin-mps-friendly-v1", "target"), "/etc/passwd"),
        (("patches", "isin-mps-friendly-v1", "target"), "transformers/../../x.py"),
        (("patches", "isin-mps-friendly-v1", "verified_on"), "4.46.3"),
        (("releases", "4.46.3", "transformers/pytorch_utils.py", "before"), "abc"),
        (("releases", "4.46.3", "transformers/pytorch_utils.py", "patch"), "nope"),
        (("releases", "4.46.3", "transformers/pytorch_utils.py", "patch"), "stopping-criteria-eos-v1"),
        (("releases", "4.30.0"), {}),
        (("releases", "4.41.2"), []),
    ],
)
def test_bad_manifests_are_refused(manifest_data, path, value):
    with pytest.raises(EnvironmentProblem):
        parse_manifest(_break(manifest_data, path, value))


def test_load_manifest_reports_missing_and_broken_files(tmp_path):
    with pytest.raises(EnvironmentProblem, match="no patch manifest"):
        load_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(EnvironmentProblem, match="not JSON"):
        load_manifest(tmp_path)


def test_lock_excludes_a_second_holder_and_times_out(tmp_path):
    directory = tmp_path / ".ascend-env"
    order = []

    def second():
        with locked(directory):
            order.append("second")

    with locked(directory):
        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(0.3)
        order.append("first")
        with pytest.raises(EnvironmentProblem, match="another ascend-env run"):
            with locked(directory, timeout=0.2):
                pass
    thread.join(10)
    assert order == ["first", "second"]


def test_lock_survives_its_directory_being_removed(tmp_path):
    import shutil

    directory = tmp_path / ".ascend-env"
    acquired = []

    def waiter():
        with locked(directory, timeout=10):
            acquired.append((directory / "lock").exists())

    with locked(directory):
        thread = threading.Thread(target=waiter)
        thread.start()
        time.sleep(0.2)
        shutil.rmtree(directory)
    thread.join(10)
    assert acquired == [True]


def test_lock_retries_when_its_directory_vanishes_during_mkdir(tmp_path, monkeypatch):
    # mkdir(exist_ok=True) raises FileExistsError when the directory existed at mkdir but was
    # removed (by a racing restore) before its is_dir() check: the lock must try again.
    from pathlib import Path

    directory = tmp_path / ".ascend-env"
    real_mkdir = Path.mkdir
    calls = []

    def racing_mkdir(self, *args, **kwargs):
        if self == directory and not calls:
            calls.append(1)
            raise FileExistsError(17, "File exists", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", racing_mkdir)
    with locked(directory, timeout=5):
        assert (directory / "lock").exists()
    assert calls == [1]


def test_lock_refuses_a_file_in_place_of_its_directory(tmp_path):
    directory = tmp_path / ".ascend-env"
    directory.write_text("not a directory")
    with pytest.raises(EnvironmentProblem, match="is a file") as info:
        with locked(directory, timeout=1):
            pass
    assert "mv " in info.value.fix
    assert directory.read_text() == "not a directory"


def test_shipped_manifest_and_patches_are_valid():
    from ascend_env.patching.diffs import parse_patch
    from ascend_env.patching.manifest import patches_dir, read_patch_text

    directory = patches_dir()
    if not (directory / "manifest.json").is_file():
        pytest.skip("no patches/manifest.json in this checkout yet")
    manifest = load_manifest(directory)
    assert manifest.distribution == "transformers"
    for entry in manifest.patches.values():
        patch = parse_patch(read_patch_text(directory, entry), entry.path)
        assert (patch.id, patch.target) == (entry.id, entry.target)


def test_lock_refuses_a_symbolic_link_in_place_of_its_directory(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    directory = tmp_path / ".ascend-env"
    directory.symlink_to(elsewhere)
    with pytest.raises(EnvironmentProblem) as info:
        with locked(directory, timeout=1):
            pass
    assert info.value.problem == (
        f"{directory} is a symbolic link (to {elsewhere}): ascend-env keeps its state only in a real "
        "directory inside site-packages, so nothing was changed."
    )
    assert info.value.fix == f"remove the link (rm {directory}) and run the command again."
    assert list(elsewhere.iterdir()) == []


def test_lock_timeout_names_the_lock_file_and_the_wait(tmp_path):
    directory = tmp_path / ".ascend-env"
    with locked(directory):
        with pytest.raises(EnvironmentProblem) as info:
            with locked(directory, timeout=0.1):
                pass
    assert info.value.problem == f"another ascend-env run has held {directory / 'lock'} for over 0 s."
    assert info.value.fix == (
        "wait for it to finish; if no ascend-env process is running, run the command again."
    )
    assert info.value.__suppress_context__


@pytest.mark.parametrize(
    ("code", "problem"),
    [
        (
            errno.EROFS,
            "cannot write in {where}: its file system is mounted read-only, so nothing was changed.",
        ),
        (errno.EACCES, "cannot write in {where} ({reason}): site-packages is read-only for this user."),
        (
            errno.ENOSPC,
            "cannot create {directory} ({reason}): its file system has no free space or inodes left, "
            "or the user's quota is used up, so nothing was changed.",
        ),
        (errno.EIO, "cannot create {directory} or its lock file ({reason}), so nothing was changed."),
    ],
)
def test_lock_file_that_cannot_be_created_is_explained(tmp_path, monkeypatch, code, problem):
    directory = tmp_path / ".ascend-env"
    real_open = os.open

    def failing_open(path, *args, **kwargs):
        if str(path) == str(directory / "lock"):
            raise OSError(code, os.strerror(code))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", failing_open)
    with pytest.raises(EnvironmentProblem) as info:
        with locked(directory, timeout=1):
            pass
    assert info.value.problem == problem.format(where=tmp_path, directory=directory, reason=os.strerror(code))
    assert info.value.__suppress_context__
