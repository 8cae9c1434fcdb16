"""Make the keras-hub image-converter fixture: a preset folder of a tiny ``DeiTImageClassifier`` with its
``DeiTImageClassifierPreprocessor`` (run once, after tests/keras_hub_vision_fixtures.py, whose DeiT files it
keeps; the files are committed, keras-hub is no test dependency). Made with keras 3, keras-hub 0.32.0, torch on
CPU:

    KERAS_BACKEND=torch python tests/keras_hub_image_converter_fixtures.py tests/data/keras_hub_vision

It writes ``deit/classifier_preset/`` (``save_to_preset``: task.json, task.weights.h5, preprocessor.json
with the ``DeiTImageConverter``: image_size (16, 16), ImageNet's per-channel scale and offset, bilinear,
crop_to_aspect_ratio) and adds to ``deit/expected.npz``, for each raw batch ``R`` of ``RAW`` (pixels
0..255 of other sizes than 16x16, a wide, a tall and a small one; float32, and one batch as uint8):

* ``converter/raw/R``, ``converter/pre/R`` (``preprocessor(raw)``) and ``converter/out/R``
  (``classifier.predict(raw)``);
* ``converter/SETTING/wide``: a bare ``ImageConverter`` of other settings (``SETTINGS``: nearest, bicubic,
  antialias, no crop, one scale for every channel (a number, a list of one), no resize) on the wide batch;
  ``deit/converter_settings.json`` says which.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import zlib

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras_hub  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from keras_hub_vision_fixtures import moved  # noqa: E402

M = keras_hub.models
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CONVERTER = {
    "image_size": (16, 16),
    "scale": [1 / (255 * s) for s in STD],
    "offset": [-m / s for m, s in zip(MEAN, STD, strict=True)],
    "crop_to_aspect_ratio": True,
    "interpolation": "bilinear",
}
RAW = {"wide": (2, 23, 31, 3), "tall": (1, 37, 20, 3), "small": (2, 9, 13, 3), "uint8": (1, 29, 24, 3)}
SETTINGS = {
    "nearest": {"interpolation": "nearest"},
    "bicubic": {"interpolation": "bicubic"},
    "antialias": {"antialias": True},
    "bicubic_antialias": {"interpolation": "bicubic", "antialias": True},
    "stretch": {"crop_to_aspect_ratio": False, "image_size": (12, 20)},
    "one_scale": {"scale": 1 / 127.5, "offset": -1.0},
    "one_item_lists": {"scale": [1 / 255], "offset": [-0.5]},
    "no_resize": {"image_size": None},
}


def main(out: str) -> None:
    rng = np.random.default_rng(zlib.crc32(b"image_converter"))
    folder = os.path.join(out, "deit")
    sizes = {"image_shape": (16, 16, 3), "patch_size": 4, "num_layers": 1, "num_heads": 2, "hidden_dim": 16}
    backbone = M.DeiTBackbone(**sizes, intermediate_dim=24)
    preprocessor = M.DeiTImageClassifierPreprocessor(image_converter=keras_hub.layers.DeiTImageConverter(**CONVERTER))
    classifier = moved(M.DeiTImageClassifier(backbone, 3, preprocessor=preprocessor), rng)
    preset = os.path.join(folder, "classifier_preset")
    shutil.rmtree(preset, ignore_errors=True)
    classifier.save_to_preset(preset)
    expected = dict(np.load(os.path.join(folder, "expected.npz")))
    expected = {k: v for k, v in expected.items() if not k.startswith("converter/")}
    for name, shape in RAW.items():
        raw = rng.integers(0, 256, shape).astype("uint8" if name == "uint8" else "float32")
        expected[f"converter/raw/{name}"] = raw
        expected[f"converter/pre/{name}"] = np.asarray(preprocessor(raw))
        expected[f"converter/out/{name}"] = np.asarray(classifier.predict(raw, verbose=0))
        for setting, change in SETTINGS.items() if name == "wide" else ():
            converter = keras_hub.layers.ImageConverter(**{**CONVERTER, **change})
            expected[f"converter/{setting}/{name}"] = np.asarray(converter(raw))
    # keras-hub loads the folder back and predicts the same
    loaded = M.ImageClassifier.from_preset(preset)
    raw = expected["converter/raw/wide"]
    np.testing.assert_allclose(loaded.predict(raw, verbose=0), expected["converter/out/wide"], atol=1e-6, rtol=0)
    np.savez_compressed(os.path.join(folder, "expected.npz"), **expected)
    with open(os.path.join(out, "deit", "converter_settings.json"), "w") as f:
        json.dump({"converter": CONVERTER, "settings": SETTINGS}, f, indent=1)
    print(f"wrote {preset} with keras-hub {keras_hub.__version__}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/keras_hub_vision")
