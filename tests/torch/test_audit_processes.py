"""``ascend-env audit`` follows every Python process of the command, however it starts and ends.

Forked children (``os.fork``, a fork ``multiprocessing.Pool``, DataLoader workers), spawn and
forkserver children, ``os._exit``, torchrun's ranks, crashes, kills, ``--timeout``, and SIGINT or
SIGTERM to the audit itself. Table 2.1.0.post6 has no NPU isin, so ``torch.isin`` falls back.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Tuple

import pytest

from ascend_env.checks import audit
from ascend_env.cli import main

ISIN = "aten::isin.Tensor_Tensor_out"
ROOT = str(Path(audit.__file__).resolve().parents[1])

PRELUDE = textwrap.dedent(
    """
    import os, signal, sys, time
    import torch
    import torch_npu  # as a script must on a real NPU before torch_npu 2.5.1

    def isin():
        x = torch.tensor([1, 2, 3], device="npu")
        return int(torch.isin(x, x[1:]).sum())
    """
)


def write_script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "script.py"
    path.write_text(PRELUDE + textwrap.dedent(body), encoding="utf-8")
    return str(path)


def run_audit(capfd, *args: str) -> Tuple[int, dict, str]:
    code = main(["audit", "--json", "--torch-npu", "2.1.0.post6", *args])
    captured = capfd.readouterr()
    report = json.loads(captured.out)
    # Forks, spawn and forkserver children, multiprocessing's helpers: every one is audited.
    assert report.get("unaudited", []) == [] and report.get("bad_reports", []) == [], report
    return code, report, captured.err


def by_origin(report: dict, origin: str) -> list:
    return [p for p in report["per_process"] if p["origin"] == origin]


def test_os_fork_children_count_their_own_fallbacks_only(capfd, tmp_path):
    script = write_script(
        tmp_path,
        """
        isin(); isin()
        pid = os.fork()
        if pid == 0:
            isin()
            os._exit(0)
        os.waitpid(pid, 0)
    """,
    )
    code, report, _ = run_audit(capfd, "--", sys.executable, script)
    assert code == 1 and report["schema"] == 1 and report["processes"] == 2
    assert report["fallbacks"] == {ISIN: 3}
    (parent,), (child,) = by_origin(report, "start"), by_origin(report, "fork")
    assert parent["fallbacks"] == {ISIN: 2} and child["fallbacks"] == {ISIN: 1}
    assert child["ended"] == "os._exit(0)" and not child["abnormal"]


def test_fork_pool_workers_are_counted_though_the_pool_terminates_them(capfd, tmp_path):
    script = write_script(
        tmp_path,
        """
        import multiprocessing
        def work(i):
            return isin()
        if __name__ == "__main__":
            with multiprocessing.get_context("fork").Pool(2) as pool:
                assert pool.map(work, range(4)) == [2, 2, 2, 2]
    """,
    )
    code, report, _ = run_audit(capfd, "--", sys.executable, script)
    assert code == 1 and report["returncode"] == 0
    assert report["fallbacks"] == {ISIN: 4}
    workers = by_origin(report, "fork")
    assert len(workers) == 2 and report["processes"] == 3
    assert sum(w["fallbacks"].get(ISIN, 0) for w in workers) == 4


def test_dataloader_fork_workers(capfd, tmp_path):
    script = write_script(
        tmp_path,
        """
        from torch.utils.data import DataLoader, Dataset
        class Items(Dataset):
            def __len__(self):
                return 6
            def __getitem__(self, i):
                return isin()
        if __name__ == "__main__":
            loader = DataLoader(Items(), batch_size=2, num_workers=2, multiprocessing_context="fork")
            assert sum(int(b.sum()) for b in loader) == 12
    """,
    )
    code, report, _ = run_audit(capfd, "--", sys.executable, script)
    assert code == 1 and report["returncode"] == 0
    assert report["fallbacks"] == {ISIN: 6} and len(by_origin(report, "fork")) == 2


def test_spawn_and_forkserver_children(capfd, tmp_path):
    script = write_script(
        tmp_path,
        """
        import multiprocessing
        if __name__ == "__main__":
            for method in ("spawn", "forkserver"):
                child = multiprocessing.get_context(method).Process(target=isin)
                child.start()
                child.join()
                assert child.exitcode == 0
    """,
    )
    code, report, _ = run_audit(capfd, "--", sys.executable, script)
    assert code == 1 and report["returncode"] == 0
    assert report["fallbacks"] == {ISIN: 2}
    falling = [p for p in report["per_process"] if p["fallbacks"]]
    # The spawn child is a new interpreter; the forkserver's child is forked from its server.
    assert sorted(p["origin"] for p in falling) == ["fork", "start"]
    assert not any(p["is_command"] for p in falling)


def test_os_exit_in_the_command_and_in_a_worker(capfd, tmp_path):
    script = write_script(
        tmp_path,
        """
        pid = os.fork()
        if pid == 0:
            isin()
            os._exit(5)
        os.waitpid(pid, 0)
        isin()
        os._exit(3)
    """,
    )
    code = main(["audit", "--torch-npu", "2.1.0.post6", "--", sys.executable, script])
    out = capfd.readouterr().out
    assert code == 1
    lines = out.splitlines()
    assert lines[1] == "the command exited 3"
    assert lines[2] == "1 Python process ended abnormally:"
    assert lines[3].startswith("  pid ") and lines[3].endswith(": os._exit(5)")
    assert lines[4] == "1 op fell back to the CPU (2 Python processes):"
    assert lines[5].startswith(f"  {ISIN}  2  (pids ")
    assert lines[6].startswith(
        f"audit failed on the simulator (torch_npu 2.1.0.post6's op table): 1 op fell back to the "
        f"CPU ({ISIN}); "
        "the command exited 3; fix: "
    )


@pytest.mark.parametrize(
    "ending, how",
    [("SIGKILL", "os.kill(os.getpid(), signal.SIGKILL)"), ("SIGSEGV", "import ctypes; ctypes.string_at(0)")],
)
def test_a_killed_or_crashed_command_reports_what_was_seen(capfd, tmp_path, ending, how):
    # The sleep lets the report thread see the fallback (it looks every POLL_SECONDS).
    script = write_script(tmp_path, f"isin()\ntime.sleep(0.5)\n{how}\n")
    code, report, _ = run_audit(capfd, "--", sys.executable, script)
    assert code == 1 and report["ended"] == f"killed by {ending}"
    assert report["fallbacks"] == {ISIN: 1} and report["processes"] == 1
    assert report["per_process"][0]["ended"] == f"killed by {ending}"


def test_a_command_killed_before_python_started_is_nothing_audited(capfd):
    code = main(["audit", "--torch-npu", "2.1.0.post6", "--", "sh", "-c", "kill -9 $$"])
    err = capfd.readouterr().err
    assert code == 2
    assert "nothing was audited (the command killed by SIGKILL)" in err


def test_timeout_stops_the_command_and_reports_what_was_seen(capfd, tmp_path):
    script = write_script(
        tmp_path,
        """
        isin()
        if os.fork() == 0:
            isin()
            time.sleep(60)
            os._exit(0)
        time.sleep(60)
    """,
    )
    start = time.monotonic()
    code, report, _ = run_audit(capfd, "--timeout", "8", "--", sys.executable, script)
    assert time.monotonic() - start < 40
    assert code == 1 and report["timed_out"] is True and report["timeout"] == 8
    assert report["ended"] == "timed out after 8 s" and report["stopped"] == 2
    assert report["fallbacks"] == {ISIN: 2}
    assert {p["ended"] for p in report["per_process"]} == {"killed by SIGTERM", "terminated by SIGTERM"}


def test_torchrun_counts_the_rank_that_torch_npu_silences(capfd, tmp_path):
    script = write_script(
        tmp_path,
        """
        if os.environ["RANK"] == "1":
            isin()
    """,
    )
    code = main(
        [
            "audit",
            "--torch-npu",
            "2.1.0.post6",
            "--",
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            script,
        ]
    )
    captured = capfd.readouterr()
    assert code == 1
    # Rank 1 prints no CAUTION line (RANK != 0 silences it, as in torch_npu); the audit counts it.
    assert "CAUTION" not in captured.err
    assert captured.out.splitlines()[1:-1] == [
        "1 op fell back to the CPU (3 Python processes):",
        f"  {ISIN}  1  (rank 1)",
    ]


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_to_the_audit_stops_the_command_and_cleans_up(tmp_path, signum, code):
    ready = tmp_path / "ready"
    script = write_script(
        tmp_path,
        f"""
        isin()
        child = os.fork()
        if child == 0:
            time.sleep(60)
            os._exit(0)
        with open({str(ready)!r} + ".tmp", "w") as out:
            out.write(f"{{os.getpid()}} {{child}} {{os.environ['ASCEND_ENV_AUDIT_REPORTS']}}")
        os.rename({str(ready)!r} + ".tmp", {str(ready)!r})
        time.sleep(60)
    """,
    )
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # SIGINT as a foreground process gets it: a suite run as a shell's background job ignores it,
    # and the audit rightly keeps an ignored SIGINT ignored (tests/unit/checks/test_audit.py).
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ascend_env",
            "audit",
            "--torch-npu",
            "2.1.0.post6",
            "--",
            sys.executable,
            script,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ready.exists(), proc.communicate()
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    parent, child, reports = ready.read_text().split()
    assert proc.returncode == code and out == ""
    assert [line for line in err.splitlines() if "CAUTION" not in line] == [
        f"ascend-env: audit interrupted by {signal.Signals(signum).name}: the command and every process "
        "it started were stopped, and nothing is reported."
    ]
    assert not os.path.exists(reports)
    assert not running(int(parent)) and not running(int(child))


def running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
