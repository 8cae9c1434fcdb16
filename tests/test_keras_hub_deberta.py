"""keras-hub's DeBERTa-v3, converted without keras-hub (attnzoo/keras/converters/hub_deberta_v3.py), and its
Hugging Face form.

The reference is Keras: tests/data/keras_hub_encoders/deberta_v3.keras is a tiny ``DebertaV3Backbone``
(bucket_size 4, so that distances past 2 fall in the log buckets) made by keras-hub 0.32
(tests/keras_hub_encoder_fixtures.py), and expected.npz holds Keras's outputs on a right-padded batch (rows
of 12, 7, 1 and 10 tokens); the port must give them within 1e-5 at every kept position. The fixture has no
left-padded batch. ``deberta_v3_classifier_preset`` beside it is a ``DebertaV3TextClassifier`` (3 classes,
its own seeded backbone) as keras-hub's ``save_to_preset`` writes it; expected.npz holds Keras's logits on
the same kind of batch, the reference for the port's within 1e-5.

The slow tier writes both through the Hugging Face door and loads them with transformers' Auto classes
(``AutoModel``, ``AutoModelForSequenceClassification``) in a child process where keras, keras_hub and
attnzoo cannot be imported; transformers' states and logits must be Keras's within 1e-5 (at every kept
position: transformers masks the padded keys as keras-hub does). On the backbone's rows padded on the left,
which the fixture lacks, transformers (a peer implementation) is the reference for the port's states at the
real tokens.
"""

from __future__ import annotations

import io
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
from attnzoo.layers.positions import log_buckets

from .conftest import run_without_keras
from .test_keras_hub_encoders import DATA, EXPECTED

FILE = DATA / "deberta_v3.keras"
TOKENS, PADDING = EXPECTED["deberta_v3/in/token_ids"], EXPECTED["deberta_v3/in/padding_mask"]
STATES = EXPECTED["deberta_v3/out/output"]
KEPT = PADDING.astype(bool)
CLASSIFIER = DATA / "deberta_v3_classifier_preset"
C_TOKENS = EXPECTED["deberta_v3_classifier/in/token_ids"]
C_PADDING = EXPECTED["deberta_v3_classifier/in/padding_mask"]
LOGITS = EXPECTED["deberta_v3_classifier/out/output"]


def _left_padded() -> tuple[np.ndarray, np.ndarray]:
    """The fixture's rows with their real tokens moved to the end (the padding first)."""
    ids, mask = np.zeros_like(TOKENS), np.zeros_like(PADDING)
    for row, count in enumerate(PADDING.sum(axis=1)):
        ids[row, -count:], mask[row, -count:] = TOKENS[row, :count], 1
    return ids, mask


LEFT = _left_padded()


def run(model, tokens: np.ndarray = TOKENS, padding: np.ndarray = PADDING) -> np.ndarray:
    given = {"token_ids": torch.from_numpy(tokens), "padding_mask": torch.from_numpy(padding)}
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


def test_a_row_with_no_key_gets_what_keras_softmax_gives_it():
    """A row whose padding mask is all 0: Keras's masked ``Softmax`` gives every weight 0, so each layer's
    attention is its output projection's bias alone. The reference is that, written in numpy from the
    file's weights: embedding -> layer norm -> per layer, LN(x + b_out) -> LN(x + W₂ gelu(W₁ x + b₁) + b₂)."""
    with zipfile.ZipFile(FILE) as archive, h5py.File(io.BytesIO(archive.read("model.weights.h5"))) as f:
        w = {name: [f[f"layers/{name}"][k][()] for k in sorted(f[f"layers/{name}"])] for name in _GROUPS}
        layers = [
            {part: [f[f"layers/{name}/{part}/vars/{i}"][()] for i in "01"] for part in _PARTS}
            for name in ("disentangled_attention_encoder", "disentangled_attention_encoder_1")
        ]

    def norm(x, scale_and_shift):
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-7) * scale_and_shift[0] + scale_and_shift[1]

    ids = TOKENS[:1]
    x = norm(w["reversible_embedding/vars"][0][ids].astype(np.float64), w["layer_normalization/vars"])
    for layer in layers:
        x = norm(x + layer["_self_attention_layer/_output_dense"][1], layer["_self_attention_layer_norm"])
        kernel, bias = layer["_feedforward_intermediate_dense"]
        h = x @ kernel + bias
        h = 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))
        kernel, bias = layer["_feedforward_output_dense"]
        x = norm(x + h @ kernel + bias, layer["_feedforward_layer_norm"])
    with torch.no_grad():
        got = convert_keras_model(FILE)(torch.zeros(1, 12, dtype=torch.int32), torch.from_numpy(ids)).numpy()
    np.testing.assert_allclose(got, x, atol=1e-5, rtol=0)


_GROUPS = ("reversible_embedding/vars", "layer_normalization/vars")
_PARTS = (
    "_self_attention_layer/_output_dense",
    "_self_attention_layer_norm",
    "_feedforward_intermediate_dense",
    "_feedforward_output_dense",
    "_feedforward_layer_norm",
)


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


