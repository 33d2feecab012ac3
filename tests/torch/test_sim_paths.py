"""``ascend-env audit --paths``: torch_npu's dispatch paths on tiny Qwen2 and Llama ``generate()`` runs.

Each test audits a script that builds a tiny model from its config (random weights, no download) and
generates 32 new tokens on the simulated NPU with torch_npu 2.1.0.post6's tables.

The host syncs of one decoding step, read from transformers 4.46.3's ``GenerationMixin._sample``
(``transformers/generation/utils.py``), with eager attention:

- ``while self._has_unfinished_sequences(this_peer_finished, ...)``: from the second iteration on,
  ``this_peer_finished`` is the tensor ``unfinished_sequences.max() == 0``, and
  ``_has_unfinished_sequences`` tests it with ``elif this_peer_finished:`` (one ``item()``);
- ``model_inputs = self.prepare_inputs_for_generation(input_ids, **model_kwargs)``: with a cache,
  ``if inputs_embeds is not None or cache_position[-1] >= input_ids.shape[1]:`` (one ``item()``).

Nothing else in the loop reads the device (the EOS criterion's ``isin`` and the sampling stay on it),
so every step from the first one that reads the cache on has exactly those two.
"""

from __future__ import annotations

import ast
import inspect
import json
import sys
import textwrap

import pytest

from ascend_env.cli import main

SEED_LINE = (
    "[W AddKernelNpu.cpp:82] Warning: The oprator of add is executed, Currently High Accuracy but Low "
    "Performance OP with 64-bit has been used, Please Do Some Cast at Python Functions with 32-bit for "
    "Better Performance! (function operator())"
)
NEW_TOKENS = 32

SCRIPT = textwrap.dedent(
    """
    import sys, torch
    import transformers as tf
    import torch_npu  # the simulated one, which audit puts on the path

    kind, case = sys.argv[1], sys.argv[2]
    if "--jit-off" in sys.argv:
        torch_npu.npu.set_compile_mode(jit_compile=False)
    common = dict(vocab_size=96, bos_token_id=1, eos_token_id=2, pad_token_id=0, num_hidden_layers=2,
                  hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=64, attn_implementation="eager")
    config = {"llama": tf.LlamaConfig, "qwen2": tf.Qwen2Config}[kind](**common)
    torch.manual_seed(0)
    model = {"llama": tf.LlamaForCausalLM, "qwen2": tf.Qwen2ForCausalLM}[kind](config).eval().to("npu")
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]], device="npu")
    options = {"greedy": dict(do_sample=False), "sampling": dict(do_sample=True, top_k=20, temperature=0.9)}
    for run in range(2 if "--switch" in sys.argv else 1):
        if run == 1:
            torch_npu.npu.set_compile_mode(jit_compile=False)
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW,
                                 min_new_tokens=NEW, pad_token_id=0, **options[case])
        assert out.shape == (2, 4 + NEW), out.shape
    """.replace("NEW", str(NEW_TOKENS))
)


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    path = tmp_path_factory.mktemp("paths") / "tiny_generate.py"
    path.write_text(SCRIPT, encoding="utf-8")
    return str(path)


def line_of(function, *needles: str) -> str:
    """``transformers/...py:LINE`` of the one line of ``function`` that contains every needle."""
    lines, first = inspect.getsourcelines(function)
    found = [first + i for i, text in enumerate(lines) if all(needle in text for needle in needles)]
    assert len(found) == 1, (function, needles, found)
    path = inspect.getsourcefile(function)
    return path.split("site-packages/", 1)[-1] + f":{found[0]}"


def sync_line(function, *needles: str) -> str:
    """Where Python reports a host sync in the condition of an ``if``/``elif`` on the line with
    ``needles``: that line from 3.10 on; before, CPython numbers a multi-line condition's code by the
    statement's first line (the ``elif (`` of transformers 4.49 on Python 3.9)."""
    where = line_of(function, *needles)
    if sys.version_info >= (3, 10):
        return where
    path, number = where.rsplit(":", 1)
    lines, first = inspect.getsourcelines(function)
    target = int(number) - first + 1
    tree = ast.parse(textwrap.dedent("".join(lines)))
    starts = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and node.lineno <= target <= (node.test.end_lineno or node.lineno)
    ]
    return f"{path}:{max(starts) + first - 1}" if starts else where


