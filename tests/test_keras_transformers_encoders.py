"""keras-hub's ELECTRA, ALBERT, XLM-RoBERTa and FNet written through the Hugging Face door as ``ElectraModel``,
``AlbertModel``, ``XLMRobertaModel`` / ``XLMRobertaForSequenceClassification`` and ``FNetModel`` folders.

The slow tier writes a folder for each fixture of tests/data/keras_hub_encoders (made by keras-hub 0.32:
tests/keras_hub_encoder_fixtures.py), loads them all in ONE child process where keras, keras_hub and attnzoo
cannot be imported (tests/conftest.py's ``run_without_keras``), and compares transformers' outputs with
Keras's saved ones (expected.npz) within 1e-5: every position of the right-padded batch for ELECTRA, ALBERT
and FNet (keys masked by the padding in both, positions 0, 1, ...; FNet takes no mask in either), the real
tokens for XLM-RoBERTa (RoBERTa's positions: hub_roberta.py says why), and the classifier's logits. The fast
tier checks what the folders hold and what the door refuses.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.torch import load_file

from attnzoo.errors import ExportError
from attnzoo.keras import to_transformers
from attnzoo.keras.converters.hub_f_net import F_NET
from attnzoo.keras.transformers_form import HubSource

from .test_keras_hub_encoders import EXPECTED, path
from .test_keras_transformers_folder import _close, run_loader

# case -> (Auto class, from_pretrained's keywords, inputs it takes, outputs compared with Keras's)
CASES = {
    "electra": (
        "AutoModel",
        {},
        ("token_ids", "padding_mask", "segment_ids"),
        {"sequence_output": "last_hidden_state"},
    ),
    "albert": (
        "AutoModel",
        {},
        ("token_ids", "padding_mask", "segment_ids"),
        {"sequence_output": "last_hidden_state", "pooled_output": "pooler_output"},
    ),
    "albert_groups": (
        "AutoModel",
        {},
        ("token_ids", "padding_mask", "segment_ids"),
        {"sequence_output": "last_hidden_state", "pooled_output": "pooler_output"},
    ),
    "xlm_roberta": ("AutoModel", {"add_pooling_layer": False}, ("token_ids", "padding_mask"), {}),
    "xlm_roberta_classifier": (
        "AutoModelForSequenceClassification",
        {},
        ("token_ids", "padding_mask"),
        {"output": "logits"},
    ),
    "f_net": (
        "AutoModel",
        {},
        ("token_ids", "segment_ids"),
        {"sequence_output": "last_hidden_state", "pooled_output": "pooler_output"},
    ),
}
NAMES = {"token_ids": "input_ids", "padding_mask": "attention_mask", "segment_ids": "token_type_ids"}


def write(tmp_path, case: str):
    folder = to_transformers(path(case), tmp_path / case)
    return json.loads((folder / "config.json").read_text()), load_file(folder / "model.safetensors")


# -- the fast tier: what each family writes, what the door refuses --------------------------------------------


def test_electra_writes_its_factorised_embedding_and_no_pooler(tmp_path):
    config, tensors = write(tmp_path, "electra")
    assert config["architectures"] == ["ElectraModel"] and config["model_type"] == "electra"
    assert (config["embedding_size"], config["hidden_size"], config["hidden_act"]) == (16, 32, "gelu_new")
    assert tensors["embeddings.word_embeddings.weight"].shape == (100, 16)
    assert tensors["embeddings_project.weight"].shape == (32, 16)
    assert not any(name.startswith("pooler") for name in tensors)


def test_albert_writes_each_group_s_shared_layer_once(tmp_path):
    config, tensors = write(tmp_path, "albert_groups")
    assert config["architectures"] == ["AlbertModel"] and config["model_type"] == "albert"
    assert (config["num_hidden_layers"], config["num_hidden_groups"], config["inner_group_num"]) == (4, 2, 1)
    groups = {name.split(".")[2] for name in tensors if "albert_layer_groups" in name}
    assert groups == {"0", "1"}
    assert tensors["encoder.embedding_hidden_mapping_in.weight"].shape == (32, 16)


def test_xlm_roberta_writes_roberta_s_positions_under_its_own_model_type(tmp_path):
    config, tensors = write(tmp_path, "xlm_roberta_classifier")
    assert config["architectures"] == ["XLMRobertaForSequenceClassification"]
    assert config["model_type"] == "xlm-roberta" and len(config["id2label"]) == 3
    positions = tensors["roberta.embeddings.position_embeddings.weight"]
    assert positions.shape == (16 + 2, 32) and not positions[:2].any()  # pad id 1: rows 0 and 1 unused
    assert tensors["classifier.out_proj.weight"].shape == (3, 32)


def test_f_net_writes_its_fourier_layers_with_the_plain_fft(tmp_path):
    config, tensors = write(tmp_path, "f_net")
    assert config["architectures"] == ["FNetModel"] and config["model_type"] == "fnet"
    assert config["use_tpu_fourier_optimizations"] is False and config["type_vocab_size"] == 4
    assert "encoder.layer.1.fourier.output.LayerNorm.weight" in tensors
    assert tensors["embeddings.projection.weight"].shape == (32, 32)


def test_the_f_net_door_refuses_an_activation_transformers_does_not_name():
    source = HubSource("FNetBackbone", "backbone", {}, {"f_net_layer_0": {"activation": "selu", "epsilon": 1e-12}}, {})
    with pytest.raises(ExportError, match="FNetBackbone is not written.*activation 'selu'"):
        F_NET.config(source)


# -- the slow tier: transformers loads the six folders in one child without keras, keras_hub or attnzoo -------


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf_encoders")
    specs, given = [], {}
    for case, (auto, kwargs, inputs, outputs) in CASES.items():
        to_transformers(path(case), root / case)
        given |= {f"{case}/{NAMES[key]}": EXPECTED[f"{case}/in/{key}"].astype(np.int64) for key in inputs}
        outs = sorted({*outputs.values(), "last_hidden_state"} if auto == "AutoModel" else outputs.values())
        specs.append(
            {
                "name": case,
                "folder": str(root / case),
                "auto": auto,
                "kwargs": kwargs,
                "inputs": sorted(NAMES[key] for key in inputs),
                "outputs": outs,
            }
        )
    return run_loader(root, specs, given)


@pytest.mark.slow
def test_the_child_could_import_neither_keras_nor_keras_hub_nor_attnzoo_and_loaded_every_weight(loaded):
    assert loaded["blocked"].all()
    for case in CASES:
        assert json.loads(str(loaded[f"{case}/loading"])) == {}, case  # no missing, unexpected or mismatched weight


@pytest.mark.slow
@pytest.mark.parametrize("case", [case for case, spec in CASES.items() if spec[3]])
def test_each_folder_gives_keras_s_outputs_at_every_position(loaded, case):
    for keras_name, theirs in CASES[case][3].items():
        _close(loaded[f"{case}/{theirs}"], EXPECTED[f"{case}/out/{keras_name}"], f"{case} {keras_name}")


@pytest.mark.slow
def test_xlm_roberta_agrees_at_every_real_token_when_no_real_token_is_the_pad_id(loaded):
    real = EXPECTED["xlm_roberta/in/padding_mask"] == 1
    assert not (EXPECTED["xlm_roberta/in/token_ids"][real] == 1).any()  # the condition the docs state
    got, want = loaded["xlm_roberta/last_hidden_state"], EXPECTED["xlm_roberta/out/output"]
    _close(got[real], want[real], "XLMRobertaBackbone at the real tokens")
