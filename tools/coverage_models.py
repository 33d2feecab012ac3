"""The coverage matrix's child process: tiny config-built models generate on the CPU, then on the NPU.

Run by ``tools/coverage_matrix.py`` under ``ascend-env audit`` (which enables the simulated NPU in this
process), or by hand on the CPU alone::

    python tools/coverage_models.py --out result.json [--archs llama,mixtral] [--strategies greedy_2eos]

For each architecture: build the model from a shrunken config (seeded, the same every run), run
every decoding strategy on the CPU, move the model to ``npu`` (when the simulator is on), reset
the simulator's fallback counts and run every strategy again. The JSON written to ``--out`` maps
each architecture to ``{"category", "model_type", "error", "strategies": {name: {"cpu": tokens or
{"error"}, "npu": ...}}, "fallbacks": {op: count}}`` (fallbacks on the NPU only, per architecture),
plus ``"transformers"``, ``"torch"`` and ``"table"``. torch and transformers are imported in
``main``, so the driver can read the lists without them.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from typing import Any, Dict, List, Optional, Tuple

VOCAB = 96
PROMPT = [[5, 6, 7, 8, 5, 6], [9, 10, 11, 12, 9, 10]]
EOS = [2, 17]
PAD = 0
SEED = 1234
MAX_NEW_TOKENS = 8
# The words of the tiny tokenizer that stop strings need: token i is "w<i>".
STOP_STRING = "w33"

# The decoding strategies of issue 34: name -> generate() options ("batch1": a one-row prompt;
# "assistant": the model's own copy as the assistant; "tokenizer": the tiny tokenizer).
STRATEGIES: Dict[str, Dict[str, Any]] = {
    "greedy_2eos": {"do_sample": False, "eos_token_id": EOS},
    "sampling": {"do_sample": True, "top_k": 20, "top_p": 0.9, "temperature": 0.9},
    "beam_length_penalty": {"num_beams": 3, "length_penalty": 0.7, "early_stopping": True},
    "repetition_ngram": {"repetition_penalty": 1.3, "no_repeat_ngram_size": 2},
    "bad_words_suppress": {"bad_words_ids": [[7], [8, 9]], "suppress_tokens": [3, 4, 40]},
    "min_new_tokens": {"min_new_tokens": 6, "eos_token_id": EOS},
    "stop_strings": {"stop_strings": [STOP_STRING], "tokenizer": True},
    "assisted": {"assistant": True, "batch1": True},
    "static_cache": {"cache_implementation": "static"},
}

# DeepSeek's multi-head latent attention and routed experts, small.
_MLA: Dict[str, Any] = {
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "kv_lora_rank": 16,
    "q_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 8,
    "first_k_dense_replace": 1,
    "n_group": 1,
    "topk_group": 1,
    "num_key_value_heads": 4,
}

# name -> (category, model_type, config overrides on top of the shrunken defaults, model class).
# The classes: "causal" (AutoModelForCausalLM), "seq2seq" (AutoModelForSeq2SeqLM), "speech"
# (AutoModelForSpeechSeq2Seq, log-mel input features), "vision" (AutoModelForImageTextToText, or
# AutoModelForVision2Seq in releases before it; one image per row).
ARCHITECTURES: Dict[str, Tuple[str, str, Dict[str, Any], str]] = {
    "gpt2": ("decoder-only", "gpt2", {}, "causal"),
    "llama": ("decoder-only", "llama", {}, "causal"),
    "mistral": ("decoder-only", "mistral", {}, "causal"),
    "qwen2": ("decoder-only", "qwen2", {}, "causal"),
    "gemma": ("decoder-only", "gemma", {"head_dim": 8}, "causal"),
    "gemma2": ("decoder-only", "gemma2", {"head_dim": 8}, "causal"),
    "phi": ("decoder-only", "phi", {}, "causal"),
    "phi3": ("decoder-only", "phi3", {}, "causal"),
    "falcon": ("decoder-only", "falcon", {}, "causal"),
    "gpt_neox": ("decoder-only", "gpt_neox", {}, "causal"),
    "opt": ("decoder-only", "opt", {"word_embed_proj_dim": 32}, "causal"),
    "bloom": ("decoder-only", "bloom", {}, "causal"),
    "starcoder2": ("decoder-only", "starcoder2", {}, "causal"),
    "qwen3": ("decoder-only", "qwen3", {"head_dim": 8}, "causal"),
    "gemma3_text": ("decoder-only", "gemma3_text", {"head_dim": 8}, "causal"),
    "llama4_text": (
        "decoder-only",
        "llama4_text",
        {
            "head_dim": 8,
            "intermediate_size_mlp": 64,
            "num_local_experts": 4,
            "num_experts_per_tok": 1,
            "attention_chunk_size": 16,
        },
        "causal",
    ),
    "mixtral": ("MoE", "mixtral", {"num_local_experts": 4, "num_experts_per_tok": 2}, "causal"),
    "qwen2_moe": (
        "MoE",
        "qwen2_moe",
        {
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 32,
        },
        "causal",
    ),
    "qwen3_moe": (
        "MoE",
        "qwen3_moe",
        {"num_experts": 4, "num_experts_per_tok": 2, "head_dim": 8, "moe_intermediate_size": 32},
        "causal",
    ),
    "deepseek_v2": ("MoE", "deepseek_v2", dict(_MLA), "causal"),
    "deepseek_v3": ("MoE", "deepseek_v3", dict(_MLA), "causal"),
    "granitemoe": ("MoE", "granitemoe", {"num_local_experts": 4, "num_experts_per_tok": 2}, "causal"),
    "mamba": ("state-space", "mamba", {"state_size": 4, "expand": 2, "conv_kernel": 4}, "causal"),
    "mamba2": (
        "state-space",
        "mamba2",
        {
            "state_size": 4,
            "expand": 2,
            "conv_kernel": 4,
            "num_heads": 8,
            "head_dim": 8,
            "n_groups": 1,
            "chunk_size": 16,
        },
        "causal",
    ),
    "jamba": (
        "hybrid",
        "jamba",
        {
            "num_experts": 2,
            "num_experts_per_tok": 1,
            "mamba_d_state": 4,
            "attn_layer_period": 2,
            "attn_layer_offset": 1,
            "expert_layer_period": 2,
            "expert_layer_offset": 1,
            "use_mamba_kernels": False,
        },
        "causal",
    ),
    "t5": (
        "encoder-decoder",
        "t5",
        {"d_kv": 8, "num_decoder_layers": 2, "decoder_start_token_id": PAD},
        "seq2seq",
    ),
    "bart": (
        "encoder-decoder",
        "bart",
        {"decoder_start_token_id": 2, "forced_eos_token_id": None},
        "seq2seq",
    ),
    "whisper": (
        "speech",
        "whisper",
        {
            "num_mel_bins": 8,
            "max_source_positions": 16,
            "max_target_positions": 64,
            "decoder_start_token_id": 1,
            "begin_suppress_tokens": None,
            "suppress_tokens": None,
        },
        "speech",
    ),
    # A llama decoder over a CLIP vision tower: sub-configs are (model_type, overrides) pairs,
    # shrunken the same way; 16-pixel images in 8-pixel patches give IMAGE_TOKENS features.
    "llava": (
        "vision-language",
        "llava",
        {
            "text_config": ("llama", {}),
            "vision_config": (
                "clip_vision_model",
                {"image_size": 16, "patch_size": 8, "projection_dim": 32, "num_channels": 3},
            ),
            "image_token_index": 90,
            "image_seq_length": 4,
            "vision_feature_layer": -1,
            "projector_hidden_act": "gelu",
        },
        "vision",
    ),
}

# The llava image's placeholder token. The prompt holds it once per patch feature where the config
# has ``image_seq_length`` (transformers 4.46 then takes its current path, not the "legacy
# processing" that expands fewer); once per image before that (4.40 expands each itself).
IMAGE_TOKEN = 90

# Shrunken defaults, applied where the config has the attribute.
_SMALL: Dict[str, Any] = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "d_model": 32,
    "n_embd": 32,
    "num_hidden_layers": 2,
    "n_layer": 2,
    "num_layers": 2,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "num_attention_heads": 4,
    "n_head": 4,
    "num_heads": 4,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 64,
    "ffn_dim": 64,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "d_ff": 64,
    "n_inner": 64,
    "max_position_embeddings": 64,
    "n_positions": 64,
    "bos_token_id": 1,
    "eos_token_id": EOS[0],
    "pad_token_id": PAD,
    "sliding_window": 32,
    "tie_word_embeddings": False,
}


def _config(model_type: str, overrides: Dict[str, Any]) -> Any:
    """The config with the small sizes, passed to its constructor so that the fields it derives
    (layer types, head sizes) follow them."""
    from transformers import AutoConfig

    default = AutoConfig.for_model(model_type)
    small = {key: value for key, value in _SMALL.items() if hasattr(default, key)}
    # Sub-configs (a vision-language model's text and vision parts) are built the same way.
    built = {key: _config(*value) if isinstance(value, tuple) else value for key, value in overrides.items()}
    return AutoConfig.for_model(model_type, **{**small, **built})


def build(name: str) -> Any:
    """The tiny model of architecture ``name``, in eval mode, the same weights every call."""
    import torch
    import transformers as tf

    _category, model_type, overrides, kind = ARCHITECTURES[name]
    if model_type not in tf.CONFIG_MAPPING:
        raise LookupError(f"transformers {tf.__version__} has no model type {model_type!r}")
    config = _config(model_type, overrides)
    # AutoModelForImageTextToText came in transformers 4.46; AutoModelForVision2Seq before it.
    vision = getattr(tf, "AutoModelForImageTextToText", None) or tf.AutoModelForVision2Seq
    auto = {
        "causal": tf.AutoModelForCausalLM,
        "seq2seq": tf.AutoModelForSeq2SeqLM,
        "speech": tf.AutoModelForSpeechSeq2Seq,
        "vision": vision,
    }[kind]
    torch.manual_seed(0)
    return auto.from_config(config).eval()


def tiny_tokenizer() -> Any:
    """A word-level tokenizer over ``w0`` ... ``w94`` and ``abcdef`` (the prefix that transformers'
    stop-string criteria tokenizes), built in memory (nothing downloaded)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(VOCAB - 1)}
    vocab["abcdef"] = VOCAB - 1
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="w3"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    # Words joined by spaces; without a decoder transformers 4.46's stop strings cannot decode.
    tokenizer.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="w3", pad_token="w0", eos_token="w2")


