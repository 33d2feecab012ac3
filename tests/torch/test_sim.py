"""The simulated NPU: memory, dispatch by op table, torch_npu's CPU fallback, and generation."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import CASES, IN_PROCESS_TABLE, MODELS, TESTS_TORCH, generate, run_python, tiny_model

from ascend_env import sim
from ascend_env.exceptions import UsageError
from ascend_env.sim import optables

ISIN_OUT = "aten::isin.Tensor_Tensor_out"
WARNING = (
    "[W VariableFallbackKernel.cpp:51] Warning: CAUTION: The operator 'aten::isin.Tensor_Tensor_out' is not "
    "currently supported on the NPU backend and will fall back to run on the CPU. This may have performance "
    "implications. (function npu_cpu_fallback)"
)


# ------------------------------------------------------------------ memory and dispatch, in process


def test_tensors_on_npu_hold_their_values_through_views_and_copies(npu):
    a = torch.arange(12, dtype=torch.float32, device=npu).reshape(3, 4)
    assert a.device == torch.device("npu:0")
    column = a[:, 1]
    column.fill_(-1.0)  # written through a strided view
    b = a.t().contiguous() * 2
    a.resize_(2, 2)  # infrastructure kernel on the npu storage
    expected = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    expected[:, 1] = -1.0
    assert torch.equal(b.cpu(), expected.t() * 2)
    assert torch.equal(a.cpu(), expected.reshape(-1)[:4].reshape(2, 2))
    assert b.cpu().untyped_storage().device.type == "cpu"


def test_out_argument_resized_by_a_pass_through_kernel(npu):
    out = torch.empty(0, device=npu)
    x = torch.tensor([1.0, 4.0, 9.0], device=npu)
    result = torch.sqrt(x, out=out)
    assert result is out
    assert torch.equal(out.cpu(), torch.tensor([1.0, 2.0, 3.0]))


def _battery(t: torch.Tensor, idx: torch.Tensor) -> dict:
    """Ops whose results alias, resize or replace their inputs' memory in different ways."""
    dev = t.device
    out: dict = {
        "split": [part * 1 for part in t.split(2, dim=1)],
        "unbind": list(t.unbind(0)),
        "cat_out": torch.cat([t, t], 0, out=torch.empty(0, device=dev)),
        "nonzero": torch.nonzero(t > 0),
        "sort": list(torch.sort(t, dim=1)),
        "topk": list(torch.topk(t, 2)),
        "where": torch.where(t > 0, t, torch.zeros_like(t)),
        "gather": torch.gather(t, 1, torch.zeros(4, 1, dtype=torch.long, device=dev)),
        "expand_add": t[:, :1].expand(4, 5) + t,
        "as_strided": t.as_strided((2, 2), (1, 2), 1) * 1,
        "t_": t.clone().t_(),
        "unsqueeze_": t.clone().unsqueeze_(0),
        "item": t[0, 0].item(),
        "tolist": t[0].tolist(),
        "lcm_out_fallback": torch.lcm(idx, idx + 1, out=torch.empty(0, dtype=torch.long, device=dev)),
    }
    y = t.clone()
    y[idx] = 0.5
    out["index_put"] = y
    y = t.clone()
    y.masked_fill_(t > 0, -1.0)
    out["masked_fill"] = y
    return out


def _host(value, device: str):
    """``value`` with each tensor as (values, shape, strides), checking it lives on ``device``."""
    if isinstance(value, torch.Tensor):
        assert value.device.type == device
        return (value.cpu().tolist(), tuple(value.shape), value.stride())
    if isinstance(value, list):
        return [_host(v, device) for v in value]
    return value


def test_pass_through_and_fallback_kernels_compute_what_the_cpu_computes(npu):
    torch.manual_seed(0)
    x, idx = torch.randn(4, 5), torch.tensor([2, 0, 3])
    sim.reset()
    on_cpu, on_npu = _battery(x, idx), _battery(x.to(npu), idx.to(npu))
    assert sim.fallbacks() == {"aten::lcm.out": 1}
    for name, expected in on_cpu.items():
        assert _host(on_npu[name], "npu") == _host(expected, "cpu"), name


