"""The SoC names and the compile mode torch_npu starts in on each."""

import pytest

from ascend_env.detect import socs
from ascend_env.exceptions import UsageError
from ascend_env.sim import compile_mode


@pytest.mark.parametrize(
    "name, expected",
    [
        ("910A", "Ascend910A"),
        ("910b", "Ascend910B1"),
        ("310P", "Ascend310P3"),
        ("Ascend910B", "Ascend910B"),
        ("ascend910b3", "Ascend910B3"),
        ("910B3", "Ascend910B3"),
        ("Ascend310P1", "Ascend310P1"),
        ("910_93", "Ascend910_9391"),
    ],
)
def test_names_and_aliases(name, expected):
    assert socs.canonical(name) == expected


def test_unknown_soc_is_refused_with_the_known_names():
    with pytest.raises(UsageError) as caught:
        socs.canonical("920X")
    assert "920X" in caught.value.problem
    assert "910A" in caught.value.fix and "Ascend310P3" in caught.value.fix


@pytest.mark.parametrize(
    "soc, jit",
    [
        # JIT compile on at device start: the 910A family and 310P.
        ("Ascend910PremiumA", True),
        ("Ascend910ProA", True),
        ("Ascend910A", True),
        ("Ascend910B", True),
        ("Ascend310P3", True),
        ("Ascend310P7", True),
        # Off from Ascend910B1 on.
        ("Ascend910B1", False),
        ("Ascend910B4", False),
        ("Ascend310B1", False),
        ("Ascend910_9391", False),
    ],
)
def test_jit_compile_default(soc, jit):
    assert socs.jit_compile_default(soc) is jit


@pytest.mark.parametrize(
    "soc, family",
    [
        ("Ascend910A", "910A"),
        ("Ascend910B", "910A"),
        ("Ascend910B2", "910B"),
        ("Ascend310P1", "310P"),
        ("Ascend310B4", "310B"),
        ("Ascend910_9382", "910_93"),
    ],
)
def test_family(soc, family):
    assert socs.family(soc) == family


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.delenv(compile_mode.SOC_ENV, raising=False)
    compile_mode.reset()
    yield monkeypatch
    compile_mode.reset()


def test_simulated_soc_defaults_and_says_it_assumed(fresh):
    assert compile_mode.soc() == compile_mode.DEFAULT_SOC
    assert compile_mode.soc_assumed()
    fresh.setenv(compile_mode.SOC_ENV, "310P")
    assert compile_mode.soc() == "Ascend310P3" and not compile_mode.soc_assumed()


def test_compile_mode_follows_the_soc_until_the_script_sets_it(fresh):
    fresh.setenv(compile_mode.SOC_ENV, "910A")
    assert compile_mode.jit_compile() and compile_mode.jit_compile_set() is None
    assert compile_mode.acl_op(has_op_api=True)
    compile_mode.set_jit_compile(False)
    assert not compile_mode.jit_compile() and compile_mode.jit_compile_set() is False
    assert not compile_mode.acl_op(has_op_api=True)
    # An op with only an acl_op implementation takes it whatever the mode.
    assert compile_mode.acl_op(has_op_api=False)
    fresh.setenv(compile_mode.SOC_ENV, "910B")
    compile_mode.reset()
    assert not compile_mode.jit_compile()
    compile_mode.set_jit_compile(True)
    assert compile_mode.acl_op(has_op_api=True)


def test_allow_internal_format(fresh):
    assert compile_mode.allow_internal_format()
    compile_mode.set_allow_internal_format(False)
    assert not compile_mode.allow_internal_format()


def test_bad_simulated_soc_is_a_usage_error_naming_the_variable(fresh):
    fresh.setenv(compile_mode.SOC_ENV, "nonsense")
    with pytest.raises(UsageError) as caught:
        compile_mode.soc()
    assert caught.value.problem == "unknown Ascend SoC 'nonsense' in $ASCEND_ENV_SOC."
    assert caught.value.fix.startswith("set ASCEND_ENV_SOC to one of 310B") and caught.value.fix.endswith(
        ", or unset it"
    )


@pytest.mark.parametrize(
    ("typed", "meant"), [("91OB", "910B"), ("ascend910b5", "Ascend910B"), ("301P", "310P")]
)
def test_an_unknown_soc_spelt_like_a_known_one_suggests_it(typed, meant):
    with pytest.raises(UsageError) as caught:
        socs.canonical(typed)
    assert caught.value.problem == f"unknown Ascend SoC {typed!r}. Did you mean {meant!r}?"


def test_a_huge_unknown_name_is_not_repeated_whole():
    with pytest.raises(UsageError) as caught:
        socs.canonical("9" * 100_000)
    assert len(caught.value.problem) < 120 and caught.value.problem.startswith("unknown Ascend SoC '999")
