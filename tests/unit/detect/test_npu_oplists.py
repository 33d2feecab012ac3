"""Reading torch_npu's ``supported:`` op lists."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ascend_env.detect import npu_oplists
from ascend_env.exceptions import EnvironmentProblem

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture
def torch_npu_dir(tmp_path: Path) -> Path:
    """A torch_npu package directory holding real excerpts of 2.1.0.post6's op lists."""
    aten = tmp_path / "torch_npu" / "csrc" / "aten"
    aten.mkdir(parents=True)
    shutil.copy(DATA / "npu_native_functions-2.1.0.post6.yaml", aten / "npu_native_functions.yaml")
    shutil.copy(
        DATA / "npu_native_functions_by_codegen-2.1.0.post6-excerpt.yaml",
        aten / "npu_native_functions_by_codegen.yaml",
    )
    return tmp_path / "torch_npu"


def test_real_lists_of_2_1_0_post6(torch_npu_dir: Path):
    ops = npu_oplists.read_torch_npu(torch_npu_dir)
    # bare strings, from either file
    assert {"empty.memory_format", "_copy_from_and_resize", "view", "resize_"} <= ops
    # mappings with `func: name.overload(schema)`, and with `func: name` alone
    assert {"eq.Tensor", "any.dim", "clone", "copy_"} <= ops
    # 2.1.0.post6 has these isin overloads natively, and not the Tensor_Tensor ones
    assert {"isin.Tensor_Scalar", "isin.Tensor_Scalar_out", "isin.Scalar_Tensor_out"} <= ops
    assert "isin.Tensor_Tensor" not in ops
    assert "isin.Tensor_Tensor_out" not in ops
    # ops listed only under `custom:` or `symint:` are not native aten kernels
    assert "npu_change_data_ptr" not in ops
    assert "embedding" not in ops


@pytest.mark.parametrize(
    "entry, name",
    [
        ("abs", "abs"),
        ("abs.out", "abs.out"),
        ({"func": "isin.Tensor_Scalar(Tensor e, Scalar t) -> Tensor", "op_api": 1}, "isin.Tensor_Scalar"),
        ({"func": "clone"}, "clone"),
        ({"op_api": True}, ""),
        (42, ""),
        (None, ""),
        ("not an op name!", ""),
    ],
)
def test_entry_name(entry, name):
    assert npu_oplists.entry_name(entry) == name


def test_one_file_is_enough(torch_npu_dir: Path):
    (torch_npu_dir / "csrc" / "aten" / "npu_native_functions_by_codegen.yaml").unlink()
    ops = npu_oplists.read_torch_npu(torch_npu_dir)
    assert "view" in ops
    assert "eq.Tensor" not in ops


def test_missing_lists_are_a_clear_error(tmp_path: Path):
    with pytest.raises(EnvironmentProblem) as info:
        npu_oplists.read_torch_npu(tmp_path)
    assert "missing" in info.value.problem
    assert "reinstall torch_npu" in info.value.fix


@pytest.mark.parametrize(
    "text, problem",
    [
        ("supported: [unclosed", "not valid YAML"),
        ("- just\n- a list\n", "top level is not a mapping"),
        ("supported: 12\n", "not a list"),
    ],
)
def test_broken_yaml_is_a_clear_error(text: str, problem: str):
    with pytest.raises(EnvironmentProblem) as info:
        npu_oplists.parse_supported(text, "x.yaml")
    assert problem in info.value.problem
    assert "x.yaml" in info.value.problem


def test_empty_document_has_no_ops():
    assert npu_oplists.parse_supported("") == frozenset()
    assert npu_oplists.parse_supported("backend: NPU\n") == frozenset()
