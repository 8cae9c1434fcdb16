"""keras-hub's Llama 3, Llama 3.1, Mistral and Mixtral written through the Hugging Face door as ``Llama*``
(Llama 3.1's adjustment as transformers' ``llama3`` rope), ``Mistral*`` (its sliding window) and ``Mixtral*``
folders, and loaded by transformers' Auto classes.

The slow tier writes each family's backbone preset, causal LM file and causal LM preset, loads them all in ONE
child process where keras, keras_hub and attnzoo cannot be imported (tests/test_keras_transformers_folder.py's
loader), and compares transformers' outputs with Keras's saved ones (tests/data/keras_hub_lm/<family>/
expected.npz): every position of the right-padded batch, every real token of the left-padded one (a left-padded
query has no key: Keras gives it the mean of the values or zeros, transformers something else; no real token
reads it; Mistral's real tokens only on both batches, since its right-padded queries past the window of 4 have
no key either), within 1e-5 (Mixtral's logits within 2e-5, as the converted model's: see
tests/test_keras_hub_llama3_mistral.py), and greedy ``generate`` gives Keras's 32 tokens (Mistral's crossing its
window of 4). The fast tier checks the folders' entries and layouts.
"""

from __future__ import annotations

import json

import pytest

from .test_keras_hub_llama3_mistral import FAMILIES, LOGITS_TOLERANCE
from .test_keras_hub_qwen_phi3 import TOLERANCE
from .test_keras_transformers_qwen_phi3 import check_outputs, check_tokens, jobs_of, load_folders, written

# -- the fast tier: what each family writes -------------------------------------------------------------------


def test_llama3_and_llama31_write_llama_with_transformers_llama3_rope(tmp_path):
    """Llama 3.1's four keras-hub arguments are transformers' ``llama3`` rope; Llama 3 has the default rope.
    ``max_position_embeddings`` is keras-hub's own exporter's: 131072 with the adjustment, 8192 without."""
    config, tensors = written(tmp_path, "llama31", "causal_lm.keras")
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama"
    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
    rope["original_max_position_embeddings"] = 64
    assert config["rope_parameters"] == {**rope, "rope_theta": 500000.0} and config["rope_scaling"] == rope
    assert config["max_position_embeddings"] == 131072 and config["tie_word_embeddings"] is False
    assert tensors["lm_head.weight"].shape == (320, 32)
    plain, _ = written(tmp_path, "llama3", "backbone.keras")
    assert plain["architectures"] == ["LlamaModel"] and plain["rope_parameters"]["rope_type"] == "default"
    assert plain["max_position_embeddings"] == 8192 and "rope_scaling" not in plain


def test_mistral_writes_its_sliding_window_and_an_untied_head(tmp_path):
    config, tensors = written(tmp_path, "mistral", "causal_lm.keras")
    assert config["architectures"] == ["MistralForCausalLM"] and config["model_type"] == "mistral"
    assert config["sliding_window"] == 4 and config["max_position_embeddings"] == 32768
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (4, 2, 8)
    assert config["tie_word_embeddings"] is False and tensors["lm_head.weight"].shape == (256, 32)


def test_mixtral_writes_every_expert_as_the_hub_s_checkpoints_hold_them(tmp_path):
    """``block_sparse_moe.experts.<e>.w1`` (gate) and ``w3`` (up) [I, D], ``w2`` (down) [D, I], the router as
    ``block_sparse_moe.gate`` [E, D]: the names transformers 5 renames and merges as it loads."""
    config, tensors = written(tmp_path, "mixtral", "causal_lm.keras")
    assert config["architectures"] == ["MixtralForCausalLM"] and config["model_type"] == "mixtral"
    assert (config["num_local_experts"], config["num_experts_per_tok"], config["intermediate_size"]) == (4, 2, 64)
    assert config["sliding_window"] == 512 and config["router_aux_loss_coef"] == 0.02
    experts = {name for name in tensors if ".experts." in name}
    assert len(experts) == 2 * 4 * 3 and tensors["model.layers.1.block_sparse_moe.experts.3.w2.weight"].shape == (
        32,
        64,
    )
    assert tensors["model.layers.0.block_sparse_moe.experts.0.w1.weight"].shape == (64, 32)
    assert tensors["model.layers.0.block_sparse_moe.gate.weight"].shape == (4, 32)


# -- the slow tier: transformers loads every folder in one child without keras, keras_hub or attnzoo -------------

JOBS = jobs_of(FAMILIES)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    return load_folders(tmp_path_factory.mktemp("hf"), JOBS)


@pytest.mark.slow
def test_the_child_could_import_neither_keras_nor_keras_hub_nor_attnzoo_and_loaded_every_weight(loaded):
    assert loaded["blocked"].all()
    for job in JOBS:
        assert json.loads(str(loaded[f"{job['name']}/loading"])) == {}, job["name"]  # nothing missing or unexpected


@pytest.mark.slow
@pytest.mark.parametrize("job", JOBS, ids=lambda job: job["name"])
def test_transformers_gives_keras_s_outputs(loaded, job):
    tolerance = LOGITS_TOLERANCE.get(job["family"], TOLERANCE) if job["out"] == "logits" else TOLERANCE
    check_outputs(loaded, job, tolerance, windowed=job["family"] == "mistral")


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_transformers_greedy_generate_gives_keras_s_tokens(loaded, family):
    check_tokens(loaded, family)
