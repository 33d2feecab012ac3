"""README.md and docs/: every relative link resolves, and the README stays the short entry point."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("check_links", ROOT / "tools" / "check_links.py")
check_links = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_links)

README = ROOT / "README.md"
# CI (.ci/run) runs this line of the README verbatim.
TEST_COMMAND = 'pip install "tox>=4.20" && tox run-parallel -m test'
PAGES = [
    "index",
    "detect",
    "install",
    "verify",
    "audit",
    "states",
    "patches",
    "hook",
    "simulator",
    "kernels",
    "architecture",
    "reliability",
    "versions",
    "docker",
]


def test_readme_and_every_page_have_no_broken_link_or_path():
    files = check_links.default_files()
    assert README in files and ROOT / "docs" / "index.md" in files
    assert [line for path in files for line in check_links.broken_links(path)] == []


def test_readme_links_every_page_of_the_manual():
    targets = {target for _, target in check_links.links(README.read_text(encoding="utf-8"))}
    assert {f"docs/{page}.md" for page in PAGES} <= targets


def test_readme_is_short_and_keeps_the_setup_and_test_commands():
    lines = README.read_text(encoding="utf-8").splitlines()
    # 130: the walkthrough's install and verify output (written from a real run), what the sim
    # extra downloads, and how long the test command takes are part of the first page.
    assert len(lines) <= 130
    assert TEST_COMMAND in lines
    # A machine with only Python: the problem on the simulated NPU, then the fix.
    assert 'pip install ".[sim]" && python -m ascend_env verify --torch-npu 2.1.0.post6' in lines
    assert "python -m ascend_env install && python -m ascend_env verify --torch-npu 2.1.0.post6" in lines


def test_broken_files_anchors_and_repository_paths_are_reported(tmp_path):
    (tmp_path / "other.md").write_text("# The `install` command, again\n\n## Options\n", encoding="utf-8")
    source = tmp_path / "page.md"
    source.write_text(
        "[fine](other.md#the-install-command-again) [fine too](other.md#options) [web](https://x.y/z)\n"
        "[gone](missing.md) [no anchor](other.md#nope) [absolute](/etc/passwd)\n"
        "[spans two\nlines](missing-too.md) and `tests/unit/test_docs_links.py` exist\n"
        "`tests/torch/test_verify.py` does not\n"
        "```console\n[not a link](inside-code.md) `tests/not/in/prose.py`\n```\n"
        "`[also not](in-a-code-span.md)`\n\n[ref]: reference-missing.md\n",
        encoding="utf-8",
    )
    broken = check_links.broken_links(source, root=ROOT)
    expected = {
        "page.md:2": ["missing.md: ", "'nope'", "/etc/passwd: absolute path"],
        "page.md:3": ["missing-too.md: "],
        "page.md:5": ["`tests/torch/test_verify.py` does not exist"],
        "page.md:11": ["reference-missing.md: "],
    }
    assert len(broken) == sum(len(fragments) for fragments in expected.values())
    for where, fragments in expected.items():
        for fragment in fragments:
            assert [line for line in broken if line.startswith(where + ": ") and fragment in line], fragment
    assert check_links.main([str(source)]) == 1


def test_github_heading_ids():
    assert check_links.anchors("# `install`, `restore`, `status`, `patch-wheel`\n# A\n# A\n") == {
        "install-restore-status-patch-wheel",
        "a",
        "a-1",
    }


def test_the_test_command_skips_a_missing_python_locally_and_ci_requires_every_one():
    import configparser

    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    assert tox["tox"]["skip_missing_interpreters"].strip() == "true"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    # tox reads --skip-missing-interpreters from this variable; it must be set before the command.
    required = ci.index("export TOX_SKIP_MISSING_INTERPRETERS=false")
    assert required < ci.index(TEST_COMMAND)
