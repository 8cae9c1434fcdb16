"""keras-hub's Qwen2, Qwen3, Qwen-MoE and Phi-3 (default and su rope) written through the Hugging Face door as
``Qwen2*``, ``Qwen3*``, ``Qwen2Moe*`` and ``Phi3*`` folders, and loaded by transformers' Auto classes.

The slow tier writes each family's backbone preset, causal LM file and causal LM preset, loads them all in ONE
child process where keras, keras_hub and attnzoo cannot be imported (tests/test_keras_transformers_folder.py's
loader), and compares transformers' outputs with Keras's saved ones (tests/data/keras_hub_lm/<family>/
expected.npz) within 1e-5: every position of the right-padded batch (transformers masks the padded keys and
counts positions 0, 1, ... as keras-hub does), every real token of the left-padded one (a left-padded query has
no key: Keras gives it the mean of the values or zeros, transformers something else; no real token reads it),
and greedy ``generate`` gives Keras's 32 tokens. The fast tier checks the folders' entries and layouts.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from attnzoo.keras import to_transformers

from .test_keras_hub_qwen_phi3 import DATA, FAMILIES, TOLERANCE, converted, expected
from .test_keras_transformers_folder import run_loader


def written(tmp_path, family: str, file: str):
    folder = tmp_path / f"{family}_{file}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a preset's tokenizer is not written yet (the door says so)
        to_transformers(DATA / family / file, folder)
    return json.loads((folder / "config.json").read_text()), load_file(folder / "model.safetensors")


# -- the fast tier: what each family writes -------------------------------------------------------------------


def test_qwen2_writes_its_biases_and_no_sliding_window(tmp_path):
    config, tensors = written(tmp_path, "qwen", "causal_lm.keras")
    assert config["architectures"] == ["Qwen2ForCausalLM"] and config["model_type"] == "qwen2"
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (4, 2, 8)
    assert config["use_sliding_window"] is False and config["tie_word_embeddings"] is True
    assert config["rms_norm_eps"] == 1e-6 and config["rope_theta"] == 10000.0
    assert tensors["model.layers.0.self_attn.k_proj.bias"].shape == (16,)
    assert "lm_head.weight" not in tensors and "model.layers.0.self_attn.o_proj.bias" not in tensors


def test_qwen3_scales_its_query_and_key_projections_for_transformers_head_norm_epsilon(tmp_path):
    """keras-hub's head norms use 1e-5, transformers' ``rms_norm_eps`` (1e-6 here): q_proj and k_proj are the
    port's times √(1e-6 / 1e-5), which the norms cancel but for the epsilon; v_proj is as it is."""
    config, tensors = written(tmp_path, "qwen3", "backbone.keras")
    assert config["architectures"] == ["Qwen3Model"] and config["head_dim"] == 8 and config["rms_norm_eps"] == 1e-6
    state = converted("qwen3", "backbone.keras").state_dict()
    for theirs, ours, factor in (("q_proj", "query", 0.1**0.5), ("k_proj", "key", 0.1**0.5), ("v_proj", "value", 1)):
        port = state[f"layers.transformer_layer_1.{ours}.weight"]
        torch.testing.assert_close(tensors[f"layers.1.self_attn.{theirs}.weight"], port * factor)
    assert tensors["layers.1.self_attn.q_norm.weight"].shape == (8,)


def test_qwen_moe_writes_every_expert_as_the_hub_s_checkpoints_hold_them(tmp_path):
    config, tensors = written(tmp_path, "qwen_moe", "causal_lm.keras")
    assert config["architectures"] == ["Qwen2MoeForCausalLM"] and config["tie_word_embeddings"] is False
    assert (config["num_experts"], config["num_experts_per_tok"], config["moe_intermediate_size"]) == (8, 4, 16)
    assert config["shared_expert_intermediate_size"] == 32 and config["mlp_only_layers"] == []
    experts = {name for name in tensors if ".mlp.experts." in name}
    assert len(experts) == 2 * 8 * 3 and tensors["model.layers.1.mlp.experts.7.down_proj.weight"].shape == (32, 16)
    assert tensors["model.layers.0.mlp.gate.weight"].shape == (8, 32)
    assert tensors["model.layers.0.mlp.shared_expert_gate.weight"].shape == (1, 32)


def test_phi3_fuses_its_projections_and_writes_su_rope_as_longrope(tmp_path):
    config, tensors = written(tmp_path, "phi3_su", "causal_lm.keras")
    assert config["architectures"] == ["Phi3ForCausalLM"]
    assert (config["max_position_embeddings"], config["original_max_position_embeddings"]) == (64, 4)
    assert config["rope_scaling"]["type"] == config["rope_parameters"]["rope_type"] == "longrope"
    assert config["rope_scaling"]["short_factor"] == [1.0, 1.1, 1.3, 1.6]
    assert config["rope_parameters"]["long_factor"] == [1.0, 2.0, 4.0, 8.0]
    assert tensors["model.layers.0.self_attn.qkv_proj.weight"].shape == ((4 + 2 + 2) * 8, 32)
    assert tensors["model.layers.0.mlp.gate_up_proj.weight"].shape == (2 * 64, 32)
    default, _ = written(tmp_path, "phi3", "backbone.keras")
    assert default["rope_scaling"] is None and default["rope_parameters"]["rope_type"] == "default"


