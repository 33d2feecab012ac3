"""The CLI's contract: subcommands, --json, exit codes, plain output off a TTY."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ascend_env import cli

ROOT = str(Path(cli.__file__).resolve().parents[1])


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ascend_env", *args], capture_output=True, text=True, timeout=120
    )


def test_every_designed_subcommand_is_listed():
    parser = cli.build_parser()
    help_text = parser.format_help()
    for name in ("detect", "install", "restore", "status", "verify", "audit", "patch-wheel"):
        assert name in help_text


def test_unknown_subcommand_is_a_usage_error():
    result = run_cli("frobnicate")
    assert result.returncode == 2
    assert "'frobnicate' is not an ascend-env command." in result.stderr
    assert "Did you mean" not in result.stderr
    assert "--help" in result.stderr


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("instal", "install"),
        ("verfy", "verify"),
        ("stauts", "status"),
        ("patch_wheel", "patch-wheel"),
        ("hlep", "help"),
    ],
)
def test_a_mistyped_command_gets_a_did_you_mean(typed, meant):
    result = run_cli("-q", typed)
    assert result.returncode == 2
    assert f"Did you mean '{meant}'?" in result.stderr
    assert result.stdout == ""
    # With --json, the one JSON document on stdout, as for every other error (docs/states.md).
    as_json = run_cli("-q", typed, "--json")
    assert as_json.returncode == 2 and as_json.stderr == ""
    document = json.loads(as_json.stdout)
    assert document["ok"] is False and document["error"] == "UsageError"
    assert f"Did you mean '{meant}'?" in document["problem"] and document["fix"]


def test_help_command_prints_the_command_s_help_to_stdout():
    result = run_cli("help", "install")
    assert result.returncode == 0
    assert result.stdout.startswith("usage: ascend-env install ")
    assert "--hook-only" in result.stdout
    overview = run_cli("help")
    assert overview.returncode == 0 and "environment variables:" in overview.stdout
    wrong = run_cli("help", "instal")
    assert wrong.returncode == 2 and "Did you mean 'install'?" in wrong.stderr


def test_a_bad_option_shows_the_subcommand_s_own_usage():
    result = run_cli("status", "--bogus")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("usage: ascend-env status ")
    assert "ascend-env status: error: unrecognized arguments: --bogus\n" in result.stderr
    assert "fix: see 'ascend-env help status'" in result.stderr


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["status", "--bogus"], "unrecognized arguments: --bogus"),
        (["patch-wheel", "x.whl", "--build", "two"], "argument --build: invalid int value: 'two'"),
        (["patch-wheel"], "the following arguments are required: wheel"),
    ],
)
def test_a_usage_error_with_json_is_one_json_document(args, problem):
    result = run_cli(*args, "--json")
    assert result.returncode == 2 and result.stderr == "", result.stderr
    assert json.loads(result.stdout) == {
        "ok": False,
        "error": "UsageError",
        "problem": problem,
        "fix": f"see 'ascend-env help {args[0]}'",
    }


def test_json_after_the_double_dash_is_the_audited_command_s():
    text = run_cli("audit", "--bogus", "--", "python", "--json")
    assert text.returncode == 2 and text.stdout == ""
    assert "ascend-env audit: error: unrecognized arguments: --bogus" in text.stderr


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        (["verify", "--torch_npu", "2.1.0.post6"], "--torch-npu"),
        (["verify", "--torch_npu=2.1.0.post6"], "--torch-npu"),
        (["verify", "--strictt"], "--strict"),
        (["install", "--dryrun"], "--dry-run"),
        (["verify", "--device", "simm"], "sim"),
        (["install", "--patches", "alway"], "always"),
    ],
)
def test_a_mistyped_option_or_value_gets_a_did_you_mean(typed, meant):
    result = run_cli(*typed)
    assert result.returncode == 2
    error = [line for line in result.stderr.splitlines() if ": error: " in line]
    assert error and error[0].endswith(f". Did you mean {meant!r}?"), result.stderr


def test_nothing_alike_gets_no_guess():
    for typed in (["status", "--bogus"], ["install", "--patches", "sometimes"]):
        assert "Did you mean" not in run_cli(*typed).stderr


def test_help_lists_every_environment_variable_ascend_env_reads():
    text = cli.build_parser().format_help()
    for name, _ in cli.ENVIRONMENT:
        assert f"  {name} " in text
    # Every ASCEND_ENV_* setting the package reads from os.environ is listed (internal ones that
    # ascend-env sets for its own children are not settings).
    import re

    internal = {"ASCEND_ENV_PROGRESS_FD", "ASCEND_ENV_CRASH_AT", "ASCEND_ENV_SIM_SOC"}
    package = Path(ROOT) / "ascend_env"
    read = set()
    for path in package.rglob("*.py"):
        read.update(re.findall(r"environ(?:\.get\(|\[)\"(ASCEND_ENV_[A-Z_]+)\"", path.read_text()))
    read = {name for name in read if not name.startswith("ASCEND_ENV_AUDIT_")} - internal
    assert read and read <= {name for name, _ in cli.ENVIRONMENT}
    # CANN's variables, which detect reads and audit's fix lines name (ASCEND_TOOLKIT_HOME).
    from ascend_env.detect import cann

    assert set(cann.ENV_VARS) <= {name for name, _ in cli.ENVIRONMENT}


@pytest.mark.parametrize("where", ["before", "after"])
def test_quiet_and_verbose_set_the_verbosity_children_inherit(monkeypatch, where):
    from ascend_env.utils import progress

    seen = {}

    class Command:
        @staticmethod
        def run(args):
            seen["level"] = os.environ.get(progress.VARIABLE)
            return 0

    parser = cli.build_parser()  # with the real commands' options
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    monkeypatch.setattr(cli, "_load", lambda name: Command)
    for flags, level in (([], None), (["-q"], "-1"), (["--quiet"], "-1"), (["-v"], "1")):
        monkeypatch.delenv(progress.VARIABLE, raising=False)
        argv = [*flags, "status"] if where == "before" else ["status", *flags]
        assert cli.main(argv) == 0
        assert seen["level"] == level


def test_no_subcommand_is_a_usage_error():
    assert run_cli().returncode == 2


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_subcommand_accepts_json(name):
    parser = cli.build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    options = {opt for action in subparsers.choices[name]._actions for opt in action.option_strings}
    assert "--json" in options


def test_version_flag_says_where_it_runs_from_and_on_which_python():
    result = run_cli("--version")
    assert result.returncode == 0
    version = ".".join(map(str, sys.version_info[:3]))
    # The package that runs: what `python -m` finds from here (a checkout, or an installed wheel).
    where = subprocess.run(
        [sys.executable, "-c", "import ascend_env, pathlib; print(pathlib.Path(ascend_env.__file__).parent)"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    assert result.stdout == (
        f"ascend-env {cli.__version__} from {where} (Python {version}, {sys.executable})\n"
    )


def test_output_is_plain_off_a_tty():
    result = run_cli("--help")
    assert "\033[" not in result.stdout


def test_ctrl_c_while_loading_a_command_says_what_happens_next(monkeypatch, capsys):
    """Ctrl-C before or while the command runs: exit 130 and one line that says the next install
    or restore finishes a change in progress (no traceback)."""
    from ascend_env import cli

    def interrupted(name):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_load", interrupted)
    try:
        code = cli.main(["status"])
    except KeyboardInterrupt:
        pytest.fail("main() let KeyboardInterrupt out (a traceback for the user)")
    assert code == 130
    err = capsys.readouterr().err
    assert err == cli.INTERRUPTED and "next install or restore" in err


def test_ctrl_c_while_ascend_env_starts_is_one_line(tmp_path):
    """Ctrl-C during the imports of ``python -m ascend_env`` (here: the CLI module's import raises
    it): a line, exit 130, no traceback."""
    code = (
        "import runpy, sys\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'ascend_env.cli':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "runpy.run_module('ascend_env', run_name='__main__')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(tmp_path),
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert result.returncode == 130
    assert result.stderr == "ascend-env: interrupted while starting; nothing was changed.\n"


def test_pre_commit_runs_what_ci_lint_runs():
    import configparser
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2]
    config = yaml.safe_load((root / ".pre-commit-config.yaml").read_text())
    (hook,) = [h for repo in config["repos"] for h in repo["hooks"]]
    assert hook["entry"] == "tox run -e lint" and hook["pass_filenames"] is False
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(root / "tox.ini")
    assert "lint" in tox["tox"]["labels"].split("test =")[1].splitlines()[0]
    assert tox["testenv:lint"]["commands"].strip()


def test_the_sim_extra_pins_what_the_old_torch_envs_test():
    """README's first command installs ``.[sim]``: on Python 3.8 / 3.9 / 3.10 it must bring exactly
    the torch and numpy that CI's old-torch envs prove, and transformers exactly."""
    import configparser
    from pathlib import Path

    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from 3.11")
    root = Path(__file__).resolve().parents[2]
    extra = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]["sim"]
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(root / "tox.ini")
    section = tox["testenv:torch-{2.1.0,2.2.0,2.3.1}"]
    pythons = {
        line.split(":")[0].strip(): line.split("python")[1].strip()
        for line in section["base_python"].strip().splitlines()
    }
    deps = [line.strip() for line in section["deps"].strip().splitlines()]

    def chosen(python: str) -> set:
        env = dict(default_environment(), python_version=python)
        return {
            f"{r.name}{r.specifier}"
            for r in map(Requirement, extra)
            if r.marker is None or r.marker.evaluate(env)
        }

    for torch, python in pythons.items():
        # einops: only for the transformers 4.53 matrix runs of those envs, not for the extra's 4.46.3.
        wanted = {
            line.split(": ")[1]
            for line in deps
            if line.startswith(f"{torch}:") and not line.split(": ")[1].startswith("einops")
        }
        assert chosen(python) >= wanted | {f"torch=={torch}", "transformers==4.46.3"}, torch
    assert chosen("3.11") == {"torch==2.13.0", "transformers==4.46.3"}


