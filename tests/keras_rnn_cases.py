"""Keras's LSTM, GRU and Bidirectional on masked sequences, the oracle of tests/test_keras_torch_layers.py:

    KERAS_BACKEND=torch python tests/keras_rnn_cases.py tests/data/keras_rnn

writes ``cases.npz``: for each case ``<case>/x`` [B, T, F], ``<case>/mask`` [B, T] (bool), Keras's output
``<case>/y`` and the layer's variables in Keras's order ``<case>/w<i>``. One mask is right padding (a
suffix: torch's packed path as it is), the other has holes (a masked step between kept ones, and a row
with no kept step). The fast tier reads the committed file; the slow tier makes it again with the
installed Keras.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np  # noqa: E402

RIGHT = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0]], dtype=bool)
HOLES = np.array([[1, 0, 1, 1, 0, 1], [0, 0, 1, 1, 1, 0], [0, 0, 0, 0, 0, 0]], dtype=bool)


def layers(keras):
    """The Keras layers under test, by case name: each is called on x with the case's mask."""
    L = keras.layers
    return {
        "lstm_sequences": lambda: L.LSTM(5, return_sequences=True),
        "lstm_last": lambda: L.LSTM(5),
        "lstm_backwards": lambda: L.LSTM(5, return_sequences=True, go_backwards=True),
        "lstm_zero_output": lambda: L.LSTM(5, return_sequences=True, zero_output_for_mask=True),
        "gru_sequences": lambda: L.GRU(5, return_sequences=True),
        "gru_last": lambda: L.GRU(5),
        "bilstm_sequences": lambda: L.Bidirectional(L.LSTM(5, return_sequences=True)),
        "bilstm_last": lambda: L.Bidirectional(L.LSTM(5)),
        "bigru_sequences": lambda: L.Bidirectional(L.GRU(5, return_sequences=True)),
    }


def main(out: Path) -> None:
    import keras

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    arrays = {}
    for name, make in layers(keras).items():
        for padding, mask in (("right", RIGHT), ("holes", HOLES)):
            case = f"{name}_{padding}"
            x = rng.normal(size=(*mask.shape, 4)).astype("float32")
            layer = make()
            layer.build(x.shape)
            for variable in layer.weights:  # off Keras's initial values (zero biases test nothing)
                variable.assign(rng.normal(scale=0.5, size=variable.shape).astype("float32"))
            y = layer(keras.ops.convert_to_tensor(x), mask=keras.ops.convert_to_tensor(mask))
            arrays[f"{case}/x"], arrays[f"{case}/mask"] = x, mask
            arrays[f"{case}/y"] = np.asarray(keras.ops.convert_to_numpy(y))
            for i, variable in enumerate(layer.weights):
                arrays[f"{case}/w{i}"] = np.asarray(keras.ops.convert_to_numpy(variable))
    out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out / "cases.npz", **arrays)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