# -- the slow tier: transformers loads every folder in one child without keras, keras_hub or attnzoo -------------


def jobs_of(families) -> list[dict]:
    """The child's jobs: each family's backbone preset, causal LM file and causal LM preset on both batches."""
    jobs = []
    for family in families:
        for file, auto, output in (
            ("backbone_preset", "AutoModel", "last_hidden_state"),
            ("causal_lm.keras", "AutoModelForCausalLM", "logits"),
            ("causal_lm_preset", "AutoModelForCausalLM", "logits"),
        ):
            for side in ("right", "left"):
                name = f"{family}/{file}/{side}"
                jobs.append({"name": name, "family": family, "file": file, "side": side, "auto": auto, "out": output})
    return jobs


def _jobs() -> list[dict]:
    return jobs_of(FAMILIES)


def load_folders(root, jobs: list[dict]) -> dict[str, np.ndarray]:
    """Each job's folder written by the door under ``root`` and loaded by transformers in one child without
    keras, keras_hub or attnzoo: its outputs, and 32 greedy tokens of the right-padded causal LM jobs."""
    specs, given = [], {}
    for job in jobs:
        family, file, side, name = job["family"], job["file"], job["side"], job["name"]
        folder = root / f"{family}_{file}"
        if not folder.exists():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the presets' tokenizers are not written yet
                to_transformers(DATA / family / file, folder)
        e = expected(family)
        given[f"{name}/input_ids"] = e[f"{side}/token_ids"].astype(np.int64)
        given[f"{name}/attention_mask"] = e[f"{side}/padding_mask"].astype(np.int64)
        decodes = job["auto"] == "AutoModelForCausalLM" and side == "right"
        if decodes:
            given[f"{name}/prompt_0"] = e["greedy/prompt"].astype(np.int64)
        spec = {"name": name, "folder": str(folder), "auto": job["auto"], "kwargs": {}, "outputs": [job["out"]]}
        specs.append({**spec, "inputs": ["attention_mask", "input_ids"], "generate": [32] if decodes else []})
    return run_loader(root, specs, given)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    return load_folders(tmp_path_factory.mktemp("hf"), _jobs())


@pytest.mark.slow
def test_the_child_could_import_neither_keras_nor_keras_hub_nor_attnzoo_and_loaded_every_weight(loaded):
    assert loaded["blocked"].all()
    for job in _jobs():
        assert json.loads(str(loaded[f"{job['name']}/loading"])) == {}, job["name"]  # nothing missing or unexpected


@pytest.mark.slow
@pytest.mark.parametrize("job", _jobs(), ids=lambda job: job["name"])
def test_transformers_gives_keras_s_outputs(loaded, job):
    check_outputs(loaded, job)


def check_outputs(
    loaded: dict[str, np.ndarray], job: dict, tolerance: float = TOLERANCE, windowed: bool = False
) -> None:
    """transformers' outputs of a job against Keras's: every position of the right-padded batch, every real
    token of the left-padded one (and of the right-padded one where ``windowed``: a padded query past a sliding
    window has no key either), within ``tolerance`` times the largest magnitude (at least 1)."""
    e = expected(job["family"])
    got = loaded[f"{job['name']}/{job['out']}"]
    want = e[f"{job['side']}/{'backbone' if job['out'] == 'last_hidden_state' else 'logits'}"]
    real = e[f"{job['side']}/padding_mask"] == 1
    every = job["side"] == "right" and not windowed
    worst = float(np.abs(got - want).max() if every else np.abs(got[real] - want[real]).max())
    print(f"{job['name']}: max difference {worst:.3g}")  # shown with -s: the measurements the docs quote
    # the bound at the logits' scale (up to 7 here), as the converted model's own (test_keras_hub_qwen_phi3)
    bound = tolerance * max(1.0, float(np.abs(want).max()))
    assert worst <= bound, f"{job['name']}: max difference {worst:.3g} (bound {bound:.3g})"


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_transformers_greedy_generate_gives_keras_s_tokens(loaded, family):
    check_tokens(loaded, family)


def check_tokens(loaded: dict[str, np.ndarray], family: str) -> None:
    """transformers' greedy ``generate`` from the causal LM's file and preset folders gives Keras's 32 tokens."""
    e = expected(family)
    want = np.concatenate([e["greedy/prompt"], e["greedy/tokens"]], axis=1)
    for file in ("causal_lm.keras", "causal_lm_preset"):
        np.testing.assert_array_equal(loaded[f"{family}/{file}/right/generated_0"], want, err_msg=file)
