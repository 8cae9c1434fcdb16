"""keras-hub's image models through the Hugging Face door (attnzoo.keras.to_transformers): DeiT as
transformers' ``DeiTModel`` / ``DeiTForImageClassification``, and what is refused (a "gap" DeiT classifier,
keras-hub ResNets whose layout transformers' ``ResNetModel`` does not have).

The slow tier writes a folder for each DeiT fixture (tests/data/keras_hub_vision/deit: a .keras backbone, its
save_to_preset folder, a "token" classifier; made by keras-hub 0.32) and loads them in ONE child process where
keras, keras_hub and attnzoo cannot be imported, with transformers' Auto classes, feeding the images Keras saw
transposed to pixel_values [B, C, H, W]; the outputs must be Keras's saved ones (expected.npz) within 1e-5.
The fast tier checks the files and the refusals, without transformers.

No keras-hub fixture is a ResNet of transformers' layout (one 7x7 stem convolution, v1 basic or bottleneck
blocks): the fixtures are ResNet-vd and ResNetV2, and are refused. The layout transformers has is checked
on ResNetBackbone files this test writes (config.json of keras-hub 0.32's arguments, model.weights.h5 by
layer name) from a seeded transformers ``ResNetModel``, its batch-norm statistics moved off their initial
values: attnzoo's conversion of the file must give that model's states, and so must the folder written from
it, loaded in the child. Images of odd and even sizes check the strided convolutions' padding.
"""

from __future__ import annotations

import io
import json
import zipfile
from functools import cache

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from attnzoo.errors import ExportError
from attnzoo.keras import convert_keras_model, to_transformers

from .conftest import ROOT
from .test_keras_transformers_folder import run_loader

DATA = ROOT / "tests" / "data" / "keras_hub_vision"
TOLERANCE = 1e-5


@cache
def expected(family: str) -> dict[str, np.ndarray]:
    return dict(np.load(DATA / family / "expected.npz"))


@cache
def converted(family: str, file: str):
    return convert_keras_model(DATA / family / file)


def config_of(folder) -> dict:
    return json.loads((folder / "config.json").read_text())


# -- the fast tier: files, entries, refusals -----------------------------------------------------------------


def test_a_deit_backbone_is_written_as_deit_model_with_keras_s_sizes_and_tokens(tmp_path):
    folder = to_transformers(converted("deit", "backbone.keras"), tmp_path / "deit")
    config = config_of(folder)
    assert config["architectures"] == ["DeiTModel"] and config["model_type"] == "deit"
    # the fixture's DeiTBackbone(image_shape=(16, 16, 3), patch_size=4, hidden_dim=16, 2 layers, 2 heads, 32)
    assert (config["image_size"], config["patch_size"], config["num_channels"]) == ([16, 16], [4, 4], 3)
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"]) == (16, 2, 2)
    assert (config["intermediate_size"], config["layer_norm_eps"], config["hidden_act"]) == (32, 1e-6, "gelu")
    tensors = load_file(folder / "model.safetensors")
    assert tensors["embeddings.position_embeddings"].shape == (1, 16 // 4 * (16 // 4) + 2, 16)
    assert tensors["embeddings.cls_token"].shape == tensors["embeddings.distillation_token"].shape == (1, 1, 16)
    assert not any(name.startswith("pooler") for name in tensors)  # keras-hub's DeiTBackbone has no pooler


def test_a_deit_classifier_without_attention_biases_writes_qkv_bias_false_and_a_zero_output_bias(tmp_path):
    folder = to_transformers(converted("deit", "classifier.keras"), tmp_path / "classifier")
    config, tensors = config_of(folder), load_file(folder / "model.safetensors")
    assert config["architectures"] == ["DeiTForImageClassification"] and config["qkv_bias"] is False
    assert config["id2label"] == {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}  # num_classes=3
    assert "deit.encoder.layer.0.attention.attention.query.bias" not in tensors
    assert not tensors["deit.encoder.layer.0.attention.output.dense.bias"].any()
    assert tensors["classifier.weight"].shape == (3, 16)


@pytest.mark.parametrize(
    ("family", "file", "why"),
    [
        ("deit", "classifier_gap.keras", r"pools by 'gap' .* DeiTForImageClassification reads the class token"),
        ("resnet", "backbone.keras", r"block_type 'bottleneck_block_vd'.* ResNetModel"),
        ("resnet", "backbone_preset", r"block_type 'bottleneck_block_vd'"),
        (
            "resnet",
            "classifier.keras",
            r"use_pre_activation=True \(ResNetV2: pre-activation blocks\); transformers. ResNetModel is post",
        ),
    ],
)
def test_an_image_model_transformers_does_not_compute_is_refused_by_name(tmp_path, family, file, why):
    with pytest.raises(ExportError, match=why):
        to_transformers(converted(family, file), tmp_path / "out")
    assert list(tmp_path.iterdir()) == []  # nothing written


V1 = {"input_conv_filters": [64], "input_conv_kernel_sizes": [7], "stackwise_num_filters": [64, 128]}
V1 |= {"stackwise_num_blocks": [2, 2], "stackwise_num_strides": [1, 2], "block_type": "bottleneck_block"}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"input_conv_kernel_sizes": [3]}, r"stem has 1 convolutions of kernels \[3\]; .* one 7x7 convolution"),
        ({"stackwise_num_strides": [1, 1]}, r"stackwise_num_strides \[1, 1\]: .* every other 2"),
        ({"stackwise_num_strides": [3, 2]}, r"stackwise_num_strides \[3, 2\]: .* first stack 1 or 2"),
        ({"stackwise_num_filters": [16, 128]}, r"stack 0's first block maps 64 channels to 64 unstrided"),
        ({"block_type": "basic_block_vd"}, r"block_type 'basic_block_vd': .* basic_block and bottleneck_block only"),
    ],
)
def test_a_resnet_layout_transformers_has_not_is_refused_saying_what_differs(change, why):
    """keras-hub 0.32's ResNetBackbone arguments (ResNet-50's, but narrower) with one thing changed."""
    from attnzoo.keras.converters.hub_resnet import RESNET
    from attnzoo.keras.transformers_form import HubSource

    with pytest.raises(ExportError, match=why):
        RESNET.config(HubSource("ResNetBackbone", "backbone", {**V1, **change}, {}, {}))


