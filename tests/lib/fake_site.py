"""Fake site-packages trees for the install engine's tests: a real dist-info, real patches."""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import subprocess
import sys
import venv
from pathlib import Path
from typing import Dict, Optional, Tuple

from ascend_env.patching.records import find_distribution, record_hash

VERSION = "4.46.3"

STOPPING = (
    "".join(f"# stopping criteria line {i}\n" for i in range(1, 31))
    + ("def eos(input_ids, eos_token_id):\n    return torch.isin(input_ids[:, -1], eos_token_id)\n")
    + "".join(f"# tail {i}\n" for i in range(1, 11))
)
STOPPING_PATCHED = STOPPING.replace(
    "    return torch.isin(input_ids[:, -1], eos_token_id)\n",
    "    last = input_ids[:, -1]\n    return (last.unsqueeze(-1) == eos_token_id.unsqueeze(0)).any(-1)\n",
)
UTILS = (
    "".join(f"# pytorch utils line {i}\n" for i in range(1, 21))
    + ("def isin_mps_friendly(elements, test_elements):\n    return torch.isin(elements, test_elements)\n")
    + "".join(f"# end {i}\n" for i in range(1, 6))
)
UTILS_PATCHED = UTILS.replace(
    "    return torch.isin(elements, test_elements)\n",
    "    if elements.device.type in ('cpu', 'cuda'):\n"
    "        return torch.isin(elements, test_elements)\n"
    "    return elements.unsqueeze(-1).eq(test_elements.flatten()).any(-1)\n",
)
STOP_PATH = "transformers/generation/stopping_criteria.py"
UTILS_PATH = "transformers/pytorch_utils.py"
PATCHES = {
    "stopping-criteria-eos-v1": (STOP_PATH, STOPPING, STOPPING_PATCHED),
    "isin-mps-friendly-v1": (UTILS_PATH, UTILS, UTILS_PATCHED),
}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def patch_text(patch_id: str, path: str, old: str, new: str) -> str:
    header = (
        f"# Patch: {patch_id}\n# Changes: avoid isin\n# Why: no NPU isin\n"
        f"# Upstream: none\n# Remove-when: torch_npu has isin\n"
    )
    diff = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}"
    )
    return header + "".join(diff)


def write_dist(site: Path, name: str, version: str, files: Dict[str, bytes]) -> Path:
    """Install a fake distribution: its files, METADATA, INSTALLER and a true RECORD."""
    dist_info = site / f"{name}-{version}.dist-info"
    dist_info.mkdir(parents=True)
    all_files = dict(files)
    all_files[f"{dist_info.name}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    )
    all_files[f"{dist_info.name}/INSTALLER"] = b"pip\n"
    rows = []
    for rel, data in sorted(all_files.items()):
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        rows.append(f"{rel},{record_hash(data)},{len(data)}\n")
    rows.append(f"{dist_info.name}/RECORD,,\n")
    (dist_info / "RECORD").write_text("".join(rows))
    return dist_info


def make_site(
    root: Path,
    version: str = VERSION,
    crlf: bool = False,
    torch_npu_ops: Optional[list] = None,
) -> Path:
    """A site-packages with transformers ``version`` (and torch_npu when ops are given)."""
    site = root / "site-packages"
    site.mkdir(parents=True)
    convert = (lambda t: t.replace("\n", "\r\n")) if crlf else (lambda t: t)
    files = {
        "transformers/__init__.py": b"__version__ = '" + version.encode() + b"'\n",
        STOP_PATH: convert(STOPPING).encode(),
        UTILS_PATH: convert(UTILS).encode(),
    }
    write_dist(site, "transformers", version, files)
    if torch_npu_ops is not None:
        yaml = "supported:\n" + "".join(f"  - {op}\n" for op in torch_npu_ops)
        write_dist(
            site,
            "torch_npu",
            "2.1.0.post6",
            {
                "torch_npu/__init__.py": b"",
                "torch_npu/csrc/aten/npu_native_functions.yaml": yaml.encode(),
            },
        )
    return site


def make_patches(
    root: Path, versions=(VERSION,), crlf_versions=(), extra_release: Optional[dict] = None
) -> Path:
    """A patches directory with two patches and a manifest listing ``versions``."""
    directory = root / "patches"
    (directory / "transformers").mkdir(parents=True)
    manifest = {
        "schema": 1,
        "distribution": "transformers",
        "generated_by": "tools/check_patches.py",
        "nothing_to_do": {"below": "4.40.0", "from": "5.1.0", "why": "no isin in generation there"},
        "patches": {},
        "releases": {},
    }
    for patch_id, (path, old, new) in PATCHES.items():
        (directory / "transformers" / f"{patch_id}.patch").write_text(patch_text(patch_id, path, old, new))
        manifest["patches"][patch_id] = {
            "path": f"transformers/{patch_id}.patch",
            "target": path,
            "verified_on": list(versions),
        }
    for version in versions:
        convert = (lambda t: t.replace("\n", "\r\n")) if version in crlf_versions else (lambda t: t)
        manifest["releases"][version] = {
            path: {
                "patch": patch_id,
                "before": sha(convert(old).encode()),
                "after": sha(convert(new).encode()),
            }
            for patch_id, (path, old, new) in PATCHES.items()
        }
    if extra_release:
        manifest["releases"].update(extra_release)
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return directory


def snapshot(site: Path, include_state: bool = True) -> Dict[str, bytes]:
    """Every file under ``site`` by relative path (``.ascend-env`` optional)."""
    out = {}
    for path in sorted(site.rglob("*")):
        rel = path.relative_to(site).as_posix()
        if not include_state and rel.startswith(".ascend-env"):
            continue
        if path.is_file():
            out[rel] = path.read_bytes()
    return out


def run_cli(*args: str, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "ascend_env", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=full_env,
    )


def site_with_ascend_env(root: Path) -> Path:
    """:func:`make_site` with ascend-env 0.1.0 installed beside transformers, as pip leaves it."""
    site = make_site(root)
    write_dist(site, "ascend_env", "0.1.0", {"ascend_env/__init__.py": b"__version__ = '0.1.0'\n"})
    return site


def remove_ascend_env(site: Path) -> None:
    """What pip does to the installed ascend-env on ``pip uninstall`` (and first on a reinstall):
    remove every file its RECORD lists, the startup hook's too, then its dist-info directory."""
    own = find_distribution(site, "ascend-env")
    assert own is not None
    for path in own.record:
        (site / path).unlink(missing_ok=True)
    (site / own.dist_info).rmdir()


def make_venv(root: Path) -> Tuple[Path, Path]:
    """A bare virtual environment (no pip) at ``root / "env"``: its python and its site-packages."""
    env = root / "env"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env)
    return env / "bin" / "python", next(env.glob("lib/python*/site-packages"))


def run_pip(python: Path, *args: str) -> subprocess.CompletedProcess:
    """pip (this environment's copy) for the environment of ``python``, offline. Only pip itself
    is put on that Python's path: this environment's site-packages would show pip the
    distributions installed here (ascend-env among them, where the tests run from its wheel)."""
    import pip

    only_pip = python.parent.parent / "pip-only"
    if not only_pip.exists():
        only_pip.mkdir()
        (only_pip / "pip").symlink_to(Path(pip.__file__).parent)
    pip_home = str(only_pip)
    code = (
        f"import sys; sys.path.append({pip_home!r})\n"
        "from pip._internal.cli.main import main\n"
        f"sys.exit(main({['--disable-pip-version-check', '--no-input', *args]!r}))\n"
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    environ["PIP_CONFIG_FILE"] = os.devnull
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=environ, timeout=300)
