"""keras-hub's OPT, BLOOM, GPT-NeoX and Falcon backbones and causal LMs convert without keras-hub, decode, and
are written as Hugging Face folders.

The fixtures (tests/data/keras_hub_lm/<family>/, made by keras-hub 0.32 with tests/keras_hub_lm_fixtures.py,
which lists each family's constructor arguments) hold ``backbone.keras``, ``backbone_preset/``,
``causal_lm.keras``, ``causal_lm_preset/`` and Keras's outputs in ``expected.npz``: the backbone's states and
the causal LM's logits on a right-padded and a left-padded batch of 4 rows (12, 7, 1 and 10 real tokens), and
the greedy tokens of the causal LM called on the whole sequence each step (``greedy/tokens``, 32 of them) and
of keras-hub's own cached ``generate`` (``generate/tokens``). The converted models agree within 1e-5 at every
position of both batches, the left-padded rows' padding included (a query with no key: zeros for OPT's
MultiHeadAttention of dropout 0.1, BLOOM's and Falcon's Softmax layers; the mean of the values for GPT-NeoX's
fused attention). ``bloom_hf`` is a BLOOM of an MLP 4 x hidden_dim wide, the only width transformers' BLOOM
has: its folder is the BLOOM one transformers loads.

The fast tier converts the .keras files once per module; the presets, save/load and transformers' loading of
the folders (one child process where keras, keras_hub and attnzoo cannot be imported) are the slow tier.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from functools import cache

import h5py
import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.errors import ExportError
from attnzoo.keras import convert_keras_model, to_transformers

from .conftest import ROOT

DATA = ROOT / "tests" / "data" / "keras_hub_lm"
FAMILIES = ("opt", "bloom", "gpt_neox", "falcon")
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
        return model(inputs).numpy()


def worst(got: np.ndarray, want: np.ndarray, what: str) -> float:
    assert got.shape == want.shape, what
    difference = float(np.abs(got - want).max())
    print(f"{what}: max difference {difference:.3g}")  # shown with -s: the numbers the report quotes
    assert difference <= TOLERANCE, f"{what}: max difference {difference:.3g}"
    return difference


# -- the fast tier: the .keras files --------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("side", ["right", "left"])
def test_the_backbone_gives_keras_s_states_at_every_position(family, side):
    e = expected(family)
    assert (e[f"{side}/padding_mask"] == 0).any()  # the padding is exercised, on the left too
    worst(run(converted(family, "backbone.keras"), family, side), e[f"{side}/backbone"], f"{family} {side} backbone")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("side", ["right", "left"])
def test_the_causal_lm_gives_keras_s_logits_at_every_position(family, side):
    got = run(converted(family, "causal_lm.keras"), family, side)
    worst(got, expected(family)[f"{side}/logits"], f"{family} {side} logits")


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_decoding_gives_keras_s_tokens_with_and_without_the_cache(family):
    """32 steps: the prompt once then one token a call through the decoders' caches, and the whole sequence
    every step; both are Keras's greedy tokens (the causal LM called on the whole sequence each step)."""
    model, e = converted(family, "causal_lm.keras"), expected(family)
    prompt = torch.from_numpy(e["greedy/prompt"])
    cached = model.generate(prompt, 32)
    assert torch.equal(cached[:, :5], prompt.long())
    np.testing.assert_array_equal(cached[:, 5:].numpy(), e["greedy/tokens"])
    assert torch.equal(model.generate(prompt, 32, use_cache=False), cached)
    if family != "gpt_neox":  # keras-hub's own cached generate agrees with its forward here
        np.testing.assert_array_equal(cached[:, 5:].numpy(), e["generate/tokens"])


@pytest.mark.parametrize("family", FAMILIES)
def test_the_model_is_built_on_meta_and_holds_the_file_s_tensors_once(monkeypatch, family):
    """No node makes a tensor of its own: nothing real is allocated while the model is built and given the
    converter's tensors (tests/test_keras_weights_once.py's watch), which it holds as they are."""
    from .test_keras_weights_once import (
        test_the_module_is_built_on_meta_and_holds_the_converters_tensors_as_they_are as built_once,
    )

    built_once(monkeypatch, DATA / family / "causal_lm.keras")


