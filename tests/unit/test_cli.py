"""The CLI's contract: subcommands, --json, exit codes, plain output off a TTY."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from ascend_env import cli


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
    assert "invalid choice" in result.stderr
    assert "--help" in result.stderr


def test_no_subcommand_is_a_usage_error():
    assert run_cli().returncode == 2


def test_unbuilt_subcommand_says_so_and_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(cli, "_load", lambda name: None)
    assert cli.main(["audit"]) == 2
    assert "not built yet" in capsys.readouterr().err


def test_unbuilt_subcommand_json(monkeypatch, capsys):
    monkeypatch.setattr(cli, "_load", lambda name: None)
    assert cli.main(["audit", "--json"]) == 2
    payload = json.loads(capsys.readouterr().out)
    assert payload["ok"] is False
    assert payload["error"] == "NotBuiltError"
    assert payload["fix"]


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_subcommand_accepts_json(name):
    parser = cli.build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    options = {opt for action in subparsers.choices[name]._actions for opt in action.option_strings}
    assert "--json" in options


def test_version_flag():
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("ascend-env ")


def test_output_is_plain_off_a_tty():
    result = run_cli("--help")
    assert "\033[" not in result.stdout
