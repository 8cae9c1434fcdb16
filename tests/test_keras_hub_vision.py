"""keras-hub's image models convert without keras-hub: each backbone rebuilt from its constructor's
arguments as the graph of plain Keras layers keras-hub builds (converted by attnzoo's own converters), and
``<X>ImageClassifier`` tasks over them (a global pooler, dropout, a dense head).

The tiny models were made once with keras 3 (torch backend) and keras-hub 0.32
(tests/keras_hub_vision_fixtures.py), every weight moved off its initial value: a backbone saved with
``model.save`` (.keras, whose config keeps only the constructor's arguments) and ``save_to_preset`` (a
folder), and a classifier over another backbone of the family. Keras's own outputs are in each family's
expected.npz; the converted model must agree within 1e-5 at every element (relative 1e-6 where a logit is
above 10, one float32 ulp there being 1e-6).
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import zipfile

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.errors import WeightsError
from attnzoo.keras import convert_keras_model

from .conftest import ROOT

DATA = ROOT / "tests" / "data" / "keras_hub_vision"
FAMILIES = ("resnet", "efficientnet", "mobilenet", "densenet", "deit")


def _expected(family: str) -> dict[str, np.ndarray]:
    return dict(np.load(DATA / family / "expected.npz"))


def _close(got: torch.Tensor, want: np.ndarray) -> None:
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want, atol=1e-5, rtol=1e-6)


CASES = [(family, "backbone.keras", "images", "backbone/out") for family in FAMILIES]
CASES += [(family, "backbone_preset", "images", "backbone/out") for family in FAMILIES]
CASES += [(family, "classifier.keras", "classifier_images", "classifier/out") for family in FAMILIES]
CASES += [("deit", "classifier_gap.keras", "classifier_images", "classifier_gap/out")]


@pytest.mark.parametrize(("family", "file", "images", "out"), CASES)
def test_an_image_model_predicts_what_keras_predicts(family, file, images, out):
    expected = _expected(family)
    model = convert_keras_model(DATA / family / file)
    assert model.input_names == ["images"]
    with torch.no_grad():
        _close(model(torch.from_numpy(expected[f"in/{images}"])), expected[out])
        if file == "backbone.keras" and "in/images_other" in expected:  # image_shape (None, None, 3): any size
            _close(model(torch.from_numpy(expected["in/images_other"])), expected["backbone/out_other"])


@pytest.mark.parametrize("family", FAMILIES)
def test_a_converted_classifier_saves_loads_and_trains(tmp_path, family):
    expected = _expected(family)
    images = torch.from_numpy(expected["in/classifier_images"])
    model = attnzoo.load(attnzoo.save(convert_keras_model(DATA / family / "classifier.keras"), tmp_path / "saved"))
    with torch.no_grad():
        _close(model(images), expected["classifier/out"])
    model.train()
    # EfficientNet's stochastic depth drops a whole block's branch in training, whose parameters then get no
    # gradient that pass: gradients are summed over passes (seeded) until each has had its turn
    torch.manual_seed(0)
    for _ in range(8):
        model(images).square().mean().backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing


def _edited(tmp_path, family: str, file: str, edit) -> str:
    """``file`` with its config.json passed through ``edit``."""
    path = tmp_path / file
    with zipfile.ZipFile(DATA / family / file) as z, zipfile.ZipFile(path, "w") as out:
        for info in z.infolist():
            data = z.read(info)
            if info.filename == "config.json":
                config = json.loads(data)
                edit(config)
                data = json.dumps(config).encode()
            out.writestr(info.filename, data)
    return str(path)


def _backbone(config):
    return config["config"]["backbone"]["config"] if "backbone" in config["config"] else config["config"]


def _blocks(config):
    _backbone(config)["stackwise_block_types"][-1] = "ghost"


@pytest.mark.parametrize(
    ("family", "file", "edit", "message"),
    [
        ("resnet", "backbone.keras", lambda c: c["config"].update(stem_width=3), r"'stem_width', which attnzoo does"),
        ("resnet", "backbone.keras", lambda c: c["config"].update(block_type="wide"), r"block_type 'wide'"),
        ("resnet", "backbone.keras", lambda c: c["config"].update(data_format="nhwc"), r"data_format 'nhwc'"),
        ("resnet", "classifier.keras", lambda c: c["config"].update(pooling="attention"), r"pooling 'attention'"),
        ("resnet", "classifier.keras", lambda c: _backbone(c).update(stackwise_num_blocks=[1]), r"list of 2 positive"),
        ("efficientnet", "classifier.keras", _blocks, r"block type\(s\) \['ghost'\]"),
        ("efficientnet", "backbone.keras", lambda c: c["config"].update(data_format="channels_first"), "channels last"),
        ("efficientnet", "backbone.keras", lambda c: c["config"].update(stackwise_strides=[1]), "one item per stack"),
        ("mobilenet", "backbone.keras", lambda c: c["config"].update(stackwise_padding=[[1]]), r"\[1, 2\] items per"),
        ("mobilenet", "classifier.keras", lambda c: c["config"].update(pooling="max"), r"'pooling', which attnzoo"),
        ("densenet", "backbone.keras", lambda c: c["config"].update(compression_ratio=1.5), r"compression_ratio 1.5"),
        ("deit", "classifier.keras", lambda c: c["config"].update(pooling="avg"), r"pooling 'avg'; keras-hub's DeiT"),
        ("deit", "backbone.keras", lambda c: c["config"].update(image_shape=[None, None, 3]), r"image_shape \[None"),
    ],
)
def test_a_config_attnzoo_does_not_compute_is_refused_by_name(tmp_path, family, file, edit, message):
    with pytest.raises(WeightsError, match=message):
        convert_keras_model(_edited(tmp_path, family, file, edit))


@pytest.mark.usefixtures("without_keras_hub")
def test_a_preset_folder_with_another_class_name_is_refused(tmp_path):
    folder = tmp_path / "preset"
    shutil.copytree(DATA / "resnet" / "backbone_preset", folder)
    config = json.loads((folder / "config.json").read_text())
    config["class_name"], config["registered_name"] = "ResNeXtBackbone", "keras_hub>ResNeXtBackbone"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(WeightsError, match=r"'ResNeXtBackbone' is a functional model.*ResNetBackbone"):
        convert_keras_model(folder)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["constant", "reflect"])
def test_keras_ops_pad_pads_with_its_constant_and_refuses_another_mode(tmp_path, mode):
    """ResNetV2's stem pads with -inf before its max pool (``ops.pad``, which keras 3 records as an
    operation): a functional model of it against Keras's own output; another mode is refused when read."""
    import keras

    x = keras.Input((3, 4, 2))
    value = {"constant_values": -1.5} if mode == "constant" else {}
    keras.Model(x, keras.ops.pad(x, [[0, 0], [1, 2], [2, 0], [0, 0]], mode=mode, **value)).save(tmp_path / "pad.keras")
    keras_model = keras.saving.load_model(tmp_path / "pad.keras")
    images = np.random.default_rng(0).standard_normal((2, 3, 4, 2)).astype("float32")
    if mode != "constant":
        with pytest.raises(Exception, match=r"pad's mode 'reflect' is not supported \(only 'constant'\)"):
            convert_keras_model(tmp_path / "pad.keras")
        return
    with torch.no_grad():
        got = convert_keras_model(tmp_path / "pad.keras")(torch.from_numpy(images))
    np.testing.assert_array_equal(got.numpy(), np.asarray(keras_model.predict(images, verbose=0)))


