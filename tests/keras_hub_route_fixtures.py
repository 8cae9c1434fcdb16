"""Make the fixtures of tests/test_keras_hub_route.py with keras 3 (torch backend) and keras-hub 0.32 (run once;
the files are committed, keras-hub is no test dependency):

    PYTHONHASHSEED=0 KERAS_BACKEND=torch python tests/keras_hub_route_fixtures.py tests/data/keras_hub_route

Two keras-hub vision backbones attnzoo neither rebuilds nor converts through keras-hub's graph yet, kept so
that a port has Keras's outputs to agree with: tiny models built from constructor arguments (no download),
every weight moved off its initial value (``w = rng.standard_normal(shape) * 0.3 + w * 0.5``, the seed
derived from the case's name), saved as ``<case>.keras`` and, for ``dinov2``, as a ``save_to_preset``
folder ``dinov2_preset``:

* ``dinov2``: ``DINOV2Backbone`` (16 x 16 x 3 images, patch 4, width 32, 2 layers of 2 heads, MLP 64, its
  position table made for 16 x 16, so that nothing is interpolated): [B, 17, 32] (class token and 16 patches);
* ``swin``: ``SwinTransformerBackbone`` (16 x 16 x 3 images, patch 2, embed_dim 16, depths [2, 2], heads
  [2, 2], window 2): [B, 16, 32].

``expected.npz`` holds each case's images ``<case>/in/images`` [2, 16, 16, 3] (standard normal) and Keras's
output ``<case>/out/output`` (``predict`` of the model the ``.keras`` file loads; the preset folder gives the same).
"""

from __future__ import annotations

import os
import sys
import zlib

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402

M = keras_hub.models
IMAGE = (16, 16, 3)
CASES = {  # name -> (make, also a preset folder)
    "dinov2": (
        lambda: M.DINOV2Backbone(
            patch_size=4,
            num_layers=2,
            hidden_dim=32,
            num_heads=2,
            intermediate_dim=64,
            image_shape=IMAGE,
            position_embedding_shape=IMAGE,
        ),
        True,
    ),
    "swin": (
        lambda: M.SwinTransformerBackbone(
            image_shape=IMAGE, embed_dim=16, depths=[2, 2], num_heads=[2, 2], window_size=2, patch_size=2
        ),
        False,
    ),
}


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    expected = {}
    for name, (make, preset) in CASES.items():
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        model = make()
        for weight in model.weights:
            value = np.asarray(weight.numpy())
            weight.assign(rng.standard_normal(value.shape).astype("float32") * 0.3 + value * 0.5)
        images = rng.standard_normal((2, *IMAGE)).astype("float32")
        model.save(os.path.join(out, f"{name}.keras"))
        # the file's model is the reference: DINOv2's save folds its (moved) interpolated position table
        # back into its position table, and its load interpolates that again, a table unlike the one moved
        model = keras.saving.load_model(os.path.join(out, f"{name}.keras"))
        got = np.asarray(model.predict(images, verbose=0))
        expected |= {f"{name}/in/images": images, f"{name}/out/output": got}
        if preset:
            model.save_to_preset(os.path.join(out, f"{name}_preset"))
            again = type(model).from_preset(os.path.join(out, f"{name}_preset"))
            assert np.array_equal(np.asarray(again.predict(images, verbose=0)), got), name
        print(f"{name}: {type(model).__name__} -> {got.shape}")
    np.savez_compressed(os.path.join(out, "expected.npz"), **expected)
    print(f"with keras {keras.__version__}, keras-hub {keras_hub.__version__}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/keras_hub_route")
