"""ascend_env.sim.silencing: what silences torch_npu's warnings, read as the C++ backend reads it,
and the same rule as verify's child environment (``ascend_env.checks.smoke.silencers``)."""

from __future__ import annotations

import re

import pytest
from sim_source import cpp_block

from ascend_env.checks import smoke
from ascend_env.sim import silencing


def test_the_silencers_are_read_as_the_backend_reads_them():
    body = cpp_block("bool warnings_silenced() {")
    assert set(re.findall(r'std::getenv\("(\w+)"\)', body)) == {silencing.RANK, silencing.LOG_LEVEL}
    assert set(re.findall(r'env_is\("(\w+)", "1"\)', body)) == set(silencing.WARNING_SWITCHES)
    assert set(re.findall(r'upper == "(\w+)"', body)) == set(silencing.QUIET_LOG_LEVELS)
    assert 'strcmp(rank, "0")' in body  # RANK silences unless it is empty or "0"


# One table for the three rules: the backend's CAUTION line (sim_backend.cpp, mirrored above), the
# model's 64-bit warnings (silencing.warnings_silenced) and verify's child environment
# (smoke.silencers: every variable that can silence must be named, so that verify can neutralise it).
SILENCING = [
    ({}, False),
    ({"RANK": "0"}, False),
    ({"RANK": ""}, False),
    ({"RANK": "1"}, True),
    ({"TORCH_NPU_DISABLED_WARNING": "1"}, True),
    ({"TORCH_NPU_WARNING_DISABLE": "1"}, True),
    ({"TORCH_NPU_WARNING_DISABLE": "0"}, False),
    ({"TORCH_CPP_LOG_LEVEL": "error"}, True),
    ({"TORCH_CPP_LOG_LEVEL": "3"}, True),
    ({"TORCH_CPP_LOG_LEVEL": "WARNING"}, False),
    ({"RANK": " 0"}, True),
    ({"RANK": "0 "}, True),
]


@pytest.mark.parametrize("environ, silenced", SILENCING)
def test_silencers_are_those_of_the_fallback_line(environ, silenced):
    assert silencing.warnings_silenced(environ) is silenced
    if silenced:
        assert smoke.silencers(environ), "verify would leave this silencer in its child's environment"
