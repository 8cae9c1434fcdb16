"""keras-hub's Llama 3, Llama 3.1, Mistral and Mixtral backbones and causal LMs convert without keras-hub and
compute what Keras computed.

The fixtures (tests/data/keras_hub_lm/<family>/, made by tests/keras_hub_lm_fixtures.py with keras 3.15 and
keras-hub 0.32 on the torch backend, CPU) hold each family's tiny backbone and causal LM (``.keras`` and
``save_to_preset`` folders) and Keras's outputs on a right- and a left-padded batch. Every position is compared,
the left padding included: a query with no key there gets what Keras gave it (the mean of the values for
Llama 3 and Mistral, whose keras-hub attention takes keras's fused ``dot_product_attention`` on torch; zeros
for Mixtral, whose attention takes keras's masked ``Softmax`` on the CPU). Llama 3.1 is Llama 3 with the
frequency adjustment; Mistral's window is 4 tokens (the 12-token batch and 37-token decoding cross it),
Mixtral's 512. Greedy decoding, with and without the KV cache, gives the plain forward's greedy tokens
(``greedy/tokens``) and keras-hub's own cached ``generate`` (``generate/tokens``).

Mixtral's causal LM is compared within 2e-5, not 1e-5: its residual stream reaches 23 in magnitude (float32
spacing 1.9e-6 there) and Keras's float32 rounding alone moves its logits by about 1e-5 (the converted model
in float64 is 1.04e-5 from Keras's logits; transformers' own Mixtral, loading the folder the door writes, is
1.3e-5 from them, as the converted model is).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnzoo.errors import ConfigError
from attnzoo.keras import convert_keras_model
from attnzoo.keras.convert import UnsupportedKerasLayerError
from attnzoo.keras.converters.hub_llama import HubLlamaDecoder, llama3_divisors

from .test_keras_hub_qwen_phi3 import (
    DATA,
    TOLERANCE,
    check_greedy,
    check_preset_folders,
    check_saved_and_loaded,
    close,
    converted,
    edited_preset,
    expected,
    run,
)

FAMILIES = ("llama3", "llama31", "mistral", "mixtral")
LOGITS_TOLERANCE = {"mixtral": 2e-5}  # see the module docstring


def _refusal(folder) -> str:
    with pytest.raises(UnsupportedKerasLayerError) as info:
        convert_keras_model(folder)
    return next(line for line in str(info.value).splitlines() if line.startswith("  transformer_layer_0"))


# -- the fast tier: the .keras files of each family ----------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_the_backbone_and_the_causal_lm_give_keras_s_outputs_at_every_position(family):
    e = expected(family)
    for side in ("right", "left"):
        assert (e[f"{side}/padding_mask"] == 0).any()  # the padding is exercised
        close(run(converted(family, "backbone.keras"), family, side), e[f"{side}/backbone"], f"{family} {side}")
        got = run(converted(family, "causal_lm.keras"), family, side)
        close(got, e[f"{side}/logits"], f"{family} {side} logits", LOGITS_TOLERANCE.get(family, TOLERANCE))


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_decoding_gives_keras_s_tokens_with_and_without_the_cache(family):
    """32 steps: the prompt once and then one token a call through the decoders' KV caches (Mistral's kept at
    its window of 4), or the whole sequence each step; both give the plain forward's greedy tokens and
    keras-hub's cached generate's."""
    check_greedy(family)


def test_mixtral_routes_each_token_to_the_experts_keras_chose():
    """``router/top_k`` [layers, 48, 2]: each token's 2 experts of 4, likeliest first, layer by layer, as
    keras-hub's routers of the causal LM chose them on the right-padded batch (padded tokens included)."""
    model = converted("mixtral", "causal_lm.keras")
    decoders = [m for m in model.modules() if hasattr(m, "route")]
    chosen = []
    for decoder in decoders:
        original = decoder.route
        decoder.route = lambda y, original=original: chosen.append(original(y)[0]) or original(y)
    try:
        run(model, "mixtral", "right")
    finally:
        for decoder in decoders:
            del decoder.route  # the class's method again
    assert len(chosen) == 2
    np.testing.assert_array_equal(torch.stack(chosen).numpy(), expected("mixtral")["router/top_k"])


