"""``audit --paths / --soc / --fail-on``: option handling and the report
(``ascend_env.checks.paths_report``), without torch."""

from __future__ import annotations

import json

import pytest

from ascend_env.checks import paths_report
from ascend_env.cli import main
from ascend_env.exceptions import UsageError
from ascend_env.sim import dispatch_model
from ascend_env.sim.reports import PathsReport, ProcessReport, RunReport


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
    assert paths_report.parse_fail_on(None) == ("fallbacks",)
    assert paths_report.parse_fail_on("compiles, 64bit") == ("compiles", "64bit")
    for bad in ("", "fallback", "compiles,,x"):
        with pytest.raises(UsageError):
            paths_report.parse_fail_on(bad)


def test_soc_choice():
    assert paths_report.choose_soc("910a", {}) == {"name": "Ascend910A", "assumed": False, "from": "--soc"}
    assert paths_report.choose_soc(None, {"ASCEND_ENV_SOC": "310P"})["name"] == "Ascend310P3"
    assumed = {"name": "Ascend910B1", "assumed": True, "from": "assumed"}
    assert paths_report.choose_soc(None, {}, no_npu_smi) == assumed
    # The machine's own SoC, as npu-smi names it, where no variable says otherwise.
    smi = paths_report.choose_soc(None, {}, lambda: "| 0     310P3         | OK     |\n")
    assert smi == {"name": "Ascend310P3", "assumed": False, "from": "npu-smi info"}


def report(steps, warnings=()) -> ProcessReport:
    """A process's report of one generate() with these (would compile, host syncs) steps."""
    bucket = dispatch_model.Bucket().to_json()
    step_json = [
        dict(bucket, would_compile=compiles, host_syncs=syncs, warnings_64bit=0) for compiles, syncs in steps
    ]
    run = RunReport(
        steps=step_json, after=bucket, steady=dispatch_model.steady_state(step_json), site=None, mode=None
    )
    return ProcessReport(
        pid=7,
        paths=PathsReport(
            soc="Ascend910A",
            soc_assumed=False,
            jit_compile=True,
            jit_compile_set=None,
            op_paths="2.1.0.post6",
            op_paths_source="op-plugin x",
            steady_from=dispatch_model.STEADY_FROM,
            totals=dict(bucket, would_compile_by_op={"cat": sum(c for c, _ in steps)}),
            outside_generate=bucket,
            generate=[run],
            warnings_64bit=list(warnings),
            errors=[],
            compile_guard={"ran": False, "why": "the startup hook is not installed in this Python"},
        ),
    )


def test_failing_counts_the_steady_state_only():
    prompt_only = paths_report.summarize([report([(50, 3), (40, 1), (0, 1), (0, 1)])])
    assert paths_report.failing(prompt_only, ("compiles", "syncs", "64bit")) == ["syncs"]
    every_step = paths_report.summarize([report([(50, 3), (40, 1), (9, 0), (9, 0)])])
    assert paths_report.failing(every_step, ("compiles",)) == ["compiles"]
    assert paths_report.failing(every_step, ("fallbacks",)) == []


def test_text_collapses_equal_steady_steps():
    summary = paths_report.summarize([report([(50, 3), (40, 1)] + [(9, 1)] * 5 + [(8, 1)])])
    lines = paths_report.format_text(summary)
    assert "    2-6                  9           1       0 each" in lines
    assert "    7                    8           1       0" in lines
    assert "    steady state (steps 2-7): 8-9 would compile and 1 host syncs per step" in lines


def test_an_assumed_soc_is_said_to_be_assumed():
    soc = paths_report.choose_soc(None, {}, no_npu_smi)
    lines = paths_report.format_text(paths_report.summarize([report([(1, 1)])], soc))
    assumed = "dispatch paths on SoC Ascend910B1 (assumed: pass --soc, or set $ASCEND_ENV_SOC)"
    assert lines[0].startswith(assumed)
    soc = paths_report.choose_soc("910A", {})
    chosen = paths_report.format_text(paths_report.summarize([report([(1, 1)])], soc))
    assert chosen[0].startswith("dispatch paths on SoC Ascend910A, JIT compile on")


def no_npu_smi() -> str:
    raise FileNotFoundError("npu-smi")


# ---------------------------------------------------------------- the report names each generate() table


def run_of(site, mode, steps=((3, 1), (2, 1), (1, 1), (1, 1))) -> RunReport:
    bucket = dispatch_model.Bucket().to_json()
    step_json = [dict(bucket, would_compile=c, host_syncs=s, warnings_64bit=0) for c, s in steps]
    steady = dispatch_model.steady_state(step_json)
    return RunReport(steps=step_json, after=bucket, steady=steady, site=site, mode=mode)


