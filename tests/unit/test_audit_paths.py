"""``audit --paths / --soc / --fail-on``: option handling and the report, without torch."""

from __future__ import annotations

import json

import pytest

from ascend_env.cli import main
from ascend_env.exceptions import UsageError
from ascend_env.sim import paths


def test_unknown_soc_exits_2_listing_the_known(capsys):
    code = main(["audit", "--json", "--soc", "920X", "--paths", "--", "true"])
    out = json.loads(capsys.readouterr().out)
    assert code == 2
    text = json.dumps(out)
    assert "920X" in text and "910A" in text and "Ascend910B1" in text


def test_bad_fail_on_exits_2(capsys):
    code = main(["audit", "--json", "--fail-on", "fallbacks,speed", "--", "true"])
    out = json.dumps(json.loads(capsys.readouterr().out))
    assert code == 2 and "speed" in out and "64bit" in out


def test_unknown_release_exits_2(capsys):
    code = main(["audit", "--json", "--torch-npu", "2.1.0.post99", "--paths", "--", "true"])
    out = json.dumps(json.loads(capsys.readouterr().out))
    assert code == 2 and "2.1.0.post17" in out


def test_fail_on_parsing():
    assert paths.parse_fail_on(None) == ("fallbacks",)
    assert paths.parse_fail_on("compiles, 64bit") == ("compiles", "64bit")
    for bad in ("", "fallback", "compiles,,x"):
        with pytest.raises(UsageError):
            paths.parse_fail_on(bad)


def test_soc_choice():
    assert paths.choose_soc("910a", {}) == {"name": "Ascend910A", "assumed": False, "from": "--soc"}
    assert paths.choose_soc(None, {"ASCEND_ENV_SOC": "310P"})["name"] == "Ascend310P3"
    assumed = {"name": "Ascend910B1", "assumed": True, "from": "assumed"}
    assert paths.choose_soc(None, {}, no_npu_smi) == assumed
    # The machine's own SoC, as npu-smi names it, where no variable says otherwise.
    smi = paths.choose_soc(None, {}, lambda: "| 0     310P3         | OK     |\n")
    assert smi == {"name": "Ascend310P3", "assumed": False, "from": "npu-smi info"}


@pytest.mark.parametrize("environ, silenced", [
    ({}, False), ({"RANK": "0"}, False), ({"RANK": ""}, False), ({"RANK": "1"}, True),
    ({"TORCH_NPU_DISABLED_WARNING": "1"}, True), ({"TORCH_NPU_WARNING_DISABLE": "1"}, True),
    ({"TORCH_NPU_WARNING_DISABLE": "0"}, False), ({"TORCH_CPP_LOG_LEVEL": "error"}, True),
    ({"TORCH_CPP_LOG_LEVEL": "3"}, True), ({"TORCH_CPP_LOG_LEVEL": "WARNING"}, False),
])
def test_silencers_are_those_of_the_fallback_line(environ, silenced):
    assert paths.warnings_silenced(environ) is silenced


def report(steps, warnings=()):
    bucket = paths.Bucket().to_json()
    step_json = []
    for compiles, syncs in steps:
        step = dict(bucket, would_compile=compiles, host_syncs=syncs, warnings_64bit=0)
        step_json.append(step)
    return {"pid": 7, "paths": {
        "soc": "Ascend910A", "soc_assumed": False, "jit_compile": True, "op_paths": "2.1.0.post6",
        "op_paths_source": "op-plugin x",
        "totals": dict(bucket, would_compile_by_op={"cat": sum(c for c, _ in steps)}),
        "warnings_64bit": list(warnings),
        "generate": [{"steps": step_json, "after": bucket, "steady": paths.steady_state(step_json)}],
    }}


def test_failing_counts_the_steady_state_only():
    prompt_only = paths.summarize([report([(50, 3), (40, 1), (0, 1), (0, 1)])])
    assert paths.failing(prompt_only, ("compiles", "syncs", "64bit")) == ["syncs"]
    every_step = paths.summarize([report([(50, 3), (40, 1), (9, 0), (9, 0)])])
    assert paths.failing(every_step, ("compiles",)) == ["compiles"]
    assert paths.failing(every_step, ("fallbacks",)) == []


def test_text_collapses_equal_steady_steps():
    summary = paths.summarize([report([(50, 3), (40, 1)] + [(9, 1)] * 5 + [(8, 1)])])
    lines = paths.format_text(summary)
    assert "    2-6                  9           1       0 each" in lines
    assert "    7                    8           1       0" in lines
    assert "    steady state (steps 2-7): 8-9 would compile and 1 host syncs per step" in lines


def test_an_assumed_soc_is_said_to_be_assumed():
    soc = paths.choose_soc(None, {}, no_npu_smi)
    lines = paths.format_text(paths.summarize([report([(1, 1)])], soc))
    assumed = "dispatch paths on SoC Ascend910B1 (assumed: pass --soc, or set $ASCEND_ENV_SOC)"
    assert lines[0].startswith(assumed)
    chosen = paths.format_text(paths.summarize([report([(1, 1)])], paths.choose_soc("910A", {})))
    assert chosen[0].startswith("dispatch paths on SoC Ascend910A, JIT compile on")


def no_npu_smi() -> str:
    raise FileNotFoundError("npu-smi")
