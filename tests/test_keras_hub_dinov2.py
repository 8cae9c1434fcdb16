"""keras-hub's DINOV2Backbone converts without keras-hub: patches by a strided Conv2d, the class token, the
position table, pre-norm encoder blocks with layer scale, a final layer norm.

The tiny DINOv2 was made once with keras 3 (torch backend) and keras-hub 0.32 (tests/keras_hub_route_fixtures.py),
every weight moved off its initial value, saved as a .keras file and a ``save_to_preset`` folder. Keras's
outputs (of the reloaded file: keras-hub's load recomputes the interpolated position table from the position
table) are in expected.npz; the converted model must agree within 1e-5.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.errors import WeightsError
from attnzoo.keras import convert_keras_model

from .conftest import ROOT

DATA = ROOT / "tests" / "data" / "keras_hub_route"
EXPECTED = dict(np.load(DATA / "expected.npz"))
IMAGES = torch.from_numpy(EXPECTED["dinov2/in/images"])


@pytest.mark.usefixtures("without_keras_hub")
@pytest.mark.parametrize("name", ["dinov2.keras", "dinov2_preset"])
def test_a_dinov2_backbone_predicts_what_keras_predicts(name):
    model = convert_keras_model(DATA / name)
    assert model.input_names == ["images"]
    with torch.no_grad():
        got = model(IMAGES).numpy()
    assert got.shape == (2, 17, 32)  # the class token and 4 x 4 patches
    np.testing.assert_allclose(got, EXPECTED["dinov2/out/output"], atol=1e-5, rtol=0)


def test_a_converted_dinov2_saves_and_loads_and_trains(tmp_path):
    model = attnzoo.load(attnzoo.save(convert_keras_model(DATA / "dinov2.keras"), tmp_path / "saved"))
    with torch.no_grad():
        np.testing.assert_allclose(model(IMAGES).numpy(), EXPECTED["dinov2/out/output"], atol=1e-5, rtol=0)
    model.train()
    model(IMAGES).square().mean().backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    assert all(g is not None and g.abs().sum() > 0 for g in grads.values()), [n for n, g in grads.items() if g is None]


def _preset_with(tmp_path, **changes):
    """The fixture's preset folder with its backbone's arguments changed."""
    folder = shutil.copytree(DATA / "dinov2_preset", tmp_path / "preset")
    config = json.loads((folder / "config.json").read_text())
    config["config"] |= changes
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"num_register_tokens": 4}, "num_register_tokens=4: attnzoo does not convert register tokens"),
        ({"use_swiglu_ffn": True}, "use_swiglu_ffn=True: attnzoo does not convert DINOv2's SwiGLU feed-forward"),
        ({"drop_path_rate": 0.1}, "drop_path_rate=0.1: attnzoo converts DINOv2 with drop_path_rate 0 only"),
        (
            {"image_shape": [8, 8, 3]},
            r"image_shape \[8, 8, 3\] differs from position_embedding_shape \[16, 16, 3\]: keras-hub resizes",
        ),
    ],
)
def test_a_configuration_attnzoo_does_not_compute_is_refused_by_name(tmp_path, changes, message):
    with pytest.raises(WeightsError, match=message):
        convert_keras_model(_preset_with(tmp_path, **changes))
