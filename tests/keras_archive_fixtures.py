"""Make the small model tests/test_hostile_archives.py edits into hostile files (run once; the file is
committed). Keras 3 on the torch backend, no TensorFlow:

    KERAS_BACKEND=torch python tests/keras_archive_fixtures.py tests/data/keras_archives

``small.keras``: inputs [batch, 5, 4] -> Dense(4) "dense" -> LayerNormalization "norm" ->
BatchNormalization "bn" -> Conv1D(3, 2) "conv", every variable moved off its initial value (the moving
variance kept positive), so that an edited value shows in the outputs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402


def main(out: Path) -> None:
    rng = np.random.default_rng(0)
    inputs = keras.Input((5, 4), name="features")
    x = keras.layers.Dense(4, name="dense")(inputs)
    x = keras.layers.LayerNormalization(name="norm")(x)
    x = keras.layers.BatchNormalization(name="bn")(x)
    x = keras.layers.Conv1D(3, 2, name="conv")(x)
    model = keras.Model(inputs, x, name="small")
    for weight in model.weights:
        value = rng.standard_normal(tuple(weight.shape)).astype("float32") * 0.5
        weight.assign(np.abs(value) + 0.5 if "variance" in weight.path else value)
    out.mkdir(parents=True, exist_ok=True)
    model.save(out / "small.keras")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
