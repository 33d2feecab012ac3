"""The compatibility table and the verdict."""

from __future__ import annotations

import json

import pytest
from packaging.version import Version

from ascend_env.detect import compat
from ascend_env.detect.cann import parse_version
from ascend_env.exceptions import EnvironmentProblem


@pytest.fixture(scope="module")
def table() -> compat.Table:
    return compat.load()


def test_table_covers_2_1_0_to_2_14_0(table):
    lines = {Version(r.torch_npu).release[:2] for r in table.rows}
    wanted = {(2, minor) for minor in range(1, 15)}
    assert wanted <= lines
    assert table.find("2.1.0") and table.find("2.14.0")


def test_rows_are_well_formed(table):
    seen = set()
    for row in table.rows:
        assert row.torch_npu not in seen
        seen.add(row.torch_npu)
        assert Version(row.torch_npu).base_version == row.torch
        assert row.status in ("official", "inferred")
        assert row.sources, row
        assert row.python and all(p.startswith("3.") for p in row.python)
        for entry in row.cann or ():
            assert parse_version(entry) is not None or entry.endswith(".x"), entry
        if row.status == "official":
            assert row.cann and row.branch


def test_official_rows_from_the_ascend_table(table):
    row = table.find("2.1.0.post6")
    assert (row.status, row.torch, row.cann) == ("official", "2.1.0", ("8.0.RC2",))
    assert row.branch == "v2.1.0-6.0.rc2"
    assert row.python == ("3.8", "3.9", "3.10")  # no cp311 wheels for 2.1.0.post6
    assert table.find("2.5.1").cann == ("8.1.RC1",)
    assert table.find("2.12.0").cann == ("9.1.0",)
    assert table.find("2.14.0").status == "inferred" and table.find("2.14.0").cann is None


def test_x86_64_cpu_pins(table):
    assert table.find("2.1.0.post6").x86_64_requires_torch == "==2.1.0+cpu"
    assert table.find("2.11.0.post3").x86_64_requires_torch == "==2.11.0+cpu"
    assert table.find("2.12.0").x86_64_requires_torch == "==2.12.0"
    assert table.find("2.13.0").x86_64_requires_torch == "==2.13.0.*"


def test_find_ignores_local_labels(table):
    assert table.find("2.1.0.post6+git1a2b3c").torch_npu == "2.1.0.post6"
    assert table.find("not a version") is None
    assert table.find("2.1.0.post5") is None


@pytest.mark.parametrize(
    "pinned, installed, expected",
    [
        ("2.1.0", "2.1.0+cpu", True),
        ("2.1.0", "2.1.0", True),
        ("2.1.0", "2.1.1", False),
        ("2.13.0", "2.13.0+cpu", True),
        ("2.1.0", "garbage", None),
    ],
)
def test_torch_matches_ignores_local_labels(pinned, installed, expected):
    assert compat.torch_matches(pinned, installed) is expected


def test_cpu_pin_requirement():
    assert compat.check_requirement("torch (==2.1.0+cpu)", "2.1.0+cpu")[0] == "ok"
    status, reason = compat.check_requirement("torch (==2.1.0+cpu)", "2.1.0")
    assert status == "ok" and "pip check" in reason
    assert compat.check_requirement("torch ==2.1.0", "2.1.0+cpu")[0] == "ok"
    assert compat.check_requirement("torch==2.13.0.*", "2.13.0+cpu")[0] == "ok"
    assert compat.check_requirement("torch (==2.1.0+cpu)", "2.2.0+cpu")[0] == "mismatch"


def verdict(table, torch_npu="2.1.0.post6", torch="2.1.0+cpu", cann="8.0.RC2", python="3.10", requires=None):
    return compat.verdict(table, torch_npu, torch, cann, python, requires)


def test_ok(table):
    result = verdict(table, requires="torch (==2.1.0+cpu)")
    assert result.status == "ok" and result.row.torch_npu == "2.1.0.post6"
    assert {c.name for c in result.checks} == {"requires", "torch_npu", "torch", "python", "cann"}


@pytest.mark.parametrize(
    "kwargs, check, status",
    [
        ({"torch": "2.2.0"}, "torch", "mismatch"),
        ({"torch": None}, "torch", "mismatch"),
        ({"python": "3.11"}, "python", "mismatch"),
        ({"cann": "8.0.RC1"}, "cann", "mismatch"),  # older than the CANN it is built for
        ({"cann": None}, "cann", "mismatch"),  # torch_npu without any CANN
        ({"cann": "8.0.RC3"}, "cann", "unknown"),  # newer: the table does not say
        ({"cann": "8.0.RC2.beta1"}, "cann", "ok"),  # community build of the listed CANN
        ({"cann": "garbage"}, "cann", "unknown"),
        ({"torch_npu": "2.1.0.post5"}, "torch_npu", "unknown"),
        ({"torch_npu": "2.13.0", "torch": "2.13.0", "cann": "9.1.0", "python": "3.11"}, "cann", "unknown"),
        ({"torch_npu": "2.12.0.post2", "torch": "2.12.0", "cann": "9.1.1", "python": "3.12"}, "cann", "ok"),
    ],
)
def test_verdicts(table, kwargs, check, status):
    result = verdict(table, **kwargs)
    found = {c.name: c.status for c in result.checks}
    assert found[check] == status, result.to_dict()
    assert result.status == max(found.values(), key=["ok", "unknown", "mismatch"].index)
    assert all(c.reason for c in result.checks)


def test_no_torch_npu(table):
    result = compat.verdict(table, None, "2.13.0+cpu", None, "3.11")
    assert result.status == "unknown" and "not installed" in result.reasons[0]


def test_unknown_release_hints_at_known_ones(table):
    reason = verdict(table, torch_npu="2.1.0.post5").reasons[0]
    assert "2.1.0.post6" in reason and "not in the compatibility table" in reason


def test_local_build_is_noted(table):
    result = verdict(table, torch_npu="2.1.0.post6+git1234")
    assert result.status == "ok" and "local build" in result.notes[0]


def test_broken_table_file(tmp_path):
    bad = tmp_path / "compat.json"
    bad.write_text(json.dumps({"rows": [{"torch": "2.1.0"}]}))
    with pytest.raises(EnvironmentProblem, match="cannot be read"):
        compat.load(bad)
    bad.write_bytes(b"\xff\x00")
    with pytest.raises(EnvironmentProblem):
        compat.load(bad)
