"""The op-path data (``ascend_env/data/oppaths/oppaths.json``) against facts read in the sources.

Sources named below: Ascend/pytorch tag ``v6.0.rc2-pytorch2.1.0`` (``setup.py``: ``VERSION =
'2.1.0.post6'``; submodule ``third_party/op-plugin`` at b761d5824d7bc3f48033fe7120552cc2cfbce56d) and
op-plugin at that commit: ``gencode.sh`` feeds ``op_plugin/config/$PYTORCH_VERSION_DIR/
op_plugin_functions.yaml``, i.e. ``op_plugin/config/v2r1/op_plugin_functions.yaml``, where
``add.Tensor`` has ``impl_ns: acl_op, op_api`` and ``__lshift__.Tensor`` ``impl_ns: acl_op``.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from ascend_env.exceptions import UsageError
from ascend_env.sim import oppaths, optables

ROOT = Path(__file__).resolve().parents[3]
COMMIT_210_POST6 = "b761d5824d7bc3f48033fe7120552cc2cfbce56d"


def generator():
    spec = importlib.util.spec_from_file_location("gen_oppaths", ROOT / "tools" / "gen_oppaths.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_op_table_release_has_op_path_data():
    assert oppaths.releases() == optables.releases()


def test_210_post6_records_its_op_plugin_commit():
    records = json.loads(oppaths.DATA_FILE.read_text(encoding="utf-8"))["releases"]
    record = next(r for r in records if r["version"] == "2.1.0.post6")
    assert record["op_plugin_commit"] == COMMIT_210_POST6
    assert record["pytorch_tag"] == "v6.0.rc2-pytorch2.1.0"
    assert record["yaml"] == "op_plugin/config/v2r1/op_plugin_functions.yaml"


def test_add_tensor_has_both_paths_and_lshift_only_acl_op_in_210_post6():
    data = oppaths.load("2.1.0.post6")
    assert "add.Tensor" in data.op_api and "add.Tensor" in data.acl_op
    assert "__lshift__.Tensor" in data.acl_op and "__lshift__.Tensor" not in data.op_api
    # op_plugin/config/v2r1/op_plugin_functions.yaml: _fft_c2c has impl_ns: op_api only
    assert "_fft_c2c" in data.op_api and "_fft_c2c" not in data.acl_op


def test_the_four_64bit_warnings_of_210_post6_as_in_the_sources():
    # op_plugin/ops/base_ops/aclops/*.cpp at b761d5824d7bc3f48033fe7120552cc2cfbce56d
    found = {(w.file, w.line, w.scalar_other): w.text for w in oppaths.load("2.1.0.post6").warnings}
    assert found[("AddKernelNpu.cpp", 82, False)] == (
        "The oprator of add is executed, Currently High Accuracy but Low Performance OP with 64-bit has been "
        "used, Please Do Some Cast at Python Functions with 32-bit for Better Performance!"
    )
    assert ("NeKernelNpu.cpp", 28, False) in found and ("NeKernelNpu.cpp", 45, True) in found
    # GatherKernelNpu.cpp:33-34 concatenates "...Low Performance OP" "with 64-bit has been used,Please ..."
    gather = found[("GatherKernelNpu.cpp", 33, False)]
    assert "Low Performance OPwith 64-bit has been used,Please Do" in gather
    index_select = found[("IndexSelectKernelNpu.cpp", 33, False)]
    assert index_select.startswith("The oprator of index_select is executed")


def test_single_yaml_releases_read_version_specs():
    # From 2.1.0.post8 (op-plugin 070332e6) gencode.sh reads op_plugin/config/op_plugin_functions.yaml, with
    # acl_op: / op_api: version specs; add.Tensor keeps both paths there too.
    data = oppaths.load("2.4.0")
    assert "add.Tensor" in data.op_api and "add.Tensor" in data.acl_op
    assert data.source.startswith("op-plugin 070332e65baff39923406c86d06eeb3e14047c6f")


def test_release_without_a_tag_says_whose_data_it_takes():
    assert "as torch_npu 2.7.1.post8" in oppaths.load("2.7.1.post10").source


def test_unknown_release_is_refused_with_the_known_ones():
    with pytest.raises(UsageError) as caught:
        oppaths.load("2.1.0.post99")
    assert "2.1.0.post17" in str(caught.value)


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("all_version", {"v2.0", "v2.1", "v2.2"}),
        ("v2.0, v2.2", {"v2.0", "v2.2"}),
        (["v2.1", "newest"], {"v2.1", "v2.2"}),
        (["v2.0", "v2.1"], {"v2.0", "v2.1"}),
        (None, set()),
    ],
)
def test_version_specs_as_op_plugin_readme_defines_them(spec, expected):
    assert generator().versions_in(spec, ["v2.0", "v2.1", "v2.2"]) == expected
