"""Keras 3 (torch backend) as the oracle of a converted model in training, run once as a subprocess:

    KERAS_BACKEND=torch python tests/keras_training_oracle.py OUT_DIR

writes into OUT_DIR, for the models below (weights moved off their initial values, seeded):

* ``<name>.keras``: the model as saved;
* ``<name>.npz``: ``x`` (padded inputs), ``y`` (labels), ``train`` (the outputs of one call with
  ``training=True``), ``eval`` (``training=False``), ``trainable`` and ``frozen`` (how many scalars Keras
  trains and keeps frozen);
* ``<name>.stepped.keras``: the model after that one ``training=True`` call (BatchNormalization's moving
  statistics updated);
* ``<name>.fitted.keras``: the model after ``fit`` on (x, y): SGD without momentum, batches of 4, no
  shuffling, the model's own loss;
* ``rnn_dropout.keras`` and ``rnn_dropout.npz``: an LSTM with ``dropout`` and ``recurrent_dropout`` and a
  GRU with ``dropout``, with the mean and the variance of each output over 400 calls in training.

Nothing here uses attnzoo: the expected values are Keras's.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

os.environ.setdefault("KERAS_BACKEND", "torch")
warnings.filterwarnings("ignore")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import layers  # noqa: E402

LEARNING_RATE = 0.1
STEPS = 3
BATCH = 4


def masked_text():
    """Embedding(mask_zero) -> BatchNormalization (masked moments) -> Dropout(0) -> LSTM -> Dense(sigmoid),
    with a frozen Dense beside: what a keras-io text classifier looks like, in training."""
    ids = keras.Input((None,), dtype="int32", name="ids")
    x = layers.Embedding(20, 6, mask_zero=True)(ids)
    x = layers.BatchNormalization(momentum=0.9)(x)
    x = layers.Dropout(0.0)(x)
    x = layers.LSTM(5, dropout=0.0, recurrent_dropout=0.0)(x)
    frozen = layers.Dense(5, activation="tanh", trainable=False, name="frozen")(x)
    x = layers.Add()([x, frozen])
    x = layers.Dense(3, activation="relu")(x)
    x = layers.BatchNormalization()(x)
    out = layers.Dense(1, activation="sigmoid", name="head")(x)
    model = keras.Model(ids, out, name="masked_text")
    model.compile(optimizer=keras.optimizers.SGD(LEARNING_RATE), loss="binary_crossentropy")
    return model


def conv_classes():
    """Conv1D -> BatchNormalization -> SpatialDropout1D(0) -> GlobalMaxPooling1D -> Dense -> softmax layer."""
    x_in = keras.Input((None, 4), name="features")
    x = layers.Conv1D(6, 3, padding="same")(x_in)
    x = layers.BatchNormalization(momentum=0.8, epsilon=1e-2)(x)
    x = layers.SpatialDropout1D(0.0)(x)
    x = layers.GlobalMaxPooling1D()(x)
    x = layers.Dense(3)(x)
    out = layers.Softmax()(x)
    model = keras.Model(x_in, out, name="conv_classes")
    model.compile(optimizer=keras.optimizers.SGD(LEARNING_RATE), loss="categorical_crossentropy")
    return model


def rnn_dropout():
    ids = keras.Input((None,), dtype="int32", name="ids")
    x = layers.Embedding(20, 6, mask_zero=True)(ids)
    lstm = layers.LSTM(4, dropout=0.4, recurrent_dropout=0.3)(x)
    gru = layers.GRU(3, dropout=0.5)(x)
    return keras.Model(ids, [lstm, gru], name="rnn_dropout")


def _dropout_moments(out: str, rng) -> None:
    model = rnn_dropout()
    _randomise(model, rng)
    x, _ = _data(model, rng)
    model.save(os.path.join(out, "rnn_dropout.keras"))
    calls = [[keras.ops.convert_to_numpy(y) for y in model(x, training=True)] for _ in range(400)]
    moments = {}
    for k in range(2):
        stacked = np.stack([c[k] for c in calls])
        moments[f"mean{k}"], moments[f"var{k}"] = stacked.mean(0), stacked.var(0)
    np.savez(os.path.join(out, "rnn_dropout.npz"), x=x, **moments)


def _data(model, rng):
    spec = model.inputs[0]
    if spec.dtype.startswith("int"):
        x = rng.integers(1, 20, size=(12, 7)).astype("int32")
        lengths = [7, 7, 5, 3, 7, 2, 6, 4, 1, 7, 5, 6]
        for i, n in enumerate(lengths):
            x[i, n:] = 0
        y = rng.integers(0, 2, size=(12, 1)).astype("float32")
    else:
        x = rng.standard_normal((12, 7, 4)).astype("float32")
        y = np.eye(3, dtype="float32")[rng.integers(0, 3, size=12)]
    return x, y


def _randomise(model, rng):
    for weight in model.weights:
        value = weight.numpy()
        moved = rng.standard_normal(value.shape).astype("float32") * 0.4 + value * 0.5
        if "variance" in weight.path:
            moved = np.abs(moved) + 0.5
        weight.assign(moved)


def _count(weights) -> int:
    return int(sum(np.prod(w.shape) for w in weights))


def main(out: str) -> None:
    rng = np.random.default_rng(0)
    for build in (masked_text, conv_classes):
        model = build()
        _randomise(model, rng)
        x, y = _data(model, rng)
        name = model.name
        model.save(os.path.join(out, f"{name}.keras"))
        evaluated = keras.ops.convert_to_numpy(model(x, training=False))
        trained = keras.ops.convert_to_numpy(model(x, training=True))  # one training call: moving statistics move
        model.save(os.path.join(out, f"{name}.stepped.keras"))
        np.savez(
            os.path.join(out, f"{name}.npz"),
            x=x,
            y=y,
            train=trained,
            eval=evaluated,
            trainable=_count(model.trainable_weights),
            frozen=_count(model.non_trainable_weights),
        )
        loss = model.loss
        model = keras.saving.load_model(os.path.join(out, f"{name}.keras"))
        model.compile(optimizer=keras.optimizers.SGD(LEARNING_RATE), loss=loss)
        model.fit(x[: BATCH * STEPS], y[: BATCH * STEPS], batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        model.save(os.path.join(out, f"{name}.fitted.keras"))
    _dropout_moments(out, rng)
    json.dump({"ok": True}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
