"""A keras-hub GPT2CausalLM converts (from .keras and from its task preset folder) and decodes on attnzoo's
KV cache.

The tiny GPT2CausalLM was made once with keras 3 (torch backend) and keras-hub
(tests/keras_hub_decoding_fixtures.py), every weight moved off its initial value. decoding.npz holds Keras's
logits on a right-padded batch and Keras's greedy decoding of 32 new tokens: keras-hub's own
``generate_step`` with a greedy sampler, which the fixture script checked equal to the Keras model called
on the whole growing sequence every step. Right-padded prompts decode as keras-hub's do: from the shortest
prompt's end, each row keeping its own prompt's tokens.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.errors import ConfigError
from attnzoo.keras import convert_keras_model, hub_families

from .conftest import ROOT, run_cli

DATA = ROOT / "tests" / "data" / "keras_hub_models"
EXPECTED = dict(np.load(DATA / "decoding.npz"))
FILES = ["gpt2_causal_lm.keras", "gpt2_causal_lm_preset"]
NEW = 32


@pytest.fixture(scope="module")
def models():
    return {file: convert_keras_model(DATA / file) for file in FILES}


def prompts(case: str) -> tuple[torch.Tensor, torch.Tensor]:
    ids, mask = EXPECTED[f"greedy/{case}/ids"], EXPECTED[f"greedy/{case}/padding_mask"]
    return torch.from_numpy(ids), torch.from_numpy(mask)


def assert_logits(model) -> None:
    given = {name: torch.from_numpy(EXPECTED[f"logits/in/{name}"]) for name in ("token_ids", "padding_mask")}
    assert (given["padding_mask"] == 0).any()  # the batch is padded: the padding mask is exercised
    with torch.no_grad():
        logits = model(given)
    np.testing.assert_allclose(logits.numpy(), EXPECTED["logits/out"], atol=1e-5, rtol=0)


def assert_greedy(model) -> None:
    for case in ("same", "padded"):
        ids, mask = prompts(case)
        tokens = model.generate(ids, NEW, padding_mask=mask)
        assert tokens.dtype == torch.int64 and tokens.shape == (ids.shape[0], ids.shape[1] + NEW)
        np.testing.assert_array_equal(tokens.numpy(), EXPECTED[f"greedy/{case}/out"], err_msg=case)


@pytest.mark.parametrize("file", FILES)
def test_a_gpt2_causal_lm_predicts_keras_s_logits_and_decodes_keras_s_greedy_tokens(models, file):
    model = models[file]
    assert model.graph["keras_hub_class"] == "GPT2CausalLM"
    assert_logits(model)
    assert_greedy(model)


def test_a_saved_and_loaded_causal_lm_still_decodes(models, tmp_path):
    loaded = attnzoo.load(attnzoo.save(models["gpt2_causal_lm.keras"], tmp_path / "saved"))
    assert_logits(loaded)
    assert_greedy(loaded)


def test_the_tied_embedding_is_one_layer_called_twice(models):
    """The logits read the token table itself (one parameter), declared once in the emitted module."""
    model = models["gpt2_causal_lm.keras"]
    tables = [name for name, _ in model.named_parameters() if name.endswith("token_embedding.weight")]
    assert tables == ["layers.gpt2_backbone/token_embedding.weight"]
    assert model.code.count('self.layers["gpt2_backbone/token_embedding"] = ') == 1


@pytest.mark.parametrize("case", ["same", "padded"])
def test_cached_decoding_equals_recomputing_the_whole_prefix(models, case):
    """Greedy and top-k sampling with one seed (an int, or a torch.Generator seeded alike) choose the same
    tokens whether each step runs one token on the caches or the whole sequence so far."""
    model = models["gpt2_causal_lm.keras"]
    ids, mask = prompts(case)
    greedy = model.generate(ids, NEW, padding_mask=mask, use_cache=False)
    torch.testing.assert_close(model.generate(ids, NEW, padding_mask=mask), greedy, rtol=0, atol=0)
    cached = model.generate(ids, NEW, padding_mask=mask, top_k=10, temperature=1.5, seed=7)
    again = model.generate(ids, NEW, padding_mask=mask, top_k=10, temperature=1.5, seed=7, use_cache=False)
    torch.testing.assert_close(cached, again, rtol=0, atol=0)
    generator = torch.Generator().manual_seed(7)
    drawn = model.generate(ids, NEW, padding_mask=mask, top_k=10, temperature=1.5, seed=generator)
    torch.testing.assert_close(drawn, cached, rtol=0, atol=0)
    assert not torch.equal(cached, greedy)  # sampling drew other tokens than the argmax
    kept = torch.nn.functional.pad(mask, (0, NEW)).bool()
    assert torch.equal(cached[kept], ids[mask.bool()])  # the prompts' tokens stay where they were


def test_top_k_draws_only_among_the_k_likeliest_tokens(models):
    """With top_k=1 sampling is greedy decoding, whatever the seed and temperature."""
    model = models["gpt2_causal_lm.keras"]
    ids, mask = prompts("padded")
    tokens = model.generate(ids, NEW, padding_mask=mask, top_k=1, temperature=5.0, seed=3)
    np.testing.assert_array_equal(tokens.numpy(), EXPECTED["greedy/padded/out"])


def test_top_p_draws_only_from_the_nucleus_of_the_likeliest_tokens(models):
    """Each drawn token is one of the fewest likeliest whose probabilities reach top_p (computed here from the
    model's own logits at that step, the token crossing top_p included); a tiny top_p is greedy decoding."""
    model = models["gpt2_causal_lm.keras"]
    ids, mask = prompts("same")
    tiny = model.generate(ids, NEW, padding_mask=mask, top_p=1e-6, temperature=3.0, seed=1)
    np.testing.assert_array_equal(tiny.numpy(), EXPECTED["greedy/same/out"])
    drawn = model.generate(ids, 8, padding_mask=mask, top_p=0.6, temperature=2.0, seed=5)
    with torch.no_grad():
        logits = model({"token_ids": drawn[:, :-1], "padding_mask": torch.ones_like(drawn[:, :-1])})
    for row in range(drawn.shape[0]):
        for index in range(ids.shape[1], drawn.shape[1]):
            probabilities = torch.softmax(logits[row, index - 1].double() / 2.0, dim=-1)
            ranked = probabilities.sort(descending=True)
            count = int((ranked.values.cumsum(0) - ranked.values < 0.6).sum())
            assert int(drawn[row, index]) in ranked.indices[:count].tolist(), (row, index, count)
    assert not torch.equal(drawn, tiny[:, : drawn.shape[1]])  # it did sample (the nucleus holds several tokens)


def test_decoding_stops_where_every_row_chose_a_stop_token(models):
    """Greedy decoding with the greedy tokens' own ids as stop tokens: each row keeps its stop token, holds
    the pad id after it, and decoding ends at the step the last row stops."""
    model = models["gpt2_causal_lm.keras"]
    ids, mask = prompts("same")
    greedy = torch.from_numpy(EXPECTED["greedy/same/out"])
    start = ids.shape[1]
    stops = [int(greedy[0, start + 2]), int(greedy[1, start + 5])]
    out = model.generate(ids, NEW, padding_mask=mask, stop_token_ids=stops, pad_token_id=99)
    first = [next(i for i in range(start, greedy.shape[1]) if int(greedy[row, i]) in stops) for row in (0, 1)]
    assert out.shape[1] == max(first) + 1
    for row in (0, 1):
        np.testing.assert_array_equal(out[row, : first[row] + 1].numpy(), greedy[row, : first[row] + 1].numpy())
        assert (out[row, first[row] + 1 :] == 99).all()


def test_a_pad_id_the_model_cannot_read_is_refused_before_decoding(models):
    """Row 1 of the greedy tokens stops first (its own greedy token as the stop id) and is fed the pad id while
    row 0 decodes on: a pad id outside the vocabulary (100) is refused up front, naming it, and a valid one
    is what the stopped row holds."""
    model = models["gpt2_causal_lm.keras"]
    ids, mask = prompts("same")
    greedy = torch.from_numpy(EXPECTED["greedy/same/out"])
    start = ids.shape[1]
    stop = int(greedy[1, start])
    assert stop not in greedy[0, start : start + 4].tolist()  # row 0 decodes on after row 1 stopped
    for bad in (-1, 100, 1.5, True):
        with pytest.raises(ValueError, match=r"pad_token_id as a token id in \[0, 100\).*got " + repr(bad)):
            model.generate(ids, 4, padding_mask=mask, stop_token_ids=[stop], pad_token_id=bad)
    out = model.generate(ids, 4, padding_mask=mask, stop_token_ids=[stop], pad_token_id=99)
    assert out[1, start + 1 :].tolist() == [99, 99, 99]


def test_generate_decodes_as_keras_s_inference_and_keeps_the_training_mode(models):
    """The file's dropout is 0.1: generate turns it off (Keras's inference) and leaves train() as it was."""
    model = models["gpt2_causal_lm.keras"]
    model.train()
    try:
        assert_greedy(model)
        assert model.training
    finally:
        model.eval()


def test_a_model_that_is_no_causal_lm_refuses_to_generate(models):
    backbone = convert_keras_model(DATA / "gpt2.keras")
    ids = torch.ones(1, 3, dtype=torch.long)
    with pytest.raises(
        ConfigError,
        match=r"causal LMs \([^)]*GPT2CausalLM, [^)]*LlamaCausalLM[^)]*\); this model is a keras-hub GPT2Backbone",
    ):
        backbone.generate(ids, 4)
    tied = convert_keras_model(DATA / "tied_lm.keras")
    with pytest.raises(ConfigError, match=r"this model is the Keras model 'tied_lm'"):
        tied.generate(ids, 4)


def test_bad_prompts_and_settings_are_refused_by_name(models):
    model = models["gpt2_causal_lm.keras"]
    ids, mask = prompts("padded")
    with pytest.raises(ValueError, match="padded on the right.*row 0 has padding before a real token"):
        model.generate(ids, 4, padding_mask=mask.flip(1))
    with pytest.raises(ValueError, match="top_k as a positive int"):
        model.generate(ids, 4, padding_mask=mask, top_k=0)
    with pytest.raises(ValueError, match="temperature as a positive number"):
        model.generate(ids, 4, padding_mask=mask, top_k=3, temperature=0)
    with pytest.raises(ValueError, match="integer token ids"):
        model.generate(ids.float(), 4)
    with pytest.raises(ValueError, match="max_new_tokens as an int >= 0"):
        model.generate(ids, -1)
    with pytest.raises(ValueError, match="top_p as a number in"):
        model.generate(ids, 4, padding_mask=mask, top_p=1.5)
    with pytest.raises(ValueError, match="stop_token_ids as a token id or a list"):
        model.generate(ids, 4, padding_mask=mask, stop_token_ids=[-1])
    with pytest.raises(ValueError, match="past the position table's sequence_length 64.*at most 65 tokens"):
        model.generate(ids, 64 - ids.shape[1] + 2, padding_mask=mask)  # the last token needs no position


def test_keras_s_own_tied_reversible_embedding_converts():
    """keras lists a shared layer where it is first called: the embedding's reverse call reads the layer
    norm listed after it."""
    model = convert_keras_model(DATA / "tied_lm.keras")
    with torch.no_grad():
        logits = model(torch.from_numpy(EXPECTED["tied/in"]))
    np.testing.assert_allclose(logits.numpy(), EXPECTED["tied/out"], atol=1e-5, rtol=0)


@pytest.mark.parametrize("semantics", [None, 3])
def test_keras_mha_s_cached_steps_equal_its_causal_call(semantics):
    """A prompt of 3, then one token per call, through ``new_cache``: the causal call's outputs; with a
    padded prompt the keys marked by ``value_mask`` stay masked for later queries."""
    layer = attnzoo.create("keras_mha", num_heads=2, key_dim=4, query_size=8, value_size=8, keras_semantics=semantics)
    layer.eval()
    x = torch.randn(2, 7, 8, generator=torch.Generator().manual_seed(0))
    keep = torch.ones(2, 7, dtype=torch.bool)
    keep[1, 1] = False
    with torch.no_grad():
        full = layer(x, x, use_causal_mask=True, value_mask=keep)
        cache = layer.new_cache(2)
        steps = [layer(x[:, :3], x[:, :3], cache=cache, use_causal_mask=True, value_mask=keep[:, :3])]
        steps += [layer(x[:, t : t + 1], x[:, t : t + 1], cache=cache, use_causal_mask=True) for t in range(3, 7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match=r"new_cache\(3\)"):
        layer(x[:1].expand(3, -1, -1), x[:1].expand(3, -1, -1), cache=cache)


def test_convert_keras_on_the_task_s_file_writes_a_folder_that_decodes(tmp_path):
    """``--check`` compares with Keras's logits passed as ``--reference`` (Keras cannot load a keras-hub
    file without keras-hub installed)."""
    reference = tmp_path / "reference.npz"
    inputs = {f"in/{i}": EXPECTED[f"logits/in/{name}"] for i, name in enumerate(("padding_mask", "token_ids"))}
    np.savez(reference, **inputs, **{"out/0": EXPECTED["logits/out"]})
    for file in FILES:
        out = tmp_path / file.replace(".", "_")
        proc = run_cli("convert-keras", str(DATA / file), "-o", str(out), "--check", "--reference", str(reference))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "GPT2CausalLM" in proc.stdout or "gpt2_causal_lm" in proc.stdout
        assert_greedy(attnzoo.load(out))


@pytest.mark.skipif(importlib.util.find_spec("keras_hub") is None, reason="the route needs keras-hub installed")
@pytest.mark.parametrize("file", FILES)
def test_through_keras_hub_s_graph_a_causal_lm_predicts_keras_s_logits(file, monkeypatch):
    """As if attnzoo rebuilt no class: keras-hub's graph calls the backbone's token embedding again, reversed,
    outside the backbone; the route places that call inside it, and the preset folder, with no task.weights.h5
    (its head has no weights of its own), converts."""
    monkeypatch.setattr(hub_families, "hub_model_of", lambda entry: None)
    model = convert_keras_model(DATA / file)
    assert_logits(model)
    vocabulary = EXPECTED["logits/out"].shape[-1]
    tables = [key for key, value in model.state_dict().items() if value.dim() == 2 and value.shape[0] == vocabulary]
    assert tables == ["layers.gpt2_backbone/token_embedding.weight"]  # the table held once
