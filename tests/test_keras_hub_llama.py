"""keras-hub's LlamaBackbone converts without keras-hub: RMSNorm, grouped-query attention (4 query heads on 2
key/value heads), keras-hub's rotary embedding and the SwiGLU feed-forward.

The tiny Llama was made once with keras 3 (torch backend) and keras-hub 0.32
(tests/keras_hub_llama_fixtures.py), every weight moved off its initial value, saved with ``model.save``
(.keras) and ``save_to_preset`` (a folder; the causal LM's folder was written later from its .keras by
``--task-preset``). Keras's own outputs on a right-padded batch (``padding_mask``
0 there) are in llama_expected.npz; the converted model must agree within 1e-5 at every position.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.keras import convert_keras_model
from attnzoo.keras.convert import UnsupportedKerasLayerError
from attnzoo.keras.converters.hub_rotary import rotate

from .conftest import ROOT

DATA = ROOT / "tests" / "data" / "keras_hub_models"
EXPECTED = dict(np.load(DATA / "llama_expected.npz"))


def _predict(model) -> np.ndarray:
    assert sorted(model.input_names) == ["padding_mask", "token_ids"]
    with torch.no_grad():
        return model(*[torch.from_numpy(EXPECTED[f"in/{name}"]) for name in model.input_names]).numpy()


@pytest.mark.parametrize("file", ["llama.keras", "llama_preset"])
def test_a_llama_backbone_predicts_what_keras_predicts(file):
    want = EXPECTED["backbone/sequence_output"]
    assert (EXPECTED["in/padding_mask"] == 0).any()  # the padding is exercised
    np.testing.assert_allclose(_predict(convert_keras_model(DATA / file)), want, atol=1e-5, rtol=0)


def test_a_converted_llama_saves_and_loads_and_writes_rms_norm_as_torch(tmp_path):
    model = convert_keras_model(DATA / "llama.keras")
    assert "nn.RMSNorm(32, eps=1e-06)" in model.code
    again = attnzoo.load(attnzoo.save(model, tmp_path / "saved"))
    np.testing.assert_allclose(_predict(again), EXPECTED["backbone/sequence_output"], atol=1e-5, rtol=0)


def test_rotary_positions_are_keras_hubs_halves_written_out():
    """One head of 4 at position 3: the pairs are (x0, x2) and (x1, x3), turned by 3·θ_j, θ_j =
    wavelength^(-2j/4), as keras-hub's RotaryEmbedding computes them."""
    x = torch.tensor([1.0, 2.0, 3.0, 4.0]).reshape(1, 1, 1, 4)
    theta = [1.0, 100.0**-0.5]
    c, s = [np.cos(3 * t) for t in theta], [np.sin(3 * t) for t in theta]
    want = [1 * c[0] - 3 * s[0], 2 * c[1] - 4 * s[1], 3 * c[0] + 1 * s[0], 4 * c[1] + 2 * s[1]]
    np.testing.assert_allclose(rotate(x, 3, 100.0).flatten().numpy(), want, atol=1e-6)


def test_llama_3_1_frequency_adjustment_given_in_part_is_refused_by_name(tmp_path):
    """keras-hub's LlamaRotaryEmbedding takes all four of Llama 3.1's arguments or none (the whole adjustment is
    checked against Keras in tests/test_keras_hub_llama3_mistral.py)."""
    preset = tmp_path / "llama_preset"
    shutil.copytree(DATA / "llama_preset", preset)
    config = json.loads((preset / "config.json").read_text())
    config["config"].update(rope_low_freq_factor=1.0, rope_high_freq_factor=4.0, rope_frequency_adjustment_factor=8.0)
    (preset / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedKerasLayerError) as info:
        convert_keras_model(preset)
    line = next(line for line in str(info.value).splitlines() if line.startswith("  transformer_layer_0"))
    assert "rope_pretraining_sequence_length=None" in line and "or none of them" in line


@pytest.mark.parametrize("file", ["llama_causal_lm.keras", "llama_causal_lm_preset"])
def test_a_llama_causal_lm_gives_keras_logits_on_a_padded_batch(file):
    model = convert_keras_model(DATA / file)
    np.testing.assert_allclose(_predict(model), EXPECTED["causal_lm/logits"], atol=1e-5, rtol=0)


