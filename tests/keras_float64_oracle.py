"""A ``keras.applications`` model run by Keras in float32 and in float64, for the test that shows where the
converted model's float32 difference from Keras comes from (tests/test_keras_float64.py):

    KERAS_BACKEND=torch python tests/keras_float64_oracle.py OUT_DIR NAME SIZE

builds ``keras.applications.NAME(weights=None, input_shape=(SIZE, SIZE, 3), classes=5)`` with logits out, moves
its weights off their initial values as the oracle does (``keras_oracle._randomise``, gentle, seeded), saves
``OUT_DIR/NAME.keras`` (float32) and writes ``OUT_DIR/NAME.npz``: the input ``x`` (float32 values) and Keras's
outputs ``float32`` and ``float64``. The float64 run is the same model built under the ``float64`` dtype policy
and given the same weights (float32 values, exact in float64).

Keras 3 on the torch backend computes some operations in float32 even on float64 tensors:
``result_type(float64, float32)`` is float32 there (``BIT64_TO_BIT32_DTYPE``), which BatchNormalization and
``ops.mean`` (GlobalAveragePooling) go through. The float64 run switches that off, so that it is float64 end to
end: a reference run, not Keras's float64 behaviour.
"""

from __future__ import annotations

import os
import sys
import warnings

os.environ.setdefault("KERAS_BACKEND", "torch")
warnings.filterwarnings("ignore")

import keras  # noqa: E402
import keras_oracle  # noqa: E402 - beside this file, which runs as a script
import numpy as np  # noqa: E402
from keras.src.backend.common import dtypes  # noqa: E402


def _build(name: str, size: int):
    return getattr(keras.applications, name)(
        weights=None, input_shape=(size, size, 3), classes=5, classifier_activation=None
    )


def main(out: str, name: str, size: int) -> None:
    rng = np.random.default_rng(0)
    single = _build(name, size)
    keras_oracle._randomise(single, rng, gentle=True)
    single.save(os.path.join(out, f"{name}.keras"))
    x = rng.standard_normal((2, size, size, 3)).astype("float32")
    first = np.asarray(single.predict(x, verbose=0))
    values = [w.numpy() for w in single.weights]
    dtypes.BIT64_TO_BIT32_DTYPE["float64"] = "float64"  # float64 computed as float64 (the docstring)
    keras.config.set_floatx("float64")
    keras.config.set_dtype_policy("float64")
    double = _build(name, size)
    for weight, value in zip(double.weights, values, strict=True):
        weight.assign(value.astype(weight.dtype))
    second = np.asarray(double.predict(x.astype("float64"), verbose=0))
    assert second.dtype == np.float64, second.dtype
    np.savez(os.path.join(out, f"{name}.npz"), x=x, float32=first, float64=second)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