def test_one_source_for_every_reinstall_command():
    """Every fix that says to reinstall a distribution comes from exceptions.reinstall (or, for
    ascend-env itself, which is not on PyPI, REINSTALL_ASCEND_ENV): no module writes the pip
    command by hand."""
    from pathlib import Path

    from ascend_env.exceptions import REINSTALL_ASCEND_ENV, reinstall

    pinned = reinstall("transformers", "4.46.3")
    assert pinned == "pip install --force-reinstall --no-deps transformers==4.46.3"
    assert reinstall("torch_npu") == "pip install --force-reinstall --no-deps torch_npu"
    assert "wheel or clone" in REINSTALL_ASCEND_ENV
    package = Path(__file__).resolve().parents[2] / "ascend_env"
    flags = ("--force-reinstall", "--ignore-installed")
    by_hand = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if any(flag in path.read_text(encoding="utf-8") for flag in flags) and path.name != "exceptions.py"
    ]
    assert by_hand == []


#: Runs ``python -m ascend_env ARGS`` as ``-m`` would, then writes the modules it imported to
#: the file named by the first argument (at exit, whatever the exit code).
_IMPORTS_AT_EXIT = """
import atexit, json, runpy, sys
record, sys.argv = sys.argv[1], ["ascend-env", *sys.argv[2:]]
atexit.register(lambda: open(record, "w").write(json.dumps(sorted(sys.modules))))
runpy.run_module("ascend_env", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("argv", [("detect", "--json"), ("status", "--help")])
def test_a_command_imports_only_what_it_needs(argv, tmp_path):
    """``detect`` and ``status`` load neither the checks, nor the simulator, nor torch: the CLI
    imports the chosen command's module alone."""
    record = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTS_AT_EXIT, str(record), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode in (0, 1), done.stderr
    if "--json" in argv:
        assert isinstance(json.loads(done.stdout), dict)
    modules = json.loads(record.read_text())
    assert f"ascend_env.commands.{argv[0]}" in modules
    unwanted = [
        name
        for name in modules
        if name in ("torch", "ascend_env.checks", "ascend_env.sim")
        or name.startswith(("torch.", "ascend_env.checks.", "ascend_env.sim."))
    ]
    assert unwanted == []
    others = {f"ascend_env.commands.{name.replace('-', '_')}" for name in cli.COMMANDS if name != argv[0]}
    assert others.isdisjoint(modules)
