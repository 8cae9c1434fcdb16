"""Make the Keras 2 fixtures of tests/test_keras_models.py with tf_keras (run once; the files are committed).

    pip install tensorflow-cpu tf_keras h5py      # 1.9 GB: not a test dependency, never in CI
    python tests/keras2_fixtures.py tests/data/keras2

Each case is a small model saved with Keras 2's ``model.save("x.h5")``, weights moved off their initial
values, and ``expected.npz`` holds the inputs and Keras 2's outputs (``<case>/<batch>/in/<i>``,
``<case>/<batch>/out/<k>``). The cases are the ones whose semantics differ between Keras 2 and 3:
hard_sigmoid, GRU with reset_after=False, a masked Bidirectional (its config carries time_major),
MultiHeadAttention over fully masked rows, 'same' average pooling, nested and shared models.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tf_keras as keras  # noqa: E402
from tf_keras import layers  # noqa: E402

rng = np.random.default_rng(0)


def ids(batch=5, length=6, vocab=20):
    x = rng.integers(1, vocab, size=(batch, length))
    x[0, 3:] = 0  # right
    x[2, :2] = 0  # left
    x[3, 1:4] = 0  # middle
    x[4] = 0  # fully padded
    return x


def token_model(body, vocab=20, width=8):
    inp = keras.Input((None,), dtype="int32")
    return keras.Model(inp, body(layers.Embedding(vocab, width, mask_zero=True)(inp)))


def cases():
    yield (
        "hard_sigmoid_lstm",
        token_model(lambda e: layers.LSTM(5, recurrent_activation="hard_sigmoid", return_sequences=True)(e)),
        [[ids()]],
    )
    yield (
        "gru_reset_before",
        token_model(
            lambda e: [layers.GRU(4, reset_after=False, return_sequences=True)(e), layers.GRU(4, reset_after=False)(e)]
        ),
        [[ids()]],
    )
    yield (
        "masked_bidirectional",
        token_model(
            lambda e: layers.GlobalAveragePooling1D()(layers.Bidirectional(layers.LSTM(4, return_sequences=True))(e))
        ),
        [[ids()]],
    )

    def attention(e):
        m = layers.MultiHeadAttention(2, 3)(e, e)
        return [m, layers.Attention()([e, m]), layers.AdditiveAttention()([e, e]), layers.Add()([e, m])]

    yield "mha_fully_masked", token_model(attention), [[ids()]]
    inp = keras.Input((11, 5))
    pooled = [
        layers.AveragePooling1D(3, strides=2, padding="same")(inp),
        layers.MaxPooling1D(2, padding="same")(inp),
        layers.Conv1D(4, 4, padding="same", strides=2)(inp),
    ]
    yield "same_padding", keras.Model(inp, pooled), [[rng.standard_normal((3, 11, 5)).astype("float32")]]
    head = keras.Sequential([layers.Dense(4, activation="relu"), layers.Dense(3)], name="head")
    inp = keras.Input((None,), dtype="int32")
    emb = layers.Embedding(20, 6, mask_zero=True)
    shared = layers.LSTM(5)
    joined = layers.Concatenate()([shared(emb(inp)), shared(layers.Dropout(0.2)(emb(inp)))])
    yield "nested_and_shared", keras.Model(inp, head(joined)), [[ids()]]
    yield (
        "sequential",
        keras.Sequential(
            [
                layers.Embedding(20, 6, mask_zero=True, input_shape=(None,)),
                layers.GRU(5),
                layers.Dense(2, activation="softmax"),
            ]
        ),
        [[ids()]],
    )


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    expected = {}
    for name, model, batches in cases():
        for layer in model.layers:
            weights = layer.get_weights()
            if weights:
                layer.set_weights([rng.standard_normal(w.shape).astype("float32") * 0.4 for w in weights])
        model.save(os.path.join(out, f"{name}.h5"))
        for b, inputs in enumerate(batches):
            outputs = model.predict(inputs if len(inputs) > 1 else inputs[0], verbose=0)
            outputs = outputs if isinstance(outputs, list) else [outputs]
            for i, x in enumerate(inputs):
                expected[f"{name}/{b}/in/{i}"] = x
            for k, y in enumerate(outputs):
                expected[f"{name}/{b}/out/{k}"] = y
    np.savez_compressed(os.path.join(out, "expected.npz"), **expected)
    print(f"wrote {len(list(cases()))} cases to {out} with tf_keras {keras.__version__}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/keras2")
