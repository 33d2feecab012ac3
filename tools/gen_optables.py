"""Regenerate ``ascend_env/data/optables/optables.json`` from the torch_npu wheels of the package index.

The index is the one pip's own configuration names (``pip.conf``, ``PIP_INDEX_URL``, a mirror):
``pip index versions`` lists the releases and ``pip download`` fetches them, so nothing here names a
host. For each final torch_npu release from 2.1.0.post3 to 2.14.0 this downloads one wheel with
``pip download --no-deps --only-binary :all:`` (one platform and Python tag: the op lists are the
same in every wheel of a release), reads its ``supported:`` lists with ``ascend_env.detect.npu_oplists``,
checks whether its binaries know ``TORCH_NPU_FALLBACK_CPU_DISABLE``, finds the upstream ``_foreach_*``
ops it registers by hand (below), and deletes the wheel.

The ``_foreach_*`` ops registered by hand: torch_npu's build registers, under PrivateUse1, PyTorch's
own CPU kernel (the per-tensor loop) of every upstream ``_foreach_*`` op that has one and that the
``supported:`` lists lack (Ascend/pytorch ``codegen/gen_backend_stubs.py``, ``gen_foreach_register``,
into ``codegen/templates/ForeachRegister.cpp``; commit 06cec48dda7dda594c652ec907cf296fc82a70c7, the
``git_version`` of 2.1.0.post6). Those ops are in no YAML list, but each one's name is a string literal
of ``m.impl("<name>", ...)`` in the wheel's ``torch_npu/lib/libtorch_npu.so``. So a release's
hand-registered ops are the ``_foreach_*`` strings of that library that are upstream schema names of
the torch the release pins (its version without the ``.postN``: ``native_functions.yaml`` of that
torch's wheel, ``torchgen/packaged/ATen/native/``, fetched once with ``pip download --no-deps`` and
only its op names kept), less the ops of its ``supported:`` lists. The intersection drops the
strings that name no op (``_foreach_add``, a function name). Checked against the real dispatcher
(``torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")``) for the six releases
importable here: ``tests/cann/test_optables_binary.py``.
From torch 2.4 the slow kernels are ``CompositeExplicitAutograd`` in ``native_functions.yaml``, not
``CPU``, so the codegen registers none by hand (none found from 2.4.0 on, as expected).

The data file stores the first release in full and every later one as the ops added and removed
relative to the release before it, so that it stays small and its diffs stay readable.

Usage::

    python tools/gen_optables.py [--versions 2.1.0.post6 2.4.0 ...] [--keep DIR]

``--keep`` keeps the torch_npu wheels there, and the op names of each torch's ``native_functions.yaml``
(``native_functions-<torch>.txt``; torch's wheel itself is deleted).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Tuple

from packaging.version import Version

from ascend_env.detect import npu_oplists

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "ascend_env" / "data" / "optables" / "optables.json"
FIRST = Version("2.1.0.post3")
LAST = Version("2.14.0")
FALLBACK_DISABLE = b"TORCH_NPU_FALLBACK_CPU_DISABLE"
#: The library whose string literals name the ops registered by hand.
LIBRARY = "torch_npu/lib/libtorch_npu.so"
#: A ``_foreach_*`` op name as ``m.impl`` spells it (a NUL-terminated string literal).
FOREACH_STRING = re.compile(rb"(?<![\w.])(_foreach_[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?)\x00")
NATIVE_FUNCTIONS = "torchgen/packaged/ATen/native/native_functions.yaml"
FUNC_LINE = re.compile(r"^- func: ([A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?)\(", re.MULTILINE)
# x86_64 wheels for CPython 3.10 exist for every release in range; the tags changed in 2.7.
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux2014_x86_64", "manylinux_2_17_x86_64")
PYTHON_VERSION = "3.10"


def _wheel_options() -> List[str]:
    """pip's options for the one wheel per release this reads (binary only, one Python, x86_64)."""
    options = ["--disable-pip-version-check", "--only-binary", ":all:", "--python-version", PYTHON_VERSION]
    for platform in PLATFORMS:
        options += ["--platform", platform]
    return options


