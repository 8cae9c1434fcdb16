"""One door for every Keras converter: Keras's layers, its operations and keras-hub's layers register through
the same decorator into one table, found from an explicit family list; one collision policy (built-ins
first, a plugin that shadows one warns; ``custom_layers=`` is the user's own choice and goes first).

The end-to-end cases convert tests/data/keras_hub/translator.keras (keras-io's translator: keras-hub layers,
a Dense, keras operations) with a plugin's hook run in this process (REGISTRY.each_plugin replaced), so no
package is installed.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from attnzoo.core.registry import REGISTRY
from attnzoo.errors import PluginWarning
from attnzoo.keras import convert_keras_model
from attnzoo.keras.convert import UnsupportedKerasLayerError
from attnzoo.keras.converters import FAMILIES
from attnzoo.keras.converters.hub_layers import convert_transformer_decoder
from attnzoo.keras.converters.ops import OPERATION_NAMES, convert_operation
from attnzoo.keras.registry import ConverterTable, Refused, builtin, builtin_keys

from .conftest import ROOT

TRANSLATOR = ROOT / "tests" / "data" / "keras_hub" / "translator.keras"
CONVERTERS = ROOT / "attnzoo" / "keras" / "converters"


def test_the_family_list_names_every_converter_file_and_only_those():
    files = sorted(p.stem for p in CONVERTERS.glob("*.py") if p.stem != "__init__")
    assert sorted(FAMILIES) == files and len(set(FAMILIES)) == len(FAMILIES)


def test_keras_hub_layers_and_keras_operations_are_attnzoo_converters_of_the_one_table():
    decoder = builtin("keras_hub>TransformerDecoder")
    assert decoder is not None and decoder.convert is convert_transformer_decoder and decoder.provider == "attnzoo"
    assert decoder.positional == ("decoder_sequence", "encoder_sequence")  # keras-io's keyword call form
    assert {f"keras.ops>{name}" for name in OPERATION_NAMES} <= builtin_keys()
    assert builtin("keras.ops>get_item").convert is convert_operation
    # an operation's key never collides with the layer of the same class name (keras.ops.add vs layers.Add)
    assert builtin("keras>Add").convert is not convert_operation


def _node(record, arrays, ctx):
    raise Refused("the plugin's converter was asked")


def test_a_plugin_that_shadows_a_builtin_warns_and_answers_only_where_attnzoo_refuses():
    table = ConverterTable()
    with pytest.warns(
        PluginWarning, match=r"'my_plugin' registers a Keras converter for 'keras>Dense', which 'attnzoo'"
    ):
        table.register_for("my_plugin")("keras>Dense", _node, protocol="node")
    with pytest.warns(PluginWarning, match=r"which 'attnzoo', 'my_plugin' converts too") as seen:
        table.register_for("other_plugin")("keras>Dense", _node, protocol="node")
    assert "custom_layers={'keras>Dense': convert}" in str(seen[0].message)
    order = [entry.provider for entry in table.candidates(["keras>Dense"])]
    assert order == ["attnzoo", "my_plugin", "other_plugin"]


def test_custom_layers_come_first_and_a_new_name_registers_without_a_warning(recwarn):
    table = ConverterTable()
    table.register_for("custom_layers")("keras>Dense", lambda config, weights: None)
    table.register_for("my_plugin")("my_pkg>Thing", _node, protocol="node")
    assert [entry.provider for entry in table.candidates(["keras>Dense"])] == ["custom_layers", "attnzoo"]
    assert [entry.provider for entry in table.candidates(["my_pkg>Thing"])] == ["my_plugin"]
    assert not [w for w in recwarn if issubclass(w.category, PluginWarning)]


@pytest.fixture
def plugin_registers_dense(monkeypatch):
    """A plugin, run in this process, whose hook registers a converter for Keras's Dense."""

    def each_plugin(hook_name, arguments):
        if hook_name == "attnzoo_register_keras_layers":
            arguments("my_plugin")["register"]("keras>Dense", _node, protocol="node")

    monkeypatch.setattr(REGISTRY, "each_plugin", each_plugin)


def test_attnzoos_dense_converts_even_with_a_plugin_of_the_same_name(plugin_registers_dense):
    with pytest.warns(PluginWarning, match="'my_plugin' registers a Keras converter for 'keras>Dense'"):
        model = convert_keras_model(TRANSLATOR)
    assert any(row["class"] == "Dense" and row["node"] == "dense" for row in model.keras_report.rows)


def _with_layer_edited(source: Path, target: Path, class_name: str, edit) -> Path:
    """A copy of the archive ``source`` whose first layer of ``class_name`` ``edit`` changed in config.json."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for item in old.infolist():
            data = old.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                edit(next(layer for layer in config["config"]["layers"] if layer["class_name"] == class_name))
                data = json.dumps(config).encode()
            new.writestr(item, data)
    return target


def test_the_plugins_converter_is_asked_where_attnzoos_refuses(tmp_path, plugin_registers_dense):
    def custom_activation(dense):
        dense["config"]["activation"] = {
            "module": "builtins",
            "class_name": "function",
            "config": "my_pkg>my_act",
            "registered_name": "function",
        }

    target = _with_layer_edited(TRANSLATOR, tmp_path / "custom_activation.keras", "Dense", custom_activation)
    with pytest.warns(PluginWarning), pytest.raises(UnsupportedKerasLayerError) as info:
        convert_keras_model(target)
    message = str(info.value)
    assert "'my_pkg>my_act' is not a built-in Keras activation" in message  # attnzoo's refusal, first
    assert "my_plugin for keras>Dense: the plugin's converter was asked" in message  # then the plugin's


def test_a_keras_operation_attnzoo_does_not_run_is_refused_by_its_ops_name_with_those_it_runs(tmp_path):
    """user_model.keras slices the backbone's output with keras.ops.get_item; renamed to an operation
    attnzoo has no converter for, the refusal names it as ``keras.ops>erfinv`` and lists what runs."""
    source = ROOT / "tests" / "data" / "keras_hub_models" / "user_model.keras"
    target = _with_layer_edited(source, tmp_path / "erfinv.keras", "GetItem", lambda op: op.update(class_name="Erfinv"))
    with pytest.raises(UnsupportedKerasLayerError) as info:
        convert_keras_model(target)
    line = next(line for line in str(info.value).splitlines() if "Erfinv" in line)
    assert "the keras operation Erfinv ('keras.ops>erfinv') is not supported; attnzoo runs" in line
    assert "get_item" in line and "matmul" in line
