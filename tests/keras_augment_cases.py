"""Keras 3 (torch backend) as the oracle of its random augmentation layers in training, run as a subprocess
by tests/test_keras_augmentation.py:

    KERAS_BACKEND=torch python tests/keras_augment_cases.py OUT_DIR

Writes, with nothing from attnzoo:

- ``geometry.keras``: one input, a branch per setting of RandomRotation, RandomZoom, RandomTranslation
  (every fill mode and interpolation), RandomContrast, RandomBrightness and RandomCrop whose factor range
  has zero width (or whose crop is not random), so Keras's training transformation is fixed; and
  ``geometry.npz``: the input (``x``), Keras's ``training=True`` outputs (``train/<k>``) and its inference
  outputs (``eval/<k>``);
- ``stats.keras``: random settings of each layer (GaussianNoise and GaussianDropout too), and
  ``stats.npz``: over ``N`` draws of one image, the mean and standard deviation of each output pixel
  (``mean/<k>``, ``std/<k>``) under ``training=True``; RandomCrop draws one window per batch, so
  ``crop_corners`` is where it cut the image (row, column) in ``CROPS`` calls;
- ``train.keras``: keras-io's augmented image classifier, RandomFlip -> RandomRotation -> RandomZoom ->
  Conv2D -> GlobalAveragePooling2D -> Dense.
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

N = 1000  # draws for the statistics
CROPS = 400


def geometry_layers() -> list[keras.layers.Layer]:
    out: list[keras.layers.Layer] = []
    for fill in ("reflect", "wrap", "constant", "nearest"):
        for interpolation in ("bilinear", "nearest"):
            options = {"fill_mode": fill, "interpolation": interpolation, "fill_value": 0.5}
            out.append(layers.RandomRotation((0.1, 0.1), **options))  # 36 degrees
            out.append(layers.RandomZoom((0.25, 0.25), (-0.3, -0.3), **options))
            out.append(layers.RandomTranslation((0.15, 0.15), (-0.23, -0.23), **options))
    out.append(layers.RandomZoom((-0.4, -0.4)))  # the width zoom is the height's
    out.append(layers.RandomRotation((-0.3, -0.3), data_format="channels_first"))  # [B, C, H, W]: 7 channels
    out.append(layers.RandomContrast((-0.3, 0.3), value_range=(-1, 1)))  # keras 3: f ~ U(1.3, 1.3)
    out.append(layers.RandomBrightness((0.1, 0.1), value_range=(-1, 1)))  # + 0.2, clipped
    out.append(layers.RandomCrop(5, 9))  # not wider than the image: its centred 5 x 9 window
    out.append(layers.RandomCrop(8, 10))  # larger than the image: a 7 x 8 window resized to 8 x 10
    return out


def stats_layers() -> list[keras.layers.Layer]:
    return [
        layers.RandomRotation(0.1),
        layers.RandomZoom(0.2, 0.3, fill_mode="constant"),
        layers.RandomTranslation(0.2, (-0.1, 0.3), interpolation="nearest", fill_mode="wrap"),
        layers.RandomContrast(0.4, value_range=(-10, 10)),
        layers.RandomBrightness((-0.2, 0.1), value_range=(-10, 10)),
        layers.RandomCrop(5, 6),
        layers.GaussianNoise(0.5),
        layers.GaussianDropout(0.3),
    ]


def branches(shape, made: list[keras.layers.Layer]) -> keras.Model:
    inp = keras.Input(shape, name="image")
    # keras 3's RandomBrightness adds to its input in place: its branch reads a copy (Rescaling(1))
    return keras.Model(
        inp,
        [layer(layers.Rescaling(1.0)(inp) if isinstance(layer, layers.RandomBrightness) else inp) for layer in made],
    )


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(57)
    x = rng.uniform(-1, 1, (3, 7, 9, 2)).astype("float32")
    model = branches((7, 9, 2), geometry_layers())
    model.save(os.path.join(out, "geometry.keras"))
    arrays = {"x": x}
    for mode, training in (("train", True), ("eval", False)):
        # a copy each time: keras 3's RandomBrightness adds to its input in place (numpy's memory too)
        for k, y in enumerate(model(x.copy(), training=training)):
            arrays[f"{mode}/{k}"] = keras.ops.convert_to_numpy(y)
    np.savez(os.path.join(out, "geometry.npz"), **arrays)

    image = rng.uniform(-3, 3, (1, 8, 8, 1)).astype("float32")
    model = branches((8, 8, 1), stats_layers())
    model.save(os.path.join(out, "stats.keras"))
    arrays = {"x": image}
    for k, y in enumerate(model(np.repeat(image, N, axis=0), training=True)):
        y = keras.ops.convert_to_numpy(y)
        arrays[f"mean/{k}"], arrays[f"std/{k}"] = y.mean(0), y.std(0)
    # RandomCrop draws one window per batch: where it cut one image, in CROPS calls
    crop = next(layer for layer in model.layers if isinstance(layer, layers.RandomCrop))
    corners = []
    for _ in range(CROPS):
        y = keras.ops.convert_to_numpy(crop(image, training=True))[0]
        corners += [(i, j) for i in range(4) for j in range(3) if np.array_equal(y, image[0, i : i + 5, j : j + 6])]
    arrays["crop_corners"] = np.array(corners)
    np.savez(os.path.join(out, "stats.npz"), **arrays)

    model = keras.Sequential(
        [
            keras.Input((16, 16, 3), name="image"),
            layers.RandomFlip("horizontal"),
            layers.RandomRotation(0.1),
            layers.RandomZoom(0.1),
            layers.Conv2D(4, 3, activation="relu"),
            layers.GlobalAveragePooling2D(),
            layers.Dense(2),
        ]
    )
    model.save(os.path.join(out, "train.keras"))


if __name__ == "__main__":
    main(sys.argv[1])
