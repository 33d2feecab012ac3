"""Fuzz the patch parser and applier, the CANN and driver file readers, and the state and journal
readers: each input parses or gives the module's own clean error, never anything else.

``ASCEND_ENV_FUZZ_EXAMPLES`` sets the examples per property (default 150; the reliability run
uses thousands).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_support import ROOT, summary

from ascend_env.detect.cann import (
    CannVersion,
    InvalidCannVersion,
    find_toolkit,
    parse_key_values,
    version_from_cfg,
)
from ascend_env.detect.driver import find_driver
from ascend_env.exceptions import EnvironmentProblem
from ascend_env.patching.diffs import FilePatch, HunkMismatch, PatchError, apply_patch, parse_patch
from ascend_env.patching.journal import Journal
from ascend_env.patching.state import State

EXAMPLES = int(os.environ.get("ASCEND_ENV_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("ASCEND_ENV_FUZZ_RANDOM") != "1",
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)
REAL_PATCHES = sorted((ROOT / "patches" / "transformers").glob("*.patch"))
PATCH_TEXTS = [path.read_text() for path in REAL_PATCHES]
DIFF_ALPHABET = st.sampled_from(list(" +-@,\n\r\t\\/ab019#:.\x00é"))
PREFIXES = [" ", "+", "-", "@@ ", "\\ ", "--- a/", "+++ b/../"]


@pytest.fixture(scope="module")
def counts(request):
    return summary(request.config, "fuzz")


def parses_or_refuses(text: str, counts) -> None:
    counts.fuzz_inputs += 1
    try:
        patch = parse_patch(text, "fuzz.patch")
    except PatchError as exc:
        assert exc.problem and isinstance(exc.problem, str)
        return
    assert isinstance(patch, FilePatch) and patch.hunks


@st.composite
def mutated_patch(draw) -> str:
    """A real shipped patch with a few lines deleted, duplicated, replaced or cut."""
    lines = draw(st.sampled_from(PATCH_TEXTS)).splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 4))):
        if not lines:
            break
        index = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["delete", "duplicate", "replace", "cut", "prefix"]))
        if action == "delete":
            del lines[index]
        elif action == "duplicate":
            lines.insert(index, lines[index])
        elif action == "replace":
            lines[index] = draw(st.text(DIFF_ALPHABET, max_size=40)) + "\n"
        elif action == "cut":
            lines[index] = lines[index][: draw(st.integers(0, len(lines[index])))]
        else:
            lines[index] = draw(st.sampled_from(PREFIXES)) + lines[index]
    return "".join(lines)


@FUZZ
@given(text=st.text(max_size=2000))
def test_patch_parser_on_any_text(counts, text):
    parses_or_refuses(text, counts)


@FUZZ
@given(text=mutated_patch())
def test_patch_parser_on_mutated_real_patches(counts, text):
    parses_or_refuses(text, counts)


@FUZZ
@given(index=st.integers(0, len(PATCH_TEXTS) - 1), data=st.binary(max_size=3000), reverse=st.booleans())
def test_applier_on_any_bytes(counts, index, data, reverse):
    patch = parse_patch(PATCH_TEXTS[index], REAL_PATCHES[index].name)
    counts.fuzz_inputs += 1
    try:
        out = apply_patch(patch, data, reverse=reverse)
    except HunkMismatch as exc:
        assert exc.path == patch.target and exc.hunk >= 1
        return
    assert isinstance(out, bytes)


@FUZZ
@given(text=st.text(max_size=80) | st.from_regex(r"(CANN )?\d{1,3}\.\d{1,3}\.(RC|T)?\d{1,3}[.a-z0-9-]{0,12}"))
def test_cann_version_parser(counts, text):
    counts.fuzz_inputs += 1
    try:
        version = CannVersion.parse(text)
    except InvalidCannVersion:
        return
    assert CannVersion.parse(str(version)).sort_key() == version.sort_key()


@FUZZ
@given(text=st.text(max_size=500))
def test_key_value_readers(counts, text):
    counts.fuzz_inputs += 1
    values = parse_key_values(text)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in values.items())
    found = version_from_cfg(text)
    assert found is None or isinstance(found, str)


@FUZZ
@given(info=st.binary(max_size=600), cfg=st.binary(max_size=300), driver=st.binary(max_size=300))
def test_cann_and_driver_files(counts, info, cfg, driver):
    counts.fuzz_inputs += 1
    with tempfile.TemporaryDirectory() as name:
        root = Path(name)
        toolkit_root = root / "cann"
        (toolkit_root / "aarch64-linux").mkdir(parents=True)
        (toolkit_root / "aarch64-linux" / "ascend_toolkit_install.info").write_bytes(info)
        (toolkit_root / "version.cfg").write_bytes(cfg)
        toolkit = find_toolkit({"ASCEND_HOME_PATH": str(toolkit_root)}, prefixes=[], arch="aarch64")
        assert toolkit.found
        assert (toolkit.version is None) == (toolkit.parsed is None)
        assert toolkit.version is not None or toolkit.problems
        (root / "driver").mkdir()
        (root / "driver" / "version.info").write_bytes(driver)
        (root / "install.info").write_bytes(driver)
        found = find_driver(root / "install.info", root)
        assert found.version is not None or found.problems
        json.dumps(toolkit.to_dict())
        json.dumps(found.to_dict())


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
    max_leaves=20,
)
ENTRY = st.fixed_dictionaries(
    {
        "path": st.text(max_size=30),
        "kind": st.sampled_from(["patch", "record", "extra", "x"]),
        "before": st.none() | st.text("0123456789abcdef", min_size=63, max_size=64),
        "after": JSON,
    }
)
STATE = st.fixed_dictionaries(
    {
        "schema": st.sampled_from([1, 2, "1"]),
        "tool_version": JSON,
        "applied_at": JSON,
        "distribution": JSON,
        "version": JSON,
        "entries": st.lists(ENTRY, max_size=3) | JSON,
    }
)


@FUZZ
@given(data=JSON | STATE)
def test_state_and_journal_readers(counts, data):
    counts.fuzz_inputs += 1
    for reader in (State.from_json, Journal.from_json):
        try:
            reader(data, "/site/.ascend-env/state.json")
        except EnvironmentProblem as exc:
            assert exc.fix