def with_runs(runs, guard):
    data = report([(1, 1)])
    data["paths"]["generate"] = runs
    data["paths"]["compile_guard"] = guard
    return data


NO_KERNELS = {
    "ran": True,
    "apply": False,
    "applied": False,
    "error": None,
    "soc": "Ascend910A",
    "reason": "no binary kernels (/usr/local/Ascend/ascend-toolkit/latest/opp/built-in/op_impl/"
    "ai_core/tbe/kernel is missing): with JIT compile off, ops would fail",
}


def test_each_generate_table_is_named_by_call_site_and_mode():
    runs = [
        run_of("chat.py:12", "greedy_search"),
        run_of("chat.py:12", "greedy_search"),
        run_of("chat.py:20", "sample"),
        run_of("chat.py:30", None),
    ]
    summary = paths_report.summarize([with_runs(runs, NO_KERNELS)], paths_report.choose_soc("910A", {}))
    lines = paths_report.format_text(summary)
    titles = [line for line in lines if line.startswith("  generate() ")]
    assert titles == [
        "  generate() at chat.py:12 (greedy_search, pid 7, call 1 of 2): 4 steps (steady state from step 2)",
        "  generate() at chat.py:12 (greedy_search, pid 7, call 2 of 2): 4 steps (steady state from step 2)",
        "  generate() at chat.py:20 (sample, pid 7): 4 steps (steady state from step 2)",
        "  generate() at chat.py:30 (decoding mode unknown, pid 7): 4 steps (steady state from step 2)",
    ]


@pytest.mark.parametrize(
    "guard, said, fix",
    [
        (
            NO_KERNELS,
            "compile guard: did not act: this machine has no binary kernels (",
            "fix: on the Ascend910A machine, install the binary kernels (Ascend-cann-kernels-910a): "
            "the startup hook then turns JIT compile off",
        ),
        (
            {"ran": False, "why": "the startup hook is not installed in this Python"},
            "compile guard: did not run: the startup hook is not installed in this Python",
            "fix: run: python -m ascend_env install (its startup hook turns JIT compile off",
        ),
        (
            {"ran": False, "why": "torch_npu was never imported, and the guard runs when it is"},
            "compile guard: did not run: torch_npu was never imported",
            "fix: import torch_npu in the script",
        ),
        (
            {
                "ran": True,
                "applied": True,
                "reason": "Ascend910A starts with JIT compile on and binary kernels are installed",
            },
            "compile guard: acted: JIT compile turned off",
            "fix: the guard turned JIT compile off and the code turned it back on",
        ),
        (
            {
                "ran": True,
                "applied": False,
                "reason": "turned off (install --no-compile-guard or $ASCEND_ENV_COMPILE_GUARD=0)",
            },
            "compile guard: did not act: turned off",
            "fix: run python -m ascend_env install without --no-compile-guard",
        ),
    ],
)
def test_the_report_says_why_the_guard_did_or_did_not_act_and_ends_with_a_fix(guard, said, fix):
    summary = paths_report.summarize(
        [with_runs([run_of("chat.py:12", "greedy_search")], guard)], paths_report.choose_soc("910A", {})
    )
    lines = paths_report.format_text(summary)
    assert any(line.startswith("  " + said) for line in lines), lines
    assert lines[-1].startswith("  " + fix)
    assert paths_report.failing(summary, ("compiles",)) == ["compiles"]
    assert paths_report.fix_line(summary, ["compiles"]) == lines[-1][len("  fix: ") :]
    assert paths_report.failing_text(summary, ["compiles"]) == (
        "2 would-be online compiles in the steady state of generate() on Ascend910A (--fail-on compiles)"
    )


def test_no_compiles_but_syncs_end_with_the_sync_fix():
    runs = [run_of("chat.py:12", "greedy_search", ((0, 2), (0, 2), (0, 2), (0, 2)))]
    lines = paths_report.format_text(paths_report.summarize([with_runs(runs, NO_KERNELS)]))
    assert lines[-1] == (
        "  fix: read the host syncs by call site above: move each device-to-host read in your code "
        "(item(), .cpu(), if tensor:) out of the decoding loop; transformers' own are not counted"
    )


# ---------------------------------------------------------------- one SoC variable, one option


def test_the_simulated_soc_is_ascend_env_soc(monkeypatch):
    from ascend_env.sim import compile_mode

    monkeypatch.delenv("ASCEND_ENV_SIM_SOC", raising=False)
    monkeypatch.setenv("ASCEND_ENV_SOC", "310P")
    assert compile_mode.SOC_ENV == paths_report.MACHINE_SOC_ENV == "ASCEND_ENV_SOC"
    assert compile_mode.soc() == "Ascend310P3" and not compile_mode.soc_assumed()


