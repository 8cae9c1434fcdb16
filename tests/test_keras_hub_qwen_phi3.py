"""keras-hub's Qwen2, Qwen3, Qwen-MoE and Phi-3 (default and su rope) backbones and causal LMs convert without
keras-hub and compute what Keras computed.

The fixtures (tests/data/keras_hub_lm/<family>/, made by tests/keras_hub_lm_fixtures.py with keras 3.15 and
keras-hub 0.32 on the torch backend, CPU) hold each family's tiny backbone and causal LM (``.keras`` and
``save_to_preset`` folders) and Keras's outputs on a right- and a left-padded batch. Every position is compared,
the left padding included: a query with no key there gets what Keras gave it (the mean of the values for
Qwen2, Qwen3 and Phi-3, whose keras-hub attention takes keras's fused ``dot_product_attention`` on torch;
zeros for Qwen-MoE, whose attention takes keras's masked ``Softmax`` on the CPU). Greedy decoding, with and
without the KV cache, gives the plain forward's greedy tokens (``greedy/tokens``) and keras-hub's own cached
``generate`` (``generate/tokens``; they agree for these families). The slow tier converts the preset folders,
saves and loads, and decodes the saved model.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from functools import cache

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.keras import convert_keras_model
from attnzoo.keras.convert import UnsupportedKerasLayerError
from attnzoo.keras.converters.hub_rotary import rotate

from .conftest import ROOT

DATA = ROOT / "tests" / "data" / "keras_hub_lm"
FAMILIES = ("qwen", "qwen3", "qwen_moe", "phi3", "phi3_su")
TOLERANCE = 1e-5


@cache
def expected(family: str) -> dict[str, np.ndarray]:
    return dict(np.load(DATA / family / "expected.npz"))


@cache
def converted(family: str, file: str):
    return convert_keras_model(DATA / family / file)


def run(model, family: str, side: str) -> np.ndarray:
    e = expected(family)
    inputs = {name: torch.from_numpy(e[f"{side}/{name}"]) for name in ("token_ids", "padding_mask")}
    with torch.no_grad():
        return model(inputs).float().numpy()


def close(got: np.ndarray, want: np.ndarray, what: str, tolerance: float = TOLERANCE) -> None:
    assert got.shape == want.shape, what
    worst = float(np.abs(got - want).max())
    print(f"{what}: max difference {worst:.3g}")  # shown with -s: the measurements the docs quote
    # the bound at the logits' scale (up to 7 here): float32 sums in another order differ by a few ulps of 7 per layer
    bound = tolerance * max(1.0, float(np.abs(want).max()))
    assert worst <= bound, f"{what}: max difference {worst:.3g} (bound {bound:.3g})"


def edited_preset(tmp_path, family: str, folder: str, **changes):
    """A copy of a preset folder whose backbone's arguments are changed (config.json, and task.json's backbone)."""
    target = tmp_path / f"{family}_{folder}"
    shutil.copytree(DATA / family / folder, target)
    for name in ("config.json", "task.json"):
        path = target / name
        if path.exists():
            record = json.loads(path.read_text())
            inner = record["config"].get("backbone", record)["config"]
            inner.update(changes)
            path.write_text(json.dumps(record))
    return target


# -- the fast tier: the .keras files of each family ----------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("side", ["right", "left"])
def test_a_backbone_gives_keras_s_states_at_every_position(family, side):
    e = expected(family)
    assert (e[f"{side}/padding_mask"] == 0).any()  # the padding is exercised
    close(run(converted(family, "backbone.keras"), family, side), e[f"{side}/backbone"], f"{family} {side} backbone")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("side", ["right", "left"])
def test_a_causal_lm_gives_keras_s_logits_at_every_position(family, side):
    got = run(converted(family, "causal_lm.keras"), family, side)
    close(got, expected(family)[f"{side}/logits"], f"{family} {side} logits")


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_decoding_gives_keras_s_tokens_with_and_without_the_cache(family):
    """32 steps: the prompt once and then one token a call through the decoders' KV caches, or the whole
    sequence each step; both give the plain forward's greedy tokens and keras-hub's cached generate's."""
    check_greedy(family)


def check_greedy(family: str) -> None:
    """The causal LM's 32 greedy tokens, cached and not, are Keras's (its forward's and its generate's)."""
    e, model = expected(family), converted(family, "causal_lm.keras")
    prompt = torch.from_numpy(e["greedy/prompt"])
    cached = model.generate(prompt, 32)
    assert torch.equal(cached[:, :5], prompt.long())
    np.testing.assert_array_equal(cached[:, 5:].numpy(), e["greedy/tokens"])
    np.testing.assert_array_equal(cached[:, 5:].numpy(), e["generate/tokens"])
    assert torch.equal(model.generate(prompt, 32, use_cache=False), cached)


@pytest.mark.parametrize("family", FAMILIES)
def test_top_k_sampling_with_a_seed_is_the_same_with_and_without_the_cache(family):
    model = converted(family, "causal_lm.keras")
    prompt = torch.from_numpy(expected(family)["greedy/prompt"])
    drawn = model.generate(prompt, 12, top_k=5, temperature=0.8, seed=3)
    assert torch.equal(model.generate(prompt, 12, top_k=5, temperature=0.8, seed=3, use_cache=False), drawn)
    assert not torch.equal(drawn, model.generate(prompt, 12))  # it did sample (greedy differs here)


