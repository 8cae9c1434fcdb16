"""Keras 3 (torch backend) as the oracle of named small models whose inputs the case chooses, run as a
subprocess by tests/keras_live.py:

    KERAS_BACKEND=torch python tests/keras_live_cases.py OUT_DIR CASE [CASE ...]

For each case it builds the model, moves every float weight off its initial value (seeded; a variance
kept positive; Normalization's cached constants refreshed), saves ``<case>.keras`` and legacy
``<case>.h5``, and writes ``<case>.npz`` with the case's inputs (``in/<i>``) and Keras's outputs
(``out/<k>``). Nothing here uses attnzoo: the expected values are Keras's.
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

CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def _frames_mask(batch: int, steps: int) -> np.ndarray:
    """Masks (as 0/1 floats) of every pattern: all kept, right-padded, left-padded, a gap, none kept."""
    keep = np.ones((batch, steps), dtype="float32")
    keep[1, steps // 2 :] = 0
    keep[2, : steps // 2] = 0
    keep[3, 1:-1] = 0
    keep[4] = 0
    return keep


@case
def numeric_preprocessing(rng):
    """CategoryEncoding in its three modes (one_hot of [B], [B, 1] and [B, n]), Discretization in its
    four, an adapted Normalization and one with invert=True."""
    codes = keras.Input((3,), dtype="int32", name="codes")
    code = keras.Input((1,), dtype="int32", name="code")
    flat = keras.Input((), dtype="int32", name="flat")
    values = keras.Input((4,), name="values")
    norm = layers.Normalization()
    norm.adapt(rng.standard_normal((20, 4)).astype("float32") * 3 + 1)
    edges = [-1.0, 0.0, 0.5, 2.0]
    outputs = [
        layers.CategoryEncoding(5, output_mode="one_hot")(code),
        layers.CategoryEncoding(5, output_mode="one_hot")(flat),
        layers.CategoryEncoding(5, output_mode="one_hot")(codes),
        layers.CategoryEncoding(6, output_mode="multi_hot")(codes),
        layers.CategoryEncoding(6, output_mode="count")(codes),
        layers.Discretization(edges)(values),
        layers.Discretization(edges, output_mode="one_hot")(layers.Reshape((4, 1))(values)),
        layers.Discretization(edges, output_mode="multi_hot")(values),
        layers.Discretization(edges, output_mode="count")(values),
        norm(values),
        layers.Normalization(mean=[1.0, 2.0, 0.0, -1.0], variance=[4.0, 1.0, 0.25, 9.0], invert=True)(values),
    ]
    dense = layers.Dense(2)(layers.Concatenate()([outputs[4], outputs[8], outputs[9]]))
    model = keras.Model([codes, code, flat, values], [*outputs, dense])
    x = rng.standard_normal((6, 4)).astype("float32") * 2
    x[0] = edges  # on the boundaries: the bin above
    inputs = [
        rng.integers(0, 5, size=(6, 3)).astype("int32"),
        rng.integers(0, 5, size=(6, 1)).astype("int32"),
        rng.integers(0, 5, size=(6,)).astype("int32"),
        x,
    ]
    return model, inputs


@case
def next_frame(rng):
    """keras-io's next-frame prediction at a small size: ConvLSTM2D (same padding, relu) twice with
    BatchNormalization, then a Conv3D over time and space with a sigmoid."""
    inp = keras.Input((None, 6, 6, 1), name="frames")
    x = layers.ConvLSTM2D(4, (3, 3), padding="same", return_sequences=True, activation="relu")(inp)
    x = layers.BatchNormalization()(x)
    x = layers.ConvLSTM2D(3, (1, 1), padding="same", return_sequences=True, activation="relu")(x)
    out = layers.Conv3D(1, (3, 3, 3), activation="sigmoid", padding="same")(x)
    return keras.Model(inp, out), [rng.standard_normal((2, 5, 6, 6, 1)).astype("float32")]


@case
def convlstm_variants(rng):
    """ConvLSTM1D/2D/3D with an explicit mask of every pattern, return_sequences, return_state,
    go_backwards, strides, dilation, valid padding, no bias, another recurrent activation, a softmax
    activation (over the channels), initial_state from another ConvLSTM's states."""
    steps = 4
    seq1 = keras.Input((steps, 7, 2), name="seq1")
    seq2 = keras.Input((steps, 5, 6, 2), name="seq2")
    seq3 = keras.Input((steps, 3, 4, 3, 1), name="seq3")
    keep = keras.Input((steps,), name="keep")
    out1, h1, c1 = layers.ConvLSTM1D(3, 3, strides=2, return_state=True, go_backwards=True)(seq1, mask=keep)
    all1 = layers.ConvLSTM1D(2, 2, padding="same", return_sequences=True, use_bias=False)(seq1, mask=keep)
    out2 = layers.ConvLSTM2D(
        3, (3, 2), dilation_rate=(2, 1), recurrent_activation="hard_sigmoid", return_sequences=True, go_backwards=True
    )(seq2, mask=keep)
    last2 = layers.ConvLSTM2D(2, 2, strides=(2, 2), padding="same", activation="sigmoid")(seq2)
    soft2 = layers.ConvLSTM2D(3, 2, padding="same", activation="softmax", return_sequences=True)(seq2)
    out3 = layers.ConvLSTM3D(2, 2, padding="same", return_sequences=True)(seq3, mask=keep)
    resumed = layers.ConvLSTM1D(3, 3, strides=2, return_sequences=True)(seq1, initial_state=[h1, c1])
    model = keras.Model([seq1, seq2, seq3, keep], [out1, h1, c1, all1, out2, last2, soft2, out3, resumed])
    batch = 5
    inputs = [
        rng.standard_normal((batch, steps, 7, 2)).astype("float32"),
        rng.standard_normal((batch, steps, 5, 6, 2)).astype("float32"),
        rng.standard_normal((batch, steps, 3, 4, 3, 1)).astype("float32"),
        _frames_mask(batch, steps),
    ]
    return model, inputs


