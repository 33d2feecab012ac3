"""The simulated torch_npu and the simulator's fidelity: storage copies, generators, pinned memory.

In process (the session's simulator, ``IN_PROCESS_TABLE``): deepcopy, ``torch.Generator("npu")``,
pinned memory, memory queries, streams, compile settings, unknown names. In subprocesses, where
``import torch_npu`` finds the simulated package: scripts written for torch_npu and for CUDA,
unchanged, under ``ascend-env audit``; the startup hook; transformers with torch_npu imported.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import IN_PROCESS_TABLE, ROOT, TESTS_TORCH, run_python
from test_hook import hooked_env, run  # noqa: F401 - the hook fixture, shared

from ascend_env import sim
from ascend_env.detect import socs
from ascend_env.sim import compile_mode

CAUTION_ISIN = (
    "CAUTION: The operator 'aten::isin.Tensor_Tensor_out' is not currently supported on the NPU backend"
)

# The script of the report that started ascend-env, unchanged.
SEED_SCRIPT = """\
import torch
from torch_npu.contrib import transfer_to_npu
a = torch.tensor([1, 2, 3, 4, 5]).cuda()
b = torch.tensor([2, 4, 6]).cuda()
print(torch.isin(a, b))
"""

# A script written for CUDA: it runs as is under transfer_to_npu.
CUDA_SCRIPT = """\
import copy
import torch
from torch.utils.data import DataLoader, TensorDataset
from torch_npu.contrib import transfer_to_npu

assert torch.cuda.is_available(), "no GPU"
torch.manual_seed(0)
data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
reference = copy.deepcopy(model)
model.cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
loader = DataLoader(data, batch_size=8, num_workers=2, pin_memory=True)
for x, y in loader:
    for net, opt, device in ((model, optimizer, "cuda"), (reference, reference_optimizer, "cpu")):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
