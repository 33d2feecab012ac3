"""The strict unified-diff applier: parsing, exact application, refusal of bad input."""

from __future__ import annotations

import difflib
import shutil
import subprocess
from pathlib import Path

import pytest

from ascend_env.patching.diffs import (
    FilePatch,
    HunkMismatch,
    PatchError,
    apply_patch,
    parse_patch,
    split_lines,
)

HEADER = (
    "# Patch: demo-v1\n"
    "# Changes: makes the demo better\n"
    "# Why: because\n"
    "# Upstream: none\n"
    "# Remove-when: never\n"
)
TARGET = "pkg/mod.py"


def make_diff(old: str, new: str, path: str = TARGET, context: int = 3) -> str:
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}", n=context
    )
    return "".join(lines)


def make_patch(old: str, new: str, **kwargs) -> FilePatch:
    return parse_patch(HEADER + make_diff(old, new, **kwargs), "demo-v1.patch")


OLD = "".join(f"line {i}\n" for i in range(1, 41))
NEW = OLD.replace("line 10\n", "line ten\nline 10.5\n").replace("line 30\n", "")


def test_parse_reads_header_paths_and_hunks():
    patch = make_patch(OLD, NEW)
    assert patch.id == "demo-v1"
    assert patch.header["Why"] == "because"
    assert patch.source == patch.target == TARGET
    assert len(patch.hunks) == 2
    assert patch.hunks[0].source_start == 7


def test_apply_and_reverse_round_trip():
    patch = make_patch(OLD, NEW)
    assert apply_patch(patch, OLD.encode()) == NEW.encode()
    assert apply_patch(patch, NEW.encode(), reverse=True) == OLD.encode()


def test_header_continuation_lines_join_the_value():
    text = HEADER.replace("# Why: because\n", "# Why: because\n#   it is long\n") + make_diff(OLD, NEW)
    assert parse_patch(text, "demo-v1.patch").header["Why"] == "because it is long"


def test_git_style_prelude_is_accepted():
    text = HEADER + f"diff --git a/{TARGET} b/{TARGET}\nindex 1234abc..5678def 100644\n" + make_diff(OLD, NEW)
    assert apply_patch(parse_patch(text, "demo"), OLD.encode()) == NEW.encode()


def test_hunk_moved_within_bound_applies_at_offset():
    patch = make_patch(OLD, NEW)
    shifted = "extra\n" * 25 + OLD
    assert apply_patch(patch, shifted.encode()) == ("extra\n" * 25 + NEW).encode()


def test_hunk_moved_beyond_bound_is_refused():
    patch = make_patch(OLD, NEW)
    with pytest.raises(HunkMismatch):
        apply_patch(patch, ("extra\n" * 25 + OLD).encode(), max_offset=10)


def test_mismatch_names_file_hunk_expected_and_found():
    patch = make_patch(OLD, NEW)
    changed = OLD.replace("line 29\n", "line 29 edited\n")
    with pytest.raises(HunkMismatch) as info:
        apply_patch(patch, changed.encode())
    err = info.value
    assert err.path == TARGET
    assert err.hunk == 2
    assert "line 29" in err.expected
    assert "line 29 edited" in err.found
    message = str(err)
    assert TARGET in message and "hunk 2 of 2" in message
    assert "'line 29'" in message and "'line 29 edited'" in message
    assert err.exit_code == 2


def test_whitespace_difference_is_a_mismatch():
    patch = make_patch(OLD, NEW)
    with pytest.raises(HunkMismatch):
        apply_patch(patch, OLD.replace("line 9\n", "line 9 \n").encode())


def test_reverse_on_unpatched_file_is_a_mismatch():
    patch = make_patch(OLD, NEW)
    with pytest.raises(HunkMismatch):
        apply_patch(patch, OLD.encode(), reverse=True)


def test_crlf_target_keeps_crlf_endings():
    patch = make_patch(OLD, NEW)
    result = apply_patch(patch, OLD.replace("\n", "\r\n").encode())
    assert result == NEW.replace("\n", "\r\n").encode()
    assert apply_patch(patch, result, reverse=True) == OLD.replace("\n", "\r\n").encode()


def test_crlf_patch_text_applies_to_lf_file():
    text = (HEADER + make_diff(OLD, NEW)).replace("\n", "\r\n")
    assert apply_patch(parse_patch(text, "demo"), OLD.encode()) == NEW.encode()