@pytest.mark.parametrize("file", ["llama_causal_lm.keras", "llama_causal_lm_preset"])
def test_a_converted_llama_decodes_keras_greedy_tokens_for_32_steps_with_its_cache(file):
    """Keras's tokens: the causal LM called on the whole sequence so far at each step, argmax at the last
    position. attnzoo's: the prompt once, then one token a call through the decoders' KV caches (4 query
    heads on 2 cached key/value heads, keys rotated at their positions)."""
    model = convert_keras_model(DATA / file)
    prompt = torch.from_numpy(EXPECTED["greedy/prompt"])
    cached = model.generate(prompt, 32)
    assert torch.equal(cached[:, :5], prompt.long())
    np.testing.assert_array_equal(cached[:, 5:].numpy(), EXPECTED["greedy/tokens"])
    assert torch.equal(model.generate(prompt, 32, use_cache=False), cached)


def test_top_k_sampling_with_a_seed_is_the_same_with_and_without_the_cache():
    model = convert_keras_model(DATA / "llama_causal_lm.keras")
    prompt = torch.from_numpy(EXPECTED["greedy/prompt"])
    drawn = model.generate(prompt, 12, top_k=5, temperature=0.8, seed=3)
    assert torch.equal(model.generate(prompt, 12, top_k=5, temperature=0.8, seed=3, use_cache=False), drawn)
    assert not torch.equal(drawn, model.generate(prompt, 12))  # it did sample (greedy differs here)


def test_a_saved_and_loaded_llama_causal_lm_gives_keras_logits_and_greedy_tokens(tmp_path):
    model = convert_keras_model(DATA / "llama_causal_lm.keras")
    again = attnzoo.load(attnzoo.save(model, tmp_path / "saved"))
    np.testing.assert_allclose(_predict(again), EXPECTED["causal_lm/logits"], atol=1e-5, rtol=0)
    prompt = torch.from_numpy(EXPECTED["greedy/prompt"])
    np.testing.assert_array_equal(again.generate(prompt, 32)[:, 5:].numpy(), EXPECTED["greedy/tokens"])


@pytest.mark.parametrize("use_cache", [True, False])
def test_right_padded_prompts_decode_keras_greedy_tokens(use_cache):
    """Prompts of 4, 9 and 6 tokens padded on the right: decoding starts at the shortest prompt's end and each
    row keeps its own prompt's tokens; Keras's tokens come from the causal LM called on the whole sequence
    every step (llama_padded_greedy.npz)."""
    padded = np.load(DATA / "llama_padded_greedy.npz")
    model = convert_keras_model(DATA / "llama_causal_lm.keras")
    ids, mask = torch.from_numpy(padded["ids"]), torch.from_numpy(padded["padding_mask"])
    assert (padded["padding_mask"] == 0).any()
    tokens = model.generate(ids, 32, padding_mask=mask, use_cache=use_cache)
    np.testing.assert_array_equal(tokens.numpy(), padded["out"])


@pytest.mark.parametrize(
    ("file", "case"), [("llama_preset", "backbone/sequence_output"), ("llama_causal_lm.keras", "causal_lm/logits")]
)
def test_convert_keras_check_compares_with_keras_s_outputs_given_as_reference(tmp_path, file, case):
    """``--check --reference``: Keras's own outputs (Keras cannot load a keras-hub file without keras-hub)."""
    from .conftest import run_cli

    reference = tmp_path / "reference.npz"
    inputs = {f"in/{i}": EXPECTED[f"in/{name}"] for i, name in enumerate(("padding_mask", "token_ids"))}
    np.savez(reference, **inputs, **{"out/0": EXPECTED[case]})
    done = run_cli(
        "convert-keras", str(DATA / file), "-o", str(tmp_path / "port"), "--check", "--reference", str(reference)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    np.testing.assert_allclose(_predict(attnzoo.load(tmp_path / "port")), EXPECTED[case], atol=1e-5, rtol=0)
