"""Check the transformers patches against every release they are for, and rewrite the manifest.

For every transformers release ``R`` with ``4.40.0 <= R < 5.1.0`` on the package index (yanked
releases and pre-releases included: a user can pin any of them), this:

1. downloads its wheel with ``pip download --no-deps --only-binary :all:`` into a cache directory;
2. reads ``transformers/pytorch_utils.py`` and ``transformers/generation/*.py``, and finds the files
   that call ``torch.isin`` outside a CPU/CUDA branch: those are the files the release needs patched;
3. applies to each the one patch of ``patches/transformers/`` whose hunks fit it, with
   ``ascend_env.patching.diffs.apply_patch`` (strict: no fuzz), byte-compiles the result, checks that no
   ``torch.isin`` call is left outside a CPU/CUDA branch and that undoing the patch gives the
   original bytes back;
4. records the sha256 of each file before and after in ``patches/manifest.json``, and writes,
   for the unit tests, a small excerpt of one real file per patch (every line farther than a few
   lines from a change left empty) to ``tests/unit/data/patch_excerpts/``.

It also checks the two ends of the nothing-to-do range: the last release below it calls no
``torch.isin`` in generation, and the first release at its top requires torch >= 2.4.

Exit status: 0 when everything checks out (the files are written, or with ``--check`` already
up to date), 1 otherwise (nothing is written).

Usage::

    python tools/check_patches.py [--cache-dir DIR] [--offline] [--check] [--versions 4.46.3 ...]
"""

from __future__ import annotations

import argparse
import ast
import difflib
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from ascend_env.patching.diffs import FilePatch, PatchError, apply_patch, parse_patch

ROOT = Path(__file__).resolve().parent.parent
PATCHES = ROOT / "patches"
MANIFEST = PATCHES / "manifest.json"
DEFAULT_CACHE = ROOT / ".cache" / "transformers-wheels"
EXCERPTS = ROOT / "tests" / "unit" / "data" / "patch_excerpts"
EXCERPT_MARGIN = 10
DISTRIBUTION = "transformers"
BELOW = Version("4.40.0")
FROM = Version("5.1.0")
WHY = "<=4.39 never calls isin in generation; >=5.1 needs torch>=2.4, whose torch_npu has a native isin"
# The old torch_npu lines without an NPU isin all sit on torch below this.
NATIVE_ISIN_TORCH = Version("2.4")
OLD_TORCH = "2.3.1"


