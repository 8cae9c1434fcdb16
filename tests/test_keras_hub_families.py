"""keras-hub's model families come in through one door (attnzoo/keras/hub_families.py): each family's file
registers its classes with ``@keras_hub_model``, a plugin's hook or a script's ``register_hub_model`` adds
classes to the same table under one collision policy, every registered class has a row in
docs/keras-hub.md and a committed fixture made by keras-hub, and a class nobody registered is refused
naming the classes that convert."""

from __future__ import annotations

import json
import re
import shutil
import zipfile

import numpy as np
import pytest
import torch

from attnzoo.core.registry import REGISTRY
from attnzoo.errors import PluginWarning, WeightsError
from attnzoo.keras import convert_keras_model, hub_keras
from attnzoo.keras.converters import FAMILIES
from attnzoo.keras.converters.hub_gpt2 import gpt2_graph
from attnzoo.keras.hub_families import HOOK, HubModel, hub_models, register_hub_model

from .conftest import ROOT

DATA = ROOT / "tests" / "data"
GPT2 = DATA / "keras_hub_models" / "gpt2_preset"
DOCS = ROOT / "docs" / "keras-hub.md"


@pytest.fixture
def own_table(monkeypatch):
    """The in-process entries of the table as they were, restored after the test (and the table rebuilt)."""
    monkeypatch.setattr(REGISTRY, "_local_items", {key: dict(value) for key, value in REGISTRY._local_items.items()})
    REGISTRY.snapshot().collected.pop(HOOK, None)
    yield
    REGISTRY.snapshot().collected.pop(HOOK, None)


def _classes_in_fixtures() -> set[str]:
    """The keras-hub model classes the committed fixtures hold, read from their configs (not from attnzoo)."""
    found: set[str] = set()

    def add(config: dict) -> None:
        found.add(str(config.get("class_name")))
        backbone = config.get("config", {}).get("backbone")
        if isinstance(backbone, dict):
            found.add(str(backbone.get("class_name")))

    for archive in DATA.rglob("*.keras"):
        with zipfile.ZipFile(archive) as z:
            add(json.loads(z.read("config.json")))
    for name in ("config.json", "task.json"):
        for path in DATA.rglob(name):
            if (path.parent / "metadata.json").exists():  # a save_to_preset folder
                add(json.loads(path.read_text()))
    return found


def test_every_family_has_its_file_and_every_class_a_fixture_made_by_keras_hub():
    table = hub_models()
    builtin = [name for name in table if table.provider(name) == "attnzoo"]
    assert {"BertBackbone", "GPT2CausalLM", "LlamaCausalLM", "ViTBackbone"} <= set(builtin)
    for name in builtin:
        assert f"hub_{table[name].family}" in FAMILIES, f"{name}'s family has no file hub_{table[name].family}.py"
    missing = sorted(set(builtin) - _classes_in_fixtures())
    assert not missing, f"no committed fixture holds {missing}"


def test_every_class_that_converts_has_its_row_in_the_docs_table_and_only_those():
    """A row: the class, its family, its kind and the transformers class its Hugging Face form writes (—: none)."""
    table = hub_models()
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \| ([\w ]+?) \| `?([\w—]+)`? \|", DOCS.read_text(), flags=re.M)
    documented = {name: (family, kind, hf) for name, family, kind, hf in rows}

    def row(name):
        entry = table[name]
        form = entry.transformers.architectures.get(entry.kind) if entry.transformers is not None else None
        return entry.family, entry.kind.replace("_", " "), form or "—"

    assert documented == {name: row(name) for name in table if table.provider(name) == "attnzoo"}


def _renamed(tmp_path, class_name: str):
    """The GPT-2 preset folder with its class renamed, as a family nobody registered would be."""
    folder = tmp_path / "renamed_preset"
    shutil.copytree(GPT2, folder)
    config = json.loads((folder / "config.json").read_text())
    config["class_name"], config["registered_name"] = class_name, f"keras_hub>{class_name}"
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.usefixtures("without_keras_hub")
def test_a_class_nobody_registered_is_refused_naming_the_classes_that_convert(tmp_path):
    with pytest.raises(WeightsError, match=r"'MyGPTBackbone' is a functional model.*GPT2Backbone.*keras.Model"):
        convert_keras_model(_renamed(tmp_path, "MyGPTBackbone"))


@pytest.mark.skipif(not hub_keras.keras_hub_installed(), reason="needs keras-hub installed")
def test_with_keras_hub_a_class_it_does_not_register_is_refused_with_the_graph_route(tmp_path):
    with pytest.raises(WeightsError, match=r"'MyGPTBackbone' is not a model class keras-hub .* registers.*keras.Model"):
        convert_keras_model(_renamed(tmp_path, "MyGPTBackbone"))


def test_a_class_registered_in_process_converts_through_its_builder(tmp_path, own_table):
    register_hub_model("MyGPTBackbone", HubModel(build=gpt2_graph, family="my_gpt"))
    assert hub_models().provider("MyGPTBackbone") == "local"
    ids = torch.randint(1, 100, (2, 7), generator=torch.Generator().manual_seed(0))
    inputs = {"token_ids": ids, "padding_mask": torch.ones_like(ids)}
    mine, original = convert_keras_model(_renamed(tmp_path, "MyGPTBackbone")), convert_keras_model(GPT2)
    assert mine.graph["keras_hub_class"] == "MyGPTBackbone"
    with torch.no_grad():
        torch.testing.assert_close(mine(inputs), original(inputs), rtol=0, atol=0)


def test_a_plugin_that_registers_a_class_attnzoo_converts_warns_and_is_skipped(monkeypatch, own_table):
    def each_plugin(hook_name, arguments):
        if hook_name == HOOK:
            arguments("my_plugin")["register"]("LlamaBackbone", HubModel(build=gpt2_graph, family="mine"))
            arguments("my_plugin")["register"]("MineBackbone", HubModel(build=gpt2_graph, family="mine"))

    monkeypatch.setattr(REGISTRY.snapshot().host, "each_plugin", each_plugin)
    with pytest.warns(PluginWarning, match=r"'my_plugin' registers the keras-hub model class 'LlamaBackbone'"):
        table = hub_models()
    assert table.provider("LlamaBackbone") == "attnzoo" and table["LlamaBackbone"].family == "llama"
    assert table.provider("MineBackbone") == "my_plugin"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"build": "not callable", "family": "x"}, "build must be callable"),
        ({"build": gpt2_graph, "family": ""}, "family must be a non-empty str"),
        (
            {"build": gpt2_graph, "family": "x", "kind": "decoder"},
            "kind must be one of backbone, causal_lm, seq2seq_lm, task",
        ),
    ],
)
def test_a_hub_model_record_says_what_is_wrong_with_it(arguments, message):
    from attnzoo.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        HubModel(**arguments)


def test_the_converted_graph_keeps_the_class_and_its_plain_constructor_arguments():
    model = convert_keras_model(DATA / "keras_hub_models" / "llama_causal_lm.keras")
    assert model.graph["keras_hub_class"] == "LlamaCausalLM"
    arguments = model.graph["keras_hub_config"]  # the backbone's, read from the task's nested record
    assert arguments["num_query_heads"] == 4 and arguments["num_key_value_heads"] == 2
    assert all(not isinstance(value, dict) for value in arguments.values())
    assert np.isclose(arguments["layer_norm_epsilon"], 1e-6)
