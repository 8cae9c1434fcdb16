"""The KV cache is passed explicitly, as transformers passes ``past_key_values``: a converted keras-hub LM's
emitted ``forward`` takes ``cache=`` (a :class:`~attnzoo.layers.kv_cache.DecodingCache`) and hands it to the
layers that decode; no layer holds a cache of its own.

The reference is the model itself called without a cache on the whole sequence so far (a causal model's
logits at a position depend only on the tokens up to it): a prompt, then one token at a time on the cache,
must give the uncached logits at every position, for every kind of layer that decodes (rotary with a
sliding window, ALiBi, partial rotary, learned positions with Keras's MultiHeadAttention, T5's relative bias
with cross-attention)."""

from __future__ import annotations

import copy
import importlib.util
import shutil

import numpy as np
import pytest
import torch

from attnzoo.keras import convert_keras_model
from attnzoo.keras.converters.hub_gemma import HubGemmaDecoder
from attnzoo.layers.kv_cache import DecodingCache, KVCache

from .conftest import ROOT

LM = ROOT / "tests" / "data" / "keras_hub_lm"
CAUSAL = {
    "gemma3": LM / "gemma3" / "causal_lm.keras",  # rotary, local layers of window 4 and a global one
    "bloom": LM / "bloom" / "causal_lm_preset",  # ALiBi
    "gpt_neox": LM / "gpt_neox" / "causal_lm.keras",  # partial rotary, parallel residual
    "phi3": LM / "phi3" / "causal_lm.keras",  # rotated after the cache
    "gpt2": ROOT / "tests" / "data" / "keras_hub_models" / "gpt2_causal_lm.keras",  # positions, keras_mha
}


@pytest.fixture(scope="module")
def models():
    return {name: convert_keras_model(path).eval() for name, path in CAUSAL.items()}


def tokens(model, batch: int = 2, length: int = 9, seed: int = 0) -> torch.Tensor:
    vocabulary = model.graph["keras_hub_config"]["vocabulary_size"]
    return torch.randint(1, vocabulary, (batch, length), generator=torch.Generator().manual_seed(seed))


def logits(model, ids: torch.Tensor, cache=None) -> torch.Tensor:
    with torch.no_grad():
        return model(token_ids=ids, padding_mask=torch.ones_like(ids), cache=cache)


@pytest.mark.parametrize("name", list(CAUSAL))
def test_a_prompt_then_one_token_at_a_time_on_the_cache_gives_the_uncached_logits(models, name):
    model = models[name]
    ids = tokens(model)
    whole = logits(model, ids)  # the reference: no cache, every position at once
    cache = DecodingCache(batch_size=2)
    steps = [logits(model, ids[:, :5], cache)] + [logits(model, ids[:, i : i + 1], cache) for i in range(5, 9)]
    scale = float(whole.abs().max())
    np.testing.assert_allclose(torch.cat(steps, dim=1).numpy(), whole.numpy(), atol=2e-6 * scale, rtol=0)


def test_no_layer_holds_a_cache_of_its_own_after_decoding(models):
    """The caches live in the DecodingCache generate made, not on the modules: after decoding none of the
    model's modules refers to a KVCache or a DecodingCache."""
    model = models["gemma3"]
    model.generate(tokens(model, length=4), 6)
    held = [
        (name, key)
        for name, module in model.named_modules()
        for key, value in vars(module).items()
        if isinstance(value, (KVCache, DecodingCache))
    ]
    assert held == []


def test_the_cache_holds_each_layer_s_keys_and_a_window_only_its_latest(models):
    model, ids = models["gemma3"], tokens(models["gemma3"], length=5)
    cache = DecodingCache(2)
    logits(model, ids, cache)
    logits(model, ids[:, :1], cache)
    blocks = [layer for layer in model.modules() if isinstance(layer, HubGemmaDecoder)]
    held = [cache.keys_values(block, 2) for block in blocks]
    assert [len(kv) for kv in held] == [4, 4, 4, 4, 4, 6]  # five local layers of window 4, one global
    assert [kv.length for kv in held] == [6] * 6


