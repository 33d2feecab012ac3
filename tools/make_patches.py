"""Regenerate ``patches/transformers/*.patch`` from the transformers wheels.

The change itself is defined here once, as a text transformation of the original file:

* transformers 4.40-4.44 call ``torch.isin`` directly in ``generation/``: add a module-level
  ``_isin`` after the ``logger = ...get_logger(__name__)`` line (or before the first class where
  there is none) and call it instead;
* transformers 4.45-5.0 route every generation call through ``pytorch_utils.isin_mps_friendly``:
  put the exact eq/any comparison first in it, for every device but CPU and CUDA.

For each target file this transforms the file of every release in the range and groups the
releases: a patch written from one release is reused for every later release it turns into
exactly the transformed text, so a new variant appears only where the context really differs.
It tries 3, 2 and 1 lines of context and keeps the fewest variants (the most context on a tie).
Then run ``tools/check_patches.py`` to verify the set and rewrite the manifest.

Usage::

    python tools/make_patches.py [--cache-dir DIR] [--offline]
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from check_patches import (
    DEFAULT_CACHE,
    DISTRIBUTION,
    PATCHES,
    fetch,
    generation_files,
    in_range,
    index_versions,
    natural_key,
    unguarded_isin_calls,
)

from ascend_env.patching.diffs import FilePatch, PatchError, apply_patch, parse_patch

# The comparison itself, indented for a function body; shared by both kinds of patch.
COMPARE = """\
if not isinstance(test_elements, torch.Tensor):
    return elements == test_elements  # what torch.isin does with a Python number
if elements.dim() == 0 and test_elements.numel() >= 10:  # torch.isin sorts: plain promotion
    dtype = torch.promote_types(elements.dtype, test_elements.dtype)
else:
    dtype = torch.result_type(elements, test_elements)
