"""The shipped transformers patches and their manifest: well-formed, consistent, and correct on real text."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Dict, List

import pytest
from packaging.version import Version

from ascend_env.patching.diffs import HEADER_KEYS, FilePatch, apply_patch, parse_patch
from ascend_env.patching.manifest import load_manifest

ROOT = Path(__file__).resolve().parents[3]
PATCHES = ROOT / "patches"
EXCERPTS = Path(__file__).resolve().parents[1] / "data" / "patch_excerpts"
PATCH_FILES = sorted((PATCHES / "transformers").glob("*.patch"))
RAW = json.loads((PATCHES / "manifest.json").read_text(encoding="utf-8"))
INDEX = json.loads((EXCERPTS / "index.json").read_text(encoding="utf-8"))
GENERATION_FILES = {
    "transformers/pytorch_utils.py",
    "transformers/generation/stopping_criteria.py",
    "transformers/generation/logits_process.py",
    "transformers/generation/utils.py",
    "transformers/generation/candidate_generator.py",
}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load(path: Path) -> FilePatch:
    return parse_patch(path.read_text(encoding="utf-8"), f"transformers/{path.name}")


def added_code(patch: FilePatch) -> List[str]:
    return [line.text.decode("utf-8") for hunk in patch.hunks for line in hunk.lines if line.kind == "+"]


def comparison_lines(patch: FilePatch) -> List[str]:
    """The inserted eq/any comparison, from its Python-number case to its return, dedented."""
    lines = added_code(patch)
    start = next(i for i, line in enumerate(lines) if "isinstance(test_elements, torch.Tensor)" in line)
    end = next(i for i, line in enumerate(lines) if "return found.reshape(elements.shape)" in line)
    indent = len(lines[start]) - len(lines[start].lstrip())
    return [line[indent:] for line in lines[start : end + 1]]


def test_there_are_patches():
    assert len(PATCH_FILES) >= 2


@pytest.mark.parametrize("path", PATCH_FILES, ids=lambda p: p.stem)
def test_patch_parses_with_a_complete_header(path: Path):
    patch = load(path)
    assert patch.id == path.stem
    assert all(patch.header[key].strip() for key in HEADER_KEYS)
    assert patch.source == patch.target
    assert patch.target in GENERATION_FILES


@pytest.mark.parametrize("path", PATCH_FILES, ids=lambda p: p.stem)
def test_patched_code_never_imports_ascend_env(path: Path):
    code = [line.split("#", 1)[0] for line in added_code(load(path))]
    assert not any("ascend_env" in line or "import" in line for line in code)


@pytest.mark.parametrize("path", PATCH_FILES, ids=lambda p: p.stem)
def test_patch_keeps_torch_isin_only_behind_the_cpu_cuda_check(path: Path):
    patch = load(path)
    code = added_code(patch)
    device_checks = [line.strip() for line in code if "elements.device.type" in line]
    if patch.target == "transformers/pytorch_utils.py":
        # An early branch for every other device, which ends in a return; torch.isin stays after it.
        assert device_checks == ['if elements.device.type not in ("cpu", "cuda"):']
        assert code[-1] == "" and code[-2].strip() == "return found.reshape(elements.shape)"
        assert not any("torch.isin(" in line for line in code)
    else:
        # A module-level _isin() whose one torch.isin call sits right under the CPU/CUDA check,
        # and every call site that called torch.isin now calls _isin instead.
        assert device_checks == ['if elements.device.type in ("cpu", "cuda"):']
        at = next(i for i, line in enumerate(code) if "elements.device.type" in line)
        assert code[at + 1].strip() == "return torch.isin(elements, test_elements)"
        assert sum("torch.isin(" in line for line in code) == 1
        removed = [line.text.decode() for h in patch.hunks for line in h.lines if line.kind == "-"]
        assert removed and all("torch.isin(" in line for line in removed)
        calls = [line for line in code if re.search(r"(?<![\w.])_isin\(", line) and "def _isin" not in line]
        assert [line.replace("_isin(", "torch.isin(") for line in calls] == removed


def test_every_patch_inserts_the_same_comparison():
    comparisons = {path.stem: tuple(comparison_lines(load(path))) for path in PATCH_FILES}
    assert len(set(comparisons.values())) == 1, comparisons.keys()
    (lines,) = set(comparisons.values())
    code = "\n".join(line.split("#", 1)[0] for line in lines)
    ops = set(re.findall(r"torch\.(\w+)|\.(\w+)\(", code))
    names = {name for pair in ops for name in pair if name}
    assert "isin" not in names
    assert {"promote_types", "result_type", "zeros", "any", "reshape", "to"} <= names


# --- the manifest -----------------------------------------------------------------------------


def test_manifest_loads_with_the_engine_reader():
    manifest = load_manifest(PATCHES)
    assert manifest.distribution == "transformers"
    assert str(manifest.below) == "4.40.0" and str(manifest.from_) == "5.1.0"
    assert RAW["generated_by"] == "tools/check_patches.py"


def test_manifest_lists_exactly_the_patch_files():
    assert sorted(RAW["patches"]) == [path.stem for path in PATCH_FILES]
    for patch_id, entry in RAW["patches"].items():
        path = PATCHES / entry["path"]
        assert path.is_file() and path.stem == patch_id
        assert load(path).target == entry["target"]


def test_verified_on_is_exactly_the_releases_that_use_each_patch():
    uses: Dict[str, List[str]] = {patch_id: [] for patch_id in RAW["patches"]}
    for version, files in RAW["releases"].items():
        for target, change in files.items():
            assert RAW["patches"][change["patch"]]["target"] == target
            uses[change["patch"]].append(version)
    for patch_id, entry in RAW["patches"].items():
        assert entry["verified_on"], f"{patch_id} is verified on no release"
        assert entry["verified_on"] == sorted(uses[patch_id], key=Version)


def test_releases_span_the_range_and_each_needs_at_most_one_patch_per_file():
    versions = [Version(v) for v in RAW["releases"]]
    assert versions == sorted(versions)
    assert len(set(versions)) == len(versions)
    assert all(Version("4.40.0") <= v < Version("5.1.0") for v in versions)
    assert {"4.40.0", "4.44.2", "4.45.0", "4.46.3", "4.57.6", "5.0.0"} <= set(RAW["releases"])
    minors = {(v.major, v.minor) for v in versions if not v.is_prerelease}
    assert {(4, minor) for minor in range(40, 58)} | {(5, 0)} <= minors
    for files in RAW["releases"].values():
        assert files and set(files) <= GENERATION_FILES
        for change in files.values():
            assert all(re.fullmatch(r"[0-9a-f]{64}", change[key]) for key in ("before", "after"))
            assert change["before"] != change["after"]


def test_releases_from_4_45_need_only_pytorch_utils():
    for version, files in RAW["releases"].items():
        if Version(version) >= Version("4.45.0"):
            assert list(files) == ["transformers/pytorch_utils.py"], version
        else:
            assert "transformers/pytorch_utils.py" not in files, version
            assert "transformers/generation/stopping_criteria.py" in files, version


def test_one_file_text_has_one_patched_text():
    after: Dict[str, str] = {}
    for files in RAW["releases"].values():
        for change in files.values():
            assert after.setdefault(change["before"], change["after"]) == change["after"]


# --- real excerpts ------------------------------------------------------------------------------


def test_every_patch_has_one_excerpt():
    assert sorted(INDEX) == sorted(RAW["patches"])
    for patch_id, entry in INDEX.items():
        assert entry["release"] in RAW["patches"][patch_id]["verified_on"]


@pytest.mark.parametrize("path", PATCH_FILES, ids=lambda p: p.stem)
def test_patch_turns_a_real_excerpt_into_the_recorded_text(path: Path):
    patch = load(path)
    entry = INDEX[patch.id]
    before = (EXCERPTS / f"{patch.id}.before").read_bytes()
    assert sha256(before) == entry["before"]
    after = apply_patch(patch, before)
    assert sha256(after) == entry["after"]
    assert apply_patch(patch, after, reverse=True) == before
    # Every torch.isin line of the excerpt was either replaced or sits behind the new device check.
    old_calls = [line for line in before.decode().splitlines() if "torch.isin(" in line.split("#")[0]]
    new_calls = [line for line in after.decode().splitlines() if "torch.isin(" in line.split("#")[0]]
    assert old_calls
    if patch.target == "transformers/pytorch_utils.py":
        assert new_calls == old_calls
        text = after.decode()
        assert text.index('if elements.device.type not in ("cpu", "cuda"):') < text.index(old_calls[0])
    else:
        assert [line.strip() for line in new_calls] == ["return torch.isin(elements, test_elements)"]