@pytest.mark.parametrize(
    ("family", "key", "changes"),
    [
        (
            "llama31",
            "noadjust",
            {
                name: None
                for name in (
                    "rope_frequency_adjustment_factor",
                    "rope_low_freq_factor",
                    "rope_high_freq_factor",
                    "rope_pretraining_sequence_length",
                )
            },
        ),
        ("mistral", "nowindow", {"sliding_window": None}),
    ],
)
def test_the_same_weights_without_the_adjustment_or_the_window_give_keras_s_logits_without_them(
    tmp_path, family, key, changes
):
    """Keras's logits of the causal LM's weights in a model built without Llama 3.1's frequency adjustment or
    Mistral's window: the option is what the converted model computes, not a constant of it."""
    model = convert_keras_model(edited_preset(tmp_path, family, "causal_lm_preset", **changes))
    want = expected(family)[f"{key}/logits"]
    assert np.abs(want - expected(family)["right/logits"]).max() > 1e-2  # the option changes the logits
    close(run(model, family, "right"), want, f"{family} {key}")


def _meta_s_apply_scaling(theta: list[float], factor: float, low: float, high: float, length: int) -> list[float]:
    """Meta's ``apply_scaling`` (llama-models, Llama 3.1's reference code) written out, one frequency at a time."""
    out = []
    for freq in theta:
        wavelength = 2 * math.pi / freq
        if wavelength < length / high:
            out.append(freq)
        elif wavelength > length / low:
            out.append(freq / factor)
        else:
            smooth = (length / wavelength - low) / (high - low)
            out.append((1 - smooth) * freq / factor + smooth * freq)
    return out


def test_llama_s_position_scaling_factor_is_not_applied_as_keras_hub_applies_none(tmp_path):
    """keras-hub 0.32's LlamaRotaryEmbedding computes its frequencies in its own ``_get_inverse_freq``, which
    never reads ``rope_position_scaling_factor``: Keras's logits with a factor of 4 are its logits with 1
    (checked once with keras-hub: 3.6e-6 apart, Keras's own rerun noise), and so are the converted model's."""
    folder = edited_preset(tmp_path, "llama3", "causal_lm_preset", rope_position_scaling_factor=4.0)
    close(run(convert_keras_model(folder), "llama3", "right"), expected("llama3")["right/logits"], "llama3 scaled")


def test_llama3_divisors_give_the_reference_frequencies_in_every_band():
    """head_dim 16, wavelength 10 000, factor 8, low 1, high 4, length 64 put the 8 frequencies in all three
    bands (high, smoothed, low); θ_j / divisor_j is the reference's adjusted frequency."""
    divisors = llama3_divisors(16, 10000.0, 8.0, 1.0, 4.0, 64)
    assert {1.0, 8.0} < set(divisors) and len(set(divisors)) >= 4  # all three bands
    theta = [10000.0 ** -(j / 16) for j in range(0, 16, 2)]
    want = _meta_s_apply_scaling(theta, 8.0, 1.0, 4.0, 64)
    np.testing.assert_allclose([t / d for t, d in zip(theta, divisors, strict=True)], want, rtol=1e-6)


@pytest.mark.slow
def test_llama3_divisors_give_transformers_llama3_frequencies():
    """transformers' own ``llama3`` rope, the one its LlamaForCausalLM loads from the door's folder."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0}
    rope |= {"high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    config = LlamaConfig(hidden_size=64, num_attention_heads=4, rope_parameters=rope)
    theirs, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    theta = 10000.0 ** -(torch.arange(0, 16, 2, dtype=torch.float32) / 16)
    divisors = torch.tensor(llama3_divisors(16, 10000.0, 8.0, 1.0, 4.0, 64))
    np.testing.assert_allclose((theta / divisors).numpy(), theirs.numpy(), rtol=1e-6)


def test_a_lora_fine_tuned_llama3_converts_with_keras_s_merged_kernels():
    """keras 3 saves a LoRA-enabled EinsumDense's kernel merged (kernel + A @ B · alpha / rank) and no adapters:
    the file converts as any, to the adapted model's logits."""
    want = expected("llama3")["lora/logits"]
    assert np.abs(want - expected("llama3")["right/logits"]).max() > 1e-2
    close(run(convert_keras_model(DATA / "llama3" / "causal_lm_lora.keras"), "llama3", "right"), want, "LoRA")


