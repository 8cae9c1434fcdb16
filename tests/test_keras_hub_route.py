"""keras-hub classes attnzoo neither rebuilds nor converts through keras-hub's graph yet: DINOv2 and Swin.

The fixtures are tiny models made with keras-hub 0.32 (tests/keras_hub_route_fixtures.py); expected.npz holds
Keras's outputs, kept for a port to agree with. Today both are refused, each with its reason: without keras-hub
by name with both routes; with it, DINOv2's graph (built by keras-hub) stops at its two layers attnzoo does
not convert, and keras-hub 0.32 cannot write Swin's graph at all (its ``SwinTransformerStage`` serialises its
``norm_layer`` class as if it were a layer, the same error ``keras.Model(swin.inputs,
swin.outputs).save(...)`` raises in Keras).
"""

from __future__ import annotations

import importlib.util

import pytest

from attnzoo.errors import UnsupportedKerasLayerError, WeightsError
from attnzoo.keras import convert_keras_model

from .conftest import ROOT

DATA = ROOT / "tests" / "data" / "keras_hub_route"
FILES = {"dinov2.keras": "DINOV2Backbone", "dinov2_preset": "DINOV2Backbone", "swin.keras": "SwinTransformerBackbone"}
needs_keras_hub = pytest.mark.skipif(importlib.util.find_spec("keras_hub") is None, reason="needs keras-hub installed")


@pytest.mark.usefixtures("without_keras_hub")
@pytest.mark.parametrize("name", sorted(FILES))
def test_without_keras_hub_each_is_refused_by_name_with_both_routes(name):
    with pytest.raises(WeightsError) as error:
        convert_keras_model(DATA / name)
    message = str(error.value)
    assert f"keras-hub's {FILES[name]!r} is a functional model" in message
    assert f"install keras-hub (pip install keras-hub) to convert {FILES[name]} through its own graph" in message


@needs_keras_hub
@pytest.mark.parametrize("name", ["dinov2.keras", "dinov2_preset"])
def test_with_keras_hub_dinov2_s_graph_stops_at_its_embedding_and_encoder(name):
    with pytest.raises(UnsupportedKerasLayerError) as error:
        convert_keras_model(DATA / name)
    message = str(error.value)
    assert "2 layer(s) cannot be converted" in message
    assert "(DINOV2Embedding, variables [1, 1, 32], [1, 32], [1, 17, 32], [1, 17, 32], [4, 4, 3, 32], [32])" in message
    assert "'keras_hub>DINOV2Encoder'" in message


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