def test_qwen_moe_routes_each_token_to_the_experts_keras_chose():
    """``router/top_k`` [layers, 48, 4]: each token's 4 experts of 8, likeliest first, layer by layer, as
    keras-hub's routers of the causal LM chose them on the right-padded batch (padded tokens included)."""
    model = converted("qwen_moe", "causal_lm.keras")
    decoders = [m for m in model.modules() if hasattr(m, "route")]
    chosen = []

    def recording(original):
        def route(y):
            experts, weights = original(y)
            chosen.append(experts)
            return experts, weights

        return route

    for decoder in decoders:
        decoder.route = recording(decoder.route)
    try:
        run(model, "qwen_moe", "right")
    finally:
        for decoder in decoders:
            del decoder.route  # the class's method again
    assert len(chosen) == 2
    np.testing.assert_array_equal(torch.stack(chosen).numpy(), expected("qwen_moe")["router/top_k"])


def test_qwen_moe_computes_every_expert_alike_while_traced(monkeypatch):
    """While a graph is traced, every expert runs on every token and the others weigh 0 (keras-hub's own way):
    the same logits as the chosen experts alone."""
    import attnzoo.keras.converters.hub_qwen_moe as moe

    model = converted("qwen_moe", "causal_lm.keras")
    monkeypatch.setattr(moe, "tracing", lambda: True)
    close(run(model, "qwen_moe", "right"), expected("qwen_moe")["right/logits"], "qwen_moe every expert")


def test_phi3_su_uses_the_short_factors_up_to_the_pretraining_length():
    """``short/*``: the first 4 tokens of the right batch, at most ``pretraining_sequence_length`` (4): the short
    factors turn them; the same positions of the 12-token batch were turned by the long ones."""
    e, model = expected("phi3_su"), converted("phi3_su", "causal_lm.keras")
    close(run(model, "phi3_su", "short"), e["short/logits"], "phi3_su short")
    assert np.abs(e["short/logits"] - e["right/logits"][:, :4]).max() > 1e-2  # the factors do differ


def test_phi3_su_cached_decoding_across_the_pretraining_length_recomputes_as_the_whole_sequence():
    """A prompt of 2 tokens decoded past length 4: the factors change from short to long, and the cached keys,
    kept unrotated, are turned again, so the tokens are those of recomputing the whole sequence each step."""
    model = converted("phi3_su", "causal_lm.keras")
    prompt = torch.from_numpy(expected("phi3_su")["greedy/prompt"][:, :2])
    assert torch.equal(model.generate(prompt, 12), model.generate(prompt, 12, use_cache=False))


def test_phi3_su_decoding_runs_the_whole_sequence_again_where_the_length_crosses_the_pretraining_length():
    """Past length 4 the long factors turn every earlier position too, so the second layer's cached keys (made
    from hidden states the short factors turned) are stale: prompts of 3 random tokens, whose cached decoding
    turning the cached keys again chose other tokens, give the tokens of recomputing the whole sequence each
    step; by hand, a step whose cache crosses 4 is refused, naming what to do."""
    from attnzoo.layers.kv_cache import DecodingCache

    model = converted("phi3_su", "causal_lm.keras")
    vocabulary = model.graph["keras_hub_config"]["vocabulary_size"]
    for seed in range(3):
        prompt = torch.randint(1, vocabulary, (2, 3), generator=torch.Generator().manual_seed(seed))
        assert torch.equal(model.generate(prompt, 10), model.generate(prompt, 10, use_cache=False)), seed
    cache, ones = DecodingCache(2), torch.ones_like(prompt)
    with torch.no_grad():
        model(token_ids=prompt, padding_mask=ones, cache=cache)
        model(token_ids=prompt[:, :1], padding_mask=ones[:, :1], cache=cache)  # length 4: the short factors
        with pytest.raises(ValueError, match="past pretraining_sequence_length 4 .* on a new DecodingCache"):
            model(token_ids=prompt[:, :1], padding_mask=ones[:, :1], cache=cache)


def test_rotate_divides_the_frequencies_by_phi3_s_factors_and_scales_cos_and_sin():
    """One head of 4 at position 3 with factors (2, 5) and scale 1.5: θ_j = 100^(-2j/4) / f_j, written out."""
    x = torch.tensor([1.0, 2.0, 3.0, 4.0]).reshape(1, 1, 1, 4)
    theta = [1.0 / 2, 100.0**-0.5 / 5]
    c, s = [1.5 * np.cos(3 * t) for t in theta], [1.5 * np.sin(3 * t) for t in theta]
    want = [1 * c[0] - 3 * s[0], 2 * c[1] - 4 * s[1], 3 * c[0] + 1 * s[0], 4 * c[1] + 2 * s[1]]
    got = rotate(x, 3, 100.0, divisor=[2.0, 5.0], scale=1.5)
    np.testing.assert_allclose(got.flatten().numpy(), want, atol=1e-6)


