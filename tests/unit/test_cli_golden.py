"""The CLI's output, byte for byte: stdout, stderr and the exit code of ``python -m ascend_env``.

Each scenario runs a few commands in a fresh temporary tree (fake site-packages, fake CANN,
fake ``npu-smi``) and compares what they print with ``tests/golden/<scenario>.txt``. A change
of wording, of a ``--json`` key or of an exit code fails here; when the change is meant,
re-record with ``ASCEND_ENV_GOLDEN_RECORD=1`` and review the diff of ``tests/golden/``.

Normalised before comparing (and nothing else):
- ISO 8601 timestamps (``applied_at``) -> ``<TIME>``;
- the scenario's temporary directory -> ``<TMP>``; ``sys.executable`` -> ``<PYTHON>``; this
  checkout -> ``<REPO>`` (``--version`` names it);
- this interpreter's ``platform.python_version()`` -> ``<PYVER>``; ``platform.machine()`` ->
  ``<MACHINE>`` (the fake CANN tree is built for it, so the report does not change otherwise).

Runs on Python 3.11 only: argparse's wording of usage errors and help differs between Python
releases (3.9 and 3.12 both changed it), so recordings from one Python do not hold on another.
Skipped where a real Ascend install is present, since ``detect`` reads ``/etc/ascend_install.info``
and ``/usr/local/Ascend`` as well as the fake tree.
"""

from __future__ import annotations

import base64
import hashlib
import os
import platform
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import pytest
from fake_site import STOP_PATH, STOPPING, UTILS, UTILS_PATH, make_patches, make_site

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden"
RECORD = os.environ.get("ASCEND_ENV_GOLDEN_RECORD") == "1"
DATA = Path(__file__).parent / "data"

pytestmark = [
    pytest.mark.skipif(
        sys.version_info[:2] != (3, 11),
        reason="recorded on Python 3.11: argparse's usage and help wording differ between Pythons",
    ),
    pytest.mark.skipif(
        Path("/etc/ascend_install.info").exists() or Path("/usr/local/Ascend").exists(),
        reason="a real Ascend install on this machine would show up in detect's report",
    ),
]

NPU_SMI = "#!/bin/sh\nprintf '| NPU   Name          | Health |\\n| 0     910B3         | OK     |\\n'\n"

Step = Tuple[Sequence[str], Dict[str, str]]


def _environment(tmp: Path) -> Dict[str, str]:
    """A small, fixed environment: no inherited ASCEND_* or TORCH_* variables, a fake npu-smi."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "npu-smi"
    smi.write_text(NPU_SMI)
    smi.chmod(0o755)
    return {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp / "home"),
        "PYTHONPATH": str(REPO),
        "LANG": "C.UTF-8",
        "ASCEND_ENV_CACHE_DIR": str(tmp / "cache"),
    }


_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:\d\d|Z)?")


def _normalise(text: str, tmp: Path) -> str:
    text = _TIMESTAMP.sub("<TIME>", text)
    text = text.replace(str(tmp), "<TMP>").replace(sys.executable, "<PYTHON>").replace(str(REPO), "<REPO>")
    text = text.replace(platform.python_version(), "<PYVER>")
    return text.replace(platform.machine(), "<MACHINE>")


def _run(tmp: Path, steps: List[Step]) -> str:
    """Every step's command, exit code, stdout and stderr, in one text."""
    base = _environment(tmp)
    out = []
    for args, extra in steps:
        env = dict(base, **extra)
        done = subprocess.run(
            [sys.executable, "-m", "ascend_env", *args],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=str(tmp),
        )
        shown_env = "".join(f"{k}={v} " for k, v in sorted(extra.items()))
        out.append(
            f"$ {shown_env}ascend-env {' '.join(args)}\n"
            f"--- exit {done.returncode}\n--- stdout\n{done.stdout}--- stderr\n{done.stderr}--- end\n\n"
        )
    return _normalise("".join(out), tmp)


# --- the trees the commands work on ---------------------------------------------------------


def _dist_info(site: Path, fixture: str) -> None:
    """A real dist-info from tests/unit/data (torch, torch_npu, transformers metadata)."""
    import shutil

    name = fixture.partition("-")[0]
    shutil.copytree(DATA / "dist-info" / fixture, site / f"{fixture}.dist-info")
    (site / name).mkdir(parents=True, exist_ok=True)


