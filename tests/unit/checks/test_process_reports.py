"""Reading the audited processes' reports (``ascend_env.checks.process_reports``): a bad report is a
finding, never a crash."""

from __future__ import annotations

import pytest

from ascend_env.checks import audit_text, process_reports
from ascend_env.checks.findings import Outcome, findings_from
from ascend_env.sim.reports import ProcessReport
from ascend_env.utils import proctree


@pytest.mark.parametrize(
    "content, problem",
    [
        ("[" * 100_000 + "]" * 100_000, "is not JSON (nested more than 100 levels deep"),
        ('{"pid": 5, "fallbacks": {"aten::isin": "many"}}', "has fallbacks that are not counts by op"),
        ('{"pid": 5, "fallbacks": {"aten::isin": -1}}', "has fallbacks that are not counts by op"),
        ('{"pid": "5"}', "has no pid"),
        ('{"pid": true}', "has no pid"),
        ("[1, 2]", "holds a list, not an object"),
        ('{"pid": 5, "argv": "x"}', "has an argv that is not a list of strings"),
        ('{"pid": 5, "end": 3}', "has an end that is not an object"),
        ('{"pid": 5, "torch": "yes"}', "has a torch that is not true or false"),
        ('{"pid": 5, "paths": []}', "has paths that are not an object"),
        (
            '{"pid": 5, "cann_steps": [{"site": "s.py:1", "steps": [{"compiles": -1, "aclop": 0, "aclnn": 0, '
            '"compiles_by_type": {}}]}]}',
            "has cann_steps that are not generate() runs of measured steps",
        ),
        ('{"pid": 5, "cann_steps": [{"site": 3, "steps": []}]}', "has cann_steps that are not generate()"),
        ("not json", "is not JSON"),
    ],
)
def test_a_bad_report_is_a_finding(tmp_path, content, problem):
    (tmp_path / "5-abcd.json").write_text(content)
    (tmp_path / "6-abcd.json").write_text('{"pid": 6, "fallbacks": {}, "end": {"how": "exit"}}')
    reports = process_reports.read_reports(tmp_path)
    assert [r["pid"] for r in reports.good] == [6]
    (bad,) = reports.bad
    assert bad.startswith(f"5-abcd.json: {problem}")
    findings = findings_from("t", ["x"], Outcome(6, 0), reports.good, reports.bad)
    assert audit_text.exit_code(findings) == 1
    text = audit_text.format_text(findings).splitlines()
    assert f"a report cannot be read: {bad}" in text
    assert text[-1].startswith(
        "audit failed on the simulator (torch_npu t's op table): 1 report could not be read; fix: audit again"
    )


def test_bad_bytes_and_a_huge_report_are_findings(tmp_path, monkeypatch):
    monkeypatch.setattr(process_reports, "MAX_REPORT_BYTES", 1000)
    (tmp_path / "7-a.json").write_bytes(b'{"pid": 7, "argv": ["\xff"]}')
    (tmp_path / "8-a.json").write_text('{"pid": 8, "argv": ["' + "x" * 2000 + '"]}')
    assert process_reports.read_reports(tmp_path).bad == [
        "7-a.json: is not JSON ('utf-8' codec can't decode byte 0xff in position 21: invalid start byte)",
        "8-a.json: larger than 1000 bytes",
    ]


@pytest.mark.parametrize("key", sorted(ProcessReport.__annotations__))
def test_every_key_of_a_process_report_is_checked(tmp_path, key):
    # A value no key of a report may hold: the reader must refuse it, whichever key holds it, so
    # that a key added to ProcessReport is read as carefully as the others.
    (tmp_path / "5-a.json").write_text(f'{{"pid": 5, "{key}": 1.5}}' if key != "pid" else '{"pid": 1.5}')
    reports = process_reports.read_reports(tmp_path)
    assert reports.good == [] and len(reports.bad) == 1, (key, reports)


def test_what_the_reporter_writes_is_read_as_written(tmp_path):
    (tmp_path / "5-a.json").write_text('{"pid": 5, "fallbacks": {"aten::isin": 2}, "future_key": [1]}')
    (tmp_path / "3-a.json").write_text('{"pid": 3}')
    (tmp_path / "4-a.json.tmp").write_text("{")  # a report being written: not listed
    assert process_reports.collect(tmp_path) == [
        {"pid": 3},
        {"pid": 5, "fallbacks": {"aten::isin": 2}, "future_key": [1]},
    ]
    # named by pid alone (an older reporter): they stand for every image of their pid
    assert process_reports.reported_images(tmp_path) == proctree.Reported(legacy={3, 5})
    (tmp_path / "6-100-2-ab12.json").write_text('{"pid": 6}')
    (tmp_path / "6-100-1-cd34.exec").write_text('{"pid": 6}')
    (tmp_path / "7-1-x-cd34.exec").write_text("{}")
    assert process_reports.reported_images(tmp_path) == proctree.Reported(
        {(6, 100, 2)}, {(6, 100, 1)}, {3, 5}
    )