def test_the_table_decides_what_falls_back(npu):
    table = optables.load(IN_PROCESS_TABLE)
    assert "gelu" in table and "gelu.out" not in table and "isin.Tensor_Tensor" not in table
    x = torch.linspace(-2, 2, 7, device=npu)
    sim.reset()
    # A functional op the release registers runs natively, not via its (unregistered) .out form.
    assert torch.allclose(torch.nn.functional.gelu(x).cpu(), torch.nn.functional.gelu(x.cpu()))
    assert sim.fallbacks() == {}
    # One it does not register decomposes (as on the device) and its .out form falls back.
    found = torch.isin(torch.tensor([1, 2, 3], device=npu), torch.tensor([2], device=npu))
    assert found.device.type == "npu" and found.cpu().tolist() == [False, True, False]
    assert sim.fallbacks() == {ISIN_OUT: 1}
    sim.reset()
    assert sim.fallbacks() == {}


def test_dispatcher_reports_the_kernels_of_the_table(npu):
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    assert has("aten::gelu", "PrivateUse1")
    assert has("aten::empty.memory_format", "PrivateUse1")
    assert not has("aten::isin.Tensor_Tensor_out", "PrivateUse1")
    assert not has("aten::isin.Tensor_Tensor", "PrivateUse1")


def test_enable_is_idempotent_and_refuses_another_table(npu):
    sim.enable(IN_PROCESS_TABLE)
    assert sim.enabled_table() == IN_PROCESS_TABLE
    with pytest.raises(UsageError, match="cannot switch to 2.4.0"):
        sim.enable("2.4.0")
    assert sim.enabled_table() == IN_PROCESS_TABLE


def test_device_module_answers_what_transformers_and_autocast_ask(npu):
    assert torch.npu.is_available() and torch.npu.device_count() == 1 and torch.npu.current_device() == 0
    assert torch.bfloat16 in torch.npu.get_amp_supported_dtype()
    torch.npu.synchronize()
    x = torch.ones(2, 2, device=npu)
    with torch.autocast(device_type="npu", enabled=False):
        assert (x @ x).dtype == torch.float32
    assert x.is_npu and torch.nn.Linear(2, 2).npu().weight.device.type == "npu"


# ------------------------------------------------------------------ generation, in process (2.1.0.post6)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("kind", MODELS)
def test_generation_on_npu_equals_cpu_and_isin_falls_back(npu, cpu_tokens, kind, case):
    model = tiny_model(kind)
    sim.reset()
    tokens = generate(model, npu, case)
    assert torch.equal(tokens, cpu_tokens[(kind, case)])
    assert tokens.shape[1] > len(cpu_tokens[(kind, case)][0]) - 8  # new tokens were decoded
    assert sim.fallbacks()[ISIN_OUT] >= 1


def test_generation_cases_differ_from_each_other(cpu_tokens):
    # Guards the comparison above against models that emit one token whatever the options.
    for kind in MODELS:
        distinct = {tuple(cpu_tokens[(kind, case)].flatten().tolist()) for case in CASES}
        assert len(distinct) >= 3, kind


# ------------------------------------------------------------------ fresh processes

GENERATE_ALL = textwrap.dedent(
    """
    import json, sys, torch
    sys.path.insert(0, {tests!r})
    from conftest import CASES, MODELS, generate, tiny_model
    from ascend_env import sim
    sim.enable({table!r})
    equal = True
    for kind in MODELS:
        model = tiny_model(kind)
        for case in CASES:
            equal &= torch.equal(generate(model, "npu", case), generate(model, "cpu", case))
    print(json.dumps({{"equal": equal, "fallbacks": dict(sim.fallbacks())}}))
    """
)


def test_fd2_carries_the_isin_warning_exactly_once_per_process():
    result = run_python(GENERATE_ALL.format(tests=TESTS_TORCH, table="2.1.0.post6"))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["equal"]
    assert report["fallbacks"][ISIN_OUT] > len(MODELS) * len(CASES)  # every generate() hit it
    assert result.stderr.splitlines().count(WARNING) == 1
    assert result.stderr.count("CAUTION") == len(report["fallbacks"])  # one line per op


def test_isin_does_not_fall_back_under_2_4_0():
    result = run_python(GENERATE_ALL.format(tests=TESTS_TORCH, table="2.4.0"))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["equal"]
    assert not any(op.startswith("aten::isin") for op in report["fallbacks"])
    assert "isin" not in result.stderr


ISIN_TWICE = textwrap.dedent(
    """
    import torch
    from ascend_env import sim
    sim.enable({table!r})
    x = torch.tensor([1, 2, 3], device="npu")
    for _ in range(2):
        torch.isin(x, x)
    print(dict(sim.fallbacks()))
    """
)