def _inputs(model: Any, device: str, batch1: bool) -> Dict[str, Any]:
    import torch

    prompt = PROMPT[:1] if batch1 else PROMPT
    ids = torch.tensor(prompt, device=device)
    if getattr(model.config, "model_type", "") == "whisper":
        torch.manual_seed(1)
        features = torch.randn(len(prompt), model.config.num_mel_bins, 2 * model.config.max_source_positions)
        return {"input_features": features.to(device)}
    if getattr(model.config, "model_type", "") == "llava":
        vision = model.config.vision_config
        torch.manual_seed(1)
        pixels = torch.randn(len(prompt), vision.num_channels, vision.image_size, vision.image_size)
        # The override is kept as an unknown attribute where the config class lacks the field.
        known = hasattr(type(model.config)(), "image_seq_length")
        placeholders = model.config.image_seq_length if known else 1
        ids = torch.tensor([[IMAGE_TOKEN] * placeholders + row for row in prompt], device=device)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "pixel_values": pixels.to(device)}
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def run_strategy(model: Any, assistant: Any, device: str, name: str) -> Any:
    """The tokens ``model`` generates on ``device`` with strategy ``name`` (a list of rows)."""
    import torch

    options = dict(STRATEGIES[name])
    batch1 = options.pop("batch1", False)
    if options.pop("assistant", False):
        options["assistant_model"] = assistant
    if options.pop("tokenizer", False):
        options["tokenizer"] = tiny_tokenizer()
    options.setdefault("do_sample", False)
    inputs = _inputs(model, device, batch1)
    torch.manual_seed(SEED)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=MAX_NEW_TOKENS, pad_token_id=PAD, **options)
    if out.device.type != torch.device(device).type:
        raise AssertionError(f"generate() returned tokens on {out.device}, not {device}")
    return out.cpu().tolist()


