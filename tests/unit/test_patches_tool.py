"""tools/check_patches.py: finding torch.isin calls, choosing the patch, and the release range."""

from __future__ import annotations

import difflib
import importlib.util
import sys
from pathlib import Path

import pytest

from ascend_env.patching.diffs import apply_patch, parse_patch

TOOL = Path(__file__).resolve().parents[2] / "tools" / "check_patches.py"
spec = importlib.util.spec_from_file_location("check_patches", TOOL)
check_patches = importlib.util.module_from_spec(spec)
sys.modules["check_patches"] = check_patches
spec.loader.exec_module(check_patches)

TARGET = "transformers/generation/stopping_criteria.py"


def calls(source: str):
    return check_patches.unguarded_isin_calls(source.encode())


def test_a_plain_call_is_unguarded():
    assert calls("import torch\n\ndef f(a, b):\n    x = 1\n    return torch.isin(a, b)\n") == [5]


def test_calls_behind_the_cpu_cuda_check_are_guarded():
    source = (
        "def f(a, b):\n"
        "    if a.device.type in ('cpu', 'cuda'):\n"
        "        return torch.isin(a, b)\n"
        "    if a.device.type not in ['cuda', 'cpu']:\n"
        "        return torch.isin(a, b)\n"  # 5: the other devices
        "    else:\n"
        "        y = torch.isin(a, b)\n"
        "    return torch.isin(a, b)\n"  # other devices returned above
        "def g(a, b):\n"
        "    if a.device.type not in ('cpu', 'cuda'):\n"
        "        a = a.cpu()\n"
        "    return torch.isin(a, b)\n"  # 12: other devices get here too
    )
    assert calls(source) == [5, 12]


def test_an_early_return_for_other_devices_guards_the_rest_of_the_block():
    source = (
        "def f(a, b):\n"
        "    if a.device.type not in ('cpu', 'cuda'):\n"
        "        return (a == b).any()\n"
        "    return torch.isin(a, b)\n"
        "def g(a, b):\n"
        "    return torch.isin(a, b)\n"
    )
    assert calls(source) == [6]


def test_other_device_sets_are_no_guard():
    source = (
        "def f(a, b):\n    if a.device.type in ('cpu', 'cuda', 'mps'):\n        return torch.isin(a, b)\n"
    )
    assert calls(source) == [3]
    assert calls("def f(a, b):\n    if a.device.type == 'cpu':\n        return torch.isin(a, b)\n") == [3]


def test_the_range_keeps_yanked_and_pre_releases_below_5_1():
    versions = ["4.39.3", "4.40.0", "4.46.0", "5.0.0rc0", "5.0.0", "5.1.0", "nonsense", "4.100.0"]
    assert check_patches.in_range(versions) == ["4.40.0", "4.46.0", "4.100.0", "5.0.0rc0", "5.0.0"]


BEFORE = (
    "".join(f"x{i} = {i}\n" for i in range(200))
    + "def f(a, b):\n    return torch.isin(a, b)\n"
    + "t = 0\n" * 5
)
FIXED = BEFORE.replace("    return torch.isin(a, b)\n", "    return _isin(a, b)\n")
PARTIAL = BEFORE.replace("x3 = 3\n", "x3 = 33\n")  # changes nothing about isin


def patch(patch_id: str, before: str, after: str, context: int = 3):
    header = f"# Patch: {patch_id}\n" + "".join(
        f"# {k}: x\n" for k in ("Changes", "Why", "Upstream", "Remove-when")
    )
    diff = "".join(
        difflib.unified_diff(
            before.splitlines(True), after.splitlines(True), f"a/{TARGET}", f"b/{TARGET}", n=context
        )
    )
    return parse_patch(header + diff, f"transformers/{patch_id}.patch")


def test_the_patch_that_leaves_no_isin_is_chosen():
    patches = {"x-v1": patch("x-v1", BEFORE, PARTIAL), "x-v2": patch("x-v2", BEFORE, FIXED)}
    result = check_patches.check_release("9.9", {TARGET: BEFORE.encode()}, patches)
    assert result.problems == []
    (change,) = result.changes.values()
    assert change.patch == "x-v2"
    assert change.before == check_patches.sha256(BEFORE.encode())
    assert change.after == check_patches.sha256(FIXED.encode())


def test_problems_are_reported():
    only_partial = {"x-v1": patch("x-v1", BEFORE, PARTIAL)}
    result = check_patches.check_release("9.9", {TARGET: BEFORE.encode()}, only_partial)
    assert not result.changes and "leaves torch.isin" in result.problems[0]
    broken = {"x-v1": patch("x-v1", BEFORE, FIXED.replace("_isin(a, b)", "_isin(a, b"))}
    result = check_patches.check_release("9.9", {TARGET: BEFORE.encode()}, broken)
    assert "syntax error" in result.problems[0]
    other = BEFORE.replace("x199 = 199\n", "x199 = 0\n")
    result = check_patches.check_release(
        "9.9", {TARGET: other.encode()}, {"x-v2": patch("x-v2", BEFORE, FIXED)}
    )
    assert "no patch fits" in result.problems[0]
    result = check_patches.check_release("9.9", {TARGET: b"x = 1\n"}, {})
    assert "nothing_to_do" in result.problems[0]


def test_two_fitting_patches_that_disagree_are_refused():
    other_fix = BEFORE.replace("    return torch.isin(a, b)\n", "    return _other(a, b)\n")
    patches = {"x-v1": patch("x-v1", BEFORE, FIXED), "x-v2": patch("x-v2", BEFORE, other_fix)}
    result = check_patches.check_release("9.9", {TARGET: BEFORE.encode()}, patches)
    assert not result.changes and "disagree" in result.problems[0]


@pytest.mark.parametrize("context", [1, 3])
def test_an_excerpt_patches_like_the_whole_file(context):
    before = BEFORE.encode()
    after = FIXED.replace("x195 = 195\n", "x195 = 195\nnew = 1\n").encode()
    little_before, little_after = check_patches.excerpt(before, after)
    assert len(little_before) < len(before) / 3
    assert little_before.count(b"\n") == before.count(b"\n")
    assert apply_patch(patch("x-v1", BEFORE, after.decode(), context), little_before) == little_after
