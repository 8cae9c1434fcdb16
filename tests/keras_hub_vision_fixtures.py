"""Make the keras-hub image-model fixtures under tests/data/keras_hub_vision with keras 3 (torch backend) and
keras-hub (run once; the files are committed, keras-hub is no test dependency). Made with keras 3.15,
keras-hub 0.32.0, torch on CPU:

    pip install keras-hub
    KERAS_BACKEND=torch python tests/keras_hub_vision_fixtures.py tests/data/keras_hub_vision [FAMILY ...]

(no FAMILY: all of them; nothing is downloaded, every model is built from its constructor). Each family's
seed derives from its name, so a family made alone gives the same files as in a full run. Every weight is
moved off its initial value, ``w = round((rng.standard_normal(shape) * 0.3 + w * 0.5) * 32) / 32`` (a
BatchNormalization's moving variance ``0.5 + |that|``, so it stays positive): multiples of 1/32, whose
float32 bytes compress, so the files stay small. Each family ``F`` writes ``F/``:

* ``backbone.keras`` (``Backbone.save``) and ``backbone_preset/`` (``save_to_preset``) of one backbone;
* ``classifier.keras``: an ``<X>ImageClassifier`` (``preprocessor=None``) over another backbone of the
  family (other settings: ``FAMILIES`` says which);
* ``expected.npz``: ``in/images`` [3, H, W, C] (uniform in [-1, 1], multiples of 1/32) and
  ``backbone/out`` (the backbone's output on them, ``predict``), ``in/images_other`` of another size and
  ``backbone/out_other`` where the backbone takes any size, ``in/classifier_images`` and ``classifier/out``
  (the classifier's);
* ``graphs.json.gz`` (ResNet): for each block type, with and without pre-activation, a backbone's
  constructor arguments (``get_config``) and Keras's own functional config of its graph
  (``keras.Model(backbone.inputs, backbone.outputs).get_config()``), which the rebuilt graph is compared with.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import zipfile
import zlib

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402

M = keras_hub.models


def moved(model, rng):
    for weight in model.weights:
        value = np.asarray(weight.numpy())
        new = np.round((rng.standard_normal(value.shape) * 0.3 + value * 0.5) * 32) / 32
        if "moving_variance" in weight.path:
            new = 0.5 + np.abs(new)
        weight.assign(new.astype("float32"))
    return model


def saved(model, path, edit=None):
    """``model.save(path)``, the archive then written again deflated (Keras stores its members as they are;
    the same members, compressed, load the same in Keras), its config.json passed through ``edit``."""
    model.save(path)
    with zipfile.ZipFile(path) as z:
        members = [(info.filename, z.read(info)) for info in z.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for name, data in members:
            if name == "config.json" and edit is not None:
                config = json.loads(data)
                edit(config)
                data = json.dumps(config).encode()
            z.writestr(name, data)


def reloaded(path, images, want, folder=False):
    """Check keras-hub loads the saved file (or preset folder) and predicts what the model did."""
    model = M.Backbone.from_preset(path) if folder else keras.saving.load_model(path)
    np.testing.assert_allclose(np.asarray(model.predict(images, verbose=0)), want, atol=1e-6, rtol=0)


def images(rng, shape):
    """Pixels uniform in [-1, 1], multiples of 1/32 (they compress)."""
    return (np.round(rng.uniform(-1, 1, shape) * 32) / 32).astype("float32")


def resnet():
    """The backbone: ResNet-vd bottleneck blocks (two input convolutions, an average-pooled shortcut), any
    image size. The classifier's: ResNetV2 basic blocks (pre-activation, the -inf padded max pool), 32x32,
    max pooling, logits."""
    backbone = M.ResNetBackbone(
        input_conv_filters=[8, 8],
        input_conv_kernel_sizes=[3, 3],
        stackwise_num_filters=[64, 4],
        stackwise_num_blocks=[1, 2],
        stackwise_num_strides=[1, 2],
        block_type="bottleneck_block_vd",
    )
    inner = M.ResNetBackbone(
        input_conv_filters=[64],
        input_conv_kernel_sizes=[3],
        stackwise_num_filters=[64, 4],
        stackwise_num_blocks=[1, 1],
        stackwise_num_strides=[1, 2],
        block_type="basic_block",
        use_pre_activation=True,
        image_shape=(32, 32, 3),
    )
    classifier = M.ResNetImageClassifier(inner, 5, pooling="max", dropout=0.1)
    return backbone, classifier, (32, 32, 3), (24, 24, 3)


def resnet_graphs():
    """Keras's own functional graph of a ResNetBackbone of each block type, with and without
    pre-activation (untrained: only the graph is kept)."""
    graphs = {}
    for kind in ("basic_block", "bottleneck_block", "basic_block_vd", "bottleneck_block_vd"):
        for pre in (False, True):
            backbone = M.ResNetBackbone(
                input_conv_filters=[64] if kind == "basic_block" else [8, 8],
                input_conv_kernel_sizes=[7] if kind == "basic_block" else [3, 5],
                stackwise_num_filters=[64, 4, 4],
                stackwise_num_blocks=[2, 1, 2],
                stackwise_num_strides=[1, 2, 2],
                block_type=kind,
                use_pre_activation=pre,
            )
            functional = keras.Model(backbone.inputs, backbone.outputs).get_config()
            graphs[f"{kind}/{pre}"] = {"arguments": backbone.get_config(), "keras": functional}
    return graphs


def efficientnet():
    """The backbone: EfficientNet (v1) blocks, squeeze-excite, width and depth coefficients, any image size.
    The classifier's: EfficientNetV2's blocks (CBABlock, FusedMBConvBlock with and without expansion,
    MBConvBlock with and without), a projection activation, 32x32, average pooling. Both of 32 features:
    keras-hub 0.32's get_config leaves ``num_features`` out, so NUM_FEATURES adds it to the saved configs."""
    backbone = M.EfficientNetBackbone(
        stackwise_width_coefficients=[1.0, 1.25],
        stackwise_depth_coefficients=[1.0, 1.5],
        stackwise_kernel_sizes=[3, 5],
        stackwise_num_repeats=[1, 2],
        stackwise_input_filters=[8, 8],
        stackwise_output_filters=[8, 16],
        stackwise_expansion_ratios=[1, 2],
        stackwise_squeeze_and_excite_ratios=[0.25, 0.25],
        stackwise_strides=[1, 2],
        stackwise_block_types=["v1", "v1"],
        num_features=32,
    )
    inner = M.EfficientNetBackbone(
        stackwise_width_coefficients=[1.0] * 5,
        stackwise_depth_coefficients=[1.0] * 5,
        stackwise_kernel_sizes=[3, 3, 3, 3, 3],
        stackwise_num_repeats=[1, 2, 1, 2, 1],
        stackwise_input_filters=[8, 8, 16, 16, 16],
        stackwise_output_filters=[8, 16, 16, 16, 24],
        stackwise_expansion_ratios=[1, 4, 1, 2, 1],
        stackwise_squeeze_and_excite_ratios=[0, 0.25, 0, 0.25, 0.25],
        stackwise_strides=[1, 2, 1, 1, 2],
        stackwise_block_types=["cba", "fused", "fused", "unfused", "unfused"],
        projection_activation="relu",
        num_features=32,
        input_shape=(32, 32, 3),
    )
    classifier = M.EfficientNetImageClassifier(inner, 4)
    return backbone, classifier, (32, 32, 3), (24, 24, 3)


