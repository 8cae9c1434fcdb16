"""keras-hub's DeBERTa-v3, converted without keras-hub (attnzoo/keras/converters/hub_deberta_v3.py), and its
Hugging Face form.

The reference is Keras: tests/data/keras_hub_encoders/deberta_v3.keras is a tiny ``DebertaV3Backbone``
(bucket_size 4, so that distances past 2 fall in the log buckets) made by keras-hub 0.32
(tests/keras_hub_encoder_fixtures.py), and expected.npz holds Keras's outputs on a right-padded batch (rows
of 12, 7, 1 and 10 tokens); the port must give them within 1e-5 at every kept position. The fixture has no
left-padded batch.

``DebertaV3TextClassifier`` has no fixture made by keras-hub; the test writes one as keras-hub's
``save_to_preset`` lays a text classifier out (the xlm_roberta_classifier preset beside it: the backbone's
config.json and model.weights.h5, task.json, and the head's two Dense layers in task.weights.h5), the
backbone's files the fixture's, the head's weights seeded. Its reference is the head written in numpy on
Keras's backbone output: ``logits = gelu(x₀ W₁ + b₁) W₂ + b₂`` (x₀ the first token's state, the exact gelu
through ``math.erf``).

The slow tier writes both through the Hugging Face door and loads them with transformers' Auto classes in a
child process where keras, keras_hub and attnzoo cannot be imported; transformers' outputs must be the same
references within 1e-5.
"""

from __future__ import annotations

import json
import math
import zipfile

import h5py
import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.errors import WeightsError
from attnzoo.keras import convert_keras_model, to_transformers
from attnzoo.keras.converters.hub_deberta_v3 import log_buckets

from .conftest import run_without_keras
from .test_keras_hub_encoders import DATA, EXPECTED

FILE = DATA / "deberta_v3.keras"
TOKENS, PADDING = EXPECTED["deberta_v3/in/token_ids"], EXPECTED["deberta_v3/in/padding_mask"]
STATES = EXPECTED["deberta_v3/out/output"]
KEPT = PADDING.astype(bool)
CLASSES = 3


def run(model) -> np.ndarray:
    given = {"token_ids": torch.from_numpy(TOKENS), "padding_mask": torch.from_numpy(PADDING)}
    with torch.no_grad():
        return model(*[given[name] for name in model.input_names]).numpy()


def test_the_backbone_gives_keras_s_states_at_every_kept_position():
    got = run(convert_keras_model(FILE))
    assert got.shape == STATES.shape == (4, 12, 32)
    worst = float(np.abs(got - STATES)[KEPT].max())
    assert worst <= 1e-5, worst


def test_the_backbone_saves_and_loads_to_the_same_states(tmp_path):
    model = convert_keras_model(FILE)
    again = attnzoo.load(attnzoo.save(model, tmp_path / "deberta"))
    np.testing.assert_allclose(run(again)[KEPT], STATES[KEPT], atol=1e-5, rtol=0)


def _with_config(tmp_path, **changes):
    """A copy of the fixture whose backbone config has ``changes``."""
    out = tmp_path / "changed.keras"
    with zipfile.ZipFile(FILE) as source, zipfile.ZipFile(out, "w") as target:
        for name in source.namelist():
            data = source.read(name)
            if name == "config.json":
                record = json.loads(data)
                record["config"].update(changes)
                data = json.dumps(record).encode()
            target.writestr(name, data)
    return out


def test_a_bucket_size_keras_hub_cannot_bucket_with_is_refused_by_name(tmp_path):
    """bucket_size 1: Keras's log buckets divide by bucket_size // 2 = 0."""
    with pytest.raises(WeightsError, match=r"DebertaV3Backbone: bucket_size 1; keras-hub's log buckets divide"):
        convert_keras_model(_with_config(tmp_path, bucket_size=1))


@pytest.mark.slow
def test_the_log_buckets_are_transformers_deberta_v2_s_at_every_distance():
    """transformers' ``make_log_bucket_position`` (its own order of operations) agrees with the port's at
    every distance up to 3000, for the fixture's buckets and keras-hub's presets'."""
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    relative = torch.arange(-3000, 3001)
    for buckets, positions in [(4, 16), (256, 512), (2, 5), (3, 7), (10, 100)]:
        theirs = make_log_bucket_position(relative, buckets, positions).long()
        assert torch.equal(log_buckets(relative, buckets, positions), theirs), (buckets, positions)
    assert log_buckets(relative, 4, 16)[3000 - 11 : 3000 + 12].tolist() == [-3] * 9 + [-2, -1, 0, 1, 2] + [3] * 9


