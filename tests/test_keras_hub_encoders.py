"""keras-hub's text encoders, and the route through keras-hub's own graph.

The fixtures are tiny models made with keras-hub (tests/keras_hub_encoder_fixtures.py), every weight moved
off its initial value; ``expected.npz`` holds Keras's outputs on right-padded batches, the reference here
(within 1e-5 at every position).

The route through keras-hub's graph (attnzoo/keras/hub_keras.py): where keras-hub is installed, a keras-hub
class attnzoo does not rebuild is built by keras-hub from the file's arguments, its variables unallocated,
and its graph converted as any functional model. CI has no keras-hub, so that test skips there (it runs in
an environment with keras-hub); the refusal without keras-hub runs always.
"""

from __future__ import annotations

import importlib.util
import io
import zipfile

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.errors import WeightsError
from attnzoo.keras import convert_keras_model, hub_families

from .conftest import ROOT

DATA = ROOT / "tests" / "data" / "keras_hub_encoders"
EXPECTED = dict(np.load(DATA / "expected.npz"))
PRESETS = (
    "xlm_roberta_classifier",
    "bert_masked_lm",
    "deberta_v3_classifier",
    "deberta_v3_masked_lm",
    "roberta_masked_lm",
)


def path(case: str):
    return DATA / (f"{case}_preset" if case in PRESETS else f"{case}.keras")


def assert_matches(model, case: str) -> None:
    """Keras's outputs on the case's inputs, within 1e-5 at every position (a lone output is ``output``)."""
    names = sorted(key.split("/")[-1] for key in EXPECTED if key.startswith(f"{case}/in/"))
    assert sorted(model.input_names) == names
    with torch.no_grad():
        got = model(*[torch.from_numpy(EXPECTED[f"{case}/in/{name}"]) for name in model.input_names])
    got = got if isinstance(got, dict) else {"output": got}
    assert sorted(got) == sorted(key.split("/")[-1] for key in EXPECTED if key.startswith(f"{case}/out/"))
    for name, value in got.items():
        want = EXPECTED[f"{case}/out/{name}"]
        assert value.shape == want.shape, name
        np.testing.assert_allclose(value.numpy(), want, atol=1e-5, rtol=0, err_msg=f"{case} {name}")


NATIVE = ("electra", "albert", "albert_groups", "xlm_roberta", "xlm_roberta_classifier", "f_net", "bert_masked_lm")


@pytest.mark.parametrize("case", NATIVE)
def test_an_encoder_attnzoo_rebuilds_predicts_what_keras_predicts(case):
    assert_matches(convert_keras_model(path(case)), case)


def test_f_net_s_fourier_encoder_saves_and_loads(tmp_path):
    """The FNetEncoder node rebuilds from a saved folder (attnzoo.save / load) to the same outputs."""
    assert_matches(attnzoo.load(attnzoo.save(convert_keras_model(path("f_net")), tmp_path / "f_net")), "f_net")


def test_bert_masked_lm_saves_and_loads_with_its_head_tied_to_the_token_embedding(tmp_path):
    """The MaskedLMHead node rebuilds from a saved folder; the port holds the token table once, and holds
    every weight of the preset's two files but the pooler's (pooled_dense, which no output reads)."""
    assert_tied_once(convert_keras_model(path("bert_masked_lm")), tmp_path)


def assert_tied_once(model, tmp_path) -> None:
    import h5py

    assert_matches(attnzoo.load(attnzoo.save(model, tmp_path / "mlm")), "bert_masked_lm")
    tables = [key for key, value in model.state_dict().items() if tuple(value.shape) == (100, 32)]
    assert tables == ["layers.bert_backbone/token_embedding.weight"]
    stored: dict[str, int] = {}
    for name in ("model.weights.h5", "task.weights.h5"):
        with h5py.File(path("bert_masked_lm") / name) as f:
            f["layers"].visititems(lambda key, item: stored.update({key: item.size}) if hasattr(item, "size") else None)
    pooler = sum(size for key, size in stored.items() if key.startswith("dense/"))
    assert pooler == 32 * 32 + 32
    assert sum(p.numel() for p in model.state_dict().values()) == sum(stored.values()) - pooler


