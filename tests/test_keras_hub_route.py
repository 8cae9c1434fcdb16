"""A keras-hub class attnzoo neither rebuilds nor converts through keras-hub's graph yet: Swin.

The fixtures are tiny models made with keras-hub 0.32 (tests/keras_hub_route_fixtures.py); expected.npz holds
Keras's outputs, kept for a port to agree with. Swin is refused with its reason: without keras-hub by name
with both routes; with it, keras-hub 0.32 cannot write Swin's graph at all (its ``SwinTransformerStage``
serialises its ``norm_layer`` class as if it were a layer, the same error ``keras.Model(swin.inputs,
swin.outputs).save(...)`` raises in Keras). DINOv2, once refused here too, now converts without keras-hub
(tests/test_keras_hub_dinov2.py); with keras-hub installed it converts the same way (attnzoo's own graph first).
"""

from __future__ import annotations

import importlib.util

import pytest

from attnzoo.errors import WeightsError
from attnzoo.keras import convert_keras_model

from .conftest import ROOT

DATA = ROOT / "tests" / "data" / "keras_hub_route"
FILES = {"swin.keras": "SwinTransformerBackbone"}
needs_keras_hub = pytest.mark.skipif(importlib.util.find_spec("keras_hub") is None, reason="needs keras-hub installed")


@pytest.mark.usefixtures("without_keras_hub")
@pytest.mark.parametrize("name", sorted(FILES))
def test_without_keras_hub_each_is_refused_by_name_with_both_routes(name):
    with pytest.raises(WeightsError) as error:
        convert_keras_model(DATA / name)
    message = str(error.value)
    assert f"keras-hub's {FILES[name]!r} is a functional model" in message
    assert f"install keras-hub (pip install keras-hub) to convert {FILES[name]} through its own graph" in message


@pytest.mark.usefixtures("without_keras_hub")
@pytest.mark.parametrize("name", ["dinov2.keras", "dinov2_preset"])
def test_dinov2_is_no_longer_refused_it_converts_through_attnzoo_s_own_graph(name):
    model = convert_keras_model(DATA / name)
    assert model.keras_classes == {
        "embeddings": "DINOV2Embedding",
        "encoder": "DINOV2Encoder",
        "layernorm": "LayerNormalization",
    }


@needs_keras_hub
def test_with_keras_hub_swin_s_graph_cannot_be_written_by_keras_hub():
    with pytest.raises(WeightsError, match=r"keras-hub could not build its SwinTransformerBackbone .*get_config"):
        convert_keras_model(DATA / "swin.keras")


@needs_keras_hub
def test_keras_itself_cannot_save_swin_s_graph(tmp_path):
    """The same error outside attnzoo: Keras saving the functional graph of the fixture's Swin."""
    import keras

    swin = keras.saving.load_model(DATA / "swin.keras")
    with pytest.raises(TypeError, match=r"get_config\(\) missing 1 required positional argument: 'self'"):
        keras.Model(swin.inputs, swin.outputs).save(tmp_path / "graph.keras")
