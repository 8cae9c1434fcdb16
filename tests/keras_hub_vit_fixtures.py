"""Make the ViT fixtures of tests/test_keras_hub_vit.py with keras 3 (torch backend) and keras-hub (run once;
the files are committed, keras-hub is no test dependency):

    pip install keras-hub
    KERAS_BACKEND=torch python tests/keras_hub_vit_fixtures.py tests/data/keras_hub_models

A tiny ``ViTBackbone`` (16x16x3 images, 4x4 patches, 2 layers, 2 heads, hidden 32, MLP 64, a class token),
every weight moved off its initial value, saved as ``vit.keras`` ``vit_preset/`` (``save_to_preset``) and
``vit_functional.keras`` (``keras.Model(vit.inputs, vit.outputs)``: the graph as Keras writes it),
and one without a class token or biases (``vit_plain.keras``). ``vit_expected.npz`` holds a batch of 3
images and Keras's outputs on it.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402

rng = np.random.default_rng(0)
SIZES = {"image_shape": (16, 16, 3), "patch_size": 4, "num_layers": 2, "num_heads": 2, "hidden_dim": 32}
SIZES["mlp_dim"] = 64
PLAIN = {"use_class_token": False, "use_mha_bias": False, "use_mlp_bias": False, "use_patch_bias": False}


def moved(model):
    for weight in model.weights:
        value = np.asarray(weight.numpy())
        weight.assign(rng.standard_normal(value.shape).astype("float32") * 0.3 + value * 0.5)
    return model


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    images = rng.standard_normal((3, 16, 16, 3)).astype("float32")
    expected = {"in/images": images}
    model = moved(keras_hub.models.ViTBackbone(**SIZES))
    model.save(os.path.join(out, "vit.keras"))
    model.save_to_preset(os.path.join(out, "vit_preset"))
    expected["vit/out"] = np.asarray(model.predict(images, verbose=0))
    keras.Model(model.inputs, model.outputs).save(os.path.join(out, "vit_functional.keras"))  # its graph, as written
    plain = moved(keras_hub.models.ViTBackbone(**SIZES, **PLAIN))
    plain.save(os.path.join(out, "vit_plain.keras"))
    expected["vit_plain/out"] = np.asarray(plain.predict(images, verbose=0))
    np.savez_compressed(os.path.join(out, "vit_expected.npz"), **expected)
    print(f"wrote ViT fixtures to {out} with keras {keras.__version__}, keras-hub {keras_hub.__version__}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/keras_hub_models")
