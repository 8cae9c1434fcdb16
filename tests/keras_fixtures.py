"""Build Keras attention layers with random weights, run them, and save weights, inputs and outputs.

Run by tests/test_keras.py in a subprocess (KERAS_BACKEND=torch must be set before Keras is imported):

    python tests/keras_fixtures.py OUT_DIR

Writes, per case, ``<case>.weights.h5`` (keras 3), ``<case>.h5`` (legacy, written by Keras's own
``model.save``), and one ``fixtures.npz`` with the inputs and Keras's outputs of every run, plus
``cases.json`` describing them. Nothing here uses attnzoo: the expected values are Keras's.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "torch")
warnings.filterwarnings("ignore")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

rng = np.random.default_rng(0)


def rand(*shape):
    return rng.standard_normal(shape).astype("float32")


@keras.saving.register_keras_serializable(package="attnzoo_tests")
class LabelWiseAttention(keras.layers.Layer):
    """Chalkidis et al. 2019's label-wise attention, as in the Keras original (mask ignored)."""

    def __init__(self, n_classes, **kwargs):
        super().__init__(**kwargs)
        self.n_classes = n_classes

    def build(self, input_shape):
        h = input_shape[-1]
        self.Wa = self.add_weight(name="Wa", shape=(self.n_classes, h), initializer="he_normal")
        self.Wo = self.add_weight(name="Wo", shape=(self.n_classes, h), initializer="he_normal")
        self.bo = self.add_weight(name="bo", shape=(self.n_classes,), initializer="zeros")

    def call(self, x):
        a = ops.softmax(ops.einsum("bth,lh->blt", x, self.Wa), axis=-1)
        reps = ops.einsum("blt,bth->blh", a, x)
        return ops.sigmoid(ops.sum(reps * self.Wo, axis=-1) + self.bo)

    def get_config(self):
        return {**super().get_config(), "n_classes": self.n_classes}


@keras.saving.register_keras_serializable(package="attnzoo_tests")
class Seed000Attention(keras.layers.Layer):
    """Seed 000's Keras layer: Ws [C, E] glorot-uniform, softmax_T(tanh(Ws Hᵀ)) H."""

    def __init__(self, class_num, **kwargs):
        super().__init__(**kwargs)
        self.class_num = class_num

    def build(self, input_shape):
        self.Ws = self.add_weight(name="Ws", shape=(self.class_num, input_shape[-1]), initializer="glorot_uniform")

    def call(self, x):
        at = ops.tanh(ops.einsum("ce,bte->bct", self.Ws, x))
        return ops.einsum("bct,bte->bce", ops.softmax(at, axis=-1), x)

    def get_config(self):
        return {**super().get_config(), "class_num": self.class_num}


def randomise(layer):
    layer.set_weights([rand(*w.shape) * 0.5 for w in layer.get_weights()])


def save(model, out: Path, case: str):
    model.save_weights(out / f"{case}.weights.h5")
    model.save(out / f"{case}.h5")  # Keras writes the legacy, name-keyed layout for .h5


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    cases: dict[str, dict] = {}
    q, v, k = rand(2, 4, 6), rand(2, 5, 6), rand(2, 5, 6)
    q_mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], bool)
    v_mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]], bool)
    arrays.update({"q": q, "v": v, "k": k, "q_mask": q_mask, "v_mask": v_mask})

    def record(case, run, result):
        outs = result if isinstance(result, (tuple, list)) else (result,)
        for i, o in enumerate(outs):
            arrays[f"{case}/{run}/{i}"] = ops.convert_to_numpy(o)

    for case, kwargs in {
        "attention_dot": {},
        "attention_scaled": {"use_scale": True},
        "attention_concat": {"score_mode": "concat", "use_scale": True},
    }.items():
        layer = keras.layers.Attention(**kwargs)
        qi, vi, ki = keras.Input((4, 6)), keras.Input((5, 6)), keras.Input((5, 6))
        model = keras.Model([qi, vi, ki], layer([qi, vi, ki]))
        randomise(layer)
        record(case, "plain", layer([q, v, k]))
        record(case, "masked", layer([q, v, k], mask=[q_mask, v_mask], return_attention_scores=True))
        record(
            case, "causal", layer([q, v, k], mask=[None, v_mask], use_causal_mask=True, return_attention_scores=True)
        )
        save(model, out, case)
        cases[case] = {
            "name": "keras_dot",
            "config": {"use_scale": kwargs.get("use_scale", False), "score_mode": kwargs.get("score_mode", "dot")},
        }

    for case, kwargs in {"additive": {}, "additive_noscale": {"use_scale": False}}.items():
        layer = keras.layers.AdditiveAttention(**kwargs)
        qi, vi = keras.Input((4, 6)), keras.Input((5, 6))
        model = keras.Model([qi, vi], layer([qi, vi]))
        randomise(layer)
        record(case, "plain", layer([q, v]))
        record(case, "masked", layer([q, v], mask=[q_mask, v_mask], return_attention_scores=True))
        record(case, "causal", layer([q, v], mask=[None, v_mask], use_causal_mask=True, return_attention_scores=True))
        save(model, out, case)
        cases[case] = {"name": "keras_additive", "config": {"use_scale": kwargs.get("use_scale", True)}}

    qm, vm, km = rand(2, 4, 6), rand(2, 5, 5), rand(2, 5, 8)
    attention_mask = np.ones((2, 4, 5), bool)
    attention_mask[0, :, 3:] = False
    attention_mask[1, 2, 1] = False
    arrays.update({"mha_q": qm, "mha_v": vm, "mha_k": km, "mha_mask": attention_mask})
    for case, kwargs in {
        "mha": {"num_heads": 2, "key_dim": 3, "value_dim": 4, "output_shape": 7},
        "mha_nobias": {"num_heads": 3, "key_dim": 2, "use_bias": False},
    }.items():
        layer = keras.layers.MultiHeadAttention(**kwargs)
        qi, vi, ki = keras.Input((4, 6)), keras.Input((5, 5)), keras.Input((5, 8))
        model = keras.Model([qi, vi, ki], layer(qi, vi, ki))
        randomise(layer)
        record(case, "plain", layer(qm, vm, km))
        record(case, "masked", layer(qm, vm, km, attention_mask=attention_mask, return_attention_scores=True))
        record(case, "causal", layer(qm, vm, km, use_causal_mask=True, return_attention_scores=True))
        save(model, out, case)
        cases[case] = {"name": "keras_mha", "config": kwargs}

    x = rand(2, 6, 8)
    arrays["x"] = x
    for case, layer, config in (
        ("lwan", LabelWiseAttention(5), {"num_labels": 5, "output": "probs"}),
        ("keras_attn", Seed000Attention(3), {"num_classes": 3}),
    ):
        xi = keras.Input((6, 8))
        model = keras.Model(xi, layer(xi))
        randomise(layer)
        record(case, "plain", layer(x))
        save(model, out, case)
        cases[case] = {"name": case, "config": config}

    np.savez(out / "fixtures.npz", **arrays)
    (out / "cases.json").write_text(json.dumps({"keras_version": keras.__version__, "cases": cases}, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