def test_non_utf8_bytes_outside_hunks_are_preserved():
    old = OLD.encode().replace(b"line 38", b"line \xff\xfe")
    new = NEW.encode().replace(b"line 38", b"line \xff\xfe")
    assert apply_patch(make_patch(OLD, NEW), old) == new


def test_hunk_at_start_must_match_at_start():
    old = "a\nb\nc\nd\ne\nf\ng\n"
    patch = make_patch(old, "a\nB\nc\nd\ne\nf\ng\n")
    assert patch.hunks[0].source_start == 1
    # The same lines later in the file do not satisfy a start-anchored hunk.
    with pytest.raises(HunkMismatch) as info:
        apply_patch(patch, ("x\n" + old).encode())
    assert "start of the file" in str(info.value)


def test_hunk_without_trailing_context_must_match_at_end():
    old = "".join(f"{i}\n" for i in range(20))
    patch = make_patch(old, old + "tail\n")
    assert apply_patch(patch, old.encode()) == (old + "tail\n").encode()
    with pytest.raises(HunkMismatch) as info:
        apply_patch(patch, (old + "more\n").encode())
    assert "end of the file" in str(info.value)


def test_missing_final_newline_is_honoured():
    diff = f"--- a/{TARGET}\n+++ b/{TARGET}\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n"
    patch = parse_patch(HEADER + diff, "demo")
    assert apply_patch(patch, b"a\nb") == b"a\nb\n"
    assert apply_patch(patch, b"a\nb\n", reverse=True) == b"a\nb"
    with pytest.raises(HunkMismatch):
        apply_patch(patch, b"a\nb\n")


def test_overlapping_search_never_reuses_lines_of_an_earlier_hunk():
    old = "x\n" * 12
    new = "x\n" * 4 + "y\n" + "x\n" * 4 + "y\n" + "x\n" * 4
    patch = make_patch(old, new, context=1)
    assert apply_patch(patch, old.encode()) == new.encode()


def test_split_lines_only_splits_on_lf():
    assert split_lines(b"a\r\nb\rc\nd") == [(b"a", b"\r\n"), (b"b\rc", b"\n"), (b"d", b"")]


BAD_DIFFS = {
    "traversal": "--- a/../evil.py\n+++ b/../evil.py\n@@ -1 +1 @@\n-a\n+b\n",
    "absolute": "--- a//etc/passwd\n+++ b//etc/passwd\n@@ -1 +1 @@\n-a\n+b\n",
    "no-prefix": f"--- {TARGET}\n+++ {TARGET}\n@@ -1 +1 @@\n-a\n+b\n",
    "rename": f"--- a/{TARGET}\n+++ b/pkg/other.py\n@@ -1 +1 @@\n-a\n+b\n",
    "two-files": f"--- a/{TARGET}\n+++ b/{TARGET}\n@@ -1 +1 @@\n-a\n+b\n"
    "--- a/pkg/b.py\n+++ b/pkg/b.py\n@@ -1 +1 @@\n-a\n+b\n",
    "new-file": f"diff --git a/{TARGET} b/{TARGET}\nnew file mode 100644\n--- /dev/null\n+++ b/{TARGET}\n"
    "@@ -0,0 +1 @@\n+a\n",
    "dev-null": f"--- /dev/null\n+++ b/{TARGET}\n@@ -0,0 +1 @@\n+a\n",
    "mode": f"diff --git a/{TARGET} b/{TARGET}\nold mode 100644\nnew mode 100755\n",
    "binary": f"diff --git a/{TARGET} b/{TARGET}\nBinary files a/{TARGET} and b/{TARGET} differ\n",
    "short-hunk": f"--- a/{TARGET}\n+++ b/{TARGET}\n@@ -1,3 +1,3 @@\n-a\n+b\n",
    "long-hunk": f"--- a/{TARGET}\n+++ b/{TARGET}\n@@ -1 +1 @@\n-a\n+b\n c\n",
    "garbage-after": f"--- a/{TARGET}\n+++ b/{TARGET}\n@@ -1 +1 @@\n-a\n+b\nrm -rf /\n",
    "no-hunks": f"--- a/{TARGET}\n+++ b/{TARGET}\n",
    "no-change": f"--- a/{TARGET}\n+++ b/{TARGET}\n@@ -1 +1 @@\n a\n",
    "no-diff": "",
    "dotdir": "--- a/pkg/./mod.py\n+++ b/pkg/./mod.py\n@@ -1 +1 @@\n-a\n+b\n",
    "git-line-disagrees": f"diff --git a/other.py b/other.py\n--- a/{TARGET}\n+++ b/{TARGET}\n"
    "@@ -1 +1 @@\n-a\n+b\n",
    "overlap": f"--- a/{TARGET}\n+++ b/{TARGET}\n@@ -5,2 +5,2 @@\n-a\n+b\n c\n@@ -3,2 +3,2 @@\n-a\n+b\n c\n",
    "bad-marker": f"--- a/{TARGET}\n+++ b/{TARGET}\n@@ -1 +1 @@\n\\ No newline at end of file\n-a\n+b\n",
}