def _detect_tree(tmp: Path, native_isin: bool = False) -> Tuple[Path, Path]:
    """A site-packages with torch, torch_npu (and its op YAML) and transformers, and a CANN tree."""
    import shutil

    site = tmp / "site-packages"
    site.mkdir()
    for fixture in ("torch-2.13.0+cpu", "torch_npu-2.1.0.post6", "transformers-4.46.3"):
        _dist_info(site, fixture)
    aten = site / "torch_npu" / "csrc" / "aten"
    aten.mkdir(parents=True)
    shutil.copy(DATA / "npu_native_functions-2.1.0.post6.yaml", aten / "npu_native_functions.yaml")
    codegen = (DATA / "npu_native_functions_by_codegen-2.1.0.post6-excerpt.yaml").read_text()
    (aten / "npu_native_functions_by_codegen.yaml").write_text(codegen)
    arch = platform.machine()
    root = tmp / "Ascend" / "ascend-toolkit" / "8.0.RC2"
    (root / f"{arch}-linux").mkdir(parents=True)
    (root / f"{arch}-linux" / "ascend_toolkit_install.info").write_text(
        "package_name=Ascend-cann-toolkit\nversion=8.0.RC2\n"
    )
    (root.parent / "set_env.sh").write_text("")
    os.symlink("8.0.RC2", root.parent / "latest")
    return site, root


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel(directory: Path, version: str = "4.46.3") -> Path:
    """A small transformers wheel holding the two files the fake patches change."""
    info = f"transformers-{version}.dist-info"
    contents = {
        "transformers/__init__.py": f"__version__ = '{version}'\n",
        STOP_PATH: STOPPING,
        UTILS_PATH: UTILS,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: transformers\nVersion: {version}\n\nA fake.\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{n},{_record_hash(t.encode())},{len(t.encode())}\n" for n, t in contents.items())
    contents[f"{info}/RECORD"] = record + f"{info}/RECORD,,\n"
    path = directory / f"transformers-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in contents.items():
            archive.writestr(zipfile.ZipInfo(name, date_time=(2024, 1, 2, 3, 4, 6)), text)
    return path


# --- the scenarios ----------------------------------------------------------------------------


def detect_steps(tmp: Path) -> List[Step]:
    site, root = _detect_tree(tmp)
    home = {"ASCEND_HOME_PATH": str(root)}
    return [
        (["detect", "--path", str(site)], home),
        (["detect", "--path", str(site), "--json"], home),
        (["detect", "--path", str(site)], {}),
        (["detect", "--path", str(site), "--json"], {"ASCEND_ENV_SOC": "910A"}),
        (["detect", "--path", str(tmp / "empty-site")], {}),
        (["detect", "--path", str(tmp / "no-such-dir"), "--json"], {}),
    ]


def _target(tmp: Path, **kw) -> List[str]:
    site = make_site(tmp, **kw)
    patches = make_patches(tmp)
    return ["--target", str(site), "--patches-dir", str(patches)]


def install_steps(tmp: Path) -> List[Step]:
    where = _target(tmp, torch_npu_ops=["add.Tensor"])
    return [
        (["status", *where], {}),
        (["status", "--json", *where], {}),
        (["install", "--dry-run", *where], {}),
        (["install", "--dry-run", "--json", *where], {}),
        (["install", *where], {}),
        (["status", *where], {}),
        (["status", "--json", *where], {}),
        (["install", *where], {}),
        (["install", "--json", *where], {}),
        (["restore", "--dry-run", *where[:2]], {}),
        (["restore", "--dry-run", "--json", *where[:2]], {}),
        (["restore", *where[:2]], {}),
        (["restore", "--json", *where[:2]], {}),
        (["restore", *where], {}),
        (["status", *where], {}),
    ]


def hook_only_steps(tmp: Path) -> List[Step]:
    where = _target(tmp, torch_npu_ops=["add.Tensor"])
    return [
        (["install", "--hook-only", "--json", *where], {}),
        (["status", *where], {}),
        (["install", "--no-compile-guard", *where], {}),
        (["status", "--json", *where], {}),
        (["install", "--patches", "never", *where], {"ASCEND_ENV_COMPILE_GUARD": "0"}),
        (["restore", *where[:2]], {}),
        (["install", "--patches", "always", "--dry-run", *where], {}),
    ]


def states_steps(tmp: Path) -> List[Step]:
    """docs/states.md's table, walked through on a machine without torch_npu (the README's first
    steps): every command says the same of the same state, with the exit code the table gives."""
    where = _target(tmp)
    site = where[1]
    return [
        (["status", *where], {}),
        (["detect", "--path", site], {}),
        (["install", *where], {}),
        (["status", *where], {}),
        (["status", "--json", *where], {}),
        (["detect", "--path", site, "--json"], {}),
        (["install", *where], {}),
        (["install", "--patches", "always", "--dry-run", *where], {}),
        (["install", "--patches", "always", *where], {}),
        (["install", "--hook-only", *where], {}),
        (["status", *where], {}),
        (["restore", *where[:2]], {}),
        (["install", "--hook-only", "--dry-run", *where], {}),
    ]


def patch_wheel_steps(tmp: Path) -> List[Step]:
    patches = make_patches(tmp)
    wheel = _wheel(tmp)
    (tmp / "out").mkdir()
    return [
        (["patch-wheel", str(wheel), "-o", str(tmp / "out"), "--patches-dir", str(patches)], {}),
        (
            [
                "patch-wheel",
                str(wheel),
                "-o",
                str(tmp / "out2"),
                "--patches-dir",
                str(patches),
                "--json",
                "--build",
                "2",
            ],
            {},
        ),
        (["patch-wheel", str(tmp / "missing.whl"), "--patches-dir", str(patches)], {}),
        (
            ["patch-wheel", str(_wheel(tmp, "4.0.0")), "-o", str(tmp / "out"), "--patches-dir", str(patches)],
            {},
        ),
    ]


def usage_steps(tmp: Path) -> List[Step]:
    return [
        ([], {}),
        (["--version"], {}),
        (["frobnicate"], {}),
        (["instal", "--dry-run"], {}),
        (["help", "status"], {}),
        (["install", "--bogus"], {}),
        (["install", "--patches", "sometimes"], {}),
        (["status", "--json", "--bogus"], {}),
        (["verify", "--torch_npu", "2.1.0.post6"], {}),
        (["verify", "--json", "--device", "simm"], {}),
        (["audit", "--fail-on", "compile", "--", "true"], {}),
        (["--json", "instal"], {}),
        (["patch-wheel"], {}),
        (["patch-wheel", "x.whl", "--build", "two"], {}),
    ]


def environment_steps(tmp: Path) -> List[Step]:
    empty = tmp / "empty-site"
    empty.mkdir()
    where = _target(tmp)
    no_manifest = tmp / "no-manifest"
    no_manifest.mkdir()
    return [
        (["install", "--target", str(empty), "--patches-dir", where[3]], {}),
        (["install", "--json", "--target", str(empty), "--patches-dir", where[3]], {}),
        (["status", "--target", str(tmp / "no-such-dir")], {}),
        (["install", "--target", where[1], "--patches-dir", str(no_manifest)], {}),
        (["install", "--json", "--target", where[1], "--patches-dir", str(no_manifest)], {}),
        (["restore", "--target", str(empty)], {}),
    ]


def emulated_cann_steps(tmp: Path) -> List[Step]:
    """``--cann emulated``'s refusals, before anything runs: a wheel without --cann emulated, a
    missing wheel, one for another Python, every affected release at once, no torch_npu at all."""
    other_python = tmp / "torch_npu-2.2.0-cp39-cp39-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    other_python.write_bytes(b"not read: its name already says it cannot run here")
    pep8 = tmp / "torch_npu_2.1.0.whl"
    pep8.write_bytes(b"")
    run = ["--", "python", "-c", "pass"]
    return [
        (["help", "audit"], {}),
        (["audit", "--torch-npu-wheel", str(other_python), *run], {}),
        (["audit", "--cann", "emulated", "--torch-npu-wheel", str(tmp / "missing.whl"), *run], {}),
        (["audit", "--cann", "emulated", "--torch-npu-wheel", str(other_python), *run], {}),
        (["audit", "--cann", "emulated", "--json", "--torch-npu-wheel", str(other_python), *run], {}),
        (["audit", "--cann", "emulated", "--torch-npu-wheel", str(pep8), *run], {}),
        (["audit", "--cann", "emulated", "--torch-npu", "affected", *run], {}),
        (["audit", "--cann", "emulated", *run], {}),
        (["audit", "--cann", "emulated", "--paths", "--torch-npu-wheel", str(other_python), *run], {}),
        (["verify", "--cann", "emulated", "--device", "sim"], {}),
    ]


SCENARIOS: Dict[str, Callable[[Path], List[Step]]] = {
    "emulated_cann": emulated_cann_steps,
    "detect": detect_steps,
    "install_status_restore": install_steps,
    "hook_only": hook_only_steps,
    "states": states_steps,
    "patch_wheel": patch_wheel_steps,
    "usage_errors": usage_steps,
    "environment_errors": environment_steps,
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_cli_output_is_unchanged(name: str, tmp_path: Path) -> None:
    tmp = tmp_path.resolve()
    got = _run(tmp, SCENARIOS[name](tmp))
    golden = GOLDEN / f"{name}.txt"
    if RECORD:
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(got)
    expected: Optional[str] = golden.read_text() if golden.exists() else None
    assert expected is not None, f"no {golden}: record it with ASCEND_ENV_GOLDEN_RECORD=1"
    assert got == expected