@pytest.fixture(scope="module")
def step_syncs():
    """The two host syncs of each decoding step of transformers' ``_sample`` (see the module docstring)."""
    from transformers.generation.utils import GenerationMixin

    return {
        sync_line(GenerationMixin._has_unfinished_sequences, "elif this_peer_finished:"): 1,
        # 4.46: `if inputs_embeds is not None or cache_position[-1] >= input_ids.shape[1]:  # Exception
        # 1 or Exception 3` in prepare_inputs_for_generation; 4.49 spells it inside an `elif (...)`;
        # 4.57 moved it into _cache_dependant_input_preparation.
        sync_line(
            getattr(
                GenerationMixin,
                "_cache_dependant_input_preparation",
                GenerationMixin.prepare_inputs_for_generation,
            ),
            "cache_position[-1] >= input_ids.shape[1]",
            "Exception 3",
        ): 1,
    }


def audit(capfd, script, *args, extra=()):
    code = main(
        [
            "audit",
            "--json",
            "--torch-npu",
            "2.1.0.post6",
            "--paths",
            *args,
            "--",
            sys.executable,
            script,
            *extra,
        ]
    )
    captured = capfd.readouterr()
    return code, json.loads(captured.out), captured.err


def the_run(report):
    runs = report["paths"]["generate"]
    assert len(runs) == 1
    run = runs[0]
    assert len(run["steps"]) == NEW_TOKENS
    return run


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
@pytest.mark.parametrize("case", ["greedy", "sampling"])
def test_910a_compiles_every_step_and_prints_the_seed_line(capfd, script, step_syncs, kind, case):
    code, report, err = audit(capfd, script, "--soc", "910A", "--fail-on", "compiles", extra=[kind, case])
    assert code == 1 and report["returncode"] == 0
    assert report["soc"] == {"name": "Ascend910A", "assumed": False, "from": "--soc"}
    run = the_run(report)
    steady = run["steps"][report["paths"]["steady_from"] :]
    assert all(step["would_compile"] > 0 for step in steady)
    # The growing KV length gives the cache cat new shapes at every step.
    assert all(step["would_compile_by_op"].get("cat", 0) >= 1 for step in steady)
    assert err.splitlines().count(SEED_LINE) == 1
    warnings = report["paths"]["warnings_64bit"]
    assert [(w["file"], w["line"], w["printed"]) for w in warnings] == [("AddKernelNpu.cpp", 82, True)]
    # next_tokens * unfinished_sequences + pad_token_id * (1 - unfinished_sequences): int64 + int64
    assert warnings[0]["site"].startswith("transformers/generation/utils.py:")
    assert all(step["host_syncs_by_site"] == step_syncs for step in run["steps"][1:])


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_910b_compiles_nothing_and_stays_quiet(capfd, script, step_syncs, kind):
    code, report, err = audit(
        capfd, script, "--soc", "910B", "--fail-on", "compiles,64bit", extra=[kind, "greedy"]
    )
    assert code == 0, report["verdict"]
    run = the_run(report)
    assert report["paths"]["would_compile"] == 0 and report["paths"]["warnings_64bit"] == []
    assert "AddKernelNpu" not in err
    assert all(step["host_syncs_by_site"] == step_syncs for step in run["steps"][1:])
    assert run["steady"]["host_syncs"] == {"min": 2, "max": 2, "total": 2 * (NEW_TOKENS - 2)}


def test_jit_compile_false_in_the_script_compiles_nothing_on_910a(capfd, script):
    code, report, err = audit(
        capfd,
        script,
        "--soc",
        "910A",
        "--fail-on",
        "compiles,64bit",
        extra=["qwen2", "sampling", "--jit-off"],
    )
    assert code == 0, report["verdict"]
    assert report["paths"]["would_compile"] == 0 and report["paths"]["jit_compile_at_exit"] is False
    assert "AddKernelNpu" not in err


def test_a_mid_run_switch_is_modelled_from_that_point(capfd, script):
    code, report, err = audit(capfd, script, "--soc", "910A", extra=["llama", "greedy", "--switch"])
    first, second = report["paths"]["generate"]
    assert all(step["would_compile"] > 0 for step in first["steps"][2:])
    assert sum(step["would_compile"] for step in second["steps"]) == 0
    assert sum(step["warnings_64bit"] for step in second["steps"]) == 0
    assert err.splitlines().count(SEED_LINE) == 1


