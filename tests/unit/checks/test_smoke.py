"""The smoke test's own process (``ascend_env.checks.smoke``): the silencers it reads as torch_npu
does, and the fix it gives where transformers is gone."""

from __future__ import annotations

import pytest

from ascend_env.checks import smoke


def test_silencers_reads_rank_as_torch_npu_does():
    assert smoke.silencers({"RANK": "0"}) == {}
    assert smoke.silencers({"RANK": ""}) == {}
    assert smoke.silencers({"RANK": " 0"}) == {"RANK": " 0"}  # not "0": the backend's rank is not 0
    assert smoke.silencers({"RANK": "3", "TORCH_CPP_LOG_LEVEL": "ERROR"}) == {
        "RANK": "3",
        "TORCH_CPP_LOG_LEVEL": "ERROR",
    }


def test_transformers_removed_after_install_says_what_status_says_to_run(monkeypatch):
    from ascend_env.exceptions import EnvironmentProblem

    monkeypatch.setattr(smoke.importlib.util, "find_spec", lambda name, *a: None)
    run = "python -m ascend_env restore (removes that record and the startup hook)"
    recorded = {"patches": {"status": "transformers removed", "code": 1, "run": run}}
    with pytest.raises(EnvironmentProblem) as caught:
        smoke._require_transformers(recorded)
    assert caught.value.fix.endswith(f"then verify again; where it is gone for good: {run}")
    with pytest.raises(EnvironmentProblem) as plain:
        smoke._require_transformers({"patches": {"status": "nothing to do", "code": 0}})
    assert "gone for good" not in plain.value.fix
