"""jsontext.loads: deep nesting is refused before the parser runs, like any malformed text."""

import json
import sys

import pytest

from ascend_env.utils import jsontext


def test_plain_json_is_read_as_json_reads_it():
    text = '{"a": [1, {"b": "[[[ not brackets ]]]"}], "c": "\\"{"}'
    assert jsontext.loads(text) == json.loads(text)


def test_nesting_up_to_the_limit_is_read():
    text = "[" * jsontext.MAX_DEPTH + "]" * jsontext.MAX_DEPTH
    assert jsontext.loads(text) is not None


@pytest.mark.parametrize("opener, closer", [("[", "]"), ('{"a":', "}")])
def test_deep_nesting_is_refused_without_calling_the_parser(monkeypatch, opener, closer):
    monkeypatch.setattr(json, "loads", lambda *a, **k: pytest.fail("the parser was called"))
    text = opener * 50_000 + "1" + closer * 50_000
    with pytest.raises(json.JSONDecodeError) as caught:
        jsontext.loads(text)
    assert "nested more than 100 levels deep" in str(caught.value)


def test_brackets_inside_strings_are_not_counted():
    inner = '"' + "[" * 500 + '\\"' + "{" * 500 + '"'
    assert jsontext.loads("[" + inner + "]") == json.loads("[" + inner + "]")


def test_no_recursion_error_escapes_with_few_frames_left():
    """Deep text read where the stack is nearly used up still gives JSONDecodeError."""

    def near_the_limit(depth: int) -> object:
        if depth > sys.getrecursionlimit() - 60:
            with pytest.raises(json.JSONDecodeError):
                jsontext.loads("[" * 100_000 + "]" * 100_000)
            return True
        return near_the_limit(depth + 1)

    assert near_the_limit(len(__import__("inspect").stack()))


def test_read_regular_reads_only_regular_files_and_never_blocks(tmp_path):
    import errno
    import os

    from ascend_env.utils.jsontext import read_regular

    good = tmp_path / "good.json"
    good.write_bytes(b"x" * 3000)
    assert read_regular(good) == b"x" * 3000 and read_regular(good, 10) == b"x" * 10
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    link.symlink_to(good)
    for path in (fifo, tmp_path, "/dev/null"):
        with pytest.raises(OSError) as raised:
            read_regular(path)
        assert raised.value.errno in (errno.EINVAL, errno.EISDIR), path
    with pytest.raises(OSError):  # a link is not followed unless asked
        read_regular(link)
    assert read_regular(link, follow=True) == b"x" * 3000
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "missing")