def test_bert_masked_lm_has_no_hugging_face_form(tmp_path):
    """transformers' BertForMaskedLM head applies the encoder's activation and ε, not keras-hub's."""
    from attnzoo.errors import ExportError
    from attnzoo.keras import to_transformers

    with pytest.raises(
        ExportError,
        match="BertMaskedLM has no Hugging Face form in attnzoo \\(transformers' BertForMaskedLM head applies",
    ):
        to_transformers(path("bert_masked_lm"), tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_an_untied_masked_lm_head_computes_the_formula_and_refuses_positions_past_the_sequence():
    """A MaskedLMHead holding its own kernel [F, V], against the formula written naively in numpy:
    ``LayerNorm(gelu(x[b, p] @ W + c)) @ K + bias`` (exact gelu, ε 1e-5, Keras's variable order)."""
    from math import erf

    from attnzoo.keras.converters.hub_masked_lm import convert_masked_lm_head
    from attnzoo.keras.nodes import build_node
    from attnzoo.keras.registry import Context

    rng = np.random.default_rng(0)
    kernel, bias, w, c = (rng.standard_normal(shape).astype("float32") for shape in ((6, 10), (10,), (8, 6), (6,)))
    gamma, beta = rng.standard_normal(6).astype("float32"), rng.standard_normal(6).astype("float32")
    record = type("Record", (), {"config": {"intermediate_activation": "gelu", "layer_norm_epsilon": 1e-5}})()
    converted = convert_masked_lm_head(record, [kernel, bias, w, c, gamma, beta], Context(3, "here"))
    node = build_node(converted.spec)
    node.load_state_dict(converted.state)
    x, positions = rng.standard_normal((2, 5, 8)).astype("float32"), np.array([[4, 0, 4], [1, 2, 3]])
    with torch.no_grad():
        (got,), _ = node([torch.from_numpy(x), torch.from_numpy(positions)], {}, [None, None])
    h = np.stack([x[b, positions[b]] for b in range(2)]) @ w + c
    h = h * 0.5 * (1 + np.vectorize(erf)(h / np.sqrt(2)))
    h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5) * gamma + beta
    np.testing.assert_allclose(got.numpy(), h @ kernel + bias, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="mask_positions holds positions outside 0..4"):
        node([torch.from_numpy(x), torch.tensor([[5, 0, 0], [0, 0, 0]])], {}, [None, None])


def test_a_masked_lm_head_not_tied_by_a_rebuilt_graph_is_refused():
    """keras-hub's own config of a MaskedLMHead does not name a layer of its graph its logits come from."""
    from attnzoo.keras.converters.hub_masked_lm import convert_masked_lm_head
    from attnzoo.keras.registry import Context, Refused

    record = type("Record", (), {"config": {"intermediate_activation": "gelu"}})()
    arrays = [np.zeros(100), np.zeros((32, 32)), np.zeros(32), np.ones(32), np.zeros(32)]
    with pytest.raises(Refused, match="ties to the head but does not call in its graph"):
        convert_masked_lm_head(record, arrays, Context(3, "here"))
    # keras-hub's config names the embedding's own config, a layer of the backbone the head's graph cannot call
    record.config["token_embedding"] = {"class_name": "ReversibleEmbedding", "config": {"name": "token_embedding"}}
    with pytest.raises(Refused, match="ties to the head but does not call in its graph"):
        convert_masked_lm_head(record, arrays, Context(3, "here"))


