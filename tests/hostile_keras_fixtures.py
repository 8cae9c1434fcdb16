"""Make tests/data/hostile/base.keras with keras 3 (run once; the file is committed).

    KERAS_BACKEND=torch python tests/hostile_keras_fixtures.py tests/data/hostile

With ``--plant FILE.json`` (``{"names": {default name: name}, "model_name": NAME}``, a file because a
name may hold a NUL, which no command line does) it builds the same model with those names instead, saves
it as ``hostile.keras`` and writes ``keras.npz``: the inputs, then Keras's own outputs (the slow test of
tests/test_hostile_keras_names.py: names Keras accepts, Keras as the oracle).

A small model with a layer of each kind the hostile probe of issue 44 named (Embedding, LSTM,
GlobalAveragePooling1D, Dense, Masking) on two inputs, weights moved off their initial values.
tests/test_hostile_keras_names.py plants hostile names, versions and values into copies of it (by
editing the archive's config.json, so names Keras itself refuses can be planted too).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import json  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402

NAMES = ("ids", "features", "embedding", "lstm", "pool", "dense", "head", "masking", "features_dense", "features_pool")


def inputs() -> list[np.ndarray]:
    """Ids with padding at the end, the start and the middle; features with steps at Masking's value."""
    ids = np.array([[3, 5, 0, 0, 0, 0], [1, 2, 3, 4, 5, 6], [0, 0, 7, 8, 0, 9]], dtype="int32")
    features = np.random.default_rng(1).standard_normal((3, 6, 4)).astype("float32")
    features[0, 4:] = 0.5
    features[2, :2] = 0.5
    return [ids, features]


def build(names: dict[str, str] | None = None, model_name: str = "hostile_base") -> keras.Model:
    keras.utils.set_random_seed(0)
    n = {**{k: k for k in NAMES}, **(names or {})}
    ids = keras.Input((None,), dtype="int32", name=n["ids"])
    features = keras.Input((None, 4), name=n["features"])
    h = keras.layers.Embedding(20, 6, mask_zero=True, name=n["embedding"])(ids)
    h = keras.layers.LSTM(5, return_sequences=True, name=n["lstm"])(h)
    h = keras.layers.GlobalAveragePooling1D(name=n["pool"])(h)
    h = keras.layers.Dense(4, activation="tanh", name=n["dense"])(h)
    text = keras.layers.Dense(3, activation="softmax", name=n["head"])(h)
    m = keras.layers.Masking(mask_value=0.5, name=n["masking"])(features)
    m = keras.layers.Dense(3, name=n["features_dense"])(m)
    pooled = keras.layers.GlobalAveragePooling1D(name=n["features_pool"])(m)
    model = keras.Model([ids, features], [text, pooled], name=model_name)
    rng = np.random.default_rng(0)
    for layer in model.layers:  # off the initial values (zero biases would hide a bias that is lost)
        layer.set_weights([w + rng.normal(0, 0.3, w.shape).astype(w.dtype) for w in layer.get_weights()])
    return model


if __name__ == "__main__":
    out = sys.argv[1]
    if len(sys.argv) == 2:
        build().save(os.path.join(out, "base.keras"))
    else:
        assert sys.argv[2] == "--plant", "usage: hostile_keras_fixtures.py OUT [--plant FILE.json]"
        with open(sys.argv[3], encoding="utf-8") as handle:
            plant = json.load(handle)
        model = build(plant["names"], plant["model_name"])
        model.save(os.path.join(out, "hostile.keras"))
        x = inputs()
        outputs = [keras.ops.convert_to_numpy(o) for o in model(x, training=False)]
        np.savez(os.path.join(out, "keras.npz"), *x, *outputs)
