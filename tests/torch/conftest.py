"""Shared fixtures for tests that need torch: the simulated NPU and tiny generation models.

One process can hold one op table (the dispatcher cannot unregister kernels), so the pytest process
runs the simulator with ``IN_PROCESS_TABLE``; a test that needs another table runs a subprocess
(``run_python``). Subprocesses import this file as a module to build the same models::

    sys.path.insert(0, TESTS_TORCH); from conftest import tiny_model, generate, CASES
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

import pytest

IN_PROCESS_TABLE = "2.1.0.post6"
TESTS_TORCH = str(Path(__file__).resolve().parent)
ROOT = Path(__file__).resolve().parents[2]

MODELS = ("gpt2", "llama", "qwen2")
PROMPT = [[5, 6, 7, 8], [9, 10, 11, 12]]
EOS, PAD = 2, 0
# generate() options under test; every case decodes MAX_NEW_TOKENS at most.
CASES: Dict[str, Dict[str, Any]] = {
    "greedy": {"do_sample": False},
    "sampling": {"do_sample": True, "top_k": 20, "temperature": 0.9},
    "beam_search": {"do_sample": False, "num_beams": 3},
    "min_new_tokens": {"do_sample": False, "min_new_tokens": 8},
    "suppress_tokens": {"do_sample": False, "suppress_tokens": [3, 4, 5, 40, 41]},
    "several_eos": {"do_sample": False, "eos_token_id": [EOS, 17, 33]},
}
MAX_NEW_TOKENS = 8
SEED = 1234


def tiny_model(kind: str):
    """A randomly initialised causal LM (2 layers, hidden size 32, vocabulary 96), the same every call."""
    import torch
    import transformers as tf

    common = {"vocab_size": 96, "bos_token_id": 1, "eos_token_id": EOS, "pad_token_id": PAD}
    if kind == "gpt2":
        config = tf.GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=64, **common)
        cls = tf.GPT2LMHeadModel
    else:
        config_cls, cls = {
            "llama": (tf.LlamaConfig, tf.LlamaForCausalLM),
            "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM),
        }[kind]
        config = config_cls(
            num_hidden_layers=2,
            hidden_size=32,
            intermediate_size=64,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            **common,
        )
    torch.manual_seed(0)
    return cls(config).eval()


def generate(model, device: str, case: str):
    """The token ids ``model`` generates on ``device`` for ``case``, as a CPU tensor."""
    import torch

    ids = torch.tensor(PROMPT, device=device)
    torch.manual_seed(SEED)
    with torch.no_grad():
        out = model.to(device).generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=MAX_NEW_TOKENS,
            pad_token_id=PAD,
            **CASES[case],
        )
    assert out.device.type == torch.device(device).type
    return out.cpu()


def run_python(
    code: str, env: Optional[Mapping[str, str]] = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh Python (this interpreter), with ``env`` added to the environment."""
    full_env = dict(os.environ)
    for name in (
        "RANK",
        "TORCH_NPU_DISABLED_WARNING",
        "TORCH_NPU_WARNING_DISABLE",
        "TORCH_CPP_LOG_LEVEL",
        "TORCH_NPU_FALLBACK_CPU_DISABLE",
    ):
        full_env.pop(name, None)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(ROOT),
    )


@pytest.fixture(scope="session")
def npu() -> str:
    """The simulated NPU, running ``IN_PROCESS_TABLE`` in this process; yields the device name."""
    from ascend_env import sim

    sim.enable(IN_PROCESS_TABLE)
    return "npu"


@pytest.fixture(scope="session", autouse=True)
def _npu_before_any_backward(request: pytest.FixtureRequest) -> None:
    """PyTorch's autograd engine sizes its per-device queues once, at the process's first backward,
    from the devices registered then (torch/csrc/autograd/engine.cpp, device_ready_queues_): the
    simulated NPU is registered before any test, or a CPU backward in an early test (the kernels'
    gradient checks) makes every later npu backward fail the engine's internal assert. A program
    imports torch_npu before its first backward, as this does."""
    request.getfixturevalue("npu")


@pytest.fixture(scope="session")
def cpu_tokens() -> Dict[tuple, Any]:
    """(model, case) -> the tokens generated on the CPU, computed once per session."""
    return {(kind, case): generate(tiny_model(kind), "cpu", case) for kind in MODELS for case in CASES}
