"""ascend_env.states: one word per state, the same exit code everywhere, and docs/states.md's
table holding the same words."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ascend_env import states

DOCS = Path(__file__).resolve().parents[2] / "docs" / "states.md"


@pytest.mark.parametrize(
    ("patches", "code", "hook", "word", "exit_code", "run"),
    [
        ("applied", 0, True, "applied", 0, "as the engine says"),
        ("applied", 0, False, "applied", 1, "python -m ascend_env install"),
        ("not applied", 1, True, "hook only", 0, None),  # torch_npu lacks isin: the hook registers it
        ("not applied", 0, True, "hook only", 0, None),
        ("nothing to do", 0, True, "hook only", 0, None),
        ("hook only", 0, True, "hook only", 0, None),
        ("not applied", 0, False, "not applied", 1, "python -m ascend_env install"),
        ("not applied", 1, False, "not applied", 1, "python -m ascend_env install"),
        ("nothing to do", 0, False, "not applied", 1, "python -m ascend_env install"),
        ("drifted", 1, True, "drifted", 1, "as the engine says"),
        ("interrupted", 1, False, "interrupted", 1, "as the engine says"),
        ("partly applied", 1, True, "partly applied", 1, "as the engine says"),
        ("conflict", 1, True, "conflict", 1, "as the engine says"),
        ("transformers removed", 1, True, "transformers removed", 1, "as the engine says"),
    ],
)
def test_the_state_of_the_patches_and_the_hook_together(patches, code, hook, word, exit_code, run):
    state = states.combine(patches, code, hook, "why", "as the engine says")
    assert (state.status, state.code, state.run) == (word, exit_code, run)
    assert state.detail is not None and state.detail.startswith("why")


def test_without_transformers_the_hook_is_installed_alone():
    state = states.combine(
        "nothing to do", 0, False, "transformers is not installed here", transformers=False
    )
    assert (state.status, state.code, state.run) == (
        "not applied",
        1,
        "python -m ascend_env install --hook-only",
    )
    assert state.detail == "transformers is not installed here; the startup hook is not installed"


@pytest.mark.parametrize(
    ("patched", "changed", "dry_run", "word"),
    [
        (True, True, False, "applied"),
        (True, False, False, "already applied"),
        (True, True, True, "would apply"),
        (False, True, False, "hook installed"),
        (False, False, False, "hook already installed"),
        (False, True, True, "would install the hook"),
        (True, False, True, "already applied"),
        (False, False, True, "hook already installed"),
    ],
)
def test_what_install_says(patched, changed, dry_run, word):
    assert states.install_word(patched, changed, dry_run) == word


def test_the_manual_s_table_has_every_word_with_its_exit_code():
    text = DOCS.read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([a-z ]+)` \|.*\| (\d) \|", text, re.M)
    table = {word: int(code) for word, code in rows}
    assert table["hook only"] == 0 and table["not applied"] == 1
    for word in states.BROKEN:
        assert table[word] == 1
    for word in (
        "applied",
        "already applied",
        "would apply",
        "hook installed",
        "hook already installed",
        "would install the hook",
    ):
        assert f"`{word}`" in text
