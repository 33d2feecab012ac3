"""This machine's NPU: the SoC from the cheapest source that answers, npu-smi bounded in every way a
real one was seen to misbehave (flooding, hanging, a daemon holding its pipe, bad bytes), and
whether the machine has an NPU at all."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ascend_env.detect import machine

NPU_SMI_910A = """\
+------------------------------------------------------------------------------------+
| npu-smi 22.0.4                   Version: 22.0.4                                   |
+-------------------+-----------------+----------------------------------------------+
| NPU     Name      | Health          | Power(W)   Temp(C)   Hugepages-Usage(page)   |
| Chip              | Bus-Id          | AICore(%)  Memory-Usage(MB)  HBM-Usage(MB)   |
+===================+=================+==============================================+
| 0       910A      | OK              | 71.4       42        0    / 0                |
| 0                 | 0000:C1:00.0    | 0          2179 / 15039   0    / 32768       |
+===================+=================+==============================================+
"""


@pytest.fixture
def fake_npu_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write an ``npu-smi`` shell script (its body given) first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")

    def write(body: str) -> Path:
        script = bin_dir / "npu-smi"
        script.write_text("#!/bin/sh\n" + body)
        script.chmod(0o755)
        return script

    return write


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) is dead for our purpose.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return True


def test_a_good_answer_names_the_soc(fake_npu_smi, tmp_path):
    (tmp_path / "listing").write_text(NPU_SMI_910A)
    fake_npu_smi(f"cat {tmp_path / 'listing'}\n")
    assert machine.machine_soc({}) == ("Ascend910A", "npu-smi info")


def test_a_flooding_npu_smi_is_cut_off_at_its_byte_bound(fake_npu_smi):
    fake_npu_smi("exec yes '| 0  910A  | OK | aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'\n")
    started = time.monotonic()
    with pytest.raises(machine.NpuSmiError, match="printed more than 256 KB"):
        machine.npu_smi()
    assert time.monotonic() - started < machine.NPU_SMI_TIMEOUT


def test_a_hung_npu_smi_times_out_and_its_whole_group_is_killed(fake_npu_smi, tmp_path):
    pids = tmp_path / "pids"
    fake_npu_smi(f"sleep 60 &\necho $! > {pids}\nsleep 60\n")
    started = time.monotonic()
    with pytest.raises(machine.NpuSmiError, match="did not answer within"):
        machine.npu_smi(timeout=1.0)
    assert time.monotonic() - started < 5
    child = int(pids.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the hung npu-smi's own child is still running"


def test_an_answer_counts_once_npu_smi_exits_though_a_daemon_holds_its_pipe(fake_npu_smi, tmp_path):
    (tmp_path / "listing").write_text(NPU_SMI_910A)
    pids = tmp_path / "pids"
    # The daemon keeps npu-smi's stdout open (it inherited it) long after npu-smi exited.
    fake_npu_smi(f"sleep 30 &\necho $! > {pids}\ncat {tmp_path / 'listing'}\nexit 0\n")
    started = time.monotonic()
    try:
        assert machine.parse_npu_smi(machine.npu_smi()) == "Ascend910A"
        assert time.monotonic() - started < 3
    finally:
        os.kill(int(pids.read_text()), 9)


def test_bytes_that_are_not_utf8_do_not_fail_the_answer(fake_npu_smi, tmp_path):
    (tmp_path / "listing").write_bytes(b"\xff\xfe npu-smi \xc3\x28\n" + NPU_SMI_910A.encode())
    fake_npu_smi(f"cat {tmp_path / 'listing'}\n")
    assert machine.machine_soc({}) == ("Ascend910A", "npu-smi info")


@pytest.mark.parametrize(
    ("body", "said"), [("exit 3\n", "exited 3"), ("echo no device here\n", "names no known SoC")]
)
def test_a_failing_npu_smi_gives_no_soc_and_says_why(fake_npu_smi, body, said):
    fake_npu_smi(body)
    soc, why = machine.machine_soc({})
    assert soc is None and said in why


def test_a_missing_npu_smi_gives_no_soc(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    soc, why = machine.machine_soc({})
    assert soc is None and why.startswith("npu-smi cannot run")


def test_what_npu_smi_said_is_passed_on_to_children_who_do_not_ask_again():
    environ: dict = {}
    machine.export_soc(environ, "Ascend910A", "npu-smi info")
    assert environ == {machine.SOC_VARIABLE: "Ascend910A"}
    environ = {}
    machine.export_soc(environ, None, "npu-smi info did not answer within 5 s")
    assert environ == {machine.SOC_UNKNOWN_VARIABLE: "npu-smi info did not answer within 5 s"}

    def never() -> str:
        raise AssertionError("a child asked npu-smi again")

    soc, why = machine.machine_soc(environ, never)
    assert soc is None and why.startswith("npu-smi info did not answer within 5 s (in a parent process")
    # A user's own choice is never overwritten by what a lookup found.
    environ = {machine.SOC_VARIABLE: "910B"}
    machine.export_soc(environ, None, f"${machine.SOC_VARIABLE}")
    assert environ == {machine.SOC_VARIABLE: "910B"}


def test_a_huge_soc_variable_is_not_repeated_whole():
    soc, why = machine.machine_soc({machine.SOC_VARIABLE: "x" * 100_000}, lambda: "")
    assert soc is None and len(why) < 200 and "xxx...' names no known SoC" in why


def test_has_npu_from_devices_or_npu_smi(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "davinci_manager").touch()  # the manager alone is no device

    def fails() -> str:
        raise machine.NpuSmiError("npu-smi cannot run (No such file or directory)")

    none = f"no {dev}/davinci* devices, and npu-smi info does not answer"
    assert machine.has_npu(dev, fails) == (False, none)
    assert machine.has_npu(dev, lambda: NPU_SMI_910A) == (True, "npu-smi info lists an Ascend910A")
    (dev / "davinci3").touch()
    assert machine.has_npu(dev, fails) == (True, f"{dev / 'davinci3'} exists")