def test_gpt_neox_decodes_the_forward_s_tokens_where_keras_hub_s_generate_differs():
    """keras-hub 0.32's GPT-NeoX generate turns a cached step's query as position 0: its tokens are not the
    greedy tokens of its own forward, which the converted model decodes (the docs say so)."""
    e = expected("gpt_neox")
    assert not np.array_equal(e["generate/tokens"], e["greedy/tokens"])
    tokens = converted("gpt_neox", "causal_lm.keras").generate(torch.from_numpy(e["greedy/prompt"]), 32)
    np.testing.assert_array_equal(tokens[:, 5:].numpy(), e["greedy/tokens"])


def test_top_k_sampling_with_a_seed_is_the_same_with_and_without_the_cache():
    for family in FAMILIES:
        model, prompt = converted(family, "causal_lm.keras"), torch.from_numpy(expected(family)["greedy/prompt"])
        drawn = model.generate(prompt, 12, top_k=5, temperature=0.8, seed=3)
        assert torch.equal(model.generate(prompt, 12, top_k=5, temperature=0.8, seed=3, use_cache=False), drawn)


def test_opt_refuses_positions_past_its_table_before_decoding():
    """OPT's learned positions end at max_sequence_length (64): 5 prompt tokens and 61 new would feed the
    token at position 64 (the last token is chosen, never fed)."""
    model = converted("opt", "causal_lm.keras")
    prompt = torch.from_numpy(expected("opt")["greedy/prompt"])
    with pytest.raises(ValueError, match="past the position table's sequence_length 64.* at most 65 tokens"):
        model.generate(prompt, 61)


def test_the_emitted_modules_declare_torch_layers_and_pass_ruff(tmp_path):
    """Keras's layer norms are ``nn.LayerNorm``, the decoders their families' classes; ``ruff format --check``
    and ``ruff check`` leave every module as it is."""
    for family in FAMILIES:
        code = converted(family, "causal_lm.keras").code
        assert "nn.LayerNorm(32, eps=1e-05)" in code, family
        (tmp_path / f"{family}.py").write_text(code, encoding="utf-8")
    assert "HubTransformerDecoder(" in (tmp_path / "opt.py").read_text()
    for family, decoder in (("bloom", "HubBloomDecoder"), ("falcon", "HubFalconDecoder"), ("gpt_neox", "HubGPTNeoX")):
        assert f"{decoder}" in (tmp_path / f"{family}.py").read_text()
    for arguments in (["format", "--isolated", "--check"], ["check", "--isolated", "--extend-select", "I"]):
        result = subprocess.run(
            [sys.executable, "-m", "ruff", *arguments, "."], capture_output=True, text=True, cwd=tmp_path, check=False
        )
        assert result.returncode == 0, (arguments, result.stdout[-3000:])


# -- the Hugging Face form: what is written, what is refused --------------------------------------------------


def test_each_family_writes_transformers_sizes_and_conventions(tmp_path):
    def config(family: str, file: str = "causal_lm.keras") -> dict:
        folder = to_transformers(converted(family, file), tmp_path / family)
        return json.loads((folder / "config.json").read_text())

    opt = config("opt")
    assert opt["architectures"] == ["OPTForCausalLM"] and opt["max_position_embeddings"] == 64
    assert (opt["ffn_dim"], opt["do_layer_norm_before"], opt["tie_word_embeddings"]) == (64, True, True)
    bloom = config("bloom_hf")
    assert bloom["architectures"] == ["BloomForCausalLM"] and (bloom["n_head"], bloom["n_layer"]) == (4, 2)
    neox = config("gpt_neox")
    assert neox["rope_parameters"]["partial_rotary_factor"] == neox["rotary_pct"] == 0.5
    assert neox["use_parallel_residual"] and neox["hidden_act"] == "gelu_new"
    falcon = config("falcon")
    assert falcon["alibi"] and falcon["bias"] and not falcon["parallel_attn"] and not falcon["multi_query"]
    assert not falcon["new_decoder_architecture"] and falcon["num_kv_heads"] == 4
    assert "max_position_embeddings" not in falcon  # keras-hub records none: transformers' default, unread by ALiBi