def index_versions() -> List[str]:
    """Final torch_npu releases between FIRST and LAST that have such a wheel, oldest first, as
    ``pip index versions`` lists them from the index pip is configured with."""
    command = [sys.executable, "-m", "pip", "index", "versions", "torch_npu", *_wheel_options()]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"pip index versions torch_npu failed (exit {done.returncode}): {tail}")
    return available_versions(done.stdout)


def available_versions(text: str) -> List[str]:
    """The final releases between FIRST and LAST on the ``Available versions:`` line of
    ``pip index versions``, oldest first."""
    for line in text.splitlines():
        if line.startswith("Available versions:"):
            found = {Version(v.strip()) for v in line.split(":", 1)[1].split(",") if v.strip()}
            return [str(v) for v in sorted(found) if not v.is_prerelease and FIRST <= v <= LAST]
    raise SystemExit(f"pip index versions printed no 'Available versions:' line:\n{text}")


def download(version: str, dest: Path, package: str = "torch_npu") -> Path:
    """Download one ``package`` wheel of ``version`` into ``dest`` and return its path."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *_wheel_options()]
    command += ["--dest", str(dest)]
    subprocess.run([*command, f"{package}=={version}"], check=True)
    wheels = sorted(dest.glob(f"{package}-{version}-*.whl")) or sorted(
        dest.glob(f"{package}-{version}+*.whl")
    )
    if not wheels:
        raise SystemExit(f"pip download left no wheel of {package} {version} in {dest}")
    return wheels[0]


def torch_of(release: str) -> str:
    """The torch a torch_npu release pins: its version without the ``.postN``."""
    return Version(release).base_version


def schema_names(native_functions: str) -> FrozenSet[str]:
    """The op names (``name.overload``) of the ``- func:`` entries of a ``native_functions.yaml``."""
    return frozenset(FUNC_LINE.findall(native_functions))


def foreach_strings(library: bytes) -> FrozenSet[str]:
    """The ``_foreach_*`` names among a binary's NUL-terminated strings."""
    return frozenset(m.decode("ascii") for m in FOREACH_STRING.findall(library))


def by_hand(strings: FrozenSet[str], upstream: FrozenSet[str], supported: FrozenSet[str]) -> FrozenSet[str]:
    """The upstream ``_foreach_*`` ops a release registers by hand: its library's ``_foreach_*``
    strings that are upstream schema names, less its ``supported:`` ops."""
    return frozenset(name for name in strings & upstream if name.startswith("_foreach_")) - supported


def upstream_names(torch_version: str, keep: Optional[Path]) -> FrozenSet[str]:
    """The op names of torch ``torch_version``'s ``native_functions.yaml`` (cached in ``keep``)."""
    cached = keep / f"native_functions-{torch_version}.txt" if keep else None
    if cached is not None and cached.exists():
        return frozenset(cached.read_text(encoding="utf-8").split())
    with tempfile.TemporaryDirectory() as scratch:
        wheel = download(torch_version, Path(scratch), "torch")
        with zipfile.ZipFile(wheel) as archive:
            names = schema_names(archive.read(NATIVE_FUNCTIONS).decode("utf-8"))
    if cached is not None:
        cached.write_text("\n".join(sorted(names)) + "\n", encoding="utf-8")
    return names


