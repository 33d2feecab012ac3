"""Regenerate ``ascend_env/data/oppaths/oppaths.json``: which aten ops have an ``op_api`` and which an
``acl_op`` implementation in each torch_npu release, and where its 64-bit warnings are.

For each release of ``ascend_env/data/optables/optables.json`` this finds the Ascend/pytorch release
tag whose ``version.txt`` (``setup.py``'s ``VERSION`` before 2.2) names it, reads the op-plugin
commit that tag pins (the ``third_party/op-plugin`` submodule), and reads op-plugin at that commit:

- the YAML that commit's ``gencode.sh`` feeds the code generator: ``op_plugin/config/vXrY/
  op_plugin_functions.yaml`` (entries with ``impl_ns: acl_op, op_api``) up to 2.1.0.post7, else
  ``op_plugin/config/op_plugin_functions.yaml`` (entries with ``acl_op:`` / ``op_api:`` version
  specs: ``all_version``, ``v2.1, v2.2``, or a closed range ``[v2.1, newest]``, per its README);
- the ``TORCH_NPU_WARN_ONCE`` calls of ``AddKernelNpu.cpp``, ``NeKernelNpu.cpp``,
  ``GatherKernelNpu.cpp`` and ``IndexSelectKernelNpu.cpp`` in its ``aclops`` sources: line and text.

A release with no tag of its own (some post releases) takes the data of the nearest earlier release
of the same torch version, and says so (``same_as``). Releases are stored as the first in full and
the rest as ops added and removed, as ``gen_optables.py`` stores them.

Usage::

    python tools/gen_oppaths.py [--pytorch GIT_DIR] [--op-plugin GIT_DIR]

Without the two git directories it clones both repositories (bare, blobs on demand) into a
temporary folder.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple

import yaml
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent
OPTABLES = ROOT / "ascend_env" / "data" / "optables" / "optables.json"
OUTPUT = ROOT / "ascend_env" / "data" / "oppaths" / "oppaths.json"
PYTORCH_URL = "https://github.com/Ascend/pytorch.git"
OP_PLUGIN_URL = "https://github.com/Ascend/op-plugin.git"
WARN_FILES = ("AddKernelNpu.cpp", "NeKernelNpu.cpp", "GatherKernelNpu.cpp", "IndexSelectKernelNpu.cpp")
# A final release tag (v6.0.rc2-pytorch2.1.0, v26.1.0-pytorch2.12.0, ...) ranks above a beta one.
TAG = re.compile(r"^[vV]\d[\w.]*-pytorch\d+\.\d+\.\d+$|^[\w.-]*pytorch2\.\d+\.\d+$")
STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def show(repo: Path, commit: str, path: str) -> Optional[str]:
    done = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], capture_output=True)
    return done.stdout.decode("utf-8", errors="replace") if done.returncode == 0 else None


def torch_npu_version(pytorch: Path, tag: str) -> Optional[str]:
    """The torch_npu version a tag of Ascend/pytorch builds."""
    text = show(pytorch, tag, "version.txt")
    if text and text.strip():
        return text.strip().splitlines()[0].strip()
    setup = show(pytorch, tag, "setup.py") or ""
    found = re.search(r"^VERSION = '([^']+)'", setup, re.M)
    return found.group(1) if found else None


def release_commits(pytorch: Path) -> Dict[str, Tuple[str, str]]:
    """torch_npu version -> (Ascend/pytorch tag, op-plugin commit), final tags before betas."""
    found: Dict[str, Tuple[str, str]] = {}
    tags = [t for t in git(pytorch, "tag").split() if "alpha" not in t.lower() and TAG.match(t)]
    for tag in sorted(tags, key=lambda t: ("beta" in t, "0day" in t, t)):
        version = torch_npu_version(pytorch, tag)
        if not version or version in found:
            continue
        entry = git(pytorch, "ls-tree", tag, "third_party/op-plugin").split()
        if len(entry) >= 3 and entry[1] == "commit":
            found[version] = (tag, entry[2])
    return found


def torch_key(release: str) -> Tuple[int, int]:
    major, minor = Version(release).release[:2]
    return major, minor


def versions_in(spec: object, all_versions: List[str]) -> Set[str]:
    """The versions an ``acl_op:`` / ``op_api:`` spec names (op-plugin's config/README.md)."""
    if spec is None:
        return set()
    if isinstance(spec, list):
        items = [str(s).strip() for s in spec]
        if len(items) == 2 and all(i in all_versions or i == "newest" for i in items):
            first = all_versions.index(items[0])
            last = len(all_versions) - 1 if items[1] == "newest" else all_versions.index(items[1])
            return set(all_versions[first : last + 1])
        return set(items)
    text = str(spec).strip()
    if text == "all_version":
        return set(all_versions)
    return {part.strip() for part in text.split(",") if part.strip()}


def op_name(func: str) -> str:
    return func.split("(", 1)[0].strip()


def read_yaml(op_plugin: Path, commit: str, release: str) -> Tuple[str, Set[str], Set[str]]:
    """(YAML path, ops with op_api, ops with acl_op) for ``release``'s torch at ``commit``."""
    major, minor = torch_key(release)
    gencode = show(op_plugin, commit, "gencode.sh") or ""
    per_version = "$PYTORCH_VERSION_DIR/op_plugin_functions.yaml" in gencode
    path = (
        f"op_plugin/config/v{major}r{minor}/op_plugin_functions.yaml"
        if per_version
        else "op_plugin/config/op_plugin_functions.yaml"
    )
    text = show(op_plugin, commit, path)
    if text is None:
        raise SystemExit(f"op-plugin {commit} has no {path}")
    document = yaml.safe_load(text)
    op_api: Set[str] = set()
    acl_op: Set[str] = set()
    wanted = f"v{major}.{minor}"
    all_versions = [str(v) for v in document.get("all_version", [])]
    # "official" and "symint" are aten ops; "custom" are torch_npu's own (npu_*), not aten.
    for section in ("official", "symint"):
        for entry in document.get(section) or []:
            name = op_name(entry["func"])
            if per_version:
                kinds = {k.strip() for k in str(entry.get("impl_ns", "")).split(",")}
                if "op_api" in kinds:
                    op_api.add(name)
                if "acl_op" in kinds:
                    acl_op.add(name)
                continue
            if wanted in versions_in(entry.get("op_api"), all_versions):
                op_api.add(name)
            if wanted in versions_in(entry.get("acl_op"), all_versions):
                acl_op.add(name)
    return path, op_api, acl_op


def read_warnings(op_plugin: Path, commit: str, release: str) -> List[dict]:
    """Each ``TORCH_NPU_WARN_ONCE`` of the four 64-bit warnings: file, path, line, text, and whether
    it sits in the overload that takes a Scalar ``other`` (NeKernelNpu.cpp has one of each)."""
    major, minor = torch_key(release)
    paths = [
        p
        for p in git(op_plugin, "ls-tree", "-r", "--name-only", commit, "op_plugin/ops").split()
        if "aclops/" in p and p.rsplit("/", 1)[-1] in WARN_FILES
    ]
    found = []
    for name in WARN_FILES:
        candidates = [p for p in paths if p.endswith("/" + name)]
        versioned = [p for p in candidates if f"/v{major}r{minor}/" in p]
        chosen = (versioned or [p for p in candidates if re.search(r"/v\d+r\d+/", p) is None])[:1]
        for path in chosen:
            lines = (show(op_plugin, commit, path) or "").splitlines()
            for index, line in enumerate(lines):
                if "TORCH_NPU_WARN_ONCE(" not in line:
                    continue
                text = []
                for follow in lines[index : index + 6]:
                    text += [s.encode().decode("unicode_escape") for s in STRING.findall(follow)]
                    if ");" in follow:
                        break
                head = index
                while head > 0 and "nocheck(" not in lines[head] and not re.match(r"^\S.*\(", lines[head]):
                    head -= 1
                signature = " ".join(lines[head:index])
                found.append(
                    {
                        "file": name,
                        "path": path,
                        "line": index + 1,
                        "text": "".join(text),
                        "scalar_other": bool(re.search(r"Scalar\s*&?\s*other", signature)),
                    }
                )
    return found


def encode(records: List[dict]) -> dict:
    """First release in full, the others as deltas (``op_api`` and ``acl_op`` each)."""
    out = []
    previous: Dict[str, Set[str]] = {"op_api": set(), "acl_op": set()}
    for record in records:
        entry = {k: v for k, v in record.items() if k not in ("op_api", "acl_op")}
        for kind in ("op_api", "acl_op"):
            ops = set(record[kind])
            entry[f"{kind}_added"] = sorted(ops - previous[kind])
            entry[f"{kind}_removed"] = sorted(previous[kind] - ops)
            previous[kind] = ops
        out.append(entry)
    return {
        "about": "aten ops with an op_api (aclnn) and an acl_op (aclopCompileAndExecute) implementation "
        "per torch_npu release, and the 64-bit warnings of its acl_op sources; generated by "
        "tools/gen_oppaths.py from the op-plugin commit each Ascend/pytorch release tag pins. Each "
        "release lists the ops added and removed relative to the release before it.",
        "releases": out,
    }


def optables_releases() -> List[str]:
    return [r["version"] for r in json.loads(OPTABLES.read_text(encoding="utf-8"))["releases"]]


def build(pytorch: Path, op_plugin: Path, releases: Iterable[str]) -> List[dict]:
    commits = release_commits(pytorch)
    records: List[dict] = []
    by_version: Dict[str, dict] = {}
    for release in releases:
        if release in commits:
            tag, commit = commits[release]
            path, op_api, acl_op = read_yaml(op_plugin, commit, release)
            record = {
                "version": release,
                "pytorch_tag": tag,
                "op_plugin_commit": commit,
                "yaml": path,
                "warnings": read_warnings(op_plugin, commit, release),
                "op_api": sorted(op_api),
                "acl_op": sorted(acl_op),
            }
        else:
            earlier = [
                r for r in by_version if torch_key(r) == torch_key(release) and Version(r) < Version(release)
            ]
            if not earlier:
                torch_version = ".".join(map(str, torch_key(release)))
                raise SystemExit(
                    f"torch_npu {release}: no Ascend/pytorch tag, no earlier torch {torch_version} release"
                )
            source = by_version[max(earlier, key=Version)]
            record = {**source, "version": release, "same_as": source.get("same_as", source["version"])}
        by_version[release] = record
        records.append(record)
        print(
            f"{release}: {len(record['op_api'])} op_api, {len(record['acl_op'])} acl_op, "
            f"{len(record['warnings'])} warnings, {record.get('same_as') or record['op_plugin_commit']}",
            flush=True,
        )
    return records


def clone(url: str, where: Path) -> Path:
    subprocess.run(["git", "clone", "--quiet", "--bare", "--filter=blob:none", url, str(where)], check=True)
    return where


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pytorch", type=Path, help="a git clone of Ascend/pytorch (with its tags)")
    parser.add_argument("--op-plugin", type=Path, help="a git clone of Ascend/op-plugin")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        pytorch = args.pytorch or clone(PYTORCH_URL, Path(scratch, "pytorch"))
        op_plugin = args.op_plugin or clone(OP_PLUGIN_URL, Path(scratch, "op-plugin"))
        try:
            releases = sorted(optables_releases(), key=Version)
        except InvalidVersion as exc:
            raise SystemExit(f"{OPTABLES}: {exc}") from None
        records = build(pytorch, op_plugin, releases)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(encode(records), indent=0) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