def test_opt_s_position_table_is_written_behind_transformers_two_offset_rows(tmp_path):
    from safetensors.torch import load_file

    model = converted("opt", "causal_lm.keras")
    tensors = load_file(to_transformers(model, tmp_path / "opt") / "model.safetensors")
    table = tensors["model.decoder.embed_positions.weight"]
    assert table.shape == (66, 32) and not table[:2].any()
    torch.testing.assert_close(table[2:], model.state_dict()["layers.opt_backbone_1/embeddings.position"])
    assert "lm_head.weight" not in tensors  # tied to embed_tokens, as keras-hub's head is to its token table


def test_a_bloom_whose_mlp_is_not_4_x_hidden_dim_is_refused_and_nothing_is_written(tmp_path):
    with pytest.raises(ExportError, match=r"MLP is 64 wide; transformers' BLOOM has an MLP of 4 x hidden_dim = 128"):
        to_transformers(converted("bloom", "causal_lm.keras"), tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def _falcon_preset(tmp_path, **changes):
    """A copy of Falcon's backbone preset with ``changes`` in its config; ``num_attention_heads`` also reshapes
    the attention's [D, H, d] kernels and [H, d] biases to that many heads (the same numbers)."""
    preset = tmp_path / "falcon_preset"
    shutil.copytree(DATA / "falcon" / "backbone_preset", preset)
    record = json.loads((preset / "config.json").read_text())
    record["config"].update(changes)
    (preset / "config.json").write_text(json.dumps(record))
    heads = changes.get("num_attention_heads")
    if heads is not None:
        with h5py.File(preset / "model.weights.h5", "r+") as f:
            found = []
            f.visititems(lambda name, item: found.append(name) if isinstance(item, h5py.Dataset) else None)
            for name in [n for n in found if n.split("/")[-3].endswith(("query_dense", "key_dense", "value_dense"))]:
                array = f[name][()]
                del f[name]
                f[name] = array.reshape(*array.shape[:-2], heads, -1)
    return preset


def test_a_falcon_whose_alibi_slopes_transformers_rounds_is_refused(tmp_path):
    """16 heads: slopes 2^(-i/2), which transformers' Falcon rounds to bfloat16."""
    model = convert_keras_model(_falcon_preset(tmp_path, num_attention_heads=16))
    with pytest.raises(ExportError, match="rounds its ALiBi slopes to bfloat16, and those of 16 heads"):
        to_transformers(model, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_falcon_whose_final_norm_s_epsilon_is_not_its_decoders_is_refused(tmp_path):
    """keras-hub's FalconBackbone gives its decoders no epsilon (they keep 1e-5); transformers' Falcon has one."""
    model = convert_keras_model(_falcon_preset(tmp_path, layer_norm_epsilon=1e-6))
    assert "nn.LayerNorm(32, eps=1e-06)" in model.code  # the final norm's; the decoders keep keras-hub's 1e-5
    with pytest.raises(ExportError, match="decoders' layer norms have ε 1e-05 and its final one 1e-06"):
        to_transformers(model, tmp_path / "out")


# -- the slow tier: presets, save and load ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_the_presets_give_what_the_files_give(family):
    e = expected(family)
    backbone, lm = converted(family, "backbone_preset"), converted(family, "causal_lm_preset")
    for side in ("right", "left"):
        worst(run(backbone, family, side), e[f"{side}/backbone"], f"{family} {side} backbone_preset")
        worst(run(lm, family, side), e[f"{side}/logits"], f"{family} {side} causal_lm_preset")
    tokens = lm.generate(torch.from_numpy(e["greedy/prompt"]), 32)
    np.testing.assert_array_equal(tokens[:, 5:].numpy(), e["greedy/tokens"])


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_a_saved_and_loaded_causal_lm_gives_keras_s_logits_and_greedy_tokens(tmp_path, family):
    e = expected(family)
    again = attnzoo.load(attnzoo.save(converted(family, "causal_lm.keras"), tmp_path / "saved"))
    for side in ("right", "left"):
        worst(run(again, family, side), e[f"{side}/logits"], f"{family} {side} saved and loaded")
    tokens = again.generate(torch.from_numpy(e["greedy/prompt"]), 32)
    np.testing.assert_array_equal(tokens[:, 5:].numpy(), e["greedy/tokens"])


# -- the slow tier: transformers loads every folder in one process without keras, keras_hub or attnzoo ---------

# each case: the fixture, the file written, transformers' Auto class, the output compared with which of Keras's
_CASES = {
    "opt": ("opt", "backbone.keras", "AutoModel", "backbone"),
    "opt_lm": ("opt", "causal_lm_preset", "AutoModelForCausalLM", "logits"),
    "bloom": ("bloom_hf", "backbone_preset", "AutoModel", "backbone"),
    "bloom_lm": ("bloom_hf", "causal_lm.keras", "AutoModelForCausalLM", "logits"),
    "gpt_neox": ("gpt_neox", "backbone.keras", "AutoModel", "backbone"),
    "gpt_neox_lm": ("gpt_neox", "causal_lm_preset", "AutoModelForCausalLM", "logits"),
    "falcon": ("falcon", "backbone_preset", "AutoModel", "backbone"),
    "falcon_lm": ("falcon", "causal_lm.keras", "AutoModelForCausalLM", "logits"),
}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """Every case's folder, then transformers' outputs on the right-padded batch (OPT's twice: with its own
    positions and with position_ids 0, 1, ...) and its greedy tokens, from one child process."""
    from .test_keras_transformers_folder import run_loader

    root = tmp_path_factory.mktemp("classic_hf")
    specs, given = [], {}
    for name, (family, file, auto, _) in _CASES.items():
        to_transformers(DATA / family / file, root / name)
        e = expected(family)
        inputs = {"input_ids": e["right/token_ids"], "attention_mask": e["right/padding_mask"]}
        runs = {name: inputs}
        if family == "opt":
            runs[f"{name}_positions"] = {**inputs, "position_ids": np.tile(np.arange(12), (4, 1))}
        for case, values in runs.items():
            given |= {f"{case}/{key}": np.asarray(value, dtype=np.int64) for key, value in values.items()}
            lm = auto == "AutoModelForCausalLM" and case == name
            if lm:
                given[f"{case}/prompt_0"] = e["greedy/prompt"].astype(np.int64)
            output = "logits" if auto == "AutoModelForCausalLM" else "last_hidden_state"
            specs.append(
                {
                    "name": case,
                    "folder": str(root / name),
                    "auto": auto,
                    "kwargs": {},
                    "inputs": sorted(values),
                    "outputs": [output],
                    "generate": [32] if lm else [],
                }
            )
    return run_loader(root, specs, given)


@pytest.mark.slow
def test_transformers_loads_every_weight_in_a_process_without_keras_or_attnzoo(loaded):
    assert loaded["blocked"].all()
    for name in _CASES:
        assert json.loads(str(loaded[f"{name}/loading"])) == {}, name  # no missing, unexpected or mismatched weight


@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name in _CASES if name != "opt" and name != "opt_lm"])
def test_transformers_gives_keras_s_outputs_at_every_position(loaded, name):
    """Every position of the right-padded batch: the padded keys masked in both, ALiBi's positions counted
    over the real tokens (keras-hub's BLOOM counts back from the last key: a constant a row's softmax ignores),
    rotary positions 0, 1, ... in both."""
    family, _, auto, key = _CASES[name]
    output = "logits" if auto == "AutoModelForCausalLM" else "last_hidden_state"
    worst(loaded[f"{name}/{output}"], expected(family)[f"right/{key}"], f"{name} transformers")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["opt", "opt_lm"])
def test_opt_agrees_at_every_real_token_and_everywhere_with_position_ids(loaded, name):
    """transformers' OPT gives a padded token position -1 (the table's zero row 1): the real tokens agree;
    given ``position_ids`` 0, 1, ... (keras-hub's for every column), every position does."""
    _, _, auto, key = _CASES[name]
    output = "logits" if auto == "AutoModelForCausalLM" else "last_hidden_state"
    want, real = expected("opt")[f"right/{key}"], expected("opt")["right/padding_mask"] == 1
    worst(loaded[f"{name}/{output}"][real], want[real], f"{name} transformers, real tokens")
    worst(loaded[f"{name}_positions/{output}"], want, f"{name} transformers with position_ids")
    assert np.abs(loaded[f"{name}/{output}"][~real] - want[~real]).max() > 1e-2  # the padded positions differ


@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name in _CASES if name.endswith("_lm")])
def test_transformers_greedy_generate_gives_keras_s_tokens(loaded, name):
    e = expected(_CASES[name][0])
    np.testing.assert_array_equal(
        loaded[f"{name}/generated_0"], np.concatenate([e["greedy/prompt"], e["greedy/tokens"]], 1)
    )
