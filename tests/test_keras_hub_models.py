"""keras-hub Backbones (BertBackbone, DistilBertBackbone, RobertaBackbone, GPT2Backbone) and a
BertTextClassifier convert without keras-hub.

A Backbone's file keeps only its constructor's arguments, not its graph; attnzoo rebuilds the graph from
them (attnzoo/keras/hub_models.py). The tiny backbones were made once with keras 3 (torch backend) and
keras-hub (tests/keras_hub_models_fixtures.py), every weight moved off its initial value, and saved both
with ``model.save`` (.keras) and with ``save_to_preset`` (a folder); the classifier (a task model holding
its backbone as a nested model) and a user's functional model calling a backbone as .keras. Keras's own
outputs on right-padded batches (``padding_mask`` 0 at the padding) are in expected.npz; the converted
model must agree within 1e-5 at every position (the padded ones too: keras-hub's encoders mask the keys).
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.errors import WeightsError
from attnzoo.keras import convert_keras_model

from .conftest import ROOT

DATA = ROOT / "tests" / "data" / "keras_hub_models"
EXPECTED = dict(np.load(DATA / "expected.npz"))
BACKBONES = ("bert", "distil_bert", "roberta", "gpt2")
FILES = [f"{case}{form}" for case in BACKBONES for form in (".keras", "_preset")]
FILES += [f"{case}_classifier.keras" for case in ("bert", "distil_bert", "roberta")] + ["user_model.keras"]


def assert_matches(model, case: str) -> None:
    """The inputs go in the converted model's order (Keras's flat order: a dict's by sorted key)."""
    given = sorted(key.split("/")[-1] for key in EXPECTED if key.startswith(f"{case}/in/"))
    assert sorted(model.input_names) == given
    with torch.no_grad():
        got = model(*[torch.from_numpy(EXPECTED[f"{case}/in/{name}"]) for name in model.input_names])
    got = got if isinstance(got, dict) else {"logits" if "classifier" in case else "sequence_output": got}
    wanted = sorted(key.split("/")[-1] for key in EXPECTED if key.startswith(f"{case}/out/"))
    assert sorted(got) == wanted
    for name in wanted:
        want = EXPECTED[f"{case}/out/{name}"]
        assert got[name].shape == want.shape, name
        np.testing.assert_allclose(got[name].numpy(), want, atol=1e-5, rtol=0, err_msg=f"{case} {name}")


@pytest.mark.parametrize("file", FILES)
def test_keras_hub_models_predict_what_keras_predicts(file):
    assert_matches(convert_keras_model(DATA / file), file.split(".")[0].removesuffix("_preset"))


def test_the_fixtures_hold_padding_and_keep_only_constructor_arguments():
    """The batches are padded (so the padding mask is exercised), and the files hold no graph to read: the
    graph is rebuilt, not parsed."""
    padding = EXPECTED["bert/in/padding_mask"]
    assert (padding == 0).any() and (padding == 1).all(axis=1).any()
    with zipfile.ZipFile(DATA / "bert.keras") as archive:
        config = json.loads(archive.read("config.json"))
    assert config["registered_name"] == "keras_hub>BertBackbone" and "layers" not in config["config"]
    preset = json.loads((DATA / "roberta_preset" / "config.json").read_text())
    assert preset["class_name"] == "RobertaBackbone" and "layers" not in preset["config"]


def test_a_converted_backbone_saves_and_loads(tmp_path):
    model = convert_keras_model(DATA / "bert.keras")
    assert_matches(attnzoo.load(attnzoo.save(model, tmp_path / "saved")), "bert")


def test_the_emitted_bert_module_declares_torch_layers_and_passes_ruff(tmp_path):
    """The embeddings, the embeddings' layer norm and the pooler are torch.nn layers in ``model.code``;
    gelu_approximate is the tanh gelu; ``ruff format --check`` and ``ruff check`` leave the module as it is."""
    code = convert_keras_model(DATA / "bert.keras").code
    assert code.count("nn.Embedding(100, 32)") == 1 and code.count("nn.Embedding(2, 32)") == 1
    assert "nn.LayerNorm" in code and "nn.Linear(32, 32)" in code and "torch.tanh(" in code
    (tmp_path / "port.py").write_text(code, encoding="utf-8")
    for arguments in (["format", "--isolated", "--check"], ["check", "--isolated", "--extend-select", "I"]):
        result = subprocess.run(
            [sys.executable, "-m", "ruff", *arguments, "."], capture_output=True, text=True, cwd=tmp_path, check=False
        )
        assert result.returncode == 0, (arguments, result.stdout[-3000:])


def test_gelu_approximate_is_keras_hub_s_tanh_formula():
    """keras_hub>gelu_approximate, written naively: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))."""
    from attnzoo.keras.activations import activation, canonical_activation

    name = canonical_activation({"class_name": "function", "config": "keras_hub>gelu_approximate"}, 3)
    x = torch.linspace(-6, 6, 101, dtype=torch.float64)
    naive = 0.5 * x * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (x + 0.044715 * x**3)))
    torch.testing.assert_close(activation(name)(x), naive, rtol=0, atol=1e-12)