# -- the slow tier: transformers loads the folders in a process without keras, keras_hub or attnzoo ------------


def _jobs() -> dict[str, dict]:
    deit = expected("deit")
    pixels = {key: deit[f"in/{key}"].transpose(0, 3, 1, 2) for key in ("images", "classifier_images")}
    no_pooler = {"add_pooling_layer": False}
    return {
        "deit": ("backbone.keras", "AutoModel", no_pooler, pixels["images"], "last_hidden_state", "backbone/out"),
        "deit_preset": (
            "backbone_preset",
            "AutoModel",
            no_pooler,
            pixels["images"],
            "last_hidden_state",
            "backbone/out",
        ),
        "deit_classifier": (
            "classifier.keras",
            "AutoModelForImageClassification",
            {},
            pixels["classifier_images"],
            "logits",
            "classifier/out",
        ),
    }


# (layer_type, stem width, stacks' output widths, depths, first stack's stride, image height and width)
RESNETS = {
    "resnet_bottleneck": ("bottleneck", 8, [16, 8], [2, 1], 1, (29, 31)),
    "resnet_basic": ("basic", 8, [8, 12], [1, 2], 1, (32, 32)),
    "resnet_downsampled": ("bottleneck", 6, [8, 16], [1, 1], 2, (33, 40)),
    "resnet_classifier": ("basic", 4, [4, 8], [2, 1], 1, (30, 27)),  # a ResNetImageClassifier of 5 classes
}
CLASSES = 5


def _reference_resnet(name: str):
    """A seeded transformers ResNetModel (ResNetForImageClassification for the classifier) of the case's
    layout, every batch-norm statistic moved."""
    import transformers

    layer_type, stem, widths, depths, first, _ = RESNETS[name]
    config = transformers.ResNetConfig(
        embedding_size=stem,
        hidden_sizes=widths,
        depths=depths,
        layer_type=layer_type,
        downsample_in_first_stage=first == 2,
        num_labels=CLASSES,
    )
    torch.manual_seed(0)
    kind = transformers.ResNetForImageClassification if name == "resnet_classifier" else transformers.ResNetModel
    model = kind(config).eval()
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.weight.data.uniform_(0.5, 1.5)
            module.bias.data.normal_(0, 0.1)
            module.running_mean.normal_(0, 0.1)
            module.running_var.uniform_(0.5, 1.5)
    return model