@case
def convlstm_channels_first(rng):
    """ConvLSTM2D with data_format='channels_first' (frames [B, T, C, H, W])."""
    inp = keras.Input((3, 2, 5, 4), name="frames")
    out = layers.ConvLSTM2D(3, 2, data_format="channels_first", return_sequences=True)(inp)
    return keras.Model(inp, out), [rng.standard_normal((2, 3, 2, 5, 4)).astype("float32")]


@case
def convlstm_stateful(rng):
    inp = keras.Input(batch_shape=(2, 3, 5, 2))
    return keras.Model(inp, layers.ConvLSTM1D(2, 2, stateful=True)(inp)), [
        rng.standard_normal((2, 3, 5, 2)).astype("float32")
    ]


def _mixed(policy):
    """Embedding, MultiHeadAttention, LayerNormalization, Conv1D, BatchNormalization, Dense in a mixed
    precision policy (each layer given it, as ``set_global_policy`` would), the last Dense in float32 as
    Keras's guide advises: on the CPU, Keras's torch backend computes float16 and bfloat16 as torch does."""

    def build(rng):
        ids = keras.Input((None,), dtype="int32", name="ids")
        x = layers.Embedding(20, 16, dtype=policy)(ids)
        x = layers.Add(dtype=policy)([x, layers.MultiHeadAttention(2, 8, dtype=policy)(x, x)])
        x = layers.LayerNormalization(dtype=policy)(x)
        x = layers.Conv1D(16, 3, padding="same", activation="relu", dtype=policy)(x)
        x = layers.BatchNormalization(dtype=policy)(x)
        x = layers.GlobalAveragePooling1D(dtype=policy)(x)
        x = layers.Dense(8, activation="gelu", dtype=policy)(x)
        out = layers.Dense(3, dtype="float32")(x)
        return keras.Model(ids, out), [rng.integers(0, 20, (64, 9)).astype("int32")]

    return build


CASES["mixed_float16"] = _mixed("mixed_float16")
CASES["mixed_bfloat16"] = _mixed("mixed_bfloat16")


def _randomise(model, rng):
    for weight in model.weights:
        if "float" not in str(weight.dtype):
            continue
        value = keras.ops.convert_to_numpy(weight)
        moved = rng.standard_normal(value.shape).astype("float32") * 0.4 + value * 0.5
        if "variance" in weight.path:
            moved = np.abs(moved) + 0.5
        weight.assign(moved)
    for layer in model.layers:
        if isinstance(layer, layers.Normalization) and layer.input_mean is None:
            layer.finalize_state()


def main(out: str, names: list[str]) -> None:
    os.makedirs(out, exist_ok=True)
    for name in names:
        rng = np.random.default_rng(sum(map(ord, name)))
        model, inputs = CASES[name](rng)
        _randomise(model, rng)
        model.save(os.path.join(out, f"{name}.keras"))
        model.save(os.path.join(out, f"{name}.h5"))
        outputs = model(inputs, training=False)
        outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        arrays = {f"in/{i}": x for i, x in enumerate(inputs)}
        arrays.update({f"out/{k}": keras.ops.convert_to_numpy(y) for k, y in enumerate(outputs)})
        np.savez(os.path.join(out, f"{name}.npz"), **arrays)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
