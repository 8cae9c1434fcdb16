"""Make the model docs/keras-source.md shows ported in full (run once; the files are committed):

    KERAS_BACKEND=torch python tests/keras_docs_fixture.py tests/data/keras_docs

A text classifier as people write it in Keras: ids padded with 0, ``Embedding(mask_zero=True)``, a
bidirectional LSTM over the masked steps, dot-product self-attention over them (``Attention``, the mask
carried by Keras), masked average pooling and a sigmoid head. It writes ``review_classifier.keras`` and
``expected.npz``: a padded batch of ids and Keras's own predictions for it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def main(out: Path) -> None:
    import keras

    keras.utils.set_random_seed(7)
    ids = keras.Input(shape=(None,), dtype="int32", name="ids")
    x = keras.layers.Embedding(200, 16, mask_zero=True, name="embedding")(ids)
    x = keras.layers.Bidirectional(keras.layers.LSTM(12, return_sequences=True), name="bilstm")(x)
    x = keras.layers.Attention(name="attention")([x, x])
    x = keras.layers.GlobalAveragePooling1D(name="pool")(x)
    probabilities = keras.layers.Dense(1, activation="sigmoid", name="positive")(x)
    model = keras.Model(ids, probabilities, name="review_classifier")
    out.mkdir(parents=True, exist_ok=True)
    model.save(out / "review_classifier.keras")
    rng = np.random.default_rng(0)
    batch = rng.integers(1, 200, size=(4, 9)).astype("int32")
    batch[0, 5:] = 0  # padded reviews: the mask says which steps are words
    batch[2, 2:] = 0
    predictions = keras.ops.convert_to_numpy(model(batch, training=False))
    np.savez(out / "expected.npz", ids=batch, predictions=predictions)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/keras_docs"))