def mobilenet():
    """The backbone: MobileNetV3 blocks (a depthwise block with squeeze-excite, inverted residual blocks of
    relu and hard swish, 3x3 and 5x5, with and without squeeze-excite and residual), any image size. The
    classifier's: a residual depthwise block without squeeze-excite, 32x32, MobileNet's own head."""

    def backbone(**settings):
        return M.MobileNetBackbone(
            stackwise_expansion=[[16], [24, 24]],
            stackwise_num_blocks=[1, 2],
            stackwise_num_filters=[[8], [16, 16]],
            stackwise_kernel_size=[[3], [5, 3]],
            stackwise_num_strides=[[1], [2, 1]],
            stackwise_se_ratio=[[None], [0.25, None]],
            stackwise_activation=[["relu"], ["hard_swish", "hard_swish"]],
            stackwise_padding=[[1], [2, 1]],
            output_num_filters=32,
            depthwise_filters=8,
            last_layer_filter=32,
            input_num_filters=8,
            **settings,
        )

    first = backbone(depthwise_stride=2, depthwise_residual=False, squeeze_and_excite=0.25)
    inner = backbone(depthwise_stride=1, depthwise_residual=True, image_shape=(32, 32, 3))
    classifier = M.MobileNetImageClassifier(inner, 3, num_features=16)
    return first, classifier, (32, 32, 3), (24, 24, 3)


def densenet():
    """The backbone: two dense stacks of growth 8, compression 0.5, any image size. The classifier's: three
    stacks of growth 4, compression 0.75, 32x32, max pooling."""
    backbone = M.DenseNetBackbone(stackwise_num_repeats=[2, 2], growth_rate=8)
    inner = M.DenseNetBackbone(
        stackwise_num_repeats=[1, 1, 2], growth_rate=4, compression_ratio=0.75, image_shape=(32, 32, 3)
    )
    classifier = M.DenseNetImageClassifier(inner, 3, pooling="max")
    return backbone, classifier, (32, 32, 3), (24, 24, 3)