def test_the_old_variable_still_works_and_warns(monkeypatch, capsys):
    from ascend_env.sim import compile_mode

    monkeypatch.delenv("ASCEND_ENV_SOC", raising=False)
    monkeypatch.setenv("ASCEND_ENV_SIM_SOC", "910A")
    monkeypatch.setattr(compile_mode, "_WARNED", [])
    with pytest.warns(DeprecationWarning, match="ASCEND_ENV_SIM_SOC is deprecated: set .ASCEND_ENV_SOC"):
        assert compile_mode.soc() == "Ascend910A"
    env = {"ASCEND_ENV_SIM_SOC": "910A"}
    compile_mode.export_soc(env)
    assert env == {"ASCEND_ENV_SIM_SOC": "910A", "ASCEND_ENV_SOC": "910A"}
    assert capsys.readouterr().err == (
        "ascend-env: warning: $ASCEND_ENV_SIM_SOC is deprecated: set "
        "$ASCEND_ENV_SOC instead (one variable names the SoC for detect, "
        "audit, verify and the startup hook)\n"
    )
    both = {"ASCEND_ENV_SIM_SOC": "910A", "ASCEND_ENV_SOC": "310P"}
    compile_mode.export_soc(both)
    assert both["ASCEND_ENV_SOC"] == "310P" and capsys.readouterr().err == ""


def test_verify_takes_soc_too(capsys):
    from ascend_env.checks import verify

    assert verify._with_soc({}, "910a")["ASCEND_ENV_SOC"] == "Ascend910A"
    assert verify._with_soc({"ASCEND_ENV_SOC": "310P"}, None)["ASCEND_ENV_SOC"] == "310P"
    code = main(["verify", "--soc", "920X", "--device", "sim"])
    assert code == 2 and "920X" in capsys.readouterr().err


# ---------------------------------------------------------------- host syncs: whose they are

GENERATE_SYNCS = {"transformers/generation/utils.py:2413": 1, "transformers/generation/utils.py:384": 1}


def run_with_sites(by_site) -> RunReport:
    """A generate() of 4 steps, each with the host syncs ``by_site``."""
    run = run_of("chat.py:12", "greedy_search", ((0, sum(by_site.values())),) * 4)
    for step in run["steps"]:
        step["host_syncs_by_site"] = dict(by_site)
    return run


def test_host_syncs_inside_transformers_generate_pass_fail_on_syncs():
    """transformers' own per-step syncs (its stopping check, its cache position) are no caller's to
    move: reported, with no fix line, and --fail-on syncs passes."""
    summary = paths_report.summarize([with_runs([run_with_sites(GENERATE_SYNCS)], NO_KERNELS)])
    assert paths_report.failing(summary, ("syncs",)) == []
    lines = paths_report.format_text(summary)
    assert "    steady state (steps 2-3): 0 would compile and 2 host syncs per step" in lines
    assert lines[-1] == (
        "  host syncs in the steady state of generate(): all at transformers' own call sites (its "
        "stopping check, its cache position): none for your code to move, and --fail-on syncs does "
        "not count them"
    )
    assert not any(line.startswith("  fix:") for line in lines)


def test_a_sync_of_the_callers_own_fails_and_is_the_one_counted():
    mine = dict(GENERATE_SYNCS, **{"/home/me/chat.py:30": 1})
    summary = paths_report.summarize([with_runs([run_with_sites(mine)], NO_KERNELS)])
    assert paths_report.failing(summary, ("syncs",)) == ["syncs"]
    assert paths_report.failing_text(summary, ["syncs"]) == (
        "2 host syncs outside transformers' own code in the steady state of generate() (--fail-on syncs)"
    )
    assert paths_report.format_text(summary)[-1].startswith("  fix: read the host syncs by call site above")


@pytest.mark.parametrize(
    ("site", "theirs"),
    [
        ("transformers/generation/utils.py:2413", True),
        ("transformers/models/llama/modeling_llama.py:80", True),
        ("/src/transformers/src/transformers/generation/utils.py:384", True),
        ("transformers_modules/my-model/modeling.py:12", False),  # remote code: the caller's
        ("/home/me/chat.py:30", False),
        ("accelerate/utils/operations.py:10", False),
        ("<unknown>", False),
    ],
)
def test_whose_call_site(site, theirs):
    assert paths_report.transformers_site(site) is theirs
