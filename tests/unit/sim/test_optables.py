"""The shipped torch_npu op tables and their generator's encoding (no torch needed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.version import Version

from ascend_env.detect import npu_oplists
from ascend_env.exceptions import UsageError
from ascend_env.sim import optables

ROOT = Path(__file__).resolve().parents[3]


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_optables", ROOT / "tools" / "gen_optables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_releases_span_the_promised_range_in_version_order():
    releases = optables.releases()
    assert releases == sorted(releases, key=Version)
    assert releases[0] == "2.1.0.post3" and optables.newest() == releases[-1] == "2.14.0"
    assert not any(Version(v).is_prerelease for v in releases)
    assert len(releases) == len(set(releases))


@pytest.mark.parametrize("version", ["2.1.0.post6", "2.2.0", "2.3.1"])
def test_isin_is_missing_in_old_releases(version):
    assert not {"isin.Tensor_Tensor", "isin.Tensor_Tensor_out"} & optables.load(version)


def test_isin_is_present_from_the_fixed_releases_on():
    fixed = ["2.1.0.post8", "2.3.1.post2", "2.4.0"]
    later = [v for v in optables.releases() if Version(v) > Version("2.4.0")]
    assert len(later) > 30
    for version in fixed + later:
        assert {"isin.Tensor_Tensor", "isin.Tensor_Tensor_out"} <= optables.load(version), version


def test_tables_hold_valid_op_names_and_the_basics():
    for version in optables.releases():
        ops = optables.load(version)
        assert len(ops) > 900
        assert all(npu_oplists.entry_name(op) == op for op in ops)
        assert {"add.Tensor", "copy_", "empty.memory_format", "_local_scalar_dense"} <= ops, version


def test_fallback_disable_releases():
    assert optables.has_fallback_disable("2.7.1.post11")
    assert optables.has_fallback_disable("2.10.0.post7")
    assert not optables.has_fallback_disable("2.7.1.post10")
    assert not optables.has_fallback_disable("2.1.0.post6")


def test_versions_are_compared_as_versions():
    assert optables.load("2.1.0-post6") == optables.load("2.1.0.post6")
    assert optables.canonical("2.4") == "2.4.0"


@pytest.mark.parametrize("version", ["2.3.0", "9.9.9", "not-a-version"])
def test_unknown_release_names_the_nearest_known_ones(version):
    with pytest.raises(UsageError) as info:
        optables.load(version)
    message = str(info.value)
    assert repr(version) in message
    nearest = optables.nearest(version)
    assert len(nearest) == 3 and all(v in message for v in nearest)
    if version == "2.3.0":
        assert "2.2.0.post2" in nearest and "2.3.1" in nearest


@pytest.mark.parametrize(
    ("version", "first"),
    [("2.1.0.pos6", "2.1.0.post6"), ("2.3.l", "2.3.1"), ("2.1.0.post6x", "2.1.0.post6")],
)
def test_a_misspelt_release_suggests_the_ones_spelt_alike(version, first):
    """Not a version at all: the suggestions are the releases spelt alike, the likeliest first (the
    newest releases were suggested, whatever was typed)."""
    with pytest.raises(UsageError) as info:
        optables.load(version)
    assert f"the closest known releases are {first}, " in str(info.value)


def test_nothing_alike_suggests_the_newest():
    assert optables.nearest("garbage") == optables.releases()[-3:]


names = st.from_regex(r"[a-z_]{1,8}(\.[A-Za-z_]{1,6})?", fullmatch=True)


@settings(deadline=None)  # behaviour, not timing: loaded CI machines are slow
@given(
    st.dictionaries(
        st.from_regex(r"2\.[1-9]\.[0-9](\.post[0-9]{1,2})?", fullmatch=True),
        st.tuples(st.frozensets(names, max_size=12), st.frozensets(names, max_size=6)),
        min_size=1,
        max_size=6,
    )
)
def test_generator_encoding_round_trips(tables):
    gen = load_generator()
    full = {
        v: {
            "ops": sorted(ops),
            "by_hand": sorted(hand),
            "wheel": f"w-{v}.whl",
            "fallback_disable": len(ops) % 2 == 0,
        }
        for v, (ops, hand) in tables.items()
    }
    assert gen.decode(gen.encode(full)) == full


def test_the_generator_reads_the_releases_from_pips_own_listing():
    """tools/gen_optables.py asks pip (`pip index versions`, honouring pip.conf) which releases
    the index has: final ones in range, oldest first."""
    generator = load_generator()
    listing = (
        "torch_npu (2.15.0)\n"
        "Available versions: 2.15.0, 2.14.0, 2.10.0rc1, 2.4.0, 2.1.0.post6, 2.1.0.post3, 2.1.0\n"
    )
    assert generator.available_versions(listing) == ["2.1.0.post3", "2.1.0.post6", "2.4.0", "2.14.0"]
    with pytest.raises(SystemExit, match="no 'Available versions:' line"):
        generator.available_versions("ERROR: No matching distribution found for torch_npu\n")


# --- the _foreach_* ops registered by hand (ForeachRegister.cpp) -------------------------------------

NATIVE_FUNCTIONS_EXCERPT = """\
- func: _foreach_add.Scalar(Tensor[] self, Scalar scalar) -> Tensor[]
  device_check: NoCheck
  variants: function
  dispatch:
    CPU: foreach_tensor_add_scalar_kernel_slow
  autogen: _foreach_add.Scalar_out

