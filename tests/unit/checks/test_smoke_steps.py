"""The smoke test's steps: one per fix of the registry, then generate(); an unknown one is refused."""

from __future__ import annotations

import pytest

from ascend_env.checks import smoke
from ascend_env.kernels import registry


def test_a_step_per_fix_then_generate():
    assert smoke.STEPS == (*(fix.name for fix in registry.FIXES if fix.smoke), "generate")
    assert smoke.STEPS[:2] == ("isin", "polar")


@pytest.mark.parametrize("steps", ["isin,nope", "generat", "polar,isin.Tensor_Tensor"])
def test_an_unknown_step_is_refused_before_anything_runs(tmp_path, capsys, steps):
    report = tmp_path / "report.json"
    with pytest.raises(SystemExit) as exited:
        smoke.main(["--report", str(report), "--steps", steps, "--device", "sim"])
    assert exited.value.code == 2
    assert "unknown step(s)" in capsys.readouterr().err
    assert not report.exists()


def test_known_steps_parse():
    args = smoke._parse(["--report", "r.json", "--steps", "isin,bucketize,generate"])
    assert args.steps == "isin,bucketize,generate"
