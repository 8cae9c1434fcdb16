"""Every refusal of a Keras file names what it refuses and says what to do; what a file sets that the
converted model does not do by itself (a mixed-precision policy, training=True calls) is said once.

The files are tests/data/keras_hub/translator.keras (keras-io's translator: keras-hub layers and a Dense,
made once with keras 3 and keras-hub) with its config.json edited in tmp_path into what a user's file holds:
a keras-hub model class, a subclassed model, a keras-hub layer attnzoo does not convert, a Dense with a
registered custom activation, a mixed_float16 policy, a call with training=True. No Keras is needed.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from attnzoo.errors import WeightsError
from attnzoo.keras import convert_keras_model
from attnzoo.keras.convert import UnsupportedKerasLayerError

from .conftest import ROOT

TRANSLATOR = ROOT / "tests" / "data" / "keras_hub" / "translator.keras"
HOOK = "attnzoo_register_keras_layers"
DOCS = "docs/keras-migration.md"


def _edited(tmp_path: Path, edit) -> Path:
    target = tmp_path / "edited.keras"
    with zipfile.ZipFile(TRANSLATOR) as old, zipfile.ZipFile(target, "w") as new:
        for item in old.infolist():
            data = old.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                edit(config, {layer["name"]: layer for layer in config["config"]["layers"]})
                data = json.dumps(config).encode()
            new.writestr(item, data)
    return target


@pytest.mark.usefixtures("without_keras_hub")
def test_a_keras_hub_model_is_not_called_something_other_than_a_keras_model(tmp_path):
    def backbone(config, _):  # a keras-hub model class whose graph attnzoo does not rebuild
        config.update(
            class_name="PaliGemmaBackbone",
            module="keras_hub.src.models.pali_gemma.pali_gemma_backbone",
            registered_name="keras_hub>PaliGemmaBackbone",
        )

    with pytest.raises(WeightsError) as info:
        convert_keras_model(_edited(tmp_path, backbone))
    message = str(info.value)
    assert "keras-hub's 'PaliGemmaBackbone' is a functional model" in message and "BertBackbone" in message
    assert "not a Keras model" not in message
    assert "keras.Model(model.inputs, model.outputs).save('model.keras')" in message


def test_a_subclassed_model_is_told_to_rebuild_as_functional_or_register_a_converter(tmp_path):
    def subclassed(config, _):
        config.update(class_name="MyModel", module=None, registered_name="my_pkg>MyModel")

    with pytest.raises(WeightsError) as info:
        convert_keras_model(_edited(tmp_path, subclassed))
    message = str(info.value)
    assert "'MyModel'" in message and "subclassed Keras model" in message
    assert "Rebuild it as a functional model" in message
    assert "register a converter for 'my_pkg>MyModel'" in message and HOOK in message and DOCS in message


def test_a_keras_hub_layer_attnzoo_does_not_convert_is_named_with_the_way_to_convert_it(tmp_path):
    def xlnet(_, layers):  # a layer of a keras-hub family attnzoo does not convert
        layer = layers["transformer_encoder_2"]
        layer.update(class_name="XLNetEncoder", registered_name="keras_hub>XLNetEncoder")

    with pytest.raises(UnsupportedKerasLayerError) as info:
        convert_keras_model(_edited(tmp_path, xlnet))
    line = next(line for line in str(info.value).splitlines() if line.startswith("  transformer_encoder_2"))
    assert "keras-hub's XLNetEncoder" in line and "'keras_hub>XLNetEncoder'" in line
    assert HOOK in str(info.value) and "TransformerEncoder" in line  # what does convert, and how to add one


def test_a_custom_activation_says_how_to_convert_the_layers_that_use_it(tmp_path):
    def activation(_, layers):
        custom = {"module": "builtins", "class_name": "function", "config": "my_pkg>my_act"}
        layers["dense_1"]["config"]["activation"] = {**custom, "registered_name": "function"}

    with pytest.raises(UnsupportedKerasLayerError) as info:
        convert_keras_model(_edited(tmp_path, activation))
    line = next(line for line in str(info.value).splitlines() if line.startswith("  dense_1"))
    assert "'my_pkg>my_act' is not a built-in Keras activation" in line
    assert "'keras>ClassName'" in line and HOOK in line and "custom_layers=" in line and DOCS in line


# -- what a file sets that the converted model does not do by itself: said once ------------------------------
def test_a_mixed_precision_policy_and_training_calls_are_said_once(tmp_path, capsys):
    from attnzoo.cli import main

    def mixed_and_mc_dropout(_, layers):
        policy = {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "mixed_float16"}}
        for layer in layers.values():
            if layer["class_name"] != "InputLayer":
                layer["config"]["dtype"] = {**policy, "registered_name": None}
        layers["transformer_encoder_2"]["inbound_nodes"][0]["kwargs"]["training"] = True

    file = _edited(tmp_path, mixed_and_mc_dropout)
    report = convert_keras_model(file).keras_report
    (policy, training) = report.notes
    assert "mixed_float16" in policy and "computes in float32" in policy and "float16 rounding" in policy
    assert "training=True" in training and "transformer_encoder_2" in training and "model.train()" in training
    row = next(row for row in report.rows if row["layer"] == "transformer_encoder_2")
    assert any("training=True" in note for note in row["notes"])
    assert main(["convert-keras", str(file), "--json", "-o", str(tmp_path / "out")]) == 0
    assert json.loads(capsys.readouterr().out)["notes"] == report.notes
    assert main(["convert-keras", str(file), "-o", str(tmp_path / "out2")]) == 0
    assert capsys.readouterr().out.count("mixed_float16") == 1
    plain = convert_keras_model(TRANSLATOR).keras_report
    assert plain.notes == []