def test_a_re_wrapped_encoder_layer_with_one_bucket_is_refused_by_name():
    """The layer's own converter refuses it too (a graph keras-hub wrote, not attnzoo's builder)."""
    from types import SimpleNamespace

    from attnzoo.keras.converters.hub_deberta_v3 import convert_disentangled_encoder
    from attnzoo.keras.registry import Refused

    config = {"num_heads": 2, "bucket_size": 1, "max_position_embeddings": 16, "activation": "gelu"}
    shapes = [(32, 2, 16), (2, 16)] * 3 + [(32, 32), (32,)] + [(32,)] * 2 + [(32, 64), (64,), (64, 32)] + [(32,)] * 3
    with pytest.raises(Refused, match=r"bucket_size 1: keras-hub's log buckets divide by bucket_size // 2 = 0"):
        convert_disentangled_encoder(SimpleNamespace(config=config), [np.zeros(s, "float32") for s in shapes], None)


# -- DebertaV3TextClassifier, as keras-hub's preset folder --------------------------------------------------------


def test_the_text_classifier_s_preset_folder_gives_keras_s_logits(tmp_path):
    model = convert_keras_model(CLASSIFIER)
    got = run(model, C_TOKENS, C_PADDING)
    assert got.shape == LOGITS.shape == (4, 3)
    np.testing.assert_allclose(got, LOGITS, atol=1e-5, rtol=0)
    again = attnzoo.load(attnzoo.save(model, tmp_path / "classifier"))
    np.testing.assert_allclose(run(again, C_TOKENS, C_PADDING), LOGITS, atol=1e-5, rtol=0)


# -- the Hugging Face door -------------------------------------------------------------------------------------


def test_the_door_writes_deberta_v2_s_relative_attention(tmp_path):
    folder = to_transformers(FILE, tmp_path / "hf")
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["DebertaV2Model"] and config["model_type"] == "deberta-v2"
    assert (config["position_buckets"], config["max_relative_positions"], config["type_vocab_size"]) == (4, 16, 0)
    assert config["pos_att_type"] == ["p2c", "c2p"] and config["position_biased_input"] is False
    assert config["hidden_act"] == "gelu" and config["layer_norm_eps"] == 1e-7
    assert config["share_att_key"] is True and config["norm_rel_ebd"] == "layer_norm"


LOADER = r"""
import json, sys
import numpy as np
import torch
import transformers

given, out = np.load(sys.argv[2]), {}
for name, auto, folder, batches in json.load(open(sys.argv[1])):
    model, info = getattr(transformers, auto).from_pretrained(folder, output_loading_info=True)
    model.eval()
    out[f"{name}/loading"] = np.array(json.dumps({k: sorted(v) for k, v in info.items() if v}))
    with torch.no_grad():
        for batch in batches:
            ids, mask = (torch.from_numpy(given[f"{batch}_{key}"]) for key in ("ids", "mask"))
            result = model(input_ids=ids, attention_mask=mask)
            out[f"{name}/{batch}"] = (result.last_hidden_state if name == "backbone" else result.logits).numpy()
out["blocked"] = np.array([sys.modules[name] is None for name in ("keras", "keras_hub", "attnzoo")])
np.savez(sys.argv[3], **out)
"""


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    root = tmp_path_factory.mktemp("deberta_hf")
    jobs = [
        ("backbone", "AutoModel", str(to_transformers(FILE, root / "backbone")), ["right", "left"]),
        ("task", "AutoModelForSequenceClassification", str(to_transformers(CLASSIFIER, root / "task")), ["task"]),
    ]
    (root / "jobs.json").write_text(json.dumps(jobs))
    batches = {"right_ids": TOKENS, "right_mask": PADDING, "left_ids": LEFT[0], "left_mask": LEFT[1]}
    batches |= {"task_ids": C_TOKENS, "task_mask": C_PADDING}
    np.savez(root / "given.npz", **{key: value.astype(np.int64) for key, value in batches.items()})
    proc = run_without_keras(LOADER, str(root / "jobs.json"), str(root / "given.npz"), str(root / "out.npz"), cwd=root)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return dict(np.load(root / "out.npz"))


@pytest.mark.slow
def test_transformers_loads_both_folders_without_keras_and_gives_keras_s_outputs(loaded):
    assert loaded["blocked"].all()
    assert json.loads(str(loaded["backbone/loading"])) == {} and json.loads(str(loaded["task/loading"])) == {}
    worst = float(np.abs(loaded["backbone/right"] - STATES)[KEPT].max())
    print(f"DebertaV2Model: max difference {worst:.3g} at kept positions")  # shown with -s
    assert worst <= 1e-5
    worst = float(np.abs(loaded["task/task"] - LOGITS).max())
    print(f"DebertaV2ForSequenceClassification: max difference {worst:.3g} from Keras's logits")
    assert worst <= 1e-5


@pytest.mark.slow
def test_padded_on_the_left_the_port_gives_transformers_states_at_the_real_tokens(loaded):
    ids, mask = LEFT
    with torch.no_grad():
        got = convert_keras_model(FILE)(torch.from_numpy(mask), torch.from_numpy(ids)).numpy()
    real = mask.astype(bool)
    worst = float(np.abs(got - loaded["backbone/left"])[real].max())
    print(f"left-padded: max difference {worst:.3g} from transformers at the real tokens")  # shown with -s
    assert worst <= 1e-5