def _keras_name(theirs: str) -> tuple[str, str]:
    """keras-hub's Conv2D and BatchNormalization names of transformers' ResNetConvLayer ``theirs``."""
    if theirs == "embedder.embedder":
        return "conv1_conv", "conv1_bn"
    _, _, s, _, b, part, *i = theirs.split(".")  # encoder.stages.<s>.layers.<b>.(shortcut | layer.<i>)
    at = f"stack{s}_block{b}_{0 if part == 'shortcut' else int(i[0]) + 1}"
    return f"{at}_conv", f"{at}_bn"


def _resnet_file(name: str, path, pooling: str = "avg") -> None:
    """A ResNetBackbone .keras file (a ResNetImageClassifier's, of ``pooling``, for the classifier) holding
    the weights of :func:`_reference_resnet`'s model."""
    import h5py

    layer_type, stem, widths, depths, first, _ = RESNETS[name]
    state = _reference_resnet(name).state_dict()
    task = name == "resnet_classifier"
    state = {key.removeprefix("resnet."): value for key, value in state.items()}
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as f:
        f.create_group("vars").attrs["name"] = "res_net_image_classifier" if task else "res_net_backbone"
        inner = f
        if task:  # the backbone nested under its name, the head's Dense beside it
            inner = f.create_group("layers/res_net_backbone")
            inner.create_group("vars").attrs["name"] = "res_net_backbone"
            f.create_group("layers/dense/vars").attrs["name"] = "predictions"
            f["layers/dense/vars"]["0"] = state["classifier.1.weight"].T.numpy()  # Dense's kernel [in, out]
            f["layers/dense/vars"]["1"] = state["classifier.1.bias"].numpy()
        for key in state:
            if not key.endswith("convolution.weight"):
                continue
            theirs = key.removesuffix(".convolution.weight")
            conv, bn = _keras_name(theirs)
            inner.create_group(f"layers/{conv}/vars").attrs["name"] = conv
            inner[f"layers/{conv}/vars"]["0"] = state[key].permute(2, 3, 1, 0).numpy()  # [kh, kw, in, out]
            group = inner.create_group(f"layers/{bn}/vars")
            group.attrs["name"] = bn
            for i, stat in enumerate(("weight", "bias", "running_mean", "running_var")):
                group[str(i)] = state[f"{theirs}.normalization.{stat}"].numpy()
    width = 4 if layer_type == "bottleneck" else 1
    arguments = {"name": "res_net_backbone", "trainable": True, "dtype": "float32", "input_conv_filters": [stem]}
    arguments |= {"input_conv_kernel_sizes": [7], "stackwise_num_filters": [w // width for w in widths]}
    arguments |= {"stackwise_num_blocks": depths, "stackwise_num_strides": [first] + [2] * (len(widths) - 1)}
    arguments |= {"block_type": f"{layer_type}_block", "use_pre_activation": False, "image_shape": [None, None, 3]}
    record = {"module": "keras_hub.src.models.resnet.resnet_backbone", "class_name": "ResNetBackbone"}
    record |= {"config": arguments, "registered_name": "keras_hub>ResNetBackbone"}
    if task:
        head = {"preprocessor": None, "name": "res_net_image_classifier", "num_classes": CLASSES, "pooling": pooling}
        head |= {"activation": None, "dropout": 0.0, "backbone": record}
        record = {
            "module": "keras_hub.src.models.resnet.resnet_image_classifier",
            "class_name": "ResNetImageClassifier",
        }
        record |= {"config": head, "registered_name": "keras_hub>ResNetImageClassifier"}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
        z.writestr("config.json", json.dumps(record))
        z.writestr("model.weights.h5", buffer.getvalue())


def _images(name: str) -> np.ndarray:
    height, width = RESNETS[name][-1]
    return np.random.default_rng(1).normal(size=(2, height, width, 3)).astype(np.float32)


@pytest.fixture(scope="module")
def resnets(tmp_path_factory):
    """Each case's file, and its reference model's states [B, C, H', W'] (the classifier's logits) on
    :func:`_images`."""
    root, found = tmp_path_factory.mktemp("resnet"), {}
    for name in RESNETS:
        _resnet_file(name, root / f"{name}.keras")
        pixels = torch.from_numpy(_images(name)).permute(0, 3, 1, 2)
        with torch.no_grad():
            out = _reference_resnet(name)(pixel_values=pixels)
        found[name] = (root / f"{name}.keras", out.logits if name == "resnet_classifier" else out.last_hidden_state)
    return found


def _output(name: str) -> str:
    return "logits" if name == "resnet_classifier" else "last_hidden_state"


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RESNETS))
def test_a_resnet_of_transformers_layout_converts_to_transformers_states(resnets, name):
    """attnzoo's ResNetBackbone (the graph the keras-hub fixtures check) computes transformers' ResNet."""
    file, want = resnets[name]
    with torch.no_grad():
        got = convert_keras_model(file)(torch.from_numpy(_images(name)))
    got = got if name == "resnet_classifier" else got.permute(0, 3, 1, 2)
    assert got.shape == want.shape
    worst = float((got - want).abs().max())
    print(f"{name} converted: max difference {worst:.3g}")
    assert worst <= TOLERANCE