torch.cuda.synchronize()
weights = next(model.parameters())
same = all(torch.allclose(a.cpu(), b, atol=1e-6) for a, b in zip(model.parameters(), reference.parameters()))
print("device", weights.device, weights.is_cuda, torch.cuda.get_device_name(0), "same-as-cpu", same)
print("batch-pinned", x.is_pinned(), "workers", loader.num_workers)
"""


def audit(script: str, tmp_path: Path, table: str = "2.1.0.post6") -> subprocess.CompletedProcess:
    """``python -m ascend_env audit --torch-npu table -- python script``, in a fresh environment."""
    path = tmp_path / "script.py"
    path.write_text(script)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "TORCH_NPU_DISABLED_WARNING", "TORCH_NPU_WARNING_DISABLE", "TORCH_CPP_LOG_LEVEL")
    }
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "ascend_env", "audit", "--torch-npu", table, "--", sys.executable, str(path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=300,
    )


# ------------------------------------------------------------------ storage and deepcopy


def test_deepcopy_and_storage_clone_make_independent_npu_copies(npu):
    base = torch.arange(12, dtype=torch.float32, device=npu).reshape(3, 4)
    view = base[:, 1:3]
    copied = copy.deepcopy(view)
    assert copied.device.type == "npu" and copied.stride() == view.stride()
    assert torch.equal(copied.cpu(), view.cpu())
    storage = base.untyped_storage().clone()
    assert storage.device.type == "npu" and storage.nbytes() == base.untyped_storage().nbytes()
    base.fill_(-1.0)  # the copies own their memory
    assert copied.cpu().tolist() == [[1.0, 2.0], [5.0, 6.0], [9.0, 10.0]]
    restored = torch.empty(0, dtype=torch.float32, device=npu).set_(storage)
    assert restored.cpu().tolist() == list(range(12))
    model = torch.nn.Linear(3, 2).to(npu)
    twin = copy.deepcopy(model)
    assert twin.weight.device.type == "npu" and torch.equal(twin.weight.cpu(), model.weight.cpu())
    assert twin.weight.data_ptr() != model.weight.data_ptr()


def test_a_cloned_storage_holds_the_bytes_of_its_source(npu):
    source = torch.tensor([1.5, -2.0, 3.25], device=npu)
    clone = source.untyped_storage().clone()
    source.zero_()
    as_tensor = torch.empty(0, dtype=torch.float32, device=npu).set_(clone)
    assert as_tensor.device.type == "npu" and as_tensor.cpu().tolist() == [1.5, -2.0, 3.25]


# ------------------------------------------------------------------ random numbers


def _draws(device: str, generator: torch.Generator) -> list:
    weights = torch.tensor([0.1, 0.5, 0.2, 0.2], device=device)
    return [
        torch.randn(5, device=device, generator=generator),
        torch.rand(3, 2, device=device, generator=generator),
        torch.randint(0, 1000, (6,), device=device, generator=generator),
        torch.randperm(7, device=device, generator=generator),
        torch.multinomial(weights, 3, generator=generator),
        torch.empty(4, device=device).normal_(2.0, 3.0, generator=generator),
        torch.bernoulli(torch.full((6,), 0.5, device=device), generator=generator),
    ]


def test_npu_generators_reproduce_the_cpu_streams(npu):
    generator = torch.Generator(device=npu)
    assert generator.device == torch.device("npu:0")
    generator.manual_seed(1234)
    on_npu = _draws(npu, generator)
    on_cpu = _draws("cpu", torch.Generator().manual_seed(1234))
    for a, b in zip(on_npu, on_cpu):
        assert a.device.type == "npu" and torch.equal(a.cpu(), b)
    assert not torch.equal(on_npu[0].cpu(), _draws("cpu", torch.Generator().manual_seed(1))[0])


def test_seeded_ops_that_fall_back_draw_from_the_npu_generator(npu):
    """poisson, cauchy_ and log_normal_ are not in 2.1.0.post6's table: the CPU fallback runs them,
    with the npu generator's state, which it gives back."""
    rates = torch.tensor([1.0, 4.0, 9.0, 0.5])
    generator = torch.Generator(device=npu).manual_seed(21)
    reference = torch.Generator().manual_seed(21)
    sim.reset()
    for _ in range(2):  # the second draw continues the stream
        assert torch.equal(torch.poisson(rates.to(npu), generator).cpu(), torch.poisson(rates, reference))
        assert torch.equal(
            torch.empty(3, device=npu).cauchy_(generator=generator).cpu(),
            torch.empty(3).cauchy_(generator=reference),
        )
    torch.manual_seed(4)
    drawn = torch.empty(3, device=npu).log_normal_().cpu()
    torch.manual_seed(4)
    assert torch.equal(drawn, torch.empty(3).log_normal_())
    assert {"aten::poisson", "aten::cauchy_", "aten::log_normal_"} <= set(sim.fallbacks())


def test_generator_state_round_trips(npu):
    generator = torch.Generator(device=npu).manual_seed(7)
    state = generator.get_state()
    first = torch.randn(4, device=npu, generator=generator).cpu()
    generator.set_state(state)
    assert torch.equal(torch.randn(4, device=npu, generator=generator).cpu(), first)
    assert generator.initial_seed() == 7


def test_the_default_npu_generator_follows_torch_manual_seed(npu):
    torch.manual_seed(99)
    npu_values = (torch.randn(5, device=npu).cpu(), torch.rand(2, device=npu).cpu())
    torch.manual_seed(99)
    assert torch.equal(npu_values[0], torch.randn(5)) and torch.equal(npu_values[1], torch.rand(2))
    # torch.npu's own seed and state reach the npu default generator only, as on the device.
    torch.manual_seed(5)
    cpu_next = torch.randn(3)
    torch.manual_seed(5)
    torch.npu.manual_seed(11)
    assert torch.equal(torch.randn(3), cpu_next)
    state = torch.npu.get_rng_state()
    first = torch.randn(3, device=npu).cpu()
    torch.npu.set_rng_state(state)
    assert torch.equal(torch.randn(3, device=npu).cpu(), first)
    assert torch.npu.initial_seed() == 11
    assert torch.npu.default_generators[0].device.type == "npu"


