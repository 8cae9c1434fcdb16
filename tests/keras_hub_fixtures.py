"""Make the keras-hub fixtures of tests/test_keras_hub.py with keras 3 (torch backend) and keras-hub (run
once; the files are committed). keras-hub's wheel requires tensorflow-text, so it is not a dependency of
the tests; its modelling layers import without it:

    pip install --no-deps --target /tmp/khub keras-hub
    PYTHONPATH=/tmp/khub KERAS_BACKEND=torch python tests/keras_hub_fixtures.py tests/data/keras_hub [CASE ...]

Each case is a small model built from keras-hub's layers the way keras-io's examples build them, every
weight moved off its initial value, saved as ``<case>.keras`` and ``<case>.h5``; ``expected.npz`` holds
the inputs (token ids padded on the right, fully, on the left, in the middle and not at all) and Keras's
outputs: ``<case>/<batch>/in/<i>``, ``<case>/<batch>/out/<k>``.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
from keras import layers, ops  # noqa: E402

hub = keras_hub.layers
rng = np.random.default_rng(0)
VOCAB, LENGTH, DIM = 30, 12, 8


def ids(batch=5, length=7):
    x = rng.integers(1, VOCAB, size=(batch, length))
    x[0, 4:] = 0  # right
    x[1, :] = 0  # fully padded
    x[2, :3] = 0  # left
    x[3, 1:5] = 0  # middle
    return x


def classifier():
    """keras-io's text classification with a transformer: token and position embedding, two encoders
    (post- and pre-norm), the masked average, a softmax."""
    inp = keras.Input((None,), dtype="int32", name="ids")
    embedded = hub.TokenAndPositionEmbedding(VOCAB, LENGTH, DIM, mask_zero=True)(inp)
    x = hub.TransformerEncoder(16, 2)(embedded)
    x = hub.TransformerEncoder(12, 4, normalize_first=True, activation="gelu", layer_norm_epsilon=1e-3)(x)
    pooled = layers.GlobalAveragePooling1D()(x)
    # keras 3 runs this pooling after the first encoder, whose attention deleted the embedding's mask
    late = layers.GlobalAveragePooling1D()(embedded)
    return keras.Model(inp, [layers.Dense(3, activation="softmax")(pooled), x, late]), [[ids()]]


def translator():
    """keras-io's English-to-Spanish translation with keras-hub: an encoder over the source, a decoder
    with causal self-attention and cross-attention, a softmax over the target vocabulary."""
    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    encoded = hub.TransformerEncoder(16, 2)(hub.TokenAndPositionEmbedding(VOCAB, LENGTH, DIM, mask_zero=True)(source))
    embedded = hub.TokenAndPositionEmbedding(VOCAB, LENGTH, DIM, mask_zero=True)(target)
    decoded = hub.TransformerDecoder(16, 2)(embedded, encoded)
    return keras.Model([source, target], layers.Dense(VOCAB, activation="softmax")(decoded)), [[ids(), ids(5, 6)]]


def positions():
    """PositionEmbedding and SinePositionEncoding added to a plain Embedding; a decoder-only
    TransformerDecoder given its padding mask by keyword; a model of keras-hub's layers called on a
    start_index."""
    inp = keras.Input((None,), dtype="int32", name="ids")
    x = layers.Embedding(VOCAB, DIM)(inp)
    x = x + hub.PositionEmbedding(LENGTH)(x)
    x = x + hub.SinePositionEncoding(max_wavelength=100)(x)
    padding = ops.not_equal(inp, 0)
    y = hub.TransformerDecoder(16, 2, normalize_first=True)(x, decoder_padding_mask=padding)
    shifted = hub.PositionEmbedding(LENGTH)(x, start_index=2)
    return keras.Model(inp, [y, shifted, hub.SinePositionEncoding()(x, start_index=3)]), [[ids()]]


def keyword_translator():
    """keras-io's English-to-Spanish translation as the example writes it: float32 inputs (``keras.Input``'s
    default) of token ids, the encoder called as ``TransformerEncoder(...)(inputs=x)``, the decoder as
    ``TransformerDecoder(...)(decoder_sequence=x, encoder_sequence=encoded)`` inside a decoder model that is
    called on the encoder's output."""
    encoder_inputs = keras.Input(shape=(None,), name="encoder_inputs")
    x = hub.TokenAndPositionEmbedding(VOCAB, LENGTH, DIM, mask_zero=True)(encoder_inputs)
    encoder_outputs = hub.TransformerEncoder(intermediate_dim=16, num_heads=2)(inputs=x)
    decoder_inputs = keras.Input(shape=(None,), name="decoder_inputs")
    encoded_seq_inputs = keras.Input(shape=(None, DIM), name="decoder_state_inputs")
    # named (keras-io leaves it unnamed) so that the emitted module's declaration of it, keyed by the nested
    # name, fits ruff's 88 columns: keras/code_lines.py cannot lay out one whose first line cannot fit
    x = hub.TokenAndPositionEmbedding(VOCAB, LENGTH, DIM, mask_zero=True, name="target_embedding")(decoder_inputs)
    x = hub.TransformerDecoder(intermediate_dim=16, num_heads=2)(
        decoder_sequence=x, encoder_sequence=encoded_seq_inputs
    )
    x = layers.Dropout(0.5)(x)
    decoder_outputs = layers.Dense(VOCAB, activation="softmax")(x)
    decoder = keras.Model([decoder_inputs, encoded_seq_inputs], decoder_outputs)
    decoder_outputs = decoder([decoder_inputs, encoder_outputs])
    model = keras.Model([encoder_inputs, decoder_inputs], decoder_outputs, name="transformer")
    return model, [[ids().astype("float32"), ids(5, 6).astype("float32")]]


CASES = {
    "classifier": classifier,
    "translator": translator,
    "positions": positions,
    "keyword_translator": keyword_translator,
}


def main(out: str, only: list[str] | None = None) -> None:
    """Write every case, or with ``only`` those cases alone (the others' files and expected values stay)."""
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "expected.npz")
    expected = dict(np.load(path)) if only and os.path.exists(path) else {}
    for name, make in CASES.items():
        if only and name not in only:
            continue
        model, batches = make()
        for weight in model.weights:
            value = np.asarray(weight.numpy())
            weight.assign(rng.standard_normal(value.shape).astype("float32") * 0.4 + value * 0.5)
        model.save(os.path.join(out, f"{name}.keras"))
        model.save(os.path.join(out, f"{name}.h5"))
        for b, inputs in enumerate(batches):
            outputs = model.predict(inputs if len(inputs) > 1 else inputs[0], verbose=0)
            outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
            for i, x in enumerate(inputs):
                expected[f"{name}/{b}/in/{i}"] = x
            for k, y in enumerate(outputs):
                expected[f"{name}/{b}/out/{k}"] = np.asarray(y)
    np.savez_compressed(path, **expected)
    print(f"wrote {only or list(CASES)} to {out} with keras {keras.__version__}, keras-hub {keras_hub.__version__}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/keras_hub", sys.argv[2:] or None)