def deit():
    """The backbone: DeiT (class and distillation tokens), 16x16 images, 4x4 patches, 2 layers. The
    classifier's: no attention biases, the class token's state (pooling "token"); ``classifier_gap``: the
    average over the tokens (pooling "gap")."""
    sizes = {"image_shape": (16, 16, 3), "patch_size": 4, "num_layers": 2, "num_heads": 2, "hidden_dim": 16}
    backbone = M.DeiTBackbone(**sizes, intermediate_dim=32)
    inner = M.DeiTBackbone(**sizes, intermediate_dim=24, use_mha_bias=False)
    return backbone, M.DeiTImageClassifier(inner, 3), (16, 16, 3), None


def deit_extra(rng, folder, expected):
    """``classifier_gap.keras``: a DeiTImageClassifier of pooling "gap" over the classifier's own backbone
    (``in/classifier_images`` -> ``classifier_gap/out``)."""
    inner = M.DeiTBackbone(
        image_shape=(16, 16, 3), patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=24
    )
    model = moved(M.DeiTImageClassifier(inner, 3, pooling="gap", activation="softmax"), rng)
    expected["classifier_gap/out"] = np.asarray(model.predict(expected["in/classifier_images"], verbose=0))
    saved(model, os.path.join(folder, "classifier_gap.keras"))
    reloaded(
        os.path.join(folder, "classifier_gap.keras"), expected["in/classifier_images"], expected["classifier_gap/out"]
    )


def num_features(config):
    """keras-hub 0.32's EfficientNetBackbone.get_config leaves out ``num_features`` (a backbone of other
    than 1280 features then saves a config it cannot load again): the fixtures' configs say it (32)."""
    inner = config["config"]["backbone"]["config"] if "backbone" in config["config"] else config["config"]
    inner.setdefault("num_features", 32)


FAMILIES = {"resnet": resnet, "efficientnet": efficientnet, "mobilenet": mobilenet, "densenet": densenet, "deit": deit}
EXTRAS = {"deit": deit_extra}
EDITS = {"efficientnet": num_features}
GRAPHS = {"resnet": resnet_graphs}


def main(out: str, names: list[str]) -> None:
    for name in names or list(FAMILIES):
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        backbone, classifier, shape, other = FAMILIES[name]()
        folder = os.path.join(out, name)
        os.makedirs(folder, exist_ok=True)
        moved(backbone, rng), moved(classifier, rng)
        expected = {"in/images": images(rng, (3, *shape))}
        expected["backbone/out"] = np.asarray(backbone.predict(expected["in/images"], verbose=0))
        if other is not None:
            expected["in/images_other"] = images(rng, (2, *other))
            expected["backbone/out_other"] = np.asarray(backbone.predict(expected["in/images_other"], verbose=0))
        expected["in/classifier_images"] = images(rng, (3, *classifier.backbone.input_shape[1:]))
        expected["classifier/out"] = np.asarray(classifier.predict(expected["in/classifier_images"], verbose=0))
        edit = EDITS.get(name)
        saved(backbone, os.path.join(folder, "backbone.keras"), edit)
        backbone.save_to_preset(os.path.join(folder, "backbone_preset"))
        if edit is not None:
            preset = os.path.join(folder, "backbone_preset", "config.json")
            with open(preset) as f:
                config = json.load(f)
            edit(config)
            with open(preset, "w") as f:
                json.dump(config, f, indent=4)
        saved(classifier, os.path.join(folder, "classifier.keras"), edit)
        reloaded(os.path.join(folder, "backbone.keras"), expected["in/images"], expected["backbone/out"])
        reloaded(os.path.join(folder, "backbone_preset"), expected["in/images"], expected["backbone/out"], True)
        reloaded(os.path.join(folder, "classifier.keras"), expected["in/classifier_images"], expected["classifier/out"])
        if name in EXTRAS:
            EXTRAS[name](rng, folder, expected)
        np.savez_compressed(os.path.join(folder, "expected.npz"), **expected)
        if name in GRAPHS:
            with gzip.open(os.path.join(folder, "graphs.json.gz"), "wt") as f:
                json.dump(GRAPHS[name](), f)
        print(f"wrote {folder} with keras {keras.__version__}, keras-hub {keras_hub.__version__}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/keras_hub_vision", sys.argv[2:])
