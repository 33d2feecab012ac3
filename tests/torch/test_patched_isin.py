"""The isin code the transformers patches insert: exact, native-op only on the simulated NPU, bounded."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import math
import sys
import textwrap
from pathlib import Path
from typing import Callable, Dict, List

import pytest
import torch
import transformers
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from packaging.version import Version
from torch.utils._python_dispatch import TorchDispatchMode

from ascend_env import sim
from ascend_env.patching.diffs import apply_patch, parse_patch

ROOT = Path(__file__).resolve().parents[2]
PATCHES = ROOT / "patches"
MANIFEST = json.loads((PATCHES / "manifest.json").read_text(encoding="utf-8"))
MODULE_PATCHES = sorted(
    p for p in (PATCHES / "transformers").glob("*.patch") if not p.name.startswith("pytorch-utils-")
)
CHUNK = 1 << 22  # booleans per comparison, as the patches promise
TORCH = Version(torch.__version__).release[:2]

DTYPES = [
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
]
VALUES = [0.0, -0.0, 1.0, 2.0, -1.0, 3.0, 0.5, 255.0, 256.0, 1e9, float("nan"), float("inf")]


@pytest.fixture(scope="module", autouse=True)
def npu():
    if sim.enabled_table() is None:
        sim.enable(torch_npu="2.1.0.post6")
    sim.reset()


def module_helper(path: Path) -> Callable:
    """The module-level ``_isin`` that a 4.40-4.44 patch inserts, compiled on its own."""
    patch = parse_patch(path.read_text(encoding="utf-8"), path.name)
    added = [line.text.decode() for hunk in patch.hunks for line in hunk.lines if line.kind == "+"]
    start = next(i for i, line in enumerate(added) if line.startswith("def _isin("))
    end = next(i for i, line in enumerate(added) if line == "    return found.reshape(elements.shape)")
    namespace: Dict[str, object] = {"torch": torch}
    exec("\n".join(added[start : end + 1]), namespace)  # noqa: S102 - the patch's own code
    return namespace["_isin"]  # type: ignore[return-value]


def patched_pytorch_utils(tmp_path: Path):
    """transformers.pytorch_utils of the installed release with pytorch-utils-isin-v1 applied."""
    original = Path(transformers.__file__).with_name("pytorch_utils.py").read_bytes()
    entry = MANIFEST["releases"][transformers.__version__]["transformers/pytorch_utils.py"]
    assert hashlib.sha256(original).hexdigest() == entry["before"]
    patch_path = PATCHES / MANIFEST["patches"][entry["patch"]]["path"]
    patched = apply_patch(parse_patch(patch_path.read_text(encoding="utf-8"), patch_path.name), original)
    assert hashlib.sha256(patched).hexdigest() == entry["after"]
    path = tmp_path / "pytorch_utils.py"
    path.write_bytes(patched)
    name = "transformers._patched_pytorch_utils"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module.isin_mps_friendly


@pytest.fixture(scope="module")
def implementations(tmp_path_factory) -> Dict[str, Callable]:
    found = {path.stem: module_helper(path) for path in MODULE_PATCHES}
    found["pytorch-utils (installed release)"] = patched_pytorch_utils(tmp_path_factory.mktemp("tu"))
    return found


def tensors(draw, dtype: torch.dtype, shape: List[int]) -> torch.Tensor:
    count = math.prod(shape)
    values = draw(st.lists(st.sampled_from(VALUES), min_size=count, max_size=count))
    if not dtype.is_floating_point:
        values = [0.0 if not math.isfinite(v) else v for v in values]
    data = torch.tensor(values, dtype=torch.float64).reshape(shape)
    return data.to(dtype) if dtype.is_floating_point else data.to(torch.int64).to(dtype)


@st.composite
def cases(draw):
    shapes = st.sampled_from([[], [0], [1], [3], [2, 3], [4, 1], [13], [2, 0]])
    elements = tensors(draw, draw(st.sampled_from(DTYPES)), draw(shapes))
    test_elements = tensors(draw, draw(st.sampled_from(DTYPES)), draw(shapes))
    return elements, test_elements


def check(isin: Callable, elements: torch.Tensor, test_elements) -> None:
    expected = torch.isin(elements, test_elements)
    sim.reset()
    other = test_elements.to("npu") if isinstance(test_elements, torch.Tensor) else test_elements
    got = isin(elements.to("npu"), other)
    assert not sim.fallbacks(), sim.fallbacks()
    assert got.device.type == "npu"
    assert got.dtype == torch.bool and got.shape == elements.shape
    assert torch.equal(got.cpu(), expected), (elements, test_elements)


def native_answers(elements: torch.Tensor, test_elements: torch.Tensor) -> bool:
    """Whether the running torch's own isin gives an answer to compare with: torch <= 2.3 refuses
    bfloat16 and has no brute-force loop for float16, and torch 2.1 can find NaN elements (see
    ascend_env.kernels.isin); the patches answer those cases as membership after promotion."""
    try:
        torch.isin(elements, test_elements)
    except RuntimeError:
        return False
    return TORCH >= (2, 2) or not bool(torch.isnan(elements).any())


@settings(max_examples=150, deadline=None)
@given(cases())
def test_every_patch_matches_torch_isin_on_the_npu(implementations, case):
    elements, test_elements = case
    assume(native_answers(elements, test_elements))
    for isin in implementations.values():
        check(isin, elements, test_elements)


@pytest.mark.parametrize("number", [2, 0, 1.5, -0.0, 255])
def test_python_number_test_elements(implementations, number):
    elements = torch.tensor([[0, 1, 2], [2, 3, 4]])
    for isin in implementations.values():
        check(isin, elements, number)
        check(isin, elements.to(torch.float32), number)


def test_nan_is_never_in_and_negative_zero_is_zero(implementations):
    elements = torch.tensor([float("nan"), -0.0, 0.0, 1.0])
    test_elements = torch.tensor([float("nan"), 0.0])
    for isin in implementations.values():
        got = isin(elements.to("npu"), test_elements.to("npu")).cpu()
        assert got.tolist() == [False, True, True, False]


@pytest.mark.parametrize("count", [9, 10, 40])
def test_zero_dim_elements_promote_like_torch_isin(implementations, count):
    # torch.isin compares a 0-dim tensor in its own dtype below 10 test elements, then promotes.
    cases_ = [
        (torch.tensor(0.1, dtype=torch.float64), torch.full((count,), 0.1, dtype=torch.float32)),
        (torch.tensor(2**40 + 1), torch.ones(count, dtype=torch.int32)),
        (torch.tensor(300, dtype=torch.int16), torch.full((count,), 44, dtype=torch.uint8)),
    ]
    for isin in implementations.values():
        for elements, test_elements in cases_:
            check(isin, elements, test_elements)


class _EqSizes(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.sizes: List[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket is torch.ops.aten.eq:
            self.sizes.append(out.numel())
        return out


@pytest.mark.parametrize("shape", [(4097,), (2, 3000)])
def test_a_vocab_sized_list_is_compared_in_bounded_chunks(implementations, shape):
    generator = torch.Generator().manual_seed(0)
    elements = torch.randint(0, 150_000, shape, generator=generator)
    test_elements = torch.randint(0, 150_000, (5000,), generator=generator)
    expected = torch.isin(elements, test_elements)
    for isin in implementations.values():
        with _EqSizes() as mode:
            got = isin(elements.to("npu"), test_elements.to("npu"))
        assert torch.equal(got.cpu(), expected)
        assert len(mode.sizes) > 1 and max(mode.sizes) <= CHUNK


def test_cpu_keeps_torch_isin(implementations):
    elements, test_elements = torch.tensor([1, 2, 3]), torch.tensor([2])

    class Calls(TorchDispatchMode):
        ops: List[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    for isin in implementations.values():
        with Calls() as calls:
            assert isin(elements, test_elements).tolist() == [False, True, False]
        assert "aten.isin" in calls.ops and "aten.eq" not in calls.ops


def test_inserted_code_parses_as_python_3_8():
    # transformers 4.40-4.44 still support Python 3.8: the inserted code must not need newer syntax.
    for path in sorted((PATCHES / "transformers").glob("*.patch")):
        patch = parse_patch(path.read_text(encoding="utf-8"), path.name)
        added = [line.text.decode() for h in patch.hunks for line in h.lines if line.kind == "+"]
        start = next(i for i, line in enumerate(added) if line.lstrip().startswith(("def _isin", "if elem")))
        last = "return found.reshape(elements.shape)"
        end = next(i for i, line in enumerate(added) if line.strip() == last)
        ast.parse(textwrap.dedent("\n".join(added[start : end + 1])), feature_version=(3, 8))
