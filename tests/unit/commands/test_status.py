"""The plain text of ``status``: multi-line messages stay inside their indented line."""

from __future__ import annotations

from typed_reports import unknown_keys

from ascend_env.commands.status import HookPart, describe_hook
from ascend_env.output import continued

# torch_npu 2.1.0.post6's ImportError where CANN's libraries are missing, as a Docker image shows it.
IMPORT_ERROR = (
    "libhccl.so: cannot open shared object file: No such file or directory. Please check that the "
    "cann package is installed.\nPlease run 'source set_env.sh' in the CANN installed path.\n"
)


def _hook(**probe: object) -> HookPart:
    part = {"installed": ["ascend_env_hook.pth", "ascend_env_hook.py"], "current": True, "probe": probe}
    assert unknown_keys(part, HookPart) == []  # a probe's answer, as hook.files.probe types it
    return part  # type: ignore[return-value]


def test_continued_indents_every_later_line():
    assert continued("first\nsecond\n\n  third\n") == "first\n    second\n      third"
    assert continued("one line") == "one line"


def test_backend_error_lines_are_indented():
    lines = "\n".join(describe_hook(_hook(ran=True, backend="torch_npu", backend_error=IMPORT_ERROR)))
    text = lines.splitlines()
    assert all(line.startswith("  ") for line in text), text
    assert any(line.startswith("    Please run 'source set_env.sh'") for line in text)
    assert "libhccl.so" in text[1]


def test_hook_errors_and_probe_error_are_indented():
    text = "\n".join(describe_hook(_hook(ran=True, backend=None, errors=["Traceback\n  File x\nValueError"])))
    assert all(line.startswith("  ") for line in text.splitlines())
    assert "  startup hook error: Traceback\n      File x\n    ValueError" in text
    text = "\n".join(describe_hook(_hook(ran=None, error="probe failed\nexit 1")))
    assert text.endswith("not checked in a fresh process: probe failed\n    exit 1")