- func: _foreach_lgamma(Tensor[] self) -> Tensor[]
  dispatch:
    CPU: foreach_tensor_lgamma_slow

- func: _foreach_lgamma_(Tensor(a!)[] self) -> ()

- func: isin.Tensor_Tensor_out(Tensor elements, Tensor test_elements, *, Tensor(a!) out) -> Tensor(a!)
"""


def test_the_generator_reads_upstream_schema_names():
    gen = load_generator()
    names = gen.schema_names(NATIVE_FUNCTIONS_EXCERPT)
    assert names == {"_foreach_add.Scalar", "_foreach_lgamma", "_foreach_lgamma_", "isin.Tensor_Tensor_out"}


def test_the_generator_finds_the_foreach_string_literals_of_a_library():
    # A literal may be the tail of a longer one (the linker merges string tails): after "::" it
    # counts; inside an identifier it does not. Names that are no upstream op drop out later.
    gen = load_generator()
    library = (
        b"\x7fELF\x00_foreach_lgamma\x00_foreach_add.Scalar\x00_foreach_add\x00"
        b"wrapper_NPU__foreach_sub_\x00npu::_foreach_x\x00_foreach_mul.Tensor\x00_foreach_div_unterminated"
    )
    assert gen.foreach_strings(library) == {
        "_foreach_lgamma",
        "_foreach_add.Scalar",
        "_foreach_add",
        "_foreach_mul.Tensor",
        "_foreach_x",
    }


def test_by_hand_is_the_upstream_foreach_strings_the_yaml_lacks():
    gen = load_generator()
    strings = frozenset({"_foreach_lgamma", "_foreach_add", "_foreach_add.Scalar", "_foreach_mul.Tensor"})
    upstream = frozenset({"_foreach_lgamma", "_foreach_add.Scalar", "_foreach_mul.Tensor", "add.Tensor"})
    supported = frozenset({"_foreach_add.Scalar", "add.Tensor"})
    # _foreach_add names no op (a function name), _foreach_add.Scalar has an NPU kernel.
    assert gen.by_hand(strings, upstream, supported) == {"_foreach_lgamma", "_foreach_mul.Tensor"}
    assert gen.by_hand(frozenset({"add.Tensor"}), upstream, frozenset()) == frozenset()


def test_the_torch_of_a_release_drops_the_post():
    gen = load_generator()
    assert gen.torch_of("2.1.0.post6") == "2.1.0"
    assert gen.torch_of("2.9.1") == "2.9.1"


def test_the_shipped_foreach_ops_registered_by_hand():
    # Measured on the real 2.1.0.post6 binary (its dispatcher's PrivateUse1 registrations): 60.
    hand = optables.by_hand("2.1.0.post6")
    assert len(hand) == 60
    assert {"_foreach_lgamma", "_foreach_lgamma_", "_foreach_mul.Tensor", "_foreach_norm.Scalar"} <= hand
    assert "_foreach_add.Scalar" in optables.load("2.1.0.post6") and "_foreach_add.Scalar" not in hand
    for version in optables.releases():
        hand = optables.by_hand(version)
        assert all(name.startswith("_foreach_") for name in hand), version
        assert not hand & optables.load(version), version
        assert optables.registered(version) == optables.load(version) | hand
