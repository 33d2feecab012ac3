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


# -- where the check's packages come from ----------------------------------------------------------


def _run_mirror(tmp_path: Path, indextargets: str, uid: int = 1000):
    """container/debian-mirror with a stand-in apt-get (and id) printing ``indextargets``."""
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "targets").write_text(indextargets)
    (bin_dir / "apt-get").write_text(
        "#!/bin/sh\n"
        f'[ "$1" = indextargets ] && cat {tmp_path / "targets"} && exit 0\n'
        f'echo "$@" >> {tmp_path / "apt-calls"}\n'
    )
    (bin_dir / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    for tool in ("apt-get", "id"):
        (bin_dir / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    command = [str(CONTAINER / "debian-mirror")]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)


def test_the_debian_mirror_is_the_one_apt_uses(tmp_path):
    listing = (
        "https://packages.example/apt/ Example stable\n"
        "http://mirror.example/debian-security/ Debian bookworm-security\n"
        "http://mirror.example/debian/ Debian bookworm\n"
        "http://mirror.example/debian/ Debian bookworm-updates\n"
    )
    done = _run_mirror(tmp_path, listing)
    assert done.returncode == 0 and done.stdout == "http://mirror.example/debian\n"


def test_no_debian_archive_in_apt_is_said_not_guessed(tmp_path):
    done = _run_mirror(tmp_path, "http://archive.example/ubuntu/ Ubuntu jammy\n")
    assert done.returncode == 1 and done.stdout == ""
    assert not (tmp_path / "apt-calls").exists()  # not root: no apt-get update


def test_the_container_check_and_the_generators_name_no_package_registry():
    """Packages come from the machine's apt and pip configuration; no host of an archive or an
    index is written into the project's scripts or these docs."""
    files = [
        *CONTAINER.rglob("*"),
        ROOT / "tools" / "gen_optables.py",
        ROOT / "docs" / "docker.md",
        ROOT / "docs" / "install.md",
        ROOT / "docs" / "reliability.md",
        ROOT / "docs" / "simulator.md",
    ]
    url = re.compile(r"\b(?:https?|ftp)://(?!localhost\b)[\w.-]+")
    named = [
        f"{path.relative_to(ROOT)}: {match.group()}"
        for path in files
        if path.is_file() and path.suffix not in (".whl",)
        for match in url.finditer(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert named == []
