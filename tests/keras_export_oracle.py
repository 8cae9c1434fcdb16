"""Keras 3 (torch backend) as the oracle of deployment: the models whose exports must be right at every
size Keras left open, saved with Keras's own outputs at three sizes each.

    KERAS_BACKEND=torch python tests/keras_export_oracle.py OUT_DIR

writes ``<name>.keras`` and ``<name>.npz`` (``x<k>`` / ``y<k>`` for k = 0, 1, 2; a second input is
``x<k>_1``) for: a text CNN with two strided ``same`` Conv1D, an image CNN with an open (None, None, 3)
input, a RandomFlip and strided ``same`` Conv2D and pooling, a masked BiLSTM, and a GRU seq2seq (encoder state into
the decoder, two open lengths), and three image models at open height and width checked at six sizes
(a transposed convolution after strided ``same`` ones, a residual ``add`` of strided ``same`` branches, a
1x1 convolution's spatial output). Integer rows are right-padded (ids 0) in the last row. It also writes
``flip.keras`` (RandomFlip in each mode) and ``flip.npz``: for each mode, which transformation Keras's
``training=True`` applied to each of 400 images (0 none, 1 left-right, 2 up-down, 3 both). Nothing here
uses attnzoo.
"""

from __future__ import annotations

import os
import sys
import warnings

os.environ.setdefault("KERAS_BACKEND", "torch")
warnings.filterwarnings("ignore")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import layers  # noqa: E402


def text_cnn():
    inp = keras.Input((None,), dtype="int32", name="ids")
    x = layers.Embedding(40, 8)(inp)
    x = layers.Conv1D(8, 3, strides=2, padding="same", activation="relu")(x)
    x = layers.Conv1D(8, 5, strides=3, padding="same", activation="relu")(x)
    x = layers.GlobalMaxPooling1D()(x)
    return keras.Model(inp, layers.Dense(3)(x))


def image_cnn():
    inp = keras.Input((None, None, 3), name="image")
    x = layers.RandomFlip("horizontal")(inp)  # keras-io's vision models augment inside the model
    x = layers.Conv2D(6, 3, strides=2, padding="same", activation="relu")(x)
    x = layers.MaxPooling2D(3, strides=2, padding="same")(x)
    x = layers.Conv2D(6, 3, strides=2, padding="same")(x)
    x = layers.AveragePooling2D(2, padding="same")(x)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inp, layers.Dense(4, activation="softmax")(x))


def masked_bilstm():
    inp = keras.Input((None,), dtype="int32", name="ids")
    x = layers.Embedding(30, 6, mask_zero=True)(inp)
    x = layers.Bidirectional(layers.LSTM(5, return_sequences=True))(x)
    x = layers.Bidirectional(layers.LSTM(4))(x)
    return keras.Model(inp, layers.Dense(3)(x))


def gru_seq2seq():
    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    _, state = layers.GRU(7, return_state=True)(layers.Embedding(20, 6, mask_zero=True)(source))
    y = layers.GRU(7, return_sequences=True)(layers.Embedding(20, 6, mask_zero=True)(target), initial_state=state)
    return keras.Model([source, target], layers.Dense(20)(y))


def two_heads():
    """A dict of two outputs: a label per text and a tag per token."""
    inp = keras.Input((None,), dtype="int32", name="ids")
    x = layers.Embedding(40, 8)(inp)
    pooled = layers.GlobalMaxPooling1D()(layers.Conv1D(8, 3, strides=2, padding="same", activation="relu")(x))
    return keras.Model(inp, {"topic": layers.Dense(3, name="topic_head")(pooled), "tags": layers.Dense(2)(x)})


def transposed():
    """A decoder's upsampling: strided ``same`` convolution, pooling, separable, transposed convolution."""
    inp = keras.Input((None, None, 3), name="image")
    x = layers.Conv2D(4, 3, strides=2, padding="same")(inp)
    x = layers.MaxPooling2D(3, 2, padding="same")(x)
    x = layers.SeparableConv2D(4, 3, padding="same")(x)
    x = layers.Conv2DTranspose(4, 3, strides=2, padding="same")(x)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inp, layers.Dense(2)(x))


