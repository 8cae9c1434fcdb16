"""Make tests/data/hostile/base.keras with keras 3 (run once; the file is committed).

    KERAS_BACKEND=torch python tests/hostile_keras_fixtures.py tests/data/hostile

A small model with a layer of each kind the hostile probe of issue 44 named (Embedding, LSTM,
GlobalAveragePooling1D, Dense, Masking) on two inputs, weights moved off their initial values.
tests/test_hostile_keras_names.py plants hostile names, versions and values into copies of it (by
editing the archive's config.json, so names Keras itself refuses can be planted too).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402


def build() -> keras.Model:
    keras.utils.set_random_seed(0)
    ids = keras.Input((None,), dtype="int32", name="ids")
    features = keras.Input((None, 4), name="features")
    h = keras.layers.Embedding(20, 6, mask_zero=True, name="embedding")(ids)
    h = keras.layers.LSTM(5, return_sequences=True, name="lstm")(h)
    h = keras.layers.GlobalAveragePooling1D(name="pool")(h)
    h = keras.layers.Dense(4, activation="tanh", name="dense")(h)
    text = keras.layers.Dense(3, activation="softmax", name="head")(h)
    m = keras.layers.Masking(mask_value=0.5, name="masking")(features)
    m = keras.layers.Dense(3, name="features_dense")(m)
    pooled = keras.layers.GlobalAveragePooling1D(name="features_pool")(m)
    model = keras.Model([ids, features], [text, pooled], name="hostile_base")
    rng = np.random.default_rng(0)
    for layer in model.layers:  # off the initial values (zero biases would hide a bias that is lost)
        layer.set_weights([w + rng.normal(0, 0.3, w.shape).astype(w.dtype) for w in layer.get_weights()])
    return model


if __name__ == "__main__":
    build().save(os.path.join(sys.argv[1], "base.keras"))