@pytest.mark.parametrize("case", sorted(BAD_DIFFS))
def test_hostile_or_malformed_diffs_are_refused(case):
    with pytest.raises(PatchError) as info:
        parse_patch(HEADER + BAD_DIFFS[case], "demo")
    assert "demo" in str(info.value)
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    "header",
    [
        "",  # no header at all
        HEADER.replace("# Upstream: none\n", ""),  # a required key missing
        HEADER + "# Why: again\n",  # repeated key
        HEADER + "random words\n",  # not a header line
        HEADER.replace("demo-v1", "Demo V1"),  # bad id
    ],
)
def test_bad_headers_are_refused(header):
    with pytest.raises(PatchError):
        parse_patch(header + make_diff(OLD, NEW), "demo")


def test_file_name_must_match_patch_id():
    with pytest.raises(PatchError, match="does not match"):
        parse_patch(HEADER + make_diff(OLD, NEW), "transformers/other-v1.patch")


def test_non_text_and_oversized_input_is_refused():
    with pytest.raises(PatchError):
        parse_patch(HEADER + make_diff(OLD, NEW) + "\x00", "demo")
    with pytest.raises(PatchError):
        parse_patch(b"bytes", "demo")  # type: ignore[arg-type]
    with pytest.raises(PatchError):
        parse_patch(HEADER + "#   x\n" * 300_000, "demo")


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_agrees_with_git_apply(tmp_path: Path):
    cases = [
        (OLD, NEW, "extra\n" * 7 + OLD),
        ("a\nb\nc\n", "a\nB\nc\n", "a\nb\nc\n"),
        (OLD, OLD + "end\n", OLD),
    ]
    for number, (old, new, actual) in enumerate(cases):
        root = tmp_path / str(number)
        (root / "pkg").mkdir(parents=True)
        (root / TARGET).write_bytes(actual.encode())
        diff = make_diff(old, new)
        (root / "x.diff").write_text(diff)
        subprocess.run(["git", "apply", "x.diff"], cwd=root, check=True, capture_output=True)
        patch = parse_patch(HEADER + diff, "demo")
        assert apply_patch(patch, actual.encode()) == (root / TARGET).read_bytes()
        # git refuses an LF patch on a CRLF file; ours applies it and keeps the file CRLF.
        crlf = apply_patch(patch, actual.replace("\n", "\r\n").encode())
        assert crlf == (root / TARGET).read_bytes().replace(b"\n", b"\r\n")


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_lines = st.lists(st.sampled_from(["a\n", "b\n", "c\n", "def f():\n", "    return 1\n", "\n"]), max_size=30)


@settings(max_examples=150, deadline=None)
@given(old=_lines, new=_lines, context=st.integers(1, 4), crlf=st.booleans())
def test_property_apply_then_reverse_is_identity(old, new, context, crlf):
    old_text, new_text = "".join(old), "".join(new)
    if old_text == new_text:
        return
    crlf = crlf and bool(old) and bool(new)  # an empty file has no ending to follow: LF
    patch = make_patch(old_text, new_text, context=context)
    convert = (lambda t: t.replace("\n", "\r\n")) if crlf else (lambda t: t)
    patched = apply_patch(patch, convert(old_text).encode())
    assert patched == convert(new_text).encode()
    assert apply_patch(patch, patched, reverse=True) == convert(old_text).encode()