def read_wheel(wheel: Path) -> Tuple[FrozenSet[str], bool, FrozenSet[str]]:
    """The ops of one wheel's ``supported:`` lists, whether it honours FALLBACK_CPU_DISABLE, and the
    ``_foreach_*`` strings of its ``libtorch_npu.so``."""
    ops: set = set()
    fallback_disable = False
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        wanted = {f"torch_npu/{npu_oplists.YAML_DIR.as_posix()}/{name}" for name in npu_oplists.YAML_FILES}
        found = [name for name in names if name in wanted]
        if not found:
            raise SystemExit(f"{wheel.name} has none of {sorted(wanted)}")
        for name in found:
            text = archive.read(name).decode("utf-8", errors="replace")
            ops |= npu_oplists.parse_supported(text, f"{wheel.name}!{name}")
        for name in names:
            if name.endswith((".so", ".py")) or ".so." in name:
                if _contains(archive, name, FALLBACK_DISABLE):
                    fallback_disable = True
                    break
        if LIBRARY not in names:
            raise SystemExit(f"{wheel.name} has no {LIBRARY}")
        strings = foreach_strings(archive.read(LIBRARY))
    return frozenset(ops), fallback_disable, strings


def _contains(archive: zipfile.ZipFile, name: str, needle: bytes) -> bool:
    tail = b""
    with archive.open(name) as stream:
        while True:
            chunk = stream.read(1 << 20)
            if not chunk:
                return False
            if needle in tail + chunk:
                return True
            tail = chunk[-len(needle) :]


def encode(tables: Dict[str, dict]) -> dict:
    """The data file's document: the first release in full, the others as deltas."""
    releases = []
    previous: FrozenSet[str] = frozenset()
    previous_hand: FrozenSet[str] = frozenset()
    for version in sorted(tables, key=Version):
        entry = tables[version]
        ops = frozenset(entry["ops"])
        hand = frozenset(entry["by_hand"])
        record = {"version": version, "wheel": entry["wheel"], "fallback_disable": entry["fallback_disable"]}
        record["added"] = sorted(ops - previous)
        record["removed"] = sorted(previous - ops)
        record["by_hand_added"] = sorted(hand - previous_hand)
        record["by_hand_removed"] = sorted(previous_hand - hand)
        releases.append(record)
        previous, previous_hand = ops, hand
    return {
        "about": "torch_npu supported: op lists per release, generated by tools/gen_optables.py; "
        "each release lists the ops added and removed relative to the release before it; by_hand: "
        "the upstream _foreach_* ops it registers by hand (ForeachRegister.cpp), the same way.",
        "releases": releases,
    }


def decode(document: dict) -> Dict[str, dict]:
    """The inverse of :func:`encode`."""
    tables: Dict[str, dict] = {}
    ops: set = set()
    hand: set = set()
    for record in document["releases"]:
        ops = (ops - set(record["removed"])) | set(record["added"])
        hand = (hand - set(record.get("by_hand_removed", []))) | set(record.get("by_hand_added", []))
        tables[record["version"]] = {
            "ops": sorted(ops),
            "by_hand": sorted(hand),
            "wheel": record["wheel"],
            "fallback_disable": record["fallback_disable"],
        }
    return tables


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", nargs="*", help="only these releases (default: all the index has)")
    parser.add_argument("--keep", type=Path, help="keep the wheels in this folder (and reuse them)")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)

    tables: Dict[str, dict] = {}
    if args.output.exists():
        tables = decode(json.loads(args.output.read_text(encoding="utf-8")))
    versions = args.versions or index_versions()
    for version in versions:
        with tempfile.TemporaryDirectory() as scratch:
            where = args.keep or Path(scratch)
            where.mkdir(parents=True, exist_ok=True)
            existing = sorted(where.glob(f"torch_npu-{version}-*.whl"))
            wheel = existing[0] if existing else download(version, where)
            ops, fallback_disable, strings = read_wheel(wheel)
        hand = by_hand(strings, upstream_names(torch_of(version), args.keep), ops)
        tables[version] = {
            "ops": sorted(ops),
            "by_hand": sorted(hand),
            "wheel": wheel.name,
            "fallback_disable": fallback_disable,
        }
        print(
            f"{version}: {len(ops)} ops, {len(hand)} _foreach_* by hand, "
            f"isin.Tensor_Tensor_out={'isin.Tensor_Tensor_out' in ops}, fallback_disable={fallback_disable}",
            flush=True,
        )
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(encode(tables), indent=0) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