flat = elements.to(dtype).reshape(-1, 1)
tests = test_elements.to(device=elements.device, dtype=dtype).reshape(-1)
found = torch.zeros(flat.shape[0], dtype=torch.bool, device=elements.device)
step = max(1, (1 << 22) // max(1, flat.shape[0]))  # at most 4M booleans per comparison
for start in range(0, tests.shape[0], step):
    found |= (flat == tests[start : start + step]).any(dim=1)
return found.reshape(elements.shape)
"""

WHY_TEXT = (
    "torch_npu 2.1.0.post6 and earlier, 2.2.x and 2.3.1 have no NPU kernel for aten::isin,\n"
    "#   so each of these calls fell back to the CPU (a device-to-host copy and back)."
)

HELPER = (
    "\n\n"
    "def _isin(elements, test_elements):\n"
    '    """`torch.isin` on CPU and CUDA; elsewhere the same result with eq/any only (added by ascend-env:\n'
    '    torch_npu before 2.4 has no NPU isin, so it ran on the CPU at every decoding step)."""\n'
    '    if elements.device.type in ("cpu", "cuda"):\n'
    "        return torch.isin(elements, test_elements)\n"
    + "".join("    " + line + "\n" for line in COMPARE.splitlines())
)

MPS_IF = '    if elements.device.type == "mps" and not is_torch_greater_or_equal_than_2_4:\n'
MPS_NEW = (
    '    if elements.device.type not in ("cpu", "cuda"):\n'
    "        # Added by ascend-env: torch_npu before 2.4 has no NPU isin, so every caller in generation ran\n"
    "        # it on the CPU at every decoding step. Off CPU and CUDA: the same result, with eq/any only.\n"
    + "".join("        " + line + "\n" for line in COMPARE.splitlines())
    + "\n"
)

LOGGER = re.compile(rb"^logger = (?:logging\.)?get_logger\(__name__\)\n", re.MULTILINE)
FIRST_CLASS = re.compile(rb"^class ", re.MULTILINE)

# target -> (patch id stem, what the patch changes)
TARGETS: Dict[str, Tuple[str, str]] = {
    "transformers/generation/stopping_criteria.py": (
        "stopping-criteria-isin",
        "EosTokenCriteria.__call__ (every decoding step) calls a new module-level _isin() instead of\n"
        "#   torch.isin().",
    ),
    "transformers/generation/logits_process.py": (
        "logits-process-isin",
        "MinLength, MinNewTokensLength, SuppressTokensAtBegin and SuppressTokens logits processors\n"
        "#   (every step they run) call a new module-level _isin() instead of torch.isin().",
    ),
    "transformers/generation/utils.py": (
        "generation-utils-isin",
        "GenerationMixin._prepare_attention_mask_for_generation and _prepare_special_tokens (once per\n"
        "#   generate() call) call a new module-level _isin() instead of torch.isin().",
    ),
    "transformers/generation/candidate_generator.py": (
        "candidate-generator-isin",
        "PromptLookupCandidateGenerator.get_candidates (every prompt-lookup step) calls a new\n"
        "#   module-level _isin() instead of torch.isin().",
    ),
    "transformers/pytorch_utils.py": (
        "pytorch-utils-isin",
        "isin_mps_friendly(), which every generation caller uses, keeps torch.isin() on CPU and CUDA;\n"
        "#   on any other device it first computes the same result (dtype promotion, NaN never in,\n"
        "#   -0.0 == 0.0, 0-dim and empty inputs) with eq/any only, in comparisons of at most 4M booleans.",
    ),
}
HELPER_NOTE = (
    "\n#   _isin() is torch.isin() on CPU and CUDA; on any other device it gives the same result\n"
    "#   (dtype promotion, NaN never in, -0.0 == 0.0, 0-dim and empty inputs) with eq/any only, in\n"
    "#   comparisons of at most 4M booleans."
)
UPSTREAM = {
    "module": (
        "not upstream; transformers 4.45.0 moved these calls to pytorch_utils.isin_mps_friendly(),\n"
        "#   which the pytorch-utils-isin patches cover."
    ),
    "pytorch_utils": (
        "not upstream; isin_mps_friendly() special-cases MPS only, for the same reason on torch < 2.4\n"
        "#   (https://github.com/pytorch/pytorch/issues/77764)."
    ),
}
REMOVE_WHEN = {
    "module": (
        "the environment's torch_npu is 2.4 or newer (native NPU isin), or transformers is 4.45 or newer."
    ),
    "pytorch_utils": (
        "the environment's torch_npu is 2.4 or newer (native NPU isin); transformers 5.1 and newer\n"
        "#   require torch >= 2.4 and need no patch."
    ),
}


def transform(target: str, original: bytes) -> Optional[bytes]:
    """The patched text of ``target``, or None when the file needs no patch."""
    calls = unguarded_isin_calls(original, target)
    if not calls:
        return None
    if target == "transformers/pytorch_utils.py":
        text = original.decode("utf-8")
        if text.count(MPS_IF) != 1:
            raise SystemExit(f"{target}: isin_mps_friendly's MPS branch is not the known text")
        return text.replace(MPS_IF, MPS_NEW + MPS_IF).encode("utf-8")
    lines = original.split(b"\n")
    for number in calls:
        line = lines[number - 1]
        if line.count(b"torch.isin(") != 1:
            raise SystemExit(f"{target}:{number}: expected one torch.isin( call")
        lines[number - 1] = line.replace(b"torch.isin(", b"_isin(")
    text = b"\n".join(lines)
    if b"_isin" in original:
        raise SystemExit(f"{target}: already defines _isin")
    helper = HELPER.encode("utf-8")
    match = LOGGER.search(text)
    if match is not None:  # after the logger line
        return text[: match.end()] + helper + text[match.end() :]
    match = FIRST_CLASS.search(text)
    if match is None:
        raise SystemExit(f"{target}: no logger line or class to put _isin() near")
    return text[: match.start()] + helper[2:] + b"\n\n" + text[match.start() :]  # before the first class


def header(target: str, patch_id: str) -> str:
    kind = "pytorch_utils" if target == "transformers/pytorch_utils.py" else "module"
    changes = TARGETS[target][1] + (HELPER_NOTE if kind == "module" else "")
    return (
        f"# Patch: {patch_id}\n"
        f"# Changes: {changes}\n"
        f"# Why: {WHY_TEXT}\n"
        f"# Upstream: {UPSTREAM[kind]}\n"
        f"# Remove-when: {REMOVE_WHEN[kind]}\n"
    )


def diff(target: str, before: bytes, after: bytes, context: int) -> str:
    lines = difflib.unified_diff(
        before.decode("utf-8").splitlines(keepends=True),
        after.decode("utf-8").splitlines(keepends=True),
        f"a/{target}",
        f"b/{target}",
        n=context,
    )
    return "".join(lines)


def group(
    target: str, files: Sequence[Tuple[str, bytes, bytes]], context: int
) -> List[Tuple[str, FilePatch]]:
    """Patch texts for ``files`` ((version, before, after), in version order)."""
    stem = TARGETS[target][0]
    made: List[Tuple[str, FilePatch]] = []
    for _version, before, after in files:
        fitting = False
        for _text, patch in made:
            try:
                fitting = apply_patch(patch, before) == after
            except PatchError:
                fitting = False
            if fitting:
                break
        if fitting:
            continue
        patch_id = f"{stem}-v{len(made) + 1}"
        text = header(target, patch_id) + diff(target, before, after, context)
        made.append((text, parse_patch(text, f"{DISTRIBUTION}/{patch_id}.patch")))
    return made


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--offline", action="store_true", help="use only wheels already in the cache")
    args = parser.parse_args(argv)

    if args.offline:
        available = [p.name.split("-")[1] for p in args.cache_dir.glob(f"{DISTRIBUTION}-*-py3-none-any.whl")]
    else:
        available = index_versions()
    per_target: Dict[str, List[Tuple[str, bytes, bytes]]] = {target: [] for target in TARGETS}
    for version in in_range(available):
        for target, original in sorted(
            generation_files(fetch(version, args.cache_dir, args.offline)).items()
        ):
            patched = transform(target, original) if target in TARGETS else None
            if patched is not None:
                per_target[target].append((version, original, patched))
            elif unguarded_isin_calls(original, target):
                raise SystemExit(f"{version}: {target} calls torch.isin but no patch is defined for it")

    out = PATCHES / DISTRIBUTION
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.patch"):
        old.unlink()
    for target, files in per_target.items():
        if not files:
            continue
        options = [group(target, files, context) for context in (3, 2, 1)]
        best = min(options, key=len)  # min keeps the first, i.e. the most context, on a tie
        for text, patch in sorted(best, key=lambda item: natural_key(item[1].id)):
            (out / f"{patch.id}.patch").write_text(text, encoding="utf-8")
        print(
            f"{target}: {len(files)} releases, {len(set(b for _, b, _ in files))} variants, "
            f"{len(best)} patches ({[len(o) for o in options]} with 3/2/1 lines of context)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