def test_a_bfloat16_llama3_converts_to_bfloat16_within_keras_s_own_bfloat16_rounding():
    """Llama 3 built with dtype="bfloat16" converts to a bfloat16 module; its logits are no farther from Keras's
    bfloat16 logits than those are from Keras's float32 ones, at the worst position and on average; its cached
    decoding gives its uncached tokens."""
    model = convert_keras_model(DATA / "llama3" / "causal_lm_bf16.keras")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    e = expected("llama3")
    got, keras_bf16 = run(model, "llama3", "right"), e["bf16/logits"]
    own = np.abs(keras_bf16 - e["right/logits"])  # Keras's bfloat16 rounding
    assert own.max() > 0.05  # it is a bfloat16 run
    difference = np.abs(got - keras_bf16)
    print(f"bfloat16: max difference {difference.max():.3g} (Keras's own {own.max():.3g})")
    assert difference.max() <= own.max() and difference.mean() <= own.mean()
    prompt = torch.from_numpy(e["greedy/prompt"])
    assert torch.equal(model.generate(prompt, 16), model.generate(prompt, 16, use_cache=False))


@pytest.mark.parametrize(
    ("family", "changes", "message"),
    [
        ("llama31", {"rope_low_freq_factor": None}, "takes all of rope_frequency_adjustment_factor"),
        ("llama31", {"rope_high_freq_factor": 0.5}, "rope_high_freq_factor <= rope_low_freq_factor"),
        ("mistral", {"rope_scaling_factor": 2.0}, "rope_scaling_factor=2.0 is not supported"),
        ("mistral", {"sliding_window": 0}, "sliding_window=0 is neither a positive int nor None"),
        ("mixtral", {"output_router_logits": True}, "output_router_logits=True: keras-hub's backbone cannot"),
        ("mixtral", {"router_jitter_noise": 0.1}, "router_jitter_noise=0.1: the router's training noise"),
        ("mixtral", {"top_k": 5}, "top_k=5 is not a number of experts from 1 to 4"),
    ],
)
def test_options_not_computed_are_refused_by_name(tmp_path, family, changes, message):
    line = _refusal(edited_preset(tmp_path, family, "backbone_preset", **changes))
    assert message in line, line


def test_a_decoder_node_given_part_of_llama_3_1_s_adjustment_is_refused():
    """A node built from hand-written data (a saved port's edited config) takes the four arguments all or none."""
    with pytest.raises(ConfigError, match=r"Llama 3.1's rope_frequency_adjustment_factor, .* are given all or none"):
        HubLlamaDecoder(
            hidden=32, intermediate_dim=64, num_query_heads=4, num_key_value_heads=2, rope_low_freq_factor=1.0
        )


# -- the slow tier: preset folders, save and load ----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_the_preset_folders_give_keras_s_outputs(family):
    check_preset_folders(family, LOGITS_TOLERANCE.get(family, TOLERANCE))


@pytest.mark.slow
@pytest.mark.parametrize("family", ("llama3", "mistral"))
def test_a_converted_preset_tokenizes_as_keras_hub_s_preprocessor(family):
    """The causal LM preset's tokenizer travels with the port (Llama 3's byte-level BPE, Mistral's
    SentencePiece): ``model.tokenize`` gives the preprocessor's ids and masks on the 200 texts."""
    e = expected(family)
    out = converted(family, "causal_lm_preset").tokenize([str(t) for t in e["tokenizer/texts"]])
    np.testing.assert_array_equal(out["token_ids"].numpy(), e["tokenizer/token_ids"])
    np.testing.assert_array_equal(out["padding_mask"].numpy(), e["tokenizer/padding_mask"])


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_a_saved_and_loaded_causal_lm_gives_keras_s_logits_and_greedy_tokens(tmp_path, family):
    check_saved_and_loaded(tmp_path / "saved", family, LOGITS_TOLERANCE.get(family, TOLERANCE))