def printed_module(model):
    """The module ``model.code`` prints, run on its own with the model's weights, in inference."""
    namespace: dict = {}
    exec(compile(model.code, "<printed>", "exec"), namespace)  # noqa: S102 - the module attnzoo printed
    printed = namespace[model.emitted.class_name]()
    printed.load_state_dict(model.state_dict())
    return printed.eval()


def test_the_emitted_forward_takes_the_cache_and_the_printed_module_decodes_with_it(models):
    """The printed source is the model: run as its own module with the converted weights, it decodes on a
    DecodingCache to the same logits."""
    model = models["gpt2"]
    assert "        cache: DecodingCache | None = None,\n" in model.code
    assert "cache=cache" in model.code
    printed = printed_module(model)
    ids = tokens(model)
    cache = DecodingCache(2)
    with torch.no_grad():
        first = printed(torch.ones_like(ids[:, :6]), ids[:, :6], cache=cache)
        second = printed(torch.ones_like(ids[:, 6:7]), ids[:, 6:7], cache=cache)
    whole = logits(model, ids[:, :7])
    np.testing.assert_allclose(torch.cat([first, second], 1).numpy(), whole.numpy(), atol=1e-5, rtol=0)


def test_a_model_without_layers_that_decode_takes_no_cache():
    model = convert_keras_model(ROOT / "tests" / "data" / "keras_hub_lm" / "bert" / "classifier.keras").eval()
    assert "cache" not in model.code
    ids = torch.ones(1, 4, dtype=torch.int32)
    inputs = {"token_ids": ids, "padding_mask": ids, "segment_ids": ids * 0}
    with pytest.raises(ValueError, match="no layer of this model decodes"):
        model(inputs, cache=DecodingCache(1))


def test_a_wrong_cache_is_refused_by_name(models):
    model = models["bloom"]
    ids = tokens(model)
    with pytest.raises(ValueError, match="expects cache as a DecodingCache"):
        logits(model, ids, cache={})
    with pytest.raises(ValueError, match="made for batch size 3, got a call of batch 2"):
        logits(model, ids, cache=DecodingCache(3))
    with pytest.raises(ValueError, match="batch_size as a positive int"):
        DecodingCache(0)


def seq2seq(tmp_path, family: str):
    """The family's converted encoder-decoder LM, the encoder inputs of its fixture and 6 decoder tokens."""
    folder = tmp_path / family
    shutil.copytree(ROOT / "tests" / "data" / "keras_hub_seq2seq" / family / "preset", folder)
    want = dict(np.load(ROOT / "tests" / "data" / "keras_hub_seq2seq" / family / "expected.npz"))
    encoder = {name: torch.from_numpy(want[f"right/{name}"]) for name in ("encoder_token_ids", "encoder_padding_mask")}
    return convert_keras_model(folder).eval(), encoder, torch.from_numpy(want["right/decoder_token_ids"])[:, :6]


def seq2seq_logits(model, encoder, decoder, cache=None):
    given = {**encoder, "decoder_token_ids": decoder, "decoder_padding_mask": torch.ones_like(decoder)}
    with torch.no_grad():
        return model(given, cache=cache)


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_an_encoder_decoder_lm_decodes_on_the_cache_as_it_computes_without(tmp_path, family):
    """The decoder's self-attention caches its keys, its cross-attention the encoder's, the encoder layers
    (T5's share the decoder's class) compute their whole padded sequence."""
    model, encoder, ids = seq2seq(tmp_path, family)
    assert (encoder["encoder_padding_mask"] == 0).any()

    def call(decoder, cache=None):
        return seq2seq_logits(model, encoder, decoder, cache)

    whole = call(ids)
    cache = DecodingCache(ids.shape[0])
    steps = [call(ids[:, :3], cache)] + [call(ids[:, i : i + 1], cache) for i in range(3, 6)]
    scale = float(whole.abs().max())
    np.testing.assert_allclose(torch.cat(steps, dim=1).numpy(), whole.numpy(), atol=2e-6 * scale, rtol=0)


