"""``audit`` follows the command's whole process tree (``ascend_env.utils.proctree``): Python
processes that ran outside the simulator, processes left behind, a killed audit. No torch needed:
these commands never import it."""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from ascend_env import _audited, origin
from ascend_env.checks import audit, process_reports, tables
from ascend_env.cli import main
from ascend_env.exceptions import EnvironmentProblem
from ascend_env.utils import proctree

ROOT = str(Path(audit.__file__).resolve().parents[2])
PY = sys.executable


def alive(pid: int) -> bool:
    return proctree.start_time(pid) is not None and not zombie(pid)


def zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def wait_for(path: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not (path.exists() and path.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists(), f"{path} never appeared"


# ---------------------------------------------------------------- Python processes that ran unaudited

CHILDREN = textwrap.dedent(
    """
    import os, subprocess, sys
    slow = "import time; time.sleep(1)"
    kept = dict(os.environ)
    replaced = dict(os.environ, PYTHONPATH=os.getcwd())
    for argv, env in ([[sys.executable, "-I", "-c", slow], kept], [[sys.executable, "-E", "-c", slow], kept],
                      [[sys.executable, "-S", "-c", slow], kept], [[sys.executable, "-c", slow], replaced],
                      [[sys.executable, "-X", "dev", "-c", slow], kept]):
        subprocess.run(argv, env=env, check=True)
    """
)


def test_python_processes_outside_the_simulator_are_counted_and_fail_the_audit(capsys):
    code = main(["audit", "--json", "--torch-npu", "2.4.0", "--", PY, "-c", CHILDREN])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["ok"] is False
    whys = [u["why"] for u in report["unaudited"]]
    assert len(whys) == 4, report["unaudited"]
    assert whys[0].startswith("-I (isolated mode") and whys[1].startswith("-E (")
    assert whys[2].startswith("-S (no site module") and "replaced PYTHONPATH" in whys[3]
    assert all(u["argv"][0] == PY for u in report["unaudited"])
    # The command's own Python and the -X dev child reported (light: they never imported torch).
    assert report["processes"] == 2 and {p["torch"] for p in report["per_process"]} == {False}


def test_the_text_names_them_and_ends_with_the_verdict(capsys):
    code = main(["audit", "--torch-npu", "2.4.0", "--", PY, "-c", CHILDREN])
    lines = capsys.readouterr().out.splitlines()
    assert code == 1, lines
    at = lines.index(
        "4 Python processes ran outside the simulator (unaudited: what fell back there is not counted):"
    )
    assert lines[at + 1].startswith("  pid ") and ": -I (isolated mode" in lines[at + 1]
    assert lines[-1] == (
        "audit failed on the simulator (torch_npu 2.4.0's op table): 4 Python processes ran "
        "unaudited; fix: let every "
        "Python of the command run the audit's sitecustomize: no -I, -E or -S, and add to "
        "PYTHONPATH rather than replace it"
    )


def test_a_command_of_unaudited_pythons_only_is_a_failure_not_nothing_audited(capsys):
    code = main(
        [
            "audit",
            "--json",
            "--torch-npu",
            "2.4.0",
            "--",
            "sh",
            "-c",
            f"{PY} -I -c 'import time; time.sleep(1)'",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["processes"] == 0 and len(report["unaudited"]) == 1


def test_a_python_without_ascend_env_says_so(tmp_path, capsys):
    # The shim runs, but this Python cannot import ascend_env: it reports itself unaudited.
    fake = tmp_path / "ascend_env"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('broken on purpose')\n")
    path = f"PYTHONPATH={_audited.shim_path()}:{tmp_path}"
    code = main(["audit", "--json", "--torch-npu", "2.4.0", "--", "env", path, PY, "-c", "pass"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    (found,) = report["unaudited"]
    assert "cannot import ascend_env (broken on purpose)" in found["why"]
    # Its fix is that Python's, not -I, -E, -S or PYTHONPATH (another interpreter first on PATH, say).
    code = main(["audit", "--torch-npu", "2.4.0", "--", "env", path, PY, "-c", "pass"])
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == (
        "audit failed on the simulator "
        "(torch_npu 2.4.0's op table): 1 Python process ran unaudited; fix: run the command with a "
        f"Python that has ascend-env (this one: {sys.executable}), or install ascend-env into {PY}: "
        f"{origin.install_command(PY)}"
    )


# An audited Python that runs exec keeps its pid: the audit must read what runs next (issue 42, 2).
SLOW = "import time; time.sleep(0.6)"
EXECS = {
    # os.execv in place, of python -I: long enough for the tree to see it, and gone at once
    "execv -I": f"import os, sys; os.execv(sys.executable, [sys.executable, '-I', '-c', {SLOW!r}])",
    "execv -I, brief": "import os, sys; os.execv(sys.executable, [sys.executable, '-I', '-c', 'pass'])",
    # os.execve with the audit's variables taken out of the environment
    "execve, clean env": (
        "import os, sys; env = {k: v for k, v in os.environ.items() if not k.startswith('ASCEND_ENV')}; "
        f"env.pop('PYTHONPATH', None); os.execve(sys.executable, [sys.executable, '-c', {SLOW!r}], env)"
    ),
    # fork, then exec in the child (which inherited the reporter)
    "fork+exec": (
        "import os, sys\npid = os.fork()\nif pid == 0:\n"
        f"    os.execv(sys.executable, [sys.executable, '-I', '-c', {SLOW!r}])\nos.waitpid(pid, 0)"
    ),
    # an audited Python that execs an audited Python that execs python -E
    "exec twice": (
        "import os, sys; os.execv(sys.executable, [sys.executable, '-c', "
        f"\"import os, sys; os.execv(sys.executable, [sys.executable, '-E', '-c', {SLOW!r}])\"])"
    ),
}


@pytest.mark.parametrize("case", sorted(EXECS))
def test_a_python_exec_ed_in_place_of_an_audited_one_is_unaudited(case, capsys):
    code = main(["audit", "--json", "--torch-npu", "2.4.0", "--", PY, "-c", EXECS[case]])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["ok"] is False, report
    (found,) = report["unaudited"]
    assert found["argv"][0] == PY, found
    if case != "execve, clean env":
        assert "-I" in found["argv"] or "-E" in found["argv"], found


def test_an_interpreter_not_named_python_is_a_python(tmp_path, capsys):
    runner = tmp_path / "runner"
    try:
        os.link(os.path.realpath(PY), runner)
    except OSError:
        import shutil

        shutil.copy2(os.path.realpath(PY), runner)
    assert subprocess.run([str(runner), "-c", "pass"]).returncode == 0
    for program in ([str(runner), "-I", "-c", SLOW], [str(runner), "-I", "-c", "pass"]):
        command = f"import os; os.execv({str(runner)!r}, {program!r})"
        code = main(["audit", "--json", "--torch-npu", "2.4.0", "--", PY, "-c", command])
        report = json.loads(capsys.readouterr().out)
        assert code == 1, report
        (found,) = report["unaudited"]
        assert found["argv"][0] == str(runner)
    # run as a child of the command (not exec'd): the tree reads the program's file
    child = f"import subprocess; subprocess.run({[str(runner), '-I', '-c', SLOW]!r})"
    code = main(["audit", "--json", "--torch-npu", "2.4.0", "--", PY, "-c", child])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and len(report["unaudited"]) == 1, report


@pytest.mark.parametrize(
    "command",
    [
        # an audited Python exec'd in place reports again: not unaudited
        f"import os, sys; os.execv(sys.executable, [sys.executable, '-c', {SLOW!r}])",
        # so does one run as execve with the environment kept
        f"import os, sys; os.execve(sys.executable, [sys.executable, '-c', {SLOW!r}], dict(os.environ))",
        # a program that is not Python
        "import os; os.execv('/bin/sh', ['sh', '-c', 'sleep 0.6'])",
        # exec that fails: the image goes on, audited
        "import os\ntry:\n    os.execv('/nonexistent/python3', ['python3', '-I'])\nexcept OSError:\n    pass",
    ],
)
def test_an_exec_that_stays_audited_is_not_unaudited(command):
    with pytest.raises(EnvironmentProblem, match="none imported torch"):
        audit.run([PY, "-c", command], "2.4.0")


def test_a_report_named_by_pid_alone_still_counts(tmp_path):
    # An older ascend-env in the command's Python names its report <pid>-<random>.json: it stands
    # for that pid's images, as before reports were named by image.
    legacy = (
        "import os, json, time; d = os.environ['ASCEND_ENV_AUDIT_REPORTS']; pid = os.getpid(); "
        "open(os.path.join(d, f'{pid}-abcd1234.json'), 'w').write(json.dumps({'pid': pid, 'torch': False})); "
        "time.sleep(0.6)"
    )
    with pytest.raises(EnvironmentProblem, match="1 Python process ran, and none imported torch"):
        audit.run(["sh", "-c", f'{PY} -I -c "{legacy}"'], "2.4.0")


# A FIFO in the report directory hung audit forever and left the directory (issue 42, item 6).
FIFO_NAMES = {
    "a report's name": "f'{os.getpid()}-1-0-abcd1234.json'",
    "any .json": "'fifo.json'",
    "an exec marker's name": "f'{os.getpid()}-1-0-abcd1234.exec'",
}


@pytest.mark.parametrize("name", sorted(FIFO_NAMES))
def test_a_fifo_in_the_report_directory_is_refused_not_waited_on(name, tmp_path):
    code = (
        "import os\nreports = os.environ['ASCEND_ENV_AUDIT_REPORTS']\n"
        f"os.mkfifo(os.path.join(reports, {FIFO_NAMES[name]}))\n"
    )
    env = dict(os.environ, TMPDIR=str(tmp_path))
    done = subprocess.run(
        [
            PY,
            "-m",
            "ascend_env",
            "audit",
            "--json",
            "--torch-npu",
            "2.4.0",
            "--timeout",
            "30",
            "--",
            PY,
            "-c",
            code,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode in (1, 2), done.stderr
    json.loads(done.stdout)
    if name != "an exec marker's name":
        assert "not a regular file" in done.stdout
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(audit.SCRATCH_PREFIX)] == []


def test_forked_children_inherit_the_audit():
    code = (
        "import os\nfor _ in range(3):\n    pid = os.fork()\n    if pid == 0:\n        os._exit(0)\n"
        "    os.waitpid(pid, 0)\n"
    )
    with pytest.raises(EnvironmentProblem, match="4 Python processes ran, and none imported torch"):
        audit.run([PY, "-c", code], "2.4.0")


# ---------------------------------------------------------------- start-up cost: what a child imports

PROBE = textwrap.dedent(
    """
    import sys
    names = ("torch", "typing", "threading", "ascend_env", "json", "enum", "re", "collections", "pathlib")
    print(repr(sorted(m for m in sys.modules if m.split(".")[0] in names)))
    """
)


#: A vendor's sitecustomize, as Debian's and Ubuntu's Pythons ship one (theirs imports apport's hook
#: where it is installed): the audit's shim shadows it and runs it after its own start-up.
VENDOR_SITECUSTOMIZE = (
    "import os\nwith open(os.environ['VENDOR_MARK'], 'a') as mark:\n    mark.write('ran\\n')\n"
)


@pytest.mark.parametrize("vendor", [False, True], ids=["this-python", "with-a-vendor-sitecustomize"])
def test_a_python_that_never_imports_torch_loads_almost_nothing(tmp_path, vendor):
    # Measured in bench/audit_startup.py; here, what it imports: none of torch, typing, threading,
    # json (its re and enum), collections or pathlib, beyond what this Python loads anyway (a
    # virtualenv's own .pth files import typing and re on Python 3.8, say; a vendor sitecustomize,
    # which the shim chains, whatever it imports). With a vendor sitecustomize on the path (this
    # Python's own where it has one, as /usr/bin/python3 on Debian; else one made here) the shim's
    # chaining must cost nothing either.
    reports, vendor_dir, mark = tmp_path / "reports", tmp_path / "vendor", tmp_path / "mark"
    reports.mkdir()
    base = dict(os.environ, PYTHONPATH=ROOT, VENDOR_MARK=str(mark))
    if vendor:
        vendor_dir.mkdir()
        (vendor_dir / "sitecustomize.py").write_text(VENDOR_SITECUSTOMIZE)
        base["PYTHONPATH"] = os.pathsep.join([ROOT, str(vendor_dir)])
    env = tables.audited_environment(tables.choose_table("2.4.0"), reports, base)
    plain, audited = (
        set(
            ast.literal_eval(
                subprocess.run(
                    [PY, "-c", PROBE], env=environ, capture_output=True, text=True, timeout=60, check=True
                ).stdout
            )
        )
        for environ in (base, env)
    )
    added = {
        "ascend_env",
        "ascend_env._audited",
        "ascend_env.utils",
        "ascend_env.utils.importhooks",
        "ascend_env.utils.jsonwrite",
    }
    assert audited - plain == added
    (report,) = process_reports.collect(reports)
    assert report["torch"] is False and report["end"] == {"how": "exit"} and report["table"] is None
    # The vendor's sitecustomize ran in both processes: the plain one and, chained, the audited one.
    assert (mark.read_text() if mark.exists() else "") == ("ran\n" * 2 if vendor else "")


# ---------------------------------------------------------------- what the command leaves behind


def test_a_daemon_holding_stdout_does_not_block_a_pipe(tmp_path):
    """`audit ... | tail`: a daemon in a session of its own keeps the command's stdout open; audit
    stops it, so the pipe's reader sees end of file within the linger time."""
    pidfile = tmp_path / "pid"
    command = [
        PY,
        "-m",
        "ascend_env",
        "audit",
        "--torch-npu",
        "2.4.0",
        "--",
        "sh",
        "-c",
        f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 300' & sleep 0.5; echo done",
    ]
    env = dict(os.environ, PYTHONPATH=ROOT)
    start = time.monotonic()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert time.monotonic() - start < 30
    assert "done" in out and proc.returncode == 2  # nothing audited: no Python process ran
    assert not alive(int(pidfile.read_text()))


def test_a_killed_audit_stops_the_command_and_removes_its_reports(tmp_path):
    pidfile = tmp_path / "pids"
    script = (
        f"sleep 300 & echo $! > {pidfile}.tmp; setsid sleep 300 & echo $! >> {pidfile}.tmp; "
        f"mv {pidfile}.tmp {pidfile}; wait"
    )
    env = dict(os.environ, PYTHONPATH=ROOT)
    command = [PY, "-m", "ascend_env", "audit", "--torch-npu", "2.4.0", "--", "sh", "-c", script]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(pidfile)
        pids = [int(line) for line in pidfile.read_text().split()]
        environ = Path(f"/proc/{pids[0]}/environ").read_bytes().split(b"\0")
        marker = b"ASCEND_ENV_AUDIT_REPORTS="
        (reports,) = [e[len(marker) :].decode() for e in environ if e.startswith(marker)]
        assert os.path.isdir(reports)
        time.sleep(0.3)  # the audit has told its watchdog of every member by now
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 20
        while (any(alive(pid) for pid in pids) or os.path.exists(reports)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(alive(pid) for pid in pids)
        assert not os.path.exists(reports)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_report_directories_of_audits_that_are_gone_are_removed(tmp_path):
    me = os.getpid()
    gone = tmp_path / f"{audit.SCRATCH_PREFIX}{2**22 + 7}-12345-abc"  # no such pid
    reused = tmp_path / f"{audit.SCRATCH_PREFIX}{me}-1-abc"  # this pid, another start time
    running = tmp_path / f"{audit.SCRATCH_PREFIX}{me}-{proctree.start_time(me)}-abc"
    unnamed = tmp_path / f"{audit.SCRATCH_PREFIX}k3j4h5"  # an older audit's: whose cannot be told
    for directory in (gone, reused, running, unnamed):
        directory.mkdir()
        (directory / "1-x.json").write_text("{}")
    (tmp_path / f"{audit.SCRATCH_PREFIX}{2**22 + 9}-1-link").symlink_to(running)
    removed = audit.remove_stale_scratch(str(tmp_path))
    assert sorted(removed) == sorted([str(gone), str(reused)])
    assert running.is_dir() and unnamed.is_dir() and not gone.exists() and not reused.exists()


def test_the_audit_removes_stale_directories_when_it_starts(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = tmp_path / f"{audit.SCRATCH_PREFIX}{2**22 + 7}-12345-abc"
    gone.mkdir()
    with pytest.raises(EnvironmentProblem):
        audit.run(["true"], "2.4.0")
    assert not gone.exists() and list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- --json is one document


def test_json_is_the_only_thing_on_stdout(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    code = (
        f"print('hello from the script'); import subprocess; subprocess.run([{PY!r}, '-I', '-c', "
        "'import time; time.sleep(1)'])"
    )
    command = [PY, "-m", "ascend_env", "audit", "--json", "--torch-npu", "2.4.0", "--", PY, "-c", code]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    report = json.loads(done.stdout)  # one document, nothing before or after it
    assert done.returncode == 1 and len(report["unaudited"]) == 1
    assert done.stderr.splitlines()[0] == "hello from the script" and done.stdout.startswith("{")
    assert report["verdict"].startswith(
        "audit failed on the simulator (torch_npu 2.4.0's op table): 1 Python process ran unaudited"
    )


def test_report_file_with_text_on_stdout(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = tmp_path / "audit.json"
    code = (
        f"print('hello'); import subprocess; subprocess.run([{PY!r}, '-S', '-c', "
        "'import time; time.sleep(1)'])"
    )
    command = [
        PY,
        "-m",
        "ascend_env",
        "audit",
        "--report",
        str(out),
        "--torch-npu",
        "2.4.0",
        "--",
        PY,
        "-c",
        code,
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == "hello"  # the command's stdout stays stdout
    assert done.stdout.splitlines()[-1].startswith(
        "audit failed on the simulator (torch_npu 2.4.0's op table): 1 Python process ran"
    )
    report = json.loads(out.read_text())
    assert report["ok"] is False and report["schema"] == 1 and len(report["unaudited"]) == 1


def test_errors_are_printed_once_with_exit_2(capsys):
    code = main(["audit", "--torch-npu", "2.4.0", "--", PY, "-c", "print(1)"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("no Python process of the command ran on the simulated NPU") == 1


def test_signals_are_left_as_they_were(tmp_path):
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(EnvironmentProblem):
        audit.run(["true"], "2.4.0")
    assert {sig: signal.getsignal(sig) for sig in before} == before
