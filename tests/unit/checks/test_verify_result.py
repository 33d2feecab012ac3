"""What the verdict decides, as records (``ascend_env.checks.verify_result``)."""

from __future__ import annotations

from ascend_env.checks import verify_result


def test_a_check_that_passed_has_no_fix():
    assert verify_result.Check("hook", True, "fine", "ignored").to_dict() == {
        "name": "hook",
        "ok": True,
        "detail": "fine",
        "fix": None,
    }
    assert verify_result.Check.failed("hook", "broken", "reinstall").to_dict()["fix"] == "reinstall"
    assert verify_result.Check.passed("hook", "fine").fix is None