def _backbone_file(tmp_path, class_name: str, config: dict) -> str:
    """A .keras archive whose config is a keras-hub model record, with the bert fixture's weights."""
    path = tmp_path / "model.keras"
    with zipfile.ZipFile(DATA / "bert.keras") as source, zipfile.ZipFile(path, "w") as target:
        record = {"module": "keras_hub.src.models.x", "class_name": class_name, "config": config}
        target.writestr("config.json", json.dumps({**record, "registered_name": f"keras_hub>{class_name}"}))
        target.writestr("model.weights.h5", source.read("model.weights.h5"))
    return str(path)


@pytest.mark.usefixtures("without_keras_hub")
def test_an_unknown_keras_hub_model_is_refused_with_the_way_forward(tmp_path):
    path = _backbone_file(tmp_path, "PaliGemmaBackbone", {"name": "pali_gemma_backbone"})
    with pytest.raises(WeightsError) as error:
        convert_keras_model(path)
    message = str(error.value)
    assert "'PaliGemmaBackbone' is a functional model" in message and "BertBackbone" in message
    assert "keras.Model(model.inputs, model.outputs).save('model.keras')" in message


def test_a_backbone_config_out_of_range_is_refused_by_its_argument(tmp_path):
    with zipfile.ZipFile(DATA / "bert.keras") as archive:
        config = json.loads(archive.read("config.json"))["config"]
    path = _backbone_file(tmp_path, "BertBackbone", {**config, "num_heads": 3})
    with pytest.raises(WeightsError, match="hidden_dim 32 is not a multiple of num_heads 3"):
        convert_keras_model(path)
    path = _backbone_file(tmp_path, "BertBackbone", {**config, "num_layers": "2"})
    with pytest.raises(WeightsError, match="num_layers is '2'"):
        convert_keras_model(path)


@pytest.mark.parametrize("tied", [True, False])
def test_a_reverse_call_is_logits_through_the_table_with_keras_s_soft_cap(tied):
    """ReversibleEmbedding(x, reverse=True): x @ E^T (tied) or x @ R (untied), then tanh(l / c) * c."""
    from attnzoo.keras.nodes import build_node

    spec = {"op": "reversible_embedding", "input_dim": 7, "output_dim": 4, "tie_weights": tied, "logit_soft_cap": 2.0}
    node = build_node(spec)
    table, reverse = torch.randn(7, 4), torch.randn(4, 7)
    node.load_state_dict({"weight": table} | ({} if tied else {"reverse_weight": reverse}))
    x = torch.randn(2, 3, 4)
    (logits,), (mask,) = node([x], {"reverse": True}, [None])
    kernel = table.T if tied else reverse
    naive = torch.tensor(
        [
            [[sum(float(x[b, t, d]) * float(kernel[d, v]) for d in range(4)) for v in range(7)] for t in range(3)]
            for b in range(2)
        ]
    )
    torch.testing.assert_close(logits, torch.tanh(naive / 2.0) * 2.0, rtol=1e-5, atol=1e-5)
    assert mask is None
    (looked_up,), _ = node([torch.tensor([[0, 6]])], {}, [None])
    torch.testing.assert_close(looked_up[0], table[[0, 6]])


@pytest.mark.parametrize("file", ["bert_classifier.keras", "distil_bert.keras", "user_model.keras"])
def test_the_ids_each_input_takes_are_bounded_through_nested_models_and_keras_hub_embeddings(file):
    """``--check`` draws ids below each input's ``vocab``: the backbones' vocabulary_size 100 and num_segments
    2 (the fixtures' constructor arguments), found through a task's nested backbone, a ReversibleEmbedding and
    a TokenAndPositionEmbedding; the padding mask is no id input."""
    specs = {spec["name"]: spec for spec in convert_keras_model(DATA / file).inputs_spec}
    assert specs["token_ids"]["vocab"] == 100 and "vocab" not in specs["padding_mask"]
    if "segment_ids" in specs:
        assert specs["segment_ids"]["vocab"] == 2


def test_keras_hub_s_layers_and_preprocessing_are_not_taken_for_models():
    """Only a Backbone or task model is unwrapped; a tokenizer or a modelling layer stays a layer."""
    from attnzoo.keras.hub_families import is_keras_hub_model

    assert is_keras_hub_model({"module": "keras_hub.src.models.gpt2.gpt2_backbone", "class_name": "GPT2Backbone"})
    assert is_keras_hub_model({"registered_name": "keras_hub>BertBackbone", "class_name": "BertBackbone"})
    assert not is_keras_hub_model({"module": "keras_hub.src.models.bert.bert_tokenizer", "class_name": "BertTokenizer"})
    layer = {"module": "keras_hub.src.layers.modeling.transformer_encoder", "class_name": "TransformerEncoder"}
    assert not is_keras_hub_model({**layer, "registered_name": "keras_hub>TransformerEncoder"})


def test_a_task_preset_folder_attnzoo_does_not_read_is_refused_not_converted_as_its_backbone(tmp_path):
    """A classifier's save_to_preset folder holds its head in task.json and task.weights.h5: converting the
    folder's backbone alone would drop the head unasked. The backbone's config.json still converts."""
    import shutil

    folder = tmp_path / "bert_classifier_preset"
    shutil.copytree(DATA / "bert_preset", folder)
    (folder / "task.json").write_text(json.dumps({"class_name": "BertTextClassifier", "config": {}}))
    (folder / "task.weights.h5").write_bytes(b"")
    with pytest.raises(WeightsError, match=r"holds a keras-hub task \(task.json, with its head in task.weights.h5\)"):
        convert_keras_model(folder)
    assert_matches(convert_keras_model(folder / "config.json"), "bert")