def test_dropout_on_npu_is_seeded_like_the_cpu(npu):
    x = torch.ones(64)
    torch.manual_seed(3)
    on_npu = torch.nn.functional.dropout(x.to(npu), p=0.5, training=True).cpu()
    torch.manual_seed(3)
    assert torch.equal(on_npu, torch.nn.functional.dropout(x, p=0.5, training=True))


# ------------------------------------------------------------------ pinned memory


def test_pinned_memory_with_npu_as_the_pinned_backend(npu):
    plain = torch.arange(6, dtype=torch.float32)
    pinned = plain.pin_memory()
    assert pinned.is_pinned() and not plain.is_pinned()
    assert pinned.device.type == "cpu" and torch.equal(pinned, plain)
    assert pinned[2:].is_pinned()  # a view into pinned memory is pinned too
    assert torch.equal(pinned.to(npu, non_blocking=True).cpu(), plain)
    assert not torch.ones(2, device=npu).is_pinned()


# ------------------------------------------------------------------ torch.npu API


def test_memory_queries_count_the_bytes_npu_tensors_hold(npu):
    before = torch.npu.memory_allocated()
    torch.npu.reset_peak_memory_stats()
    block = torch.empty(1 << 20, dtype=torch.uint8, device=npu)
    assert torch.npu.memory_allocated() - before == 1 << 20
    assert torch.npu.max_memory_allocated() >= before + (1 << 20)
    free, total = torch.npu.mem_get_info()
    assert total == free + torch.npu.memory_allocated()
    del block
    assert torch.npu.memory_allocated() == before
    assert torch.npu.max_memory_allocated() >= before + (1 << 20)
    torch.npu.reset_peak_memory_stats()
    assert torch.npu.max_memory_allocated() == before
    torch.npu.empty_cache()


def test_streams_and_events_are_noops_with_the_right_types(npu):
    stream = torch.npu.Stream()
    assert torch.npu.current_stream() is torch.npu.default_stream()
    with torch.npu.stream(stream):
        assert torch.npu.current_stream() is stream
    assert torch.npu.current_stream() is torch.npu.default_stream()
    start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    start.record()
    torch.ones(4, device=npu).sum()
    end.record(stream)
    end.synchronize()
    assert start.query() and stream.query() and start.elapsed_time(end) >= 0.0
    assert isinstance(stream.record_event(), torch.npu.Event) and stream.device == torch.device("npu:0")
    with torch.npu.device(0):
        torch.npu.set_device("npu:0")
    with pytest.raises(RuntimeError, match="one device"):
        torch.npu.set_device(1)


def test_compile_mode_and_internal_format_round_trip(npu, monkeypatch):
    monkeypatch.setenv(compile_mode.SOC_ENV, "910B")
    compile_mode.reset()
    try:
        assert torch.npu.is_jit_compile_false()  # 910B starts with JIT compile off
        torch.npu.set_compile_mode(jit_compile=True)
        assert compile_mode.jit_compile() and not torch.npu.is_jit_compile_false()
        torch.npu.set_option({"jitCompile": "disable"})
        assert compile_mode.jit_compile_set() is False and torch.npu.is_jit_compile_false()
        assert torch.npu.config.allow_internal_format is True
        torch.npu.config.allow_internal_format = False
        assert compile_mode.allow_internal_format() is False
        assert torch.npu.config.allow_internal_format is False
        with pytest.raises(ValueError, match="ACL_OP_COMPILER_CACHE_MODE"):
            torch.npu.set_option({"ACL_OP_COMPILER_CACHE_MODE": "sometimes"})
        assert torch.npu.get_soc_version() == 220  # SocVersion::Ascend910B1
        assert torch.npu.get_device_name() == "Ascend910B1"
        monkeypatch.setenv(compile_mode.SOC_ENV, "310P")
        assert torch.npu.get_soc_version() == socs.soc_version("Ascend310P3") == 202
        assert torch.npu.get_device_name(0) == torch.npu.get_device_properties(0).name == "Ascend310P3"
    finally:
        compile_mode.reset()


