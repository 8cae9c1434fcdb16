"""A layer a functional graph calls twice, once inside a nested model and once outside it, converts with its
weights held once (issue 66).

``keras.Model(lm.inputs, lm.outputs)`` of keras-hub's ``GPT2CausalLM`` (and ``OPTCausalLM``) calls its backbone's
``token_embedding`` on the ids inside the nested backbone and again, ``reverse=True``, outside it for the logits; a
plain Keras graph (``keras_shared``) calls a nested model's ``Embedding`` again on the ids. Keras's file lists such
a layer in the outer model too and saves its weights once, under the nested model (OPT's inside its backbone's
``TokenAndPositionEmbedding``, whose reverse call is the table's). The fixtures
(tests/keras_hub_rewrapped_fixtures.py, keras-hub 0.32) hold Keras's outputs on a right-padded batch, from the
model in memory (Keras's own ``load_model`` refuses these files).
"""

from __future__ import annotations

import io
import json
import zipfile

import h5py
import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.keras import convert_keras_model

from .conftest import ROOT

DATA = ROOT / "tests" / "data" / "keras_hub_rewrapped"
EXPECTED = dict(np.load(DATA / "expected.npz"))
# case -> the table's name in the outer model's layers, the layer that holds it (both calls go to it), and its
# state dict key (the table is [50, 16]); OPT's token table is held inside its backbone's TokenAndPositionEmbedding
TABLES = {
    "gpt2": ("token_embedding", "gpt2_backbone/token_embedding", "weight"),
    "opt": ("token_embedding", "opt_backbone/embeddings", "token"),
    "keras_shared": ("table", "encoder/table", "weight"),
}
SHAPE = (50, 16)


@pytest.fixture(scope="module")
def models():
    return {name: convert_keras_model(DATA / f"{name}.keras") for name in TABLES}


def _outputs(model, name: str) -> np.ndarray:
    given = {k.split("/")[-1]: torch.from_numpy(v) for k, v in EXPECTED.items() if k.startswith(f"{name}/in/")}
    with torch.no_grad():
        got = model(given) if len(given) > 1 else model(given["token_ids"])
    return got.numpy()


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_file_lists_the_table_outside_and_saves_its_weights_only_inside(name):
    """What the fix reads: the outer model's layers list the table's name, and the weights file has no group
    for it at the root (Keras saved it once, inside the nested model)."""
    table, nested = TABLES[name][0], TABLES[name][1].split("/")[0]
    with zipfile.ZipFile(DATA / f"{name}.keras") as archive:
        listed = [layer["name"] for layer in json.loads(archive.read("config.json"))["config"]["layers"]]
        with h5py.File(io.BytesIO(archive.read("model.weights.h5"))) as weights:
            root = sorted(weights["layers"])
    assert nested in listed and table in listed
    assert not any("embedding" in group or group == table for group in root), root


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_converted_graph_gives_keras_s_outputs(models, name):
    np.testing.assert_allclose(_outputs(models[name], name), EXPECTED[f"{name}/out/logits"], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_shared_table_is_one_parameter(models, name):
    _, key, parameter = TABLES[name]
    tables = [k for k, v in models[name].state_dict().items() if tuple(v.shape) == SHAPE]
    assert tables == [f"layers.{key}.{parameter}"]
    # the outer listing is no layer of its own: every call of the table goes to the one module
    assert [c["layer"] for c in models[name].calls].count(key) == 2


@pytest.mark.parametrize("name", ["gpt2", "opt"])
def test_the_reverse_call_reads_the_held_table(name):
    """Zeroing the one held table zeroes the logits (the last state times the table): the reverse call
    outside the backbone reads the table the backbone's ids call holds, not a copy."""
    _, key, parameter = TABLES[name]
    model = convert_keras_model(DATA / f"{name}.keras")
    with torch.no_grad():
        model.state_dict()[f"layers.{key}.{parameter}"].zero_()
    np.testing.assert_array_equal(_outputs(model, name), 0.0)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_a_saved_and_loaded_model_gives_the_same_outputs(models, name, tmp_path):
    loaded = attnzoo.load(attnzoo.save(models[name], tmp_path / "saved"))
    np.testing.assert_allclose(_outputs(loaded, name), EXPECTED[f"{name}/out/logits"], atol=1e-5, rtol=1e-5)
    assert len([v for v in loaded.state_dict().values() if tuple(v.shape) == SHAPE]) == 1


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_old_refusal_is_gone(models, name):
    """Before, the outer listing was read as a layer without weights and refused: 'token_embedding
    (ReversibleEmbedding, no variables)'. The report now lists no weightless listing of the table."""
    rows = {row["layer"] for row in models[name].keras_report.rows}
    assert TABLES[name][1] in rows
    assert TABLES[name][0] not in rows
