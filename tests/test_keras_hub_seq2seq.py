"""keras-hub's encoder-decoder LMs (BART, T5) convert and decode without Keras.

Each family's tiny ``<X>Seq2SeqLM`` was made once with keras 3 (torch backend) and keras-hub 0.32
(tests/keras_hub_seq2seq_fixtures.py), every weight moved off its initial value, and saved with
``save_to_preset``: one folder holding the backbone (config.json) and the task (task.json). expected.npz holds
Keras's outputs on right-padded batches (and, for BART, left-padded ones) and Keras's greedy decoding of 16 new
tokens (the task called on the whole decoder sequence every step, which keras-hub's own cached ``generate``
matched). The backbone alone is read from a copy of the folder without task.json.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from attnzoo.keras import convert_keras_model

from .conftest import ROOT

DATA = ROOT / "tests" / "data" / "keras_hub_seq2seq"
FAMILIES = ["bart", "t5"]
CLASSES = {"bart": ("BartBackbone", "BartSeq2SeqLM"), "t5": ("T5Backbone", "T5Seq2SeqLM")}
INPUTS = ("encoder_token_ids", "encoder_padding_mask", "decoder_token_ids", "decoder_padding_mask")
NEW = 16


def expected(family: str) -> dict[str, np.ndarray]:
    return dict(np.load(DATA / family / "expected.npz"))


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    models = {}
    for family in FAMILIES:
        backbone = tmp_path_factory.mktemp(family) / "backbone_preset"
        shutil.copytree(DATA / family / "preset", backbone)
        (backbone / "task.json").unlink()
        models[family] = (convert_keras_model(backbone), convert_keras_model(DATA / family / "preset"))
    return models


def greedy_inputs(want: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {
        "encoder_token_ids": want["greedy/encoder_token_ids"],
        "encoder_padding_mask": want["greedy/encoder_padding_mask"],
        "decoder_token_ids": want["greedy/prompt"],
    }


@pytest.mark.parametrize("family", FAMILIES)
def test_the_backbone_and_the_task_predict_what_keras_predicts_at_every_position(converted, family):
    backbone, task = converted[family]
    assert (backbone.graph["keras_hub_class"], task.graph["keras_hub_class"]) == CLASSES[family]
    want = expected(family)
    for side in ("right", "left"):
        if f"{side}/logits" not in want:
            continue
        given = {name: torch.from_numpy(want[f"{side}/{name}"]) for name in INPUTS}
        assert all((given[mask] == 0).any() for mask in ("encoder_padding_mask", "decoder_padding_mask"))
        with torch.no_grad():
            out, logits = backbone(given), task(given)
        assert sorted(out) == ["decoder_sequence_output", "encoder_sequence_output"]
        for key, value in out.items():
            np.testing.assert_allclose(value.numpy(), want[f"{side}/{key}"], atol=1e-5, rtol=0, err_msg=side)
        # the logits are up to ~40 here: float32 rounding of the tied head's 32-term sums, 1e-6 of their scale
        scale = float(np.abs(want[f"{side}/logits"]).max())
        np.testing.assert_allclose(logits.numpy(), want[f"{side}/logits"], atol=1e-6 * scale, rtol=0, err_msg=side)


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_decoding_gives_keras_s_tokens_cached_or_not_and_the_encoder_runs_once(converted, family, monkeypatch):
    _, task = converted[family]
    want = expected(family)
    np.testing.assert_array_equal(want["greedy/tokens"], want["generate/tokens"])  # oracle == keras-hub's
    given = greedy_inputs(want)
    encoder = [task.layers[key] for key in task.layers if "encoder_layer" in key]
    calls = []
    for cls in {type(layer) for layer in encoder}:
        original = cls.forward
        monkeypatch.setattr(cls, "forward", lambda self, *a, _f=original, **k: calls.append(self) or _f(self, *a, **k))
    cached = task.generate(given, NEW)
    ran = [layer for layer in calls if any(layer is own for own in encoder)]
    assert len(ran) == len(encoder) == task.graph["keras_hub_config"]["num_layers"]  # once each, not every step
    uncached = task.generate(given, NEW, use_cache=False)
    np.testing.assert_array_equal(cached[:, :3].numpy(), want["greedy/prompt"])
    np.testing.assert_array_equal(cached[:, 3:].numpy(), want["greedy/tokens"])
    np.testing.assert_array_equal(uncached.numpy(), cached.numpy())


@pytest.mark.parametrize("family", FAMILIES)
def test_padded_prompts_and_sampling_decode_the_same_with_the_cache_as_without(converted, family):
    _, task = converted[family]
    given = greedy_inputs(expected(family))
    prompt = np.concatenate([given["decoder_token_ids"], given["decoder_token_ids"][:, :2]], axis=1)
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], "int32")
    given |= {"decoder_token_ids": prompt * mask, "decoder_padding_mask": mask}
    for options in ({}, {"top_k": 5, "seed": 3}, {"top_p": 0.9, "temperature": 0.7, "seed": 4}):
        cached = task.generate(given, 8, **options)
        np.testing.assert_array_equal(cached.numpy(), task.generate(given, 8, use_cache=False, **options).numpy())
        np.testing.assert_array_equal(cached[0, :5].numpy(), prompt[0])  # each row keeps its own prompt
        np.testing.assert_array_equal(cached[1, :2].numpy(), prompt[1, :2])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda g: g["decoder_token_ids"], "dict of keras-hub's inputs"),
        (lambda g: {"decoder_token_ids": g["decoder_token_ids"]}, "encoder_token_ids and decoder_token_ids"),
        (lambda g: {**g, "padding_mask": g["decoder_token_ids"]}, "decoder_padding_mask; got"),
        (lambda g: {**g, "encoder_padding_mask": g["encoder_padding_mask"][:, :4]}, "encoder_padding_mask of"),
        (lambda g: {**g, "encoder_token_ids": g["encoder_token_ids"] + 1000}, "encoder_token_ids"),
    ],
)
def test_generate_says_what_an_encoder_decoder_lm_takes(converted, change, message):
    _, task = converted["bart"]
    with pytest.raises(ValueError, match=message):
        task.generate(change(greedy_inputs(expected("bart"))), 2)