def test_unknown_names_fail_naming_the_simulator(npu):
    with pytest.raises(AttributeError, match="simulated torch_npu has no torch.npu.npu_format_cast_fancy"):
        torch.npu.npu_format_cast_fancy  # noqa: B018
    with pytest.raises(AttributeError, match="simulated torch_npu has no torch.npu.config.allow_hf"):
        torch.npu.config.allow_hf32_anywhere  # noqa: B018
    assert not hasattr(torch.npu, "FloatTensor")


# ------------------------------------------------------------------ the package, in subprocesses


def test_torch_npu_is_importable_only_where_asked():
    code = textwrap.dedent("""
        import importlib.util, json, sys
        from ascend_env import sim
        sim.enable("2.1.0.post6")
        before = importlib.util.find_spec("torch_npu") is None
        sim.add_torch_npu_to_path(); sim.add_torch_npu_to_path()
        import torch, torch_npu, torch_npu.npu
        try:
            torch_npu.npu_magic_op
        except AttributeError as exc:
            missing = str(exc)
        print(json.dumps({
            "before": before, "version": torch_npu.__version__, "same": torch_npu.npu is torch.npu,
            "file": torch_npu.__file__, "dir": sim.torch_npu_path(),
            "path_entries": sys.path.count(sim.torch_npu_path()),
            "first": sys.path[0] == sim.torch_npu_path(), "missing": missing,
        }))
    """)
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["before"] and report["version"] == "2.1.0.post6" and report["same"]
    # The child's own ascend_env (installed, or this checkout on PYTHONPATH) names the directory.
    assert report["file"].startswith(report["dir"]) and report["path_entries"] == 1 and report["first"]
    assert "simulated torch_npu has no torch_npu.npu_magic_op" in report["missing"]
    # Without the simulator, the package says how to start it.
    result = run_python(f"import sys; sys.path.append({sim.torch_npu_path()!r}); import torch_npu")
    assert result.returncode != 0 and "ascend_env.sim.enable(RELEASE)" in result.stderr


def test_the_seed_script_runs_unchanged_under_audit(tmp_path):
    result = audit(SEED_SCRIPT, tmp_path)
    assert "tensor([False,  True, False,  True, False], device='npu:0')" in result.stdout, result.stderr
    assert result.stderr.count(CAUTION_ISIN) == 1
    assert "aten::isin.Tensor_Tensor_out" in result.stdout
    assert result.returncode == 1, (result.stdout, result.stderr)


def test_a_cuda_script_runs_unchanged_under_audit(tmp_path):
    result = audit(CUDA_SCRIPT, tmp_path)
    expected = f"device npu:0 True {compile_mode.soc()} same-as-cpu True"
    assert expected in result.stdout, result.stderr
    assert "batch-pinned True workers 2" in result.stdout, result.stderr
    assert "ModuleNotFoundError" not in result.stderr and "Traceback" not in result.stderr