@pytest.mark.skipif(importlib.util.find_spec("h5py") is None, reason="needs h5py")
def test_the_source_checker_refuses_any_other_keyword_only_argument(models):
    from attnzoo.errors import ConfigError
    from attnzoo.keras.codegen import check_source

    code = models["gpt2"].code
    check_source(code)
    for changed in (
        code.replace("cache: DecodingCache | None = None", "cache: DecodingCache | None = print"),
        code.replace("cache: DecodingCache | None = None", "hook: DecodingCache | None = None"),
        code.replace("cache: DecodingCache | None = None", "cache: DecodingCache | None = None, other=None"),
    ):
        assert changed != code
        with pytest.raises(ConfigError, match="more than plain arguments"):
            check_source(changed)


def test_a_padded_call_with_the_cache_is_refused_naming_the_mask(models):
    """The layers given a cache read no padding: a padded prompt there would be silently attended to."""
    model = models["gpt2"]
    ids = tokens(model)
    mask = torch.ones_like(ids)
    mask[1, -2:] = 0
    with pytest.raises(ValueError, match="'padding_mask' holds padding .* given cache="), torch.no_grad():
        model(token_ids=ids, padding_mask=mask, cache=DecodingCache(2))
    with torch.no_grad():  # without the cache the padding is the model's to read
        model(token_ids=ids, padding_mask=mask)


def test_a_call_refused_for_its_batch_or_its_positions_leaves_the_cache_to_continue(models):
    """GPT-2's position embedding runs before its attention: a call of another batch, or one past the position
    table (64), is refused before any layer counts or caches its tokens, so the next call continues at the right
    positions, to the uncached logits."""
    model = models["gpt2"]
    ids = tokens(model, length=64)
    whole = logits(model, ids)
    cache = DecodingCache(2)
    first = logits(model, ids[:, :58], cache)
    with pytest.raises(ValueError, match="made for batch size 2, got a call of batch 1"):
        logits(model, ids[:1, 58:60], cache)
    second = logits(model, ids[:, 58:60], cache)
    with pytest.raises(ValueError, match="past the position table's sequence_length 64: .* at most 4 more tokens"):
        logits(model, ids[:, 58:64], cache)
    third = logits(model, ids[:, 60:64], cache)
    np.testing.assert_allclose(torch.cat([first, second, third], 1).numpy(), whole.numpy(), atol=1e-5, rtol=0)


def test_the_printed_module_s_position_embedding_refuses_another_batch_before_counting_it(models):
    """Run as its own module (none of the model's checks before its layers), GPT-2's position embedding is
    the first layer given the cache: a call of another batch is refused there, uncounted, and the next call
    continues at the right positions, to the uncached logits."""
    model = models["gpt2"]
    printed, ids = printed_module(model), tokens(model)
    cache = DecodingCache(2)
    with torch.no_grad():
        first = printed(torch.ones_like(ids[:, :6]), ids[:, :6], cache=cache)
        with pytest.raises(ValueError, match="made for batch size 2, got a call of batch 1"):
            printed(torch.ones_like(ids[:1, 6:]), ids[:1, 6:], cache=cache)
        second = printed(torch.ones_like(ids[:, 6:]), ids[:, 6:], cache=cache)
    np.testing.assert_allclose(torch.cat([first, second], 1).numpy(), logits(model, ids).numpy(), atol=1e-5, rtol=0)


