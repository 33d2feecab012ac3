"""Reports as the audited processes write them (``ascend_env.sim.reports.ProcessReport``), for the
tests of the audit's findings and text."""

from __future__ import annotations

from ascend_env.sim.reports import ProcessEnd, ProcessReport

ISIN = "aten::isin.Tensor_Tensor_out"


def report(pid: int, fallbacks=None, end: ProcessEnd = None, rank=None, origin="start") -> ProcessReport:
    """The report of an audited process that ran ``w.py`` on table ``t`` (its last one: ``end``)."""
    return ProcessReport(
        pid=pid,
        ppid=1,
        argv=["w.py"],
        rank=rank,
        origin=origin,
        table="t",
        fallbacks=fallbacks or {},
        end=end,
    )