def test_transfer_to_npu_rewrites_devices_backends_and_jit():
    code = textwrap.dedent("""
        import json, warnings
        import torch
        from ascend_env import sim
        sim.enable("2.1.0.post6"); sim.add_torch_npu_to_path()
        cpu_is_available = torch.cuda.is_available()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            from torch_npu.contrib import transfer_to_npu
        def scripted(x):
            return x + 1
        g = torch.Generator(device="cuda")
        m = torch.nn.Linear(2, 2).cuda()
        out = {
            "cpu_is_available": cpu_is_available, "is_available": torch.cuda.is_available(),
            "cuda_is_npu_fn": torch.cuda.current_stream is torch.npu.current_stream,
            "device_count": torch.cuda.device_count(), "name": torch.cuda.get_device_name(0),
            "kw": str(torch.ones(2, device="cuda").device),
            "kw_dev": str(torch.zeros(1, device=torch.device("cuda:0")).device),
            "to_str": str(torch.ones(1).to("cuda").device), "to_int": str(torch.ones(1).to(0).device),
            "tensor_cuda": str(torch.ones(1).cuda().device), "is_cuda": torch.ones(1).cuda().is_cuda,
            "module": str(m.weight.device),
            "module_to": str(torch.nn.Linear(1, 1).to("cuda:0").weight.device),
            "new": str(torch.ones(1).new_zeros(2, device="cuda").device),
            "generator": str(g.device), "is_generator": isinstance(torch.default_generator, torch.Generator),
            "jit_off": torch.jit.script(scripted) is scripted,
            "nccl": torch.distributed.is_nccl_available(),
            "warnings": sorted({w.category.__name__ for w in caught}),
            "cuda_random": torch.cuda.random.get_rng_state is torch.npu.random.get_rng_state,
            "amp": torch.cuda.amp.autocast is torch.npu.amp.autocast,
        }
        import os, torch.distributed as dist
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29400 + os.getpid() % 500))
        dist.init_process_group("nccl", rank=0, world_size=1)
        out["backend"] = dist.get_backend()
        t = torch.ones(3)
        dist.all_reduce(t)
        out["all_reduce"] = t.tolist()
        dist.destroy_process_group()
        print(json.dumps(out))
    """)
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.splitlines()[-1])
    assert out.pop("cpu_is_available") is False  # a CPU-only torch, before transfer_to_npu
    npu0 = "npu:0"
    assert out == {
        "is_available": True,
        "cuda_is_npu_fn": True,
        "device_count": 1,
        "name": compile_mode.soc(),
        "kw": npu0,
        "kw_dev": npu0,
        "to_str": npu0,
        "to_int": npu0,
        "tensor_cuda": npu0,
        "is_cuda": True,
        "module": npu0,
        "module_to": npu0,
        "new": npu0,
        "generator": npu0,
        "is_generator": True,
        "jit_off": True,
        "nccl": True,
        "warnings": ["ImportWarning", "RuntimeWarning"],
        "cuda_random": True,
        "amp": True,
        "backend": "hccl",
        "all_reduce": [1.0, 1.0, 1.0],
    }


def test_the_startup_hook_hears_of_the_simulated_torch_npu(hooked_env):  # noqa: F811
    code = textwrap.dedent("""
        import json, torch
        from ascend_env import sim, runtime
        sim.enable("2.1.0.post6"); sim.add_torch_npu_to_path()
        import torch_npu
        from ascend_env import _watch
        x = torch.tensor([1, 2, 3], device="npu")
        print(json.dumps({
            "status": runtime.status(), "loader": type(torch_npu.__spec__.loader).__name__,
            "isin": torch.isin(x, torch.tensor([2], device="npu")).cpu().tolist(),
            "fallbacks": dict(sim.fallbacks()),
        }))
    """)
    result = run(hooked_env, code)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["status"]["events"] == ["torch_npu: import (simulated)"]
    assert report["loader"] == "SourceFileLoader"  # the hook never wraps it: the module keeps its loader
    assert report["status"]["release"] == "2.1.0.post6" and report["status"]["errors"] == []
    assert report["isin"] == [False, True, False]
    assert not any(op.startswith("aten::isin") for op in report["fallbacks"])
    assert CAUTION_ISIN not in result.stderr


