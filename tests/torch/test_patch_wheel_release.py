"""patch-wheel on the real transformers release of this environment, rebuilt as a wheel from its files."""

from __future__ import annotations

import csv
import hashlib
import importlib.metadata
import io
import zipfile
from pathlib import Path

from ascend_env.patching.manifest import load_manifest
from ascend_env.patching.records import record_hash
from ascend_env.patching.wheels import patch_wheel

#: Files pip adds to an installed .dist-info that the released wheel does not have.
PIP_ADDED = ("INSTALLER", "REQUESTED", "direct_url.json")


def rebuild_wheel(directory: Path) -> Path:
    """The installed transformers as its wheel: every file its RECORD lists, except bytecode,
    scripts and what pip added, with a RECORD of those files' installed rows (the release's)."""
    dist = importlib.metadata.distribution("transformers")
    version = dist.version
    path = directory / f"transformers-{version}-py3-none-any.whl"
    info = f"transformers-{version}.dist-info"
    rows = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in dist.files:
            name = str(file)
            if name.startswith("..") or "__pycache__" in name or name in (f"{info}/{n}" for n in PIP_ADDED):
                continue
            if name == f"{info}/RECORD":
                continue
            archive.writestr(name, Path(dist.locate_file(file)).read_bytes())
            rows.append([name, f"{file.hash.mode}={file.hash.value}", str(file.size)])
        rows.append([f"{info}/RECORD", "", ""])
        record = io.StringIO()
        csv.writer(record, lineterminator="\n").writerows(rows)
        archive.writestr(f"{info}/RECORD", record.getvalue())
    return path


def test_patch_wheel_on_the_installed_release(tmp_path):
    manifest = load_manifest()
    version = importlib.metadata.version("transformers")
    release = manifest.releases[version]
    original = rebuild_wheel(tmp_path)
    result = patch_wheel(original, tmp_path / "out")
    assert result.version == f"{version}+ascend.1"
    with zipfile.ZipFile(original) as old, zipfile.ZipFile(result.path) as new:
        before = {
            n: old.read(n) for n in old.namelist() if not n.startswith(f"transformers-{version}.dist-info/")
        }
        after = {n: new.read(n) for n in new.namelist()}
    for target, change in release.changes.items():
        assert hashlib.sha256(before[target]).hexdigest() == change.before
        assert hashlib.sha256(after[target]).hexdigest() == change.after
    unchanged = [name for name in before if name not in release.changes]
    assert len(unchanged) > 1000
    assert all(after[name] == before[name] for name in unchanged)
    info = f"transformers-{version}+ascend.1.dist-info"
    rows = list(csv.reader(io.StringIO(after[f"{info}/RECORD"].decode())))
    assert {row[0] for row in rows} == set(after)
    assert all(row[1] == record_hash(after[row[0]]) for row in rows if row[0] != f"{info}/RECORD")


def test_a_backdoored_release_is_refused(tmp_path):
    """One edited member of the real release (its RECORD row left as released): refused, no output."""
    import pytest

    from ascend_env.exceptions import EnvironmentProblem

    original = rebuild_wheel(tmp_path)
    with zipfile.ZipFile(original) as archive:
        contents = [(info, archive.read(info)) for info in archive.infolist()]
    with zipfile.ZipFile(original, "w", zipfile.ZIP_DEFLATED) as archive:
        for info, data in contents:
            if info.filename == "transformers/__init__.py":
                data += b"\nimport os\nos.system('true')\n"
            archive.writestr(info, data)
    with pytest.raises(EnvironmentProblem, match="transformers/__init__.py differs from its RECORD row"):
        patch_wheel(original, tmp_path / "out")
    assert not (tmp_path / "out").exists()
