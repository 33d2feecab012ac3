"""container/: the Dockerfile that container/check builds is the one docs/docker.md shows."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import List

ROOT = Path(__file__).resolve().parents[2]
CONTAINER = ROOT / "container"
INSTALL = "python -m ascend_env install && "


def readme_dockerfile() -> str:
    """The text of docs/docker.md's one ```dockerfile block (with its final newline)."""
    blocks = re.findall(r"^```dockerfile\n(.*?)^```$", (ROOT / "docs" / "docker.md").read_text(), re.S | re.M)
    assert len(blocks) == 1, f"docs/docker.md has {len(blocks)} dockerfile blocks, expected one"
    return blocks[0]


def instructions(text: str) -> List[str]:
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_dockerfile_is_readme_block_byte_for_byte():
    assert (CONTAINER / "Dockerfile").read_bytes() == readme_dockerfile().encode()


def test_dockerfile_installs_then_verifies():
    steps = instructions(readme_dockerfile())
    assert steps[-1] == f"RUN {INSTALL}python -m ascend_env verify"
    # The base image is the only thing a build changes, as a build argument.
    assert steps[:2] == ["ARG CANN_IMAGE", "FROM ${CANN_IMAGE}"]


def test_no_install_dockerfile_is_the_same_minus_install():
    expected = [line.replace(INSTALL, "") for line in instructions(readme_dockerfile())]
    actual = instructions((CONTAINER / "Dockerfile.no-install").read_text())
    assert actual == expected
    assert not any("ascend_env install" in line for line in actual)


def test_base_points_pip_at_the_mounted_wheels_only():
    conf = (CONTAINER / "base" / "pip.conf").read_text().splitlines()
    assert "no-index = true" in conf and "find-links = /wheels" in conf
    base = (CONTAINER / "base" / "Containerfile.base").read_text()
    assert "ENV PYTHONDONTWRITEBYTECODE=1" in base
    assert '--no-deps "torch_npu==2.1.0.post6"' in base


def test_fake_cann_tree_has_what_detect_reads():
    ascend = CONTAINER / "base" / "Ascend"
    info = ascend / "ascend-toolkit" / "8.0.RC2" / "x86_64-linux" / "ascend_toolkit_install.info"
    assert "version=8.0.RC2" in info.read_text().splitlines()
    assert (ascend / "ascend-toolkit" / "set_env.sh").is_file()
    assert "Version=24.1.rc2" in (ascend / "driver" / "version.info").read_text().splitlines()


def test_check_is_an_executable_bash_script():
    check = CONTAINER / "check"
    assert check.read_text().startswith("#!/usr/bin/env bash\n")
    assert os.stat(check).st_mode & stat.S_IXUSR
