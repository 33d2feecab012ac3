"""The coverage matrix's vision-language model: built from configs alone, with its image in the prompt."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import coverage_models  # noqa: E402


def test_llava_is_tiny_and_its_prompt_carries_the_image():
    model = coverage_models.build("llava")
    assert model.config.text_config.hidden_size == 32
    assert model.config.vision_config.hidden_size == 32
    inputs = coverage_models._inputs(model, "cpu", batch1=False)
    vision = model.config.vision_config
    assert tuple(inputs["pixel_values"].shape) == (2, 3, vision.image_size, vision.image_size)
    placeholders = (inputs["input_ids"] == coverage_models.IMAGE_TOKEN).sum(dim=1)
    # One per patch feature (transformers >= 4.46), or one that the model expands (older releases).
    patches = (vision.image_size // vision.patch_size) ** 2
    assert placeholders.tolist() in ([patches, patches], [1, 1])
    # The image reaches the decoder: another image, other logits.
    with torch.no_grad():
        logits = model(**inputs).logits
        inputs["pixel_values"] = inputs["pixel_values"] + 1.0
        other = model(**inputs).logits
    assert not torch.allclose(logits, other)


def test_llava_generates_on_the_cpu():
    model = coverage_models.build("llava")
    rows = coverage_models.run_strategy(model, model, "cpu", "greedy_2eos")
    prompt = coverage_models._inputs(model, "cpu", batch1=False)["input_ids"].tolist()
    assert [row[: len(prompt[0])] for row in rows] == prompt
    assert all(len(row) > len(prompt[0]) for row in rows)