@pytest.mark.slow
def test_a_resnet_classifier_pooled_by_max_is_refused(tmp_path):
    _resnet_file("resnet_classifier", tmp_path / "max.keras", pooling="max")
    with pytest.raises(ExportError, match=r"pooler is not an average \('max' pooling\)"):
        to_transformers(tmp_path / "max.keras", tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def loaded(tmp_path_factory, resnets):
    root = tmp_path_factory.mktemp("hf_vision")
    specs, given = [], {}
    for name, (file, _) in resnets.items():
        to_transformers(file, root / name)
        given[f"{name}/pixel_values"] = np.ascontiguousarray(_images(name).transpose(0, 3, 1, 2))
        auto = "AutoModelForImageClassification" if name == "resnet_classifier" else "AutoModel"
        spec = {"name": name, "folder": str(root / name), "auto": auto, "kwargs": {}, "generate": []}
        pooled = [] if name == "resnet_classifier" else ["pooler_output"]
        specs.append({**spec, "inputs": ["pixel_values"], "outputs": [_output(name), *pooled]})
    for name, (file, auto, kwargs, pixels, output, _) in _jobs().items():
        to_transformers(DATA / "deit" / file, root / name)
        given[f"{name}/pixel_values"] = np.ascontiguousarray(pixels, dtype=np.float32)
        specs.append(
            {
                "name": name,
                "folder": str(root / name),
                "auto": auto,
                "kwargs": kwargs,
                "inputs": ["pixel_values"],
                "outputs": [output],
                "generate": [],
            }
        )
    return run_loader(root, specs, given)


@pytest.mark.slow
def test_the_child_imported_none_of_keras_keras_hub_attnzoo_and_loaded_every_weight(loaded):
    assert loaded["blocked"].all()
    for name in [*_jobs(), *RESNETS]:
        assert json.loads(str(loaded[f"{name}/loading"])) == {}, name  # no missing, unexpected or mismatched weight


@pytest.mark.slow
@pytest.mark.parametrize("name", ["deit", "deit_preset", "deit_classifier"])
def test_deit_gives_keras_s_states_and_logits(loaded, name):
    """Every token of the backbone (class, distillation, patches); the classifier's logits."""
    _, _, _, _, output, want = _jobs()[name]
    got, want = loaded[f"{name}/{output}"], expected("deit")[want]
    assert got.shape == want.shape
    worst = float(np.abs(got - want).max())
    print(f"{name}: max difference {worst:.3g}")
    assert worst <= TOLERANCE, worst
    assert torch.from_numpy(got).isfinite().all()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RESNETS))
def test_a_resnet_folder_gives_the_reference_model_s_states(loaded, resnets, name):
    got, want = loaded[f"{name}/{_output(name)}"], resnets[name][1].numpy()
    assert got.shape == want.shape
    worst = float(np.abs(got - want).max())
    if name != "resnet_classifier":  # the pooled features, [B, C, 1, 1] in transformers: the states' average
        pooled = want.mean(axis=(2, 3), keepdims=True)
        assert np.abs(loaded[f"{name}/pooler_output"] - pooled).max() <= TOLERANCE
    print(f"{name} through the folder: max difference {worst:.3g}")
    assert worst <= TOLERANCE
