"""Generate with a tiny config-built Llama and print the tokens as JSON, for the transformers matrix.

Run in a fresh process by ``test_matrix.py``::

    python generation.py cpu npu:2.1.0.post6   # the CPU, then the simulated NPU with that op table

Each device runs every case: ``generate()`` with the options in ``CASES``, seeded before every call.
The output maps each device to ``{"transformers": ..., "tokens": {case: [[...]] or {"error": ...}},
"fallbacks": {op: count}}`` (fallbacks counted on the NPU only). torch and transformers are
imported in ``main``, so the test module can read ``CASES`` without them.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Dict, List

# The model verify's smoke test generates with (eos 2, pad 0: EOS[0] and PAD here).
from ascend_env.checks.smoke import tiny_llama

PROMPT = [[5, 6, 7, 8, 5, 6], [9, 10, 11, 12, 9, 10]]
PADDED_PROMPT = [[5, 6, 7, 8, 5, 6], [0, 0, 9, 10, 11, 12]]  # left padding, mask inferred
LOOKUP_PROMPT = [[5, 6, 7, 8, 5, 6, 7, 8, 5, 6]]  # repeated n-grams for prompt lookup; batch 1
EOS = [2, 17, 33]
PAD = 0
SEED = 1234
MAX_NEW_TOKENS = 10

# case -> generate() options; "prompt" picks the input.
CASES: Dict[str, Dict[str, Any]] = {
    "greedy": {},
    "sampling": {"do_sample": True, "top_k": 20, "temperature": 0.9},
    "beam_search": {"num_beams": 3},
    "min_length": {"min_length": 14},
    "min_new_tokens": {"min_new_tokens": 8},
    "suppress_tokens": {"suppress_tokens": [3, 4, 40, 41, 60]},
    "begin_suppress_tokens": {"begin_suppress_tokens": [3, 4, 40]},
    "inferred_attention_mask": {"prompt": "padded"},
    "prompt_lookup": {"prompt": "lookup", "prompt_lookup_num_tokens": 3},
}
# Cases every release in the matrix must run (all of them: prompt lookup exists since 4.35).
REQUIRED = tuple(CASES)


def run_case(model, device: str, options: Dict[str, Any]) -> List[List[int]]:
    import torch

    options = dict(options)
    prompt = {"padded": PADDED_PROMPT, "lookup": LOOKUP_PROMPT}.get(options.pop("prompt", ""), PROMPT)
    ids = torch.tensor(prompt, device=device)
    if prompt is not PADDED_PROMPT:
        options["attention_mask"] = torch.ones_like(ids)
    options.setdefault("do_sample", False)
    torch.manual_seed(SEED)
    with torch.no_grad():
        out = model.generate(
            ids, max_new_tokens=MAX_NEW_TOKENS, eos_token_id=EOS, pad_token_id=PAD, **options
        )
    if out.device.type != torch.device(device).type:
        raise AssertionError(f"generate() returned tokens on {out.device}, not {device}")
    return out.cpu().tolist()


def run_device(device: str) -> Dict[str, Any]:
    import transformers

    name, _, table = device.partition(":")
    if name == "npu":
        from ascend_env import sim

        sim.enable(torch_npu=table or None)
        sim.add_torch_npu_to_path()
        # As a real program reaches torch_npu: transformers' own check probes for it, then imports it.
        # The check is cached (lru_cache), and transformers >= 4.49 asks it while building the
        # CPU run's model, before torch_npu was on the path here; a real program has it from the start.
        check = transformers.utils.is_torch_npu_available
        getattr(check, "cache_clear", lambda: None)()
        if not check():
            raise AssertionError("transformers does not see the simulated torch_npu")
    model = tiny_llama().to(name)
    if name == "npu":
        sim.reset()
    tokens: Dict[str, Any] = {}
    for case, options in CASES.items():
        try:
            tokens[case] = run_case(model, name, options)
        except Exception as exc:  # noqa: BLE001 - recorded, compared with the CPU run
            tokens[case] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    fallbacks = dict(sim.fallbacks()) if name == "npu" else {}
    return {"transformers": transformers.__version__, "tokens": tokens, "fallbacks": fallbacks}


def main(argv: List[str]) -> int:
    results = {device.partition(":")[0]: run_device(device) for device in argv}
    json.dump(results, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