def test_silenced_rank_hides_the_line_but_reports_it(capfd, script, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    code, report, err = audit(capfd, script, "--soc", "910A", extra=["qwen2", "greedy"])
    assert "AddKernelNpu" not in err and "CAUTION" not in err
    assert [w["printed"] for w in report["paths"]["warnings_64bit"]] == [False]


def test_text_report_shows_the_step_table(capsys, script):
    code = main(
        [
            "audit",
            "--torch-npu",
            "2.1.0.post6",
            "--soc",
            "910A",
            "--paths",
            "--fail-on",
            "syncs",
            "--",
            sys.executable,
            script,
            "llama",
            "greedy",
        ]
    )
    out = capsys.readouterr().out
    # Both host syncs of each step are transformers' own (see step_syncs): --fail-on syncs passes,
    # and says what it did not find (the isin fallback above is not what was asked).
    assert code == 0, out
    assert out.splitlines()[-1] == (
        "audit passed on the simulator "
        "(torch_npu 2.1.0.post6's op table) (--fail-on syncs): no host syncs outside transformers' "
        "own code in 1 audited Python process"
    )
    assert "dispatch paths on SoC Ascend910A, JIT compile on at exit" in out
    assert "    step     would compile  host syncs  64-bit" in out
    assert f"    steady state (steps 2-{NEW_TOKENS - 1}): " in out and " and 2 host syncs per step" in out
    assert "a simulated count, not a hardware measurement" in out


OPS_SCRIPT = textwrap.dedent(
    """
    import torch
    import torch_npu  # as on a real NPU before torch_npu 2.5.1 (audit fails a script without it)
    x = torch.arange(6, device="npu")                      # int64
    i = torch.tensor([0, 2], device="npu")
    for _ in range(2):                                     # each warning once per process
        x + x                                              # AddKernelNpu.cpp:82
        x.ne(x)                                            # NeKernelNpu.cpp:28 (Tensor other)
        x.ne(3)                                            # NeKernelNpu.cpp:45 (Scalar other)
        torch.gather(x, 0, i)                              # GatherKernelNpu.cpp:33
        torch.index_select(x, 0, i)                        # IndexSelectKernelNpu.cpp:33
    x + 1                                                  # a CPU scalar: Adds, no warning
    x.int() + x.int()                                      # int32: no warning
    x.float().add(x.float(), alpha=2)                      # AxpyV2, no warning
    syncs = [x.sum().item(), x.cpu(), torch.nonzero(x), x[x > 2], bool(x[0])]
    """
)


@pytest.mark.parametrize(
    "soc, lines",
    [
        (
            "910A",
            [
                "AddKernelNpu.cpp:82",
                "NeKernelNpu.cpp:28",
                "NeKernelNpu.cpp:45",
                "GatherKernelNpu.cpp:33",
                "IndexSelectKernelNpu.cpp:33",
            ],
        ),
        ("910B", []),
    ],
)
def test_the_four_64bit_warnings_and_the_host_syncs_outside_generate(capfd, tmp_path, soc, lines):
    path = tmp_path / "ops.py"
    path.write_text(OPS_SCRIPT, encoding="utf-8")
    code, report, err = audit(capfd, str(path), "--soc", soc, "--fail-on", "64bit")
    assert code == (1 if lines else 0)
    printed = [
        line.split("]", 1)[0][3:]
        for line in err.splitlines()
        if line.startswith("[W ") and "High Accuracy but Low Performance" in line
    ]
    assert printed == lines
    assert [w["count"] for w in report["paths"]["warnings_64bit"]] == [2] * len(lines)
    syncs = report["paths"]["host_syncs_by_op"]
    # x.cpu() reaches the mode as to.dtype_layout: torch_npu 2.1.0.post6 registers it (its op table)
    assert syncs == {"_local_scalar_dense": 2, "to.dtype_layout": 1, "nonzero": 1, "index.Tensor": 1}
    assert all(site.startswith(str(path) + ":") for site in report["paths"]["host_syncs_by_site"])