def test_transformers_generates_with_the_simulated_torch_npu_imported():
    code = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {TESTS_TORCH!r})
        import torch
        from ascend_env import sim
        sim.enable("{IN_PROCESS_TABLE}"); sim.add_torch_npu_to_path()
        import transformers.utils
        from conftest import PROMPT, tiny_model, generate
        out = {{"available": transformers.utils.is_torch_npu_available(),
               "devices": sorted(transformers.utils.get_available_devices())}}
        for kind in ("llama", "gpt2"):
            model = tiny_model(kind)
            for case in ("greedy", "sampling"):
                expected = generate(model, "cpu", case)
                out[kind + "-" + case] = torch.equal(generate(model, "npu", case), expected)
        # Assisted decoding deep-copies the model kwargs (npu tensors): it crashed the simulator once.
        def assisted(device):
            ids = torch.tensor(PROMPT[:1], device=device)
            with torch.no_grad():
                return tiny_model("llama").to(device).generate(
                    ids, attention_mask=torch.ones_like(ids), assistant_model=tiny_model("gpt2").to(device),
                    max_new_tokens=6, do_sample=False, pad_token_id=0).cpu()
        out["llama-assisted"] = torch.equal(assisted("npu"), assisted("cpu"))
        print(json.dumps(out))
    """)
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.splitlines()[-1])
    assert out["available"] is True and "npu" in out["devices"]
    assert {k: v for k, v in out.items() if "-" in k} == {
        "llama-greedy": True,
        "llama-sampling": True,
        "gpt2-greedy": True,
        "gpt2-sampling": True,
        "llama-assisted": True,
    }


@pytest.mark.parametrize("layout", ["BSND", "BNSD", "BSH", "SBH", "TND"])
def test_npu_fusion_attention_computes_causal_attention(npu, layout):
    # The module alone: importing the package would make this process's transformers see torch_npu.
    source = Path(sim.torch_npu_path(), "torch_npu", "_fusion.py")
    spec = importlib.util.spec_from_file_location("_sim_fusion", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    npu_fusion_attention = module.npu_fusion_attention
    torch.manual_seed(0)
    b, n, kv, s, d = 2, 4, 2, 5, 8
    q, k, v = torch.randn(b, n, s, d), torch.randn(b, kv, s, d), torch.randn(b, kv, s, d)
    expected = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(n // kv, 1), v.repeat_interleave(n // kv, 1), is_causal=True
    )
    shape = {
        "BNSD": lambda t: t,
        "BSND": lambda t: t.transpose(1, 2),
        "BSH": lambda t: t.transpose(1, 2).reshape(b, s, -1),
        "SBH": lambda t: t.permute(2, 0, 1, 3).reshape(s, b, -1),
        "TND": lambda t: t.transpose(1, 2).reshape(b * s, t.shape[1], d),
    }[layout]
    mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1).to(npu)
    extra = {"actual_seq_qlen": (s, 2 * s), "actual_seq_kvlen": (s, 2 * s)} if layout == "TND" else {}
    out = npu_fusion_attention(
        shape(q).to(npu),
        shape(k).to(npu),
        shape(v).to(npu),
        n,
        layout,
        atten_mask=mask,
        scale=d**-0.5,
        sparse_mode=3,
        **extra,
    )[0]
    assert out.device.type == "npu"
    assert torch.allclose(out.cpu(), shape(expected), atol=1e-5)


def test_transformers_npu_flash_attention_runs_on_npu_fusion_attention():
    """transformers >= 4.47 route ``attn_implementation="flash_attention_2"`` on an NPU to
    ``torch_npu.npu_fusion_attention`` (transformers/integrations/npu_flash_attention.py): padded
    prompts take its TND (varlen) form, and greedy tokens equal the CPU's with SDPA."""
    code = textwrap.dedent(f"""
        import importlib.util, json, sys
        sys.path.insert(0, {TESTS_TORCH!r})
        import torch
        from ascend_env import sim
        sim.enable("{IN_PROCESS_TABLE}"); sim.add_torch_npu_to_path()
        import torch_npu
        layouts = []
        real = torch_npu.npu_fusion_attention
        def counted(*args, **kwargs):
            layouts.append(kwargs.get("input_layout", args[4] if len(args) > 4 else None))
            return real(*args, **kwargs)
        torch_npu.npu_fusion_attention = counted
        if importlib.util.find_spec("transformers.integrations.npu_flash_attention") is None:
            print(json.dumps({{"skip": True}})); sys.exit()
        from conftest import tiny_model
        ids = torch.tensor([[0, 0, 5, 6, 7], [9, 10, 11, 12, 13]])
        mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
        def greedy(model, device):
            with torch.no_grad():
                out = model.to(device).generate(ids.to(device), attention_mask=mask.to(device),
                                                max_new_tokens=6, do_sample=False, pad_token_id=0)
            return out.cpu()
        model = tiny_model("llama")
        expected = greedy(model, "cpu")
        model.config._attn_implementation = "flash_attention_2"
        got = greedy(model, "npu")
        equal = torch.equal(got, expected)
        print(json.dumps({{"skip": False, "equal": equal, "layouts": sorted(set(layouts))}}))
    """)
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.splitlines()[-1])
    if out["skip"]:
        pytest.skip("this transformers has no NPU flash attention (added in 4.47)")
    assert out["equal"] and "TND" in out["layouts"], out