def test_a_call_that_fails_partway_leaves_the_cache_refused(models, monkeypatch):
    """A call failing in GPT-2's second block, after the first cached its tokens: the layers are out of step,
    and a retry would read them at other positions; every later call on that cache is refused."""
    model = models["gpt2"]
    ids = tokens(model)
    cache = DecodingCache(2)
    logits(model, ids[:, :5], cache)
    block = model.layers["gpt2_backbone/transformer_layer_1"]

    def fail(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(block, "forward", fail)
    with pytest.raises(RuntimeError, match="out of memory"):
        logits(model, ids[:, 5:6], cache)
    monkeypatch.undo()
    with pytest.raises(ValueError, match="an earlier call on it failed partway .*out of memory.* new DecodingCache"):
        logits(model, ids[:, 5:6], cache)
    fresh = DecodingCache(2)  # a new cache decodes as before
    np.testing.assert_allclose(logits(model, ids, fresh).numpy(), logits(model, ids).numpy(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["gemma3", "gpt2"])
def test_a_prompt_cached_under_inference_mode_decodes_on_under_no_grad(models, name):
    """A prompt run under torch.inference_mode(), the steps after it under no_grad (whose in-place writes an
    inference tensor refuses): the uncached logits."""
    model = models[name]
    ids = tokens(model)
    cache = DecodingCache(2)
    with torch.inference_mode():
        prompt = model(token_ids=ids[:, :5], padding_mask=torch.ones_like(ids[:, :5]), cache=cache).clone()
    steps = [logits(model, ids[:, i : i + 1], cache) for i in range(5, 9)]
    np.testing.assert_allclose(torch.cat([prompt, *steps], 1).numpy(), logits(model, ids).numpy(), atol=1e-5, rtol=0)


def test_calls_of_several_tokens_continue_the_cache_as_a_second_prompt_would(models):
    """Calls of 3, 6, 1, 7 and 3 tokens on one cache (Gemma 3's windows of 4 crossed inside a call): the
    uncached logits of their concatenation, as a used cache reads a second prompt after the first."""
    model = models["gemma3"]
    ids = tokens(model, length=20)
    cache, start, steps = DecodingCache(2), 0, []
    for count in (3, 6, 1, 7, 3):
        steps.append(logits(model, ids[:, start : start + count], cache))
        start += count
    whole = logits(model, ids)
    scale = float(whole.abs().max())
    np.testing.assert_allclose(torch.cat(steps, dim=1).numpy(), whole.numpy(), atol=2e-6 * scale, rtol=0)


def test_a_cache_serves_the_model_it_was_first_given_and_refuses_another(models):
    """A copy of the model has layers new to the cache: on the prompt's cache it would compute the step alone,
    as position 0; refused, and the model itself continues to the uncached logits."""
    model = models["gpt2"]
    ids = tokens(model)
    cache = DecodingCache(2)
    prompt = logits(model, ids[:, :6], cache)
    with pytest.raises(ValueError, match="holds the tokens another model was given .* for each model"):
        logits(copy.deepcopy(model), ids[:, 6:], cache)
    step = logits(model, ids[:, 6:], cache)
    np.testing.assert_allclose(torch.cat([prompt, step], 1).numpy(), logits(model, ids).numpy(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_a_step_given_another_encoder_input_than_the_cache_holds_is_refused(tmp_path, family):
    """The cross-attention's keys are the first call's encoder output: a step given other encoder inputs
    (the batch's rows in another order) is refused, where T5's read the first ones' keys under the new
    padding; the same inputs again decode on, to the uncached logits."""
    model, encoder, ids = seq2seq(tmp_path, family)
    other = {name: value.flip(0) for name, value in encoder.items()}
    assert not torch.equal(other["encoder_token_ids"], encoder["encoder_token_ids"])
    cache = DecodingCache(ids.shape[0])
    first = seq2seq_logits(model, encoder, ids[:, :3], cache)
    with pytest.raises(ValueError, match="this step got a different context.* DecodingCache"):
        seq2seq_logits(model, other, ids[:, 3:], cache)
    cache = DecodingCache(ids.shape[0])
    first = seq2seq_logits(model, encoder, ids[:, :3], cache)
    steps = torch.cat([first, seq2seq_logits(model, {k: v.clone() for k, v in encoder.items()}, ids[:, 3:], cache)], 1)
    np.testing.assert_allclose(steps.numpy(), seq2seq_logits(model, encoder, ids).numpy(), atol=1e-5, rtol=0)