@pytest.mark.parametrize(
    "env",
    [
        {"RANK": "1"},
        {"TORCH_NPU_DISABLED_WARNING": "1"},
        {"TORCH_NPU_WARNING_DISABLE": "1"},
        {"TORCH_CPP_LOG_LEVEL": "ERROR"},
    ],
    ids=lambda env: next(iter(env)),
)
def test_silencers_hide_the_warning_but_not_the_count(env):
    result = run_python(ISIN_TWICE.format(table="2.1.0.post6"), env)
    assert result.returncode == 0, result.stderr
    assert "CAUTION" not in result.stderr
    assert result.stdout.strip() == str({ISIN_OUT: 2})


def test_rank_zero_still_warns():
    result = run_python(ISIN_TWICE.format(table="2.1.0.post6"), {"RANK": "0"})
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines().count(WARNING) == 1


LCM_TWICE = textwrap.dedent(
    """
    import torch
    from ascend_env import sim
    sim.enable({table!r})
    x = torch.tensor([4, 6], device="npu")
    for _ in range(2):
        torch.lcm(x, x)
    print(dict(sim.fallbacks()))
    """
)


@pytest.mark.parametrize(("table", "honoured"), [("2.7.1.post11", True), ("2.7.1.post10", False)])
def test_fallback_cpu_disable_only_where_the_release_has_it(table, honoured):
    assert optables.has_fallback_disable(table) is honoured
    assert not {"lcm", "lcm.out"} & optables.load(table)
    result = run_python(LCM_TWICE.format(table=table), {"TORCH_NPU_FALLBACK_CPU_DISABLE": "1"})
    if honoured:
        assert result.returncode != 0
        assert "RuntimeError" in result.stderr and "TORCH_NPU_FALLBACK_CPU_DISABLE" in result.stderr
        assert "aten::lcm.out" in result.stderr
    else:
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == str({"aten::lcm.out": 2})


# ------------------------------------------------------------------ the build cache


def test_concurrent_builders_compile_once(tmp_path, monkeypatch):
    import threading

    from ascend_env.sim import build

    monkeypatch.setenv("ASCEND_ENV_CACHE_DIR", str(tmp_path))
    compiles = []

    def fake_command(output):
        compiles.append(output)
        return ["sh", "-c", f"sleep 0.3; printf built > '{output}'"]

    monkeypatch.setattr(build, "compile_command", fake_command)
    results, errors = [], []

    def builder():
        try:
            results.append(build.ensure_built())
        except Exception as exc:  # pragma: no cover - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=builder) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(compiles) == 1
    assert len(set(results)) == 1 and results[0].read_text() == "built"
    assert sorted(p.name for p in results[0].parent.iterdir()) == sorted([build.LIBRARY_NAME, "build.lock"])
    assert build.ensure_built() == results[0] and len(compiles) == 1  # a later caller reuses it