def test_the_seed_script_with_the_hook_installed_falls_back_nowhere(tmp_path, hooked_env):  # noqa: F811
    """The issue's proof: the same script, unchanged, in an environment where ``install`` put the
    startup hook: nothing falls back (exit 0); with the hook turned off, the isin line and exit 1."""
    path = tmp_path / "seed.py"
    path.write_text(SEED_SCRIPT)
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "RANK",
            "TORCH_NPU_DISABLED_WARNING",
            "TORCH_NPU_WARNING_DISABLE",
            "TORCH_CPP_LOG_LEVEL",
            "ASCEND_ENV_DISABLE",
        )
    }

    def audited(**extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                str(hooked_env),
                "-m",
                "ascend_env",
                "audit",
                "--torch-npu",
                "2.1.0.post6",
                "--",
                str(hooked_env),
                str(path),
            ],
            capture_output=True,
            text=True,
            env={**env, **extra},
            cwd=str(tmp_path),
            timeout=300,
        )

    hooked = audited()
    assert hooked.returncode == 0, (hooked.stdout, hooked.stderr)
    assert "tensor([False,  True, False,  True, False], device='npu:0')" in hooked.stdout
    assert CAUTION_ISIN not in hooked.stderr and "no op fell back to the CPU" in hooked.stdout
    off = audited(ASCEND_ENV_DISABLE="1")
    assert off.returncode == 1 and off.stderr.count(CAUTION_ISIN) == 1


def test_the_simulated_torch_npu_wins_over_a_real_one_that_cannot_start(tmp_path):
    """A real torch_npu installed without CANN (a Docker build step) fails on import; where the
    simulator runs, its package is the one imported, after a probe too, and the hook hears of it."""
    real = tmp_path / "real"
    (real / "torch_npu").mkdir(parents=True)
    (real / "torch_npu" / "__init__.py").write_text(
        "raise ImportError('libhccl.so: cannot open shared object file: No such file or directory')\n"
    )
    code = textwrap.dedent("""
        import importlib.util, json
        probed = importlib.util.find_spec("torch_npu").origin  # the real one, before the simulator
        from ascend_env import sim
        sim.enable("2.1.0.post6"); sim.add_torch_npu_to_path()
        import torch_npu
        print(json.dumps({"probed": probed, "imported": torch_npu.__file__, "dir": sim.torch_npu_path()}))
    """)
    result = run_python(code, {"PYTHONPATH": str(real)})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["probed"].startswith(str(real)) and report["imported"].startswith(report["dir"])


def test_npu_rotary_mul_applies_rotary_embeddings_as_transformers_does(npu):
    # The module alone, as above. transformers 4.53 imports npu_rotary_mul where torch_npu imports.
    source = Path(sim.torch_npu_path(), "torch_npu", "_rotary.py")
    spec = importlib.util.spec_from_file_location("_sim_rotary", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    x, cos, sin = torch.randn(2, 5, 4, 8), torch.randn(1, 5, 1, 8), torch.randn(1, 5, 1, 8)
    half = x.shape[-1] // 2
    expected = x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin  # rotate_half
    out = module.npu_rotary_mul(x.to(npu), cos.to(npu), sin.to(npu))
    assert out.device.type == "npu"
    assert torch.equal(out.cpu(), expected)
    assert not torch.equal(out.cpu(), x * cos + x * sin)
    with pytest.raises(NotImplementedError, match="rotary_mode='half' only"):
        module.npu_rotary_mul(x, cos, sin, rotary_mode="interleave")