def residual():
    """keras-io's residual block: a strided ``same`` pooling added to a strided 1x1 convolution."""
    inp = keras.Input((None, None, 3), name="image")
    x = layers.Conv2D(4, 3, padding="same", activation="relu")(inp)
    pooled = layers.MaxPooling2D(3, strides=2, padding="same")(x)
    x = layers.add([pooled, layers.Conv2D(4, 1, strides=2, padding="same")(x)])
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inp, layers.Dense(2)(x))


def spatial_out():
    """A spatial output: a strided ``same`` convolution, then a 1x1 one (a map per pixel)."""
    inp = keras.Input((None, None, 3), name="image")
    return keras.Model(inp, layers.Conv2D(1, 1)(layers.Conv2D(4, 3, strides=2, padding="same")(inp)))


IMAGES = ("image_cnn", "transposed", "residual", "spatial_out")
SIZES = {"text_cnn": (9, 16, 31), "image_cnn": ((5, 7), (9, 9), (32, 17)), "masked_bilstm": (5, 9, 17)}
SIZES["gru_seq2seq"] = ((5, 3), (9, 12), (17, 6))
SIZES["two_heads"] = (9, 16, 31)
for _name in IMAGES[1:]:  # three odd sizes and three even ones on each axis
    SIZES[_name] = ((17, 19), (31, 33), (97, 131), (16, 20), (64, 48), (40, 130))


def inputs(name, size, rng):
    if name in IMAGES:
        return [rng.standard_normal((2, *size, 3)).astype("float32")]
    sizes = size if isinstance(size, tuple) else (size,)
    out = []
    for length in sizes:
        ids = rng.integers(1, 20, (3, length)).astype("int32")
        ids[-1, length // 2 + 1 :] = 0  # a right-padded row
        out.append(ids)
    return out


def flips(out):
    rng = np.random.default_rng(0)
    images = rng.standard_normal((400, 5, 6, 3)).astype("float32")
    inp = keras.Input((5, 6, 3), name="image")
    modes = ("horizontal", "vertical", "horizontal_and_vertical")
    model = keras.Model(inp, [layers.RandomFlip(m, seed=i)(inp) for i, m in enumerate(modes)])
    model.save(f"{out}/flip.keras")
    got = model(images, training=True)
    kinds = {}
    for mode, y in zip(modes, got, strict=True):
        y = keras.ops.convert_to_numpy(y)
        candidates = [images, images[:, :, ::-1], images[:, ::-1], images[:, ::-1, ::-1]]
        match = np.stack([np.abs(y - c).reshape(len(y), -1).max(1) == 0 for c in candidates], axis=1)
        assert (match.sum(1) >= 1).all(), "every Keras output is one of the four flips"
        kinds[mode] = match.argmax(1)
    np.savez(f"{out}/flip.npz", images=images, **kinds)


def main(out):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    for name, build in (
        ("text_cnn", text_cnn),
        ("image_cnn", image_cnn),
        ("masked_bilstm", masked_bilstm),
        ("gru_seq2seq", gru_seq2seq),
        ("two_heads", two_heads),
        ("transposed", transposed),
        ("residual", residual),
        ("spatial_out", spatial_out),
    ):
        model = build()
        for w in model.weights:  # off their initial values (zero biases would hide a misplaced bias)
            w.assign(np.asarray(rng.normal(0, 0.4, w.shape), dtype="float32"))
        model.save(f"{out}/{name}.keras")
        arrays = {}
        for k, size in enumerate(SIZES[name]):
            xs = inputs(name, size, rng)
            for i, x in enumerate(xs):
                arrays[f"x{k}" + (f"_{i}" if i else "")] = x
            y = model(xs if len(xs) > 1 else xs[0], training=False)  # the random layers' default is True
            if isinstance(y, dict):  # y<k>.<key>
                arrays.update({f"y{k}.{key}": keras.ops.convert_to_numpy(v) for key, v in y.items()})
            else:
                arrays[f"y{k}"] = keras.ops.convert_to_numpy(y)
        np.savez(f"{out}/{name}.npz", **arrays)
    flips(out)


if __name__ == "__main__":
    main(sys.argv[1])