# -- DebertaV3TextClassifier, as a preset folder ---------------------------------------------------------------


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    """A DebertaV3TextClassifier preset folder (see the module docstring) and its numpy logits."""
    folder = tmp_path_factory.mktemp("deberta") / "deberta_v3_classifier_preset"
    folder.mkdir()
    with zipfile.ZipFile(FILE) as archive:
        backbone = json.loads(archive.read("config.json"))
        (folder / "model.weights.h5").write_bytes(archive.read("model.weights.h5"))
    backbone = {key: backbone[key] for key in ("module", "class_name", "config", "registered_name")}
    (folder / "config.json").write_text(json.dumps(backbone))
    (folder / "metadata.json").write_text(json.dumps({"keras_version": "3.15.1", "keras_hub_version": "0.32.0"}))
    task = {"backbone": backbone, "preprocessor": None, "name": "deberta_v3_text_classifier"}
    task |= {"num_classes": CLASSES, "activation": "linear", "hidden_dim": 32, "dropout": 0.0}
    record = {"module": "keras_hub.src.models.deberta_v3.deberta_v3_text_classifier"}
    record |= {"class_name": "DebertaV3TextClassifier", "config": task}
    (folder / "task.json").write_text(json.dumps({**record, "registered_name": "keras_hub>DebertaV3TextClassifier"}))
    rng = np.random.default_rng(66)
    w1, b1 = rng.standard_normal((32, 32)).astype("float32") * 0.3, rng.standard_normal(32).astype("float32") * 0.3
    w2, b2 = rng.standard_normal((32, CLASSES)).astype("float32"), rng.standard_normal(CLASSES).astype("float32")
    with h5py.File(folder / "task.weights.h5", "w") as f:  # keras-hub's layout: the head's layers by class
        for name, arrays in [("dense", (w1, b1)), ("dense_1", (w2, b2)), ("dropout", ()), ("dropout_1", ())]:
            group = f.create_group(f"layers/{name}/vars")
            for i, array in enumerate(arrays):
                group.create_dataset(str(i), data=array)
        f.create_group("vars")
    x = STATES[:, 0, :].astype(np.float64)
    h = x @ w1 + b1
    h = 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))
    return folder, h @ w2 + b2


def test_the_text_classifier_gives_the_head_s_logits_on_keras_s_states(classifier):
    folder, want = classifier
    got = run(convert_keras_model(folder))
    assert got.shape == (4, CLASSES)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


# -- the Hugging Face door -------------------------------------------------------------------------------------


def test_the_door_writes_deberta_v2_s_relative_attention(tmp_path):
    folder = to_transformers(FILE, tmp_path / "hf")
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["DebertaV2Model"] and config["model_type"] == "deberta-v2"
    assert (config["position_buckets"], config["max_relative_positions"], config["type_vocab_size"]) == (4, 16, 0)
    assert config["pos_att_type"] == ["p2c", "c2p"] and config["position_biased_input"] is False
    assert config["hidden_act"] == "gelu" and config["layer_norm_eps"] == 1e-7


LOADER = r"""
import json, sys
import numpy as np
import torch
import transformers

jobs, given = json.load(open(sys.argv[1])), np.load(sys.argv[2])
out = {}
for name, auto, folder in jobs:
    model, info = getattr(transformers, auto).from_pretrained(folder, output_loading_info=True)
    model.eval()
    out[f"{name}/loading"] = np.array(json.dumps({k: sorted(v) for k, v in info.items() if v}))
    with torch.no_grad():
        result = model(input_ids=torch.from_numpy(given["ids"]), attention_mask=torch.from_numpy(given["mask"]))
    out[name] = (result.last_hidden_state if name == "backbone" else result.logits).numpy()
out["blocked"] = np.array([sys.modules[name] is None for name in ("keras", "keras_hub", "attnzoo")])
np.savez(sys.argv[3], **out)
"""


@pytest.fixture(scope="module")
def loaded(classifier, tmp_path_factory):
    root = tmp_path_factory.mktemp("deberta_hf")
    jobs = [
        ("backbone", "AutoModel", str(to_transformers(FILE, root / "backbone"))),
        ("task", "AutoModelForSequenceClassification", str(to_transformers(classifier[0], root / "task"))),
    ]
    (root / "jobs.json").write_text(json.dumps(jobs))
    np.savez(root / "given.npz", ids=TOKENS.astype(np.int64), mask=PADDING.astype(np.int64))
    proc = run_without_keras(LOADER, str(root / "jobs.json"), str(root / "given.npz"), str(root / "out.npz"), cwd=root)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return dict(np.load(root / "out.npz"))


@pytest.mark.slow
def test_transformers_loads_both_folders_without_keras_and_gives_keras_s_outputs(loaded, classifier):
    assert loaded["blocked"].all()
    assert json.loads(str(loaded["backbone/loading"])) == {} and json.loads(str(loaded["task/loading"])) == {}
    worst = float(np.abs(loaded["backbone"] - STATES)[KEPT].max())
    print(f"DebertaV2Model: max difference {worst:.3g} at kept positions")  # shown with -s
    assert worst <= 1e-5
    np.testing.assert_allclose(loaded["task"], classifier[1], atol=1e-5, rtol=0)
