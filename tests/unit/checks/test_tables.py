"""Which op table the audit runs (``ascend_env.checks.tables``)."""

from __future__ import annotations

import pytest

from ascend_env.checks import audit_text, tables
from ascend_env.exceptions import UsageError
from ascend_env.sim import startup


def test_affected_releases_are_those_without_an_npu_isin():
    from ascend_env.sim import optables

    affected = tables.affected_releases()
    assert affected == ["2.1.0.post3", "2.1.0.post6", "2.2.0", "2.2.0.post2", "2.3.1"]
    assert all("isin.Tensor_Tensor_out" not in optables.load(r) for r in affected)
    others = [r for r in optables.releases() if r not in affected]
    assert all("isin.Tensor_Tensor_out" in optables.load(r) for r in others)


@pytest.mark.parametrize(
    "value, releases",
    [
        (None, [None]),
        ("2.1.0-post6", ["2.1.0.post6"]),
        ("2.1.0.post6, 2.2.0,2.1.0.post6", ["2.1.0.post6", "2.2.0"]),
        ("affected,2.4.0", ["2.1.0.post3", "2.1.0.post6", "2.2.0", "2.2.0.post2", "2.3.1", "2.4.0"]),
        ("AFFECTED", ["2.1.0.post3", "2.1.0.post6", "2.2.0", "2.2.0.post2", "2.3.1"]),
    ],
)
def test_releases_asked(value, releases):
    assert tables.releases_asked(value) == releases


@pytest.mark.parametrize("value", [",", "2.1.0.post99", "2.2.0,nope"])
def test_bad_releases_are_usage_errors(value):
    with pytest.raises(UsageError):
        tables.releases_asked(value)


def test_with_none_named_and_none_installed_the_oldest_release_runs(monkeypatch):
    from ascend_env.sim import optables

    monkeypatch.setattr(tables, "installed_torch_npu", lambda: None)
    table = tables.choose_table(None)  # audit's, and verify's simulated smoke test's, default
    assert table.label == table.env[startup.TORCH_NPU] == "2.1.0.post3" and table.chosen == "oldest"
    assert table.label == optables.releases()[0] != optables.newest()
    assert audit_text.header({"table": "2.1.0.post3", "table_chosen": "oldest"}).startswith(
        "audit: torch_npu 2.1.0.post3 op table on the simulated NPU (no --torch-npu and no torch_npu "
        "installed: the oldest known release"
    )


@pytest.mark.parametrize(
    "release, user, expected",
    [
        ("2.5.1", None, "1"),
        ("2.5.1", "1", "1"),
        ("2.5.1", "0", "0"),
        ("2.5.1", "false", "0"),
        ("2.4.0.post4", None, "0"),
        ("2.1.0.post6", "1", "0"),
        ("2.14.0", None, "1"),
    ],
)
def test_autoload_follows_the_release_and_the_users_switch(tmp_path, release, user, expected):
    base = {} if user is None else {"TORCH_DEVICE_BACKEND_AUTOLOAD": user}
    env = tables.audited_environment(tables.choose_table(release), tmp_path, base)
    assert env[startup.AUTOLOAD] == expected
    assert env["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "0"  # a real torch_npu must not load itself


def test_verify_drops_every_variable_the_audit_passes():
    from ascend_env import _audited
    from ascend_env.checks import verify
    from ascend_env.sim import dispatch_model

    assert set(verify.AUDIT_VARIABLES) == {*startup.VARIABLES, _audited.REPORTS, dispatch_model.ENV}