_READ = ("filters", "kernel_size", "strides", "padding", "data_format", "use_bias", "activation", "groups")
_READ += ("axis", "epsilon", "momentum", "center", "scale", "pool_size", "pad_width", "mode", "dilation_rate")


def _summary(functional: dict) -> dict:
    """A functional config as {layer: (class, the settings the converters read, its inputs)}; a layer Keras
    named itself (``average_pooling2d_3``, ``pad``: no weights) is keyed by its class and its consumer."""
    layers = functional.get("config", functional)["layers"]

    def sources(layer):
        text = json.dumps(layer["inbound_nodes"])
        return re.findall(r'"keras_history": \["([^"]+)"', text)

    consumers = {source: layer["name"] for layer in layers for source in sources(layer)}
    auto = {layer["name"] for layer in layers if layer["class_name"] in ("AveragePooling2D", "Pad", "InputLayer")}

    def key(name):
        if name not in auto:
            return name
        kind = next(layer["class_name"] for layer in layers if layer["name"] == name)
        return f"{kind} -> {key(consumers[name])}"

    def settings(layer):
        config = {k: v for k, v in layer["config"].items() if k in _READ}
        nodes = layer["inbound_nodes"]
        config["kwargs"] = [{k: v for k, v in node["kwargs"].items() if v is not None} for node in nodes]
        return json.loads(json.dumps(config).replace("-Infinity", '"-inf"'))

    return {key(x["name"]): (x["class_name"], settings(x), sorted(key(s) for s in sources(x))) for x in layers}


def test_the_rebuilt_resnet_graphs_are_keras_s_own_for_every_block_type():
    """Keras's functional config of a ResNetBackbone of each block type, with and without pre-activation
    (tests/keras_hub_vision_fixtures.py), against the graph attnzoo rebuilds from its arguments: the same
    layers, classes, settings and connections."""
    from attnzoo.keras.converters.hub_resnet import resnet_graph

    with gzip.open(DATA / "resnet" / "graphs.json.gz", "rt") as f:
        graphs = json.load(f)
    assert len(graphs) == 8
    for variant, graph in graphs.items():
        rebuilt = json.loads(json.dumps(resnet_graph(graph["arguments"], variant)))
        ours, theirs = _summary(rebuilt), _summary(graph["keras"])
        assert set(ours) == set(theirs), variant
        for name in ours:
            assert ours[name] == theirs[name], (variant, name)