def test_the_build_says_that_it_runs_once_and_where_it_is_cached(tmp_path, monkeypatch, capsys):
    from ascend_env.sim import build
    from ascend_env.utils import progress

    monkeypatch.setenv("ASCEND_ENV_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(progress.VARIABLE, raising=False)
    monkeypatch.setattr(build, "compile_command", lambda output: ["sh", "-c", f"printf built > '{output}'"])
    library = build.ensure_built()
    out, err = capsys.readouterr()
    assert out == ""
    first, last = err.splitlines()
    assert first.startswith("ascend-env: building the simulated NPU's C++ backend for torch ")
    assert f"(once, half a minute to a minute; later runs reuse it from {library.parent}) ..." in first
    assert last.startswith("ascend-env: building the simulated NPU's C++ backend for torch ")
    assert ": done in " in last
    assert build.ensure_built() == library
    assert capsys.readouterr().err == ""  # cached: nothing to say
    monkeypatch.setenv(progress.VARIABLE, "-1")
    library.unlink()
    build.ensure_built()
    assert capsys.readouterr().err == ""  # -q


def test_a_wait_for_another_builder_says_so(tmp_path, monkeypatch, capsys):
    import subprocess

    from ascend_env.sim import build

    monkeypatch.setenv("ASCEND_ENV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "compile_command", lambda output: ["sh", "-c", f"printf built > '{output}'"])
    lock = build.build_dir() / "build.lock"
    lock.parent.mkdir(parents=True, mode=0o700)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; f = open(sys.argv[1], 'w'); "
            "fcntl.flock(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(1)",
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        build.ensure_built()
    finally:
        holder.wait(timeout=30)
    err = capsys.readouterr().err
    assert "waiting for another process that is building the simulated NPU's backend" in err


@pytest.mark.parametrize(
    ("script", "memory"),
    [
        ("kill -9 $$", True),
        ("echo 'g++: fatal error: Killed signal terminated program cc1plus'; exit 1", True),
        ("echo 'g++: internal compiler error: Killed (program cc1plus)'; exit 4", True),
        ("echo \"error: 'optional' in namespace 'std' does not name a template type\"; exit 1", False),
        ("kill -11 $$", False),
    ],
)
def test_a_compiler_killed_for_memory_is_not_blamed_on_cxx17(tmp_path, monkeypatch, script, memory):
    from ascend_env.exceptions import EnvironmentProblem
    from ascend_env.sim import build

    monkeypatch.setenv("ASCEND_ENV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "compile_command", lambda output: ["sh", "-c", script])
    with pytest.raises(EnvironmentProblem) as info:
        build.ensure_built()
    error = info.value
    assert ("most likely by the kernel for want of memory" in error.problem) is memory
    assert ("free memory" in error.fix) is memory
    assert ("C++17" in error.fix) is not memory
    assert "full log: " in error.problem
    assert not (build.build_dir() / build.LIBRARY_NAME).exists()


def test_a_second_process_reuses_the_build(npu):
    from ascend_env.sim import build

    library = build.ensure_built()
    stamp = library.stat().st_mtime_ns
    code = "from ascend_env.sim import build\nbuild.compile_command = None\nprint(build.ensure_built())"
    result = run_python(code)  # compile_command = None: any attempt to build would raise
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(library) and library.stat().st_mtime_ns == stamp


def test_failed_build_leaves_nothing_that_looks_finished(tmp_path, monkeypatch):
    from ascend_env.exceptions import EnvironmentProblem
    from ascend_env.sim import build

    monkeypatch.setenv("ASCEND_ENV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(
        build, "compile_command", lambda output: ["sh", "-c", f"printf half > '{output}'; exit 3"]
    )
    with pytest.raises(EnvironmentProblem, match="building the simulated NPU backend failed"):
        build.ensure_built()
    assert sorted(p.name for p in build.build_dir().iterdir()) == ["build.lock", "build.log"]


def _planted(tmp_path, monkeypatch):
    """The build cache in ``tmp_path`` with a finished-looking library in it, and a fake compiler
    that records its calls."""
    from ascend_env.sim import build

    monkeypatch.setenv("ASCEND_ENV_CACHE_DIR", str(tmp_path / "cache"))
    compiles = []
    monkeypatch.setattr(
        build,
        "compile_command",
        lambda output: compiles.append(output) or ["sh", "-c", f"printf ours > '{output}'"],
    )
    library = build.build_dir() / build.LIBRARY_NAME
    library.parent.mkdir(parents=True)
    library.write_text("planted")
    return build, library, compiles


@pytest.mark.parametrize("where", ["cache", "build dir", "library"])
def test_a_cache_others_can_write_is_refused(tmp_path, monkeypatch, where):
    """A library planted in a shared cache would run as the user who loads it: the cache, the
    build directory and the library must be writable by their owner alone."""
    from ascend_env.exceptions import EnvironmentProblem

    build, library, compiles = _planted(tmp_path, monkeypatch)
    loose = {"cache": build.cache_root(), "build dir": library.parent, "library": library}[where]
    loose.chmod(loose.stat().st_mode | 0o022)
    with pytest.raises(EnvironmentProblem, match="writable by other users") as info:
        build.ensure_built()
    assert str(loose) in str(info.value) and "ASCEND_ENV_CACHE_DIR" in info.value.fix
    assert compiles == [] and library.read_text() == "planted"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_another_users_library_is_refused(tmp_path, monkeypatch):
    from ascend_env.exceptions import EnvironmentProblem

    build, library, _ = _planted(tmp_path, monkeypatch)
    os.chown(library, 65534, 65534)
    with pytest.raises(EnvironmentProblem, match="belongs to another user"):
        build.ensure_built()


def test_a_cache_inside_a_directory_others_can_write_is_refused_unless_sticky(tmp_path, monkeypatch):
    """Another user who can rename entries of a directory above the cache can put their own cache
    in its place between the check and the load: such a directory is refused, a sticky one
    (as /tmp) is not."""
    from ascend_env.exceptions import EnvironmentProblem

    shared = tmp_path / "shared"
    shared.mkdir()
    build, library, compiles = _planted(shared, monkeypatch)
    library.chmod(0o644)
    shared.chmod(0o777)
    with pytest.raises(EnvironmentProblem, match="writable by other users") as info:
        build.ensure_built()
    assert f"is inside {shared}, which" in str(info.value) and "ASCEND_ENV_CACHE_DIR" in info.value.fix
    assert compiles == [] and library.read_text() == "planted"
    shared.chmod(0o1777)
    assert build.ensure_built() == library


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_cache_in_another_users_directory_is_refused(tmp_path, monkeypatch):
    """sudo without -H: root's cache in another user's home, which that user can swap."""
    from ascend_env.exceptions import EnvironmentProblem

    home = tmp_path / "alice"
    home.mkdir()
    build, library, compiles = _planted(home, monkeypatch)
    library.chmod(0o644)
    os.chown(home, 65534, 65534)
    with pytest.raises(EnvironmentProblem, match=r"which belongs to another user \(uid 65534\)"):
        build.ensure_built()
    assert compiles == []


def test_the_library_loaded_is_the_file_checked_not_its_path(tmp_path, monkeypatch):
    """A file swapped in at the library's path after the check is not the one loaded."""
    import ctypes

    build, library, _ = _planted(tmp_path, monkeypatch)
    library.chmod(0o644)
    loaded = []

    def swap_then_load(path):
        swapped = library.with_name("swapped")
        swapped.write_text("swapped")
        os.replace(swapped, library)
        loaded.append((path, Path(path).read_text()))

    monkeypatch.setattr(ctypes, "CDLL", swap_then_load)
    build._load_checked(torch, library)
    assert len(loaded) == 1 and loaded[0][0].startswith("/proc/self/fd/") and loaded[0][1] == "planted"
    assert library.read_text() == "swapped"


def test_a_symlinked_library_or_lock_is_refused_and_its_target_untouched(tmp_path, monkeypatch):
    from ascend_env.exceptions import EnvironmentProblem

    build, library, compiles = _planted(tmp_path, monkeypatch)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    library.unlink()
    library.symlink_to(victim)
    with pytest.raises(EnvironmentProblem, match="is a symbolic link"):
        build.ensure_built()
    library.unlink()
    (library.parent / "build.lock").symlink_to(victim)  # root would truncate it through the link
    with pytest.raises(EnvironmentProblem, match="build lock .* is a symbolic link") as info:
        build.ensure_built()
    assert "rm " in info.value.fix
    assert victim.read_text() == "precious" and compiles == []


def test_a_damaged_cached_library_is_built_again(npu, tmp_path):
    """A library that does not load (truncated on disk, say) is removed and built once more."""
    from ascend_env.sim import build

    real = build.ensure_built()  # the in-process simulator's: copied in as the "build"
    cache = tmp_path / "cache"
    code = (
        "import shutil, torch\n"
        "from ascend_env import sim\nfrom ascend_env.sim import build\n"
        "damaged = build.build_dir() / build.LIBRARY_NAME\n"
        "damaged.parent.mkdir(parents=True)\ndamaged.write_bytes(b'\\x7fELF truncated')\n"
        "calls = []\n"
        f"build.compile_command = lambda out: calls.append(out) or ['cp', {str(real)!r}, str(out)]\n"
        "sim.enable('2.1.0.post6')\n"
        "x = torch.tensor([1, 2, 3], device='npu')\n"
        "print(len(calls), torch.isin(x, x[1:]).cpu().tolist())\n"
    )
    result = run_python(code, {"ASCEND_ENV_CACHE_DIR": str(cache)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == "1 [False, True, True]"


def test_missing_compiler_is_a_clear_error(monkeypatch):
    from ascend_env.exceptions import EnvironmentProblem
    from ascend_env.sim import build

    monkeypatch.setenv("CXX", "no-such-compiler-anywhere")
    with pytest.raises(EnvironmentProblem, match="needs a C\\+\\+ compiler") as info:
        build.compiler()
    assert "apt-get install g++" in info.value.fix