def test_albert_s_shared_layers_hold_their_weights_once():
    """4 layers in 2 groups: 2 encoder layers, each called twice; the port holds the file's weights once."""
    import h5py

    model = convert_keras_model(path("albert_groups"))
    with zipfile.ZipFile(path("albert_groups")) as archive:
        weights = io.BytesIO(archive.read("model.weights.h5"))
    stored: list[int] = []
    with h5py.File(weights) as f:
        f.visititems(lambda name, item: stored.append(item.size) if isinstance(item, h5py.Dataset) else None)
    assert sum(p.numel() for p in model.state_dict().values()) == sum(stored)
    assert sorted({key.split(".")[1] for key in model.state_dict() if "inner_layer" in key}) == [
        "group_0_inner_layer_0",
        "group_1_inner_layer_0",
    ]


ROUTE = (*NATIVE, "deberta_v3", "deberta_v3_classifier", "deberta_v3_masked_lm", "roberta_masked_lm")


@pytest.mark.skipif(importlib.util.find_spec("keras_hub") is None, reason="the route needs keras-hub installed")
@pytest.mark.parametrize("case", ROUTE)
def test_keras_hub_s_own_graph_converts_a_class_attnzoo_does_not_rebuild(case, monkeypatch):
    """As if attnzoo rebuilt none of these classes: keras-hub builds each from the file's arguments."""
    monkeypatch.setattr(hub_families, "hub_model_of", lambda entry: None)
    assert_matches(convert_keras_model(path(case)), case)


@pytest.mark.skipif(importlib.util.find_spec("keras_hub") is None, reason="the route needs keras-hub installed")
@pytest.mark.parametrize("case", ["deberta_v3_masked_lm", "roberta_masked_lm"])
def test_a_task_keras_hub_builds_over_a_backbone_attnzoo_rebuilds_predicts_what_keras_predicts(case):
    """DebertaV3MaskedLM, RobertaMaskedLM: keras-hub builds the task's graph, attnzoo its backbone, and the
    head is placed inside that backbone, reading its token table (RoBERTa's inside its
    TokenAndPositionEmbedding)."""
    assert_matches(convert_keras_model(path(case)), case)


@pytest.mark.skipif(importlib.util.find_spec("keras_hub") is None, reason="the route needs keras-hub installed")
def test_through_keras_hub_s_graph_a_masked_lm_s_head_reads_the_backbone_s_table_held_once(tmp_path, monkeypatch):
    """keras-hub's graph calls the head outside the nested backbone; the route places it inside, as attnzoo's
    builder does, so that its logits come from the backbone's one token table."""
    monkeypatch.setattr(hub_families, "hub_model_of", lambda entry: None)
    assert_tied_once(convert_keras_model(path("bert_masked_lm")), tmp_path)


@pytest.mark.usefixtures("without_keras_hub")
def test_a_masked_lm_head_whose_table_the_backbone_does_not_hold_is_refused():
    from attnzoo.keras.converters.hub_masked_lm import _embedding

    built = {"config": {"layers": [{"name": "embeddings", "class_name": "PositionEmbedding"}]}}
    with pytest.raises(WeightsError, match=r"here: its MaskedLMHead reverses the backbone's 'token_embedding'"):
        _embedding(built, "token_embedding", "here")


@pytest.mark.usefixtures("without_keras_hub")
def test_without_keras_hub_a_class_attnzoo_does_not_rebuild_is_refused_naming_both_routes(monkeypatch):
    monkeypatch.setattr(hub_families, "hub_model_of", lambda entry: None)
    with pytest.raises(WeightsError) as error:
        convert_keras_model(path("electra"))
    message = str(error.value)
    assert "keras-hub's 'ElectraBackbone' is a functional model" in message
    assert "install keras-hub (pip install keras-hub) to convert ElectraBackbone through its own graph" in message
    assert "keras.Model(model.inputs, model.outputs).save('model.keras')" in message
    with pytest.raises(WeightsError, match=r"holds a keras-hub task \(task.json, with its head in task.weights.h5"):
        convert_keras_model(path("xlm_roberta_classifier"))