def test_the_emitted_modules_declare_torch_layers_and_pass_ruff(tmp_path):
    """``model.code`` of each family's causal LM: the final RMSNorm an ``nn.RMSNorm``, the decoders the family's
    node classes; ``ruff format --check`` and ``ruff check`` leave the modules as they are."""
    nodes = {"qwen_moe": "HubQwenMoeDecoder(", "phi3_su": "HubPhi3Decoder("}
    for family in FAMILIES:
        code = converted(family, "causal_lm.keras").code
        assert "nn.RMSNorm(" in code and code.count(nodes.get(family, "HubLlamaDecoder(")) == 2, family
        (tmp_path / f"{family}_port.py").write_text(code, encoding="utf-8")
    for arguments in (["format", "--isolated", "--check"], ["check", "--isolated", "--extend-select", "I"]):
        result = subprocess.run(
            [sys.executable, "-m", "ruff", *arguments, "."], capture_output=True, text=True, cwd=tmp_path, check=False
        )
        assert result.returncode == 0, (arguments, result.stdout[-3000:])


# -- options: followed as Keras computes them on torch, or refused by name ---------------------------------


def _refusal(folder) -> str:
    with pytest.raises(UnsupportedKerasLayerError) as info:
        convert_keras_model(folder)
    return str(info.value)


def test_phi3_su_without_its_rope_scaling_gives_keras_s_default_rope_logits(tmp_path):
    """``default_rope/logits``: the causal LM's weights in a Phi-3 whose ``rope_scaling_type`` is None."""
    model = convert_keras_model(edited_preset(tmp_path, "phi3_su", "causal_lm_preset", rope_scaling_type=None))
    close(run(model, "phi3_su", "right"), expected("phi3_su")["default_rope/logits"], "phi3_su default rope")


def test_qwen_s_sliding_window_is_not_applied_as_keras_on_torch_does_not(tmp_path):
    """keras-hub's QwenAttention applies its window only off the fused ``dot_product_attention``, which torch
    always takes: a window of 4 on a 12-token batch leaves Keras's logits (the window-free ones) unchanged."""
    folder = edited_preset(
        tmp_path, "qwen", "causal_lm_preset", use_sliding_window_attention=True, sliding_window_size=4
    )
    close(run(convert_keras_model(folder), "qwen", "right"), expected("qwen")["right/logits"], "qwen window")


@pytest.mark.parametrize(
    ("family", "changes", "message"),
    [
        ("qwen_moe", {"decoder_sparse_step": 2}, "decoder_sparse_step=2, mlp_only_layers=[]: keras-hub 0.32 then"),
        ("qwen_moe", {"use_sliding_window_attention": True}, "applies the window on the CPU"),
        ("qwen", {"rope_scaling_factor": 2.0}, "rope_scaling_factor=2.0 is not supported"),
        ("phi3", {"rope_scaling_type": "yarn"}, "rope_scaling_type='yarn' is not keras-hub's"),
    ],
)
def test_options_keras_hub_computes_apart_are_refused_by_name(tmp_path, family, changes, message):
    refusal = _refusal(edited_preset(tmp_path, family, "backbone_preset", **changes))
    line = next(line for line in refusal.splitlines() if line.startswith("  transformer_layer_0"))
    assert message in line, line


# -- the slow tier: preset folders, save and load ----------------------------------------------------------


def check_preset_folders(family: str, tolerance: float = TOLERANCE) -> None:
    """The backbone's and the causal LM's preset folders give Keras's outputs (the logits within ``tolerance``)
    on both batches, and the causal LM's folder Keras's greedy tokens."""
    e = expected(family)
    for side in ("right", "left"):
        close(run(converted(family, "backbone_preset"), family, side), e[f"{side}/backbone"], f"{family} preset")
        got = run(converted(family, "causal_lm_preset"), family, side)
        close(got, e[f"{side}/logits"], f"{family} lm preset", tolerance)
    prompt = torch.from_numpy(e["greedy/prompt"])
    tokens = converted(family, "causal_lm_preset").generate(prompt, 32)
    np.testing.assert_array_equal(tokens[:, 5:].numpy(), e["greedy/tokens"])


def check_saved_and_loaded(folder, family: str, tolerance: float = TOLERANCE) -> None:
    """The causal LM saved in ``folder`` and loaded gives Keras's logits (within ``tolerance``) and greedy tokens."""
    e = expected(family)
    again = attnzoo.load(attnzoo.save(converted(family, "causal_lm.keras"), folder))
    close(run(again, family, "left"), e["left/logits"], f"{family} loaded", tolerance)
    prompt = torch.from_numpy(e["greedy/prompt"])
    np.testing.assert_array_equal(again.generate(prompt, 32)[:, 5:].numpy(), e["greedy/tokens"])


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_the_preset_folders_give_keras_s_outputs(family):
    check_preset_folders(family)


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_a_saved_and_loaded_causal_lm_gives_keras_s_logits_and_greedy_tokens(tmp_path, family):
    check_saved_and_loaded(tmp_path / "saved", family)
