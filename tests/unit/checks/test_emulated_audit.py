"""The audit on the emulated CANN, judged without torch: the binary's fd 2 read through the tee,
fallbacks counted by CAUTION line, and what makes a run "not proven" (never green)."""

from __future__ import annotations

import os
from pathlib import Path

from audit_support import ISIN, report

from ascend_env import _audited
from ascend_env.checks import audit_text, emulated_audit
from ascend_env.checks.findings import Outcome, findings_from
from ascend_env.checks.torch_npu_wheel import Choice
from ascend_env.sim import emulated, startup
from ascend_env.utils.tee import Tee

CAUTION = (
    "[W VariableFallbackKernel.cpp:51] Warning: CAUTION: The operator '{op}' is not currently supported on "
    "the NPU backend and will fall back to run on the CPU. This may have performance implications. "
    "(function npu_cpu_fallback)"
)
CHOICE = Choice("2.1.0.post6", "wheel", Path("/cache/unpacked"), Path("/w/torch_npu-2.1.0.post6-cp38.whl"))
PIPE = (7, 4242)
DONE = {"how": "exit"}


def real(pid, **facts):
    """A report as a process on the emulated CANN writes its last one."""
    data = report(pid, {}, DONE)
    data.update({"torch": True, "torch_npu": "real", "fd2": list(PIPE), "silenced": False})
    data.update(facts)
    return data


def judged(fd2, reports, returncode=0):
    findings = findings_from(
        CHOICE.label, ["python", "seed.py"], Outcome(reports[0]["pid"], returncode), reports
    )
    return emulated_audit.judge(findings, CHOICE, fd2, PIPE, reports)


def fd2_of(*lines):
    fd2 = emulated_audit.Fd2()
    for line in lines:
        fd2.line(line.encode())
    return fd2


def test_the_binarys_caution_lines_are_the_fallbacks_counted_once_per_process():
    fd2 = fd2_of("noise", CAUTION.format(op=ISIN), CAUTION.format(op="aten::foo"), CAUTION.format(op=ISIN))
    findings = judged(fd2, [real(10), real(11)])
    assert findings["fallbacks"] == {ISIN: 2, "aten::foo": 1}
    assert findings["fallbacks_counted"] == "processes" and findings["not_proven"] == []
    assert findings["backend"]["kind"] == "emulated_cann" and findings["backend"]["source"] == "wheel"
    assert audit_text.exit_code(findings) == 1
    text = audit_text.format_text(findings).splitlines()
    assert text[0] == (
        "audit: the real torch_npu binary on the emulated CANN, not a real NPU: torch_npu 2.1.0.post6 "
        "(wheel given: torch_npu-2.1.0.post6-cp38.whl)"
    )
    assert text[1:4] == [
        "2 ops fell back to the CPU, as the binary's CAUTION lines say (2 Python processes):",
        f"  {ISIN}  at least once in 2 processes",
        "  aten::foo                     at least once in 1 process",
    ]
    assert text[-1].startswith(
        "audit failed on the real torch_npu 2.1.0.post6 binary on the emulated CANN: 2 ops fell back "
        "to the CPU"
    )


def test_no_caution_line_passes_and_says_what_ran():
    findings = judged(fd2_of("hello"), [real(10, cann={"counters": {"aclnn": {"aclnnEqTensor": 3}}})])
    assert audit_text.exit_code(findings) == 0
    text = audit_text.format_text(findings).splitlines()
    assert "no op fell back to the CPU (1 Python process): no CAUTION line from the binary" in text
    assert text[-1] == (
        "audit passed on the real torch_npu 2.1.0.post6 binary on the emulated CANN: nothing fell back "
        "to the CPU in 1 audited Python process"
    )
    assert findings["cann"] == {"aclnn": {"aclnnEqTensor": 3}}


def test_an_unimplemented_entry_point_makes_the_run_not_proven_and_names_it():
    line = "ascend-env emulated CANN: aclnnFooBar is not implemented"
    counted = real(10, cann={"counters": {"unimplemented": {"aclnnBaz": 1}}})
    findings = judged(fd2_of(line, line), [counted])
    assert findings["unimplemented"] == ["aclnnFooBar", "aclnnBaz"]
    verdict = audit_text.verdict(findings)
    assert verdict.code == 1
    assert verdict.line.startswith(
        "audit not proven on the real torch_npu 2.1.0.post6 binary on the emulated CANN: the emulated CANN "
        "does not implement aclnnFooBar, which the binary called"
    )
    assert "the emulated CANN does not implement aclnnBaz: the run is not proven" in audit_text.format_text(
        findings
    )
    # Beside a fallback it still fails, and says both.
    both = judged(fd2_of(line, CAUTION.format(op=ISIN)), [real(10)])
    assert "; not proven: the emulated CANN does not implement aclnnFooBar" in audit_text.verdict(both).line