def is_generation_file(name: str) -> bool:
    """Whether ``name`` (a wheel member) is on the generation path this project patches."""
    return name == "transformers/pytorch_utils.py" or (
        name.startswith("transformers/generation/") and name.endswith(".py") and name.count("/") == 2
    )


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def natural_key(patch_id: str) -> Tuple:
    """Sort ``x-v2`` before ``x-v10``."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", patch_id))


# --- finding torch.isin calls -------------------------------------------------------------------


def _is_torch_isin(node: ast.AST) -> bool:
    func = node.func if isinstance(node, ast.Call) else None
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "isin"
        and isinstance(func.value, ast.Name)
        and func.value.id == "torch"
    )


def _device_test(test: ast.AST) -> Optional[str]:
    """``"in"`` for ``<x>.type in ("cpu", "cuda")``, ``"not in"`` for its negation, else None."""
    if not (
        isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.In, ast.NotIn))
    ):
        return None
    (choices,) = test.comparators
    if not isinstance(choices, (ast.Tuple, ast.List, ast.Set)):
        return None
    values = {elt.value for elt in choices.elts if isinstance(elt, ast.Constant)}
    if len(values) != len(choices.elts) or values != {"cpu", "cuda"}:
        return None
    return "in" if isinstance(test.ops[0], ast.In) else "not in"


def unguarded_isin_calls(source: bytes, filename: str = "<file>") -> List[int]:
    """Line numbers of the ``torch.isin(...)`` calls that other devices than CPU and CUDA reach.

    A call is guarded inside ``if <x>.type in ("cpu", "cuda"):``, in the ``else`` of its negation,
    and after ``if <x>.type not in ("cpu", "cuda"): ... return`` in the same block.
    """
    tree = ast.parse(source, filename)
    found: List[int] = []

    def visit_block(statements: Sequence[ast.stmt], guarded: bool) -> None:
        for statement in statements:
            visit(statement, guarded)
            if (
                isinstance(statement, ast.If)
                and _device_test(statement.test) == "not in"
                and isinstance(statement.body[-1], (ast.Return, ast.Raise))
            ):
                guarded = True

    def visit(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, ast.Call) and _is_torch_isin(node) and not guarded:
            found.append(node.lineno)
        if isinstance(node, ast.If):
            test = _device_test(node.test)
            visit(node.test, guarded)
            visit_block(node.body, guarded or test == "in")
            visit_block(node.orelse, guarded or test == "not in")
            return
        for _, value in ast.iter_fields(node):
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                visit_block(value, guarded)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST):
                        visit(item, guarded)
            elif isinstance(value, ast.AST):
                visit(value, guarded)

    visit(tree, False)
    return sorted(found)


# --- patches ------------------------------------------------------------------------------------


def load_patches(directory: Path = PATCHES) -> Dict[str, FilePatch]:
    """Every ``<distribution>/*.patch`` under ``directory``, by id (raises PatchError)."""
    patches: Dict[str, FilePatch] = {}
    for path in sorted((directory / DISTRIBUTION).glob("*.patch")):
        name = f"{DISTRIBUTION}/{path.name}"
        patch = parse_patch(path.read_text(encoding="utf-8"), name)
        patches[patch.id] = patch
    return patches


@dataclass
class Change:
    patch: str
    before: str
    after: str
    original: bytes = field(default=b"", repr=False)
    patched: bytes = field(default=b"", repr=False)


@dataclass
class ReleaseResult:
    version: str
    changes: Dict[str, Change] = field(default_factory=dict)
    problems: List[str] = field(default_factory=list)


def patched_problems(patch: FilePatch, original: bytes, patched: bytes) -> List[str]:
    """What is wrong with ``patched`` (``original`` with ``patch`` applied); empty when nothing."""
    target = patch.target
    try:
        compile(patched, target, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return [f"{target}: {patch.id} leaves a syntax error at line {exc.lineno}: {exc.msg}"]
    problems: List[str] = []
    left = unguarded_isin_calls(patched, target)
    if left:
        problems.append(f"{target}: {patch.id} leaves torch.isin outside a CPU/CUDA branch at lines {left}")
    if apply_patch(patch, patched, reverse=True) != original:
        problems.append(f"{target}: undoing {patch.id} does not give the original bytes back")
    return problems


def check_file(
    target: str, original: bytes, candidates: Sequence[FilePatch]
) -> Tuple[Optional[FilePatch], Optional[bytes], List[str]]:
    """The one patch among ``candidates`` that applies to ``original`` and passes every check.

    Returns ``(patch, patched, [])``, or ``(None, None, problems)``.
    """
    good: List[Tuple[FilePatch, bytes]] = []
    problems: List[str] = []
    for patch in candidates:
        try:
            patched = apply_patch(patch, original)
        except PatchError:
            continue
        found = patched_problems(patch, original, patched)
        problems.extend(found)
        if not found:
            good.append((patch, patched))
    if not good:
        ids = ", ".join(p.id for p in candidates) or "none"
        return None, None, problems or [f"{target}: no patch fits (tried: {ids}); write a new variant"]
    if any(patched != good[0][1] for _, patched in good[1:]):
        ids = ", ".join(p.id for p, _ in good)
        return None, None, [f"{target}: patches {ids} all fit but disagree; make their contexts distinct"]
    return good[0][0], good[0][1], []


def check_release(version: str, files: Dict[str, bytes], patches: Dict[str, FilePatch]) -> ReleaseResult:
    """Which files of ``version`` need a patch, which patch fits each, and their hashes."""
    result = ReleaseResult(version)
    by_target: Dict[str, List[FilePatch]] = {}
    for patch_id in sorted(patches, key=natural_key):
        by_target.setdefault(patches[patch_id].target, []).append(patches[patch_id])
    for target in sorted(files):
        original = files[target]
        try:
            needs = unguarded_isin_calls(original, target)
        except SyntaxError as exc:
            result.problems.append(f"{target}: does not parse ({exc.msg} at line {exc.lineno})")
            continue
        if not needs:
            continue
        patch, patched, problems = check_file(target, original, by_target.get(target, []))
        result.problems.extend(problems)
        if patch is not None and patched is not None and not problems:
            result.changes[target] = Change(patch.id, sha256(original), sha256(patched), original, patched)
    if not result.changes and not result.problems:
        result.problems.append("no generation file calls torch.isin: this release belongs to nothing_to_do")
    return result


def build_manifest(results: Iterable[ReleaseResult], patches: Dict[str, FilePatch]) -> dict:
    """The manifest for ``results`` (all of which must be free of problems)."""
    releases = sorted(results, key=lambda r: Version(r.version))
    verified: Dict[str, List[str]] = {patch_id: [] for patch_id in patches}
    for release in releases:
        for change in release.changes.values():
            verified[change.patch].append(release.version)
    return {
        "schema": 1,
        "distribution": DISTRIBUTION,
        "generated_by": "tools/check_patches.py",
        "nothing_to_do": {"below": str(BELOW), "from": str(FROM), "why": WHY},
        "patches": {
            patch_id: {
                "path": f"{DISTRIBUTION}/{patch_id}.patch",
                "target": patches[patch_id].target,
                "verified_on": verified[patch_id],
            }
            for patch_id in sorted(patches, key=natural_key)
        },
        "releases": {
            release.version: {
                target: {"patch": change.patch, "before": change.before, "after": change.after}
                for target, change in sorted(release.changes.items())
            }
            for release in releases
        },
    }


def manifest_text(manifest: dict) -> str:
    return json.dumps(manifest, indent=2) + "\n"


def excerpt(before: bytes, after: bytes, margin: int = EXCERPT_MARGIN) -> Tuple[bytes, bytes]:
    """``before`` and ``after`` with every line farther than ``margin`` from a change left empty.

    Line numbers stay as they were, so a patch applies to the excerpt of ``before`` exactly as to
    the whole file, and gives the excerpt of ``after``.
    """
    old, new = before.split(b"\n"), after.split(b"\n")
    keep_old, keep_new = set(), set()
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            keep_old.update(range(i1 - margin, i2 + margin))
            keep_new.update(range(j1 - margin, j2 + margin))
    blank = lambda lines, keep: b"\n".join(line if i in keep else b"" for i, line in enumerate(lines))  # noqa: E731
    return blank(old, keep_old), blank(new, keep_new)


def excerpts(results: Sequence[ReleaseResult], manifest: dict) -> Dict[str, Tuple[str, bytes, bytes]]:
    """For each patch, excerpts of the first release it is verified on: ``(release, before, after)``."""
    found: Dict[str, Tuple[str, bytes, bytes]] = {}
    by_version = {result.version: result for result in results}
    for patch_id, entry in manifest["patches"].items():
        release = entry["verified_on"][0]
        change = by_version[release].changes[entry["target"]]
        found[patch_id] = (release, *excerpt(change.original, change.patched))
    return found


def excerpt_files(found: Dict[str, Tuple[str, bytes, bytes]]) -> Dict[Path, bytes]:
    """The test data files for ``found``: one ``.before`` per patch and an index with the hashes."""
    files: Dict[Path, bytes] = {}
    index = {}
    for patch_id, (release, before, after) in sorted(found.items()):
        files[EXCERPTS / f"{patch_id}.before"] = before
        index[patch_id] = {"release": release, "before": sha256(before), "after": sha256(after)}
    files[EXCERPTS / "index.json"] = (json.dumps(index, indent=2) + "\n").encode("utf-8")
    return files


# --- wheels -------------------------------------------------------------------------------------


def _pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, check=False)


def index_versions() -> List[str]:
    """Every transformers version on the package index, yanked and pre-releases included.

    ``pip index versions`` hides yanked releases, so this asks pip for a version that does not
    exist and reads the "(from versions: ...)" list of its error message.
    """
    with tempfile.TemporaryDirectory() as scratch:
        done = _pip(
            "download",
            "--no-deps",
            "--only-binary",
            ":all:",
            "--pre",
            "--dest",
            scratch,
            f"{DISTRIBUTION}==0.0.0.dev0",
        )
    match = re.search(r"\(from versions: ([^)]*)\)", done.stderr)
    if match is None:
        raise SystemExit(f"check_patches: cannot list {DISTRIBUTION} versions with pip:\n{done.stderr}")
    return [v.strip() for v in match.group(1).split(",") if v.strip()]


def in_range(versions: Iterable[str], low: Version = BELOW, high: Version = FROM) -> List[str]:
    """The versions in ``[low, high)``, sorted; unparsable ones are dropped."""
    kept = []
    for text in versions:
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if low <= version < high:
            kept.append(text)
    return sorted(kept, key=Version)


def wheel_path(cache: Path, version: str) -> Path:
    return cache / f"{DISTRIBUTION}-{version}-py3-none-any.whl"


def fetch(version: str, cache: Path, offline: bool = False) -> Path:
    """The cached wheel of ``version``, downloaded first unless ``offline``."""
    path = wheel_path(cache, version)
    if path.is_file() or offline:
        return path
    cache.mkdir(parents=True, exist_ok=True)
    done = _pip(
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--dest",
        str(cache),
        f"{DISTRIBUTION}=={version}",
    )
    if done.returncode != 0 or not path.is_file():
        raise SystemExit(f"check_patches: pip could not download {DISTRIBUTION}=={version}:\n{done.stderr}")
    return path


def generation_files(wheel: Path) -> Dict[str, bytes]:
    """The generation-path sources of a transformers wheel, by path inside site-packages."""
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist() if is_generation_file(name)}


def torch_requirement(wheel: Path) -> Optional[Requirement]:
    """The wheel's ``Requires-Dist: torch... ; extra == "torch"``, if any."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(metadata).decode("utf-8")
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        try:
            requirement = Requirement(line.split(":", 1)[1].strip())
        except InvalidRequirement:
            continue
        if (
            requirement.name == "torch"
            and requirement.marker
            and requirement.marker.evaluate({"extra": "torch"})
        ):
            return requirement
    return None


def check_boundaries(available: Sequence[str], cache: Path, offline: bool) -> List[str]:
    """Problems with the two ends of the nothing-to-do range (none when both hold)."""
    problems: List[str] = []
    finals = sorted(Version(v) for v in in_range(available, Version("0"), Version("999")))
    finals = [v for v in finals if not v.is_prerelease]
    below = [v for v in finals if v < BELOW]
    above = [v for v in finals if v >= FROM]
    if below:
        last = str(below[-1])
        files = generation_files(fetch(last, cache, offline))
        calls = {name: unguarded_isin_calls(data, name) for name, data in files.items()}
        calls = {name: lines for name, lines in calls.items() if lines}
        if calls:
            problems.append(f"{last} (below {BELOW}) calls torch.isin in generation: {calls}")
        else:
            print(f"ok   {last}: below {BELOW}, no torch.isin in generation")
    if above:
        first = str(above[0])
        requirement = torch_requirement(fetch(first, cache, offline))
        if requirement is None or requirement.specifier.contains(OLD_TORCH, prereleases=True):
            problems.append(
                f"{first} (from {FROM}) does not require torch >= {NATIVE_ISIN_TORCH}: {requirement}"
            )
        else:
            print(f"ok   {first}: from {FROM}, requires {requirement.name}{requirement.specifier}")
    return problems


# --- command line -------------------------------------------------------------------------------


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help="where wheels are kept")
    parser.add_argument("--offline", action="store_true", help="use only wheels already in the cache")
    parser.add_argument("--check", action="store_true", help="do not write; fail if the manifest is stale")
    parser.add_argument("--versions", nargs="+", help="check only these releases (never writes)")
    args = parser.parse_args(argv)

    patches = load_patches()
    if args.offline:
        available = [p.name.split("-")[1] for p in args.cache_dir.glob(f"{DISTRIBUTION}-*-py3-none-any.whl")]
    else:
        available = index_versions()
    versions = args.versions or in_range(available)
    problems: List[str] = [] if args.versions else check_boundaries(available, args.cache_dir, args.offline)
    results: List[ReleaseResult] = []
    for version in versions:
        wheel = fetch(version, args.cache_dir, args.offline)
        if not wheel.is_file():
            problems.append(f"{version}: no wheel in {args.cache_dir} (run without --offline)")
            continue
        result = check_release(version, generation_files(wheel), patches)
        results.append(result)
        used = ", ".join(sorted({c.patch for c in result.changes.values()}, key=natural_key))
        print(f"{'ok ' if not result.problems else 'BAD'}  {version}: {used or '-'}")
        problems.extend(f"{version}: {problem}" for problem in result.problems)

    manifest = build_manifest(results, patches)
    unused = [patch_id for patch_id, entry in manifest["patches"].items() if not entry["verified_on"]]
    if not args.versions:
        problems.extend(f"patch {patch_id} fits no release: delete it" for patch_id in unused)
    variants = {sha for r in results for sha in (c.before for c in r.changes.values())}
    print(f"{len(results)} releases, {len(variants)} distinct file variants patched, {len(patches)} patches")
    if problems:
        print("\n".join(["problems:", *("  " + problem for problem in problems)]), file=sys.stderr)
        return 1
    if args.versions:
        return 0
    outputs = {MANIFEST: manifest_text(manifest).encode("utf-8")}
    outputs.update(excerpt_files(excerpts(results, manifest)))
    stale = [path for path, data in outputs.items() if not path.is_file() or path.read_bytes() != data]
    if args.check:
        for path in stale:
            print(f"{path.relative_to(ROOT)} is stale: run tools/check_patches.py", file=sys.stderr)
        if not stale:
            print("the manifest and the test excerpts are up to date")
        return 1 if stale else 0
    EXCERPTS.mkdir(parents=True, exist_ok=True)
    for old in EXCERPTS.glob("*.before"):
        if old not in outputs:
            old.unlink()
    for path in stale:
        path.write_bytes(outputs[path])
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
