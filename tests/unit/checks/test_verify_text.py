"""verify's verdict as text (``ascend_env.checks.verify_text``): the last line, and passing checks
alike on one line."""

from __future__ import annotations

from verify_support import good_report, judged

from ascend_env.checks import verify_text
from ascend_env.kernels import registry


def test_the_last_line_states_the_verdict_and_its_cause():
    passed = verify_text.format_text(judged(good_report()))
    per_fix = 2 * len(registry.FIXES)  # a step and a fallback check per fix
    assert passed.splitlines()[-1] == f"verify: passed: all {4 + per_fix} checks passed"
    report = good_report()
    report["installation"]["hook_files"] = []
    assert verify_text.format_text(judged(report)).splitlines()[-1] == (
        f"verify: FAILED: 1 of {4 + per_fix} checks failed: hook (fix lines above)"
    )


def test_passing_checks_alike_share_a_line_and_failed_ones_keep_theirs():
    text = verify_text.format_text(judged(good_report()))
    names = [fix.name for fix in registry.FIXES]
    steps = ", ".join(f"{name} ({len(fix.smoke)})" for name, fix in zip(names, registry.FIXES))
    assert f"  ok    {steps}: every overload (out= included) ran on npu:0 and match the CPU" in text
    fallbacks = ", ".join(f"{name} fallback" for name in names)
    assert f"  ok    {fallbacks}: none: no CAUTION line, no refusal, nothing counted" in text
    report = good_report()
    report["steps"]["polar"]["overloads"]["polar.out"] = {"ok": False, "error": "wrong"}
    lines = verify_text.format_text(judged(report)).splitlines()
    assert "  FAIL  polar: polar.out: wrong" in lines
    assert "  ok    isin: every overload (out= included) ran on npu:0 and match the CPU" in lines
    assert any(line.startswith("  ok    repeat_interleave (1), bitwise_shift (6)") for line in lines)
    assert judged(good_report())["checks"][1]["name"] == "isin"  # --json keeps a check per step
