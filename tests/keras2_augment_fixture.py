"""Make tests/data/keras2_augment/augment_draws.h5 and augment_draws.npz with tf_keras (run once; committed).

    pip install tensorflow-cpu tf_keras h5py      # not a test dependency, never in CI
    python tests/keras2_augment_fixture.py tests/data/keras2_augment

A Keras 2 model of RandomContrast(0.3) and RandomBrightness((-0.2, 0.4), value_range=(0, 255)) side by side,
saved with ``model.save("augment_draws.h5")``, and Keras 2's training outputs of ``CALLS`` calls on one batch
(``contrast`` and ``brightness``: [CALLS, B, H, W, C]), the batch ``x`` and its inference outputs
(``eval_contrast``, ``eval_brightness``). tests/test_keras_augmentation.py reads the factor and the shift of
each image back from them.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tf_keras as keras  # noqa: E402
from tf_keras import layers  # noqa: E402

CALLS = 60


def main(out: str) -> None:
    keras.utils.set_random_seed(0)
    image = keras.Input((6, 5, 2))
    contrast = layers.RandomContrast(0.3, name="contrast")(image)
    brightness = layers.RandomBrightness((-0.2, 0.4), value_range=(0, 255), name="brightness")(image)
    model = keras.Model(image, [contrast, brightness])
    x = np.random.default_rng(0).uniform(20.0, 200.0, size=(3, 6, 5, 2)).astype("float32")
    x[0, 0, 0] = 250.0  # pixels that a larger contrast or a brighter image clips at 255
    x[1, 2, 3] = 5.0
    runs = [model(x, training=True) for _ in range(CALLS)]
    at_inference = model(x, training=False)
    model.save(os.path.join(out, "augment_draws.h5"))
    np.savez_compressed(
        os.path.join(out, "augment_draws.npz"),
        x=x,
        contrast=np.stack([np.asarray(c) for c, _ in runs]),
        brightness=np.stack([np.asarray(b) for _, b in runs]),
        eval_contrast=np.asarray(at_inference[0]),
        eval_brightness=np.asarray(at_inference[1]),
        keras_version=np.array(keras.__version__),
    )


if __name__ == "__main__":
    main(sys.argv[1])