def test_silenced_warnings_or_a_redirected_fd2_prove_nothing():
    silenced = judged(fd2_of(), [real(10, silenced=True)])
    assert audit_text.verdict(silenced).line.startswith("audit not proven on the real torch_npu")
    assert "pid 10 silenced torch_npu's warnings" in silenced["not_proven"][0]
    elsewhere = judged(fd2_of(), [real(10, fd2=[1, 2])])
    assert elsewhere["not_proven"] == [
        "pid 10 wrote its fd 2 elsewhere (redirected): its CAUTION lines were not read"
    ]
    assert audit_text.exit_code(elsewhere) == 1
    # A process that never imported torch_npu proves nothing and claims nothing.
    plain = report(11, {}, DONE)
    assert judged(fd2_of(), [real(10), plain])["not_proven"] == []


def test_a_cann_that_cannot_start_is_an_environment_error():
    broken = report(10, {}, DONE)
    broken["error"] = "EnvironmentProblem: no C++ compiler"
    findings = judged(fd2_of(), [broken])
    assert audit_text.verdict(findings) == (
        2,
        "audit error: the emulated CANN could not start in 1 process: EnvironmentProblem: no C++ compiler",
    )


def test_the_environment_runs_the_real_binary_not_the_simulator(tmp_path):
    base = {"PYTHONPATH": "/mine", startup.TORCH_NPU: "2.2.0", "PATH": "/bin"}
    env = emulated_audit.environment(CHOICE, tmp_path, "Ascend910A", base)
    assert env["PYTHONPATH"] == os.pathsep.join([_audited.shim_path(), "/cache/unpacked", "/mine"])
    assert env[_audited.CANN] == "emulated" and env[_audited.REPORTS] == str(tmp_path)
    assert env[emulated.SOC_VARIABLE] == "Ascend910A" and startup.TORCH_NPU not in env
    assert env[_audited.LABEL] == CHOICE.label and env["PATH"] == "/bin"
    installed = Choice("2.1.0.post6", "installed", None, None)
    assert emulated_audit.environment(installed, tmp_path, None, {})["PYTHONPATH"] == _audited.shim_path()


def test_the_tee_copies_every_byte_and_hands_each_line(tmp_path):
    out = tmp_path / "out"
    lines = []
    with out.open("wb") as sink:
        tee = Tee(lines.append, sink.fileno())
        os.write(tee.fd, b"one\ntw")
        os.write(tee.fd, b"o\nlast")
        assert os.fstat(tee.fd).st_ino == tee.identity[1]
        tee.finish()
    assert out.read_bytes() == b"one\ntwo\nlast"
    assert lines == [b"one", b"two", b"last"]


def test_the_adapter_reads_the_emulated_cann_lines_and_counters():
    text = "x\nascend-env emulated CANN: aclrtFoo is not implemented\n" * 2
    assert emulated.unimplemented_in(text + "ascend-env emulated CANN: aclBar is not implemented") == [
        "aclrtFoo",
        "aclBar",
    ]
    assert emulated.unimplemented({"counters": {"unimplemented": {"b": 1, "a": 2}}}) == ["a", "b"]
    assert emulated.unimplemented({}) == [] and emulated.report() == {}


def test_a_command_where_nothing_imported_torch_npu_audited_nothing():
    import pytest

    from ascend_env.exceptions import EnvironmentProblem

    plain = report(10, {}, DONE)
    plain["torch"] = False
    with pytest.raises(EnvironmentProblem) as nothing:
        findings_from(
            CHOICE.label, ["true"], Outcome(10, 0), [plain], where="the real torch_npu on the emulated CANN"
        )
    assert nothing.value.problem.startswith(
        "no Python process of the command ran on the real torch_npu on the emulated CANN, so nothing "
        "was audited"
    )
    assert (
        "none imported torch_npu; a Python process runs there once it imports torch_npu."
        in nothing.value.problem
    )