def _error(exc: BaseException) -> Dict[str, str]:
    return {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}


def run_architecture(name: str, strategies: List[str], npu: bool) -> Dict[str, Any]:
    """One architecture: every strategy on the CPU, then (``npu``) on the simulated NPU."""
    category, model_type = ARCHITECTURES[name][:2]
    result: Dict[str, Any] = {
        "category": category,
        "model_type": model_type,
        "error": None,
        "strategies": {},
        "fallbacks": {},
    }
    devices = ["cpu", "npu"] if npu else ["cpu"]
    for device in devices:
        # A fresh model per device (the same weights): a CPU run may leave state on the model
        # (transformers 4.49 keeps a static cache with meta tensors, which .to() cannot move).
        try:
            model = build(name).to(device)
            assistant = copy.deepcopy(model)
        except Exception as exc:  # noqa: BLE001 - recorded: "not covered", with the reason
            result["error"] = _error(exc)["error"]
            return result
        if device == "npu":
            from ascend_env import sim

            sim.reset()
        for strategy in strategies:
            try:
                tokens: Any = run_strategy(model, assistant, device, strategy)
            except Exception as exc:  # noqa: BLE001 - recorded, compared with the CPU's
                tokens = _error(exc)
            result["strategies"].setdefault(strategy, {})[device] = tokens
        if device == "npu":
            result["fallbacks"] = dict(sorted(sim.fallbacks().items()))
    return result


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="where to write the JSON result")
    parser.add_argument("--archs", default=",".join(ARCHITECTURES), help="comma-separated architectures")
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated strategies")
    args = parser.parse_args(argv)
    import torch
    import transformers

    from ascend_env import sim

    table = sim.enabled_table()
    strategies = [s for s in args.strategies.split(",") if s]
    results: Dict[str, Any] = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "table": table,
        "architectures": {},
    }
    for name in [a for a in args.archs.split(",") if a]:
        results["architectures"][name] = run_architecture(name, strategies, npu=table is not None)
        print(f"coverage: {name} done", file=sys.stderr, flush=True)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(results, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
