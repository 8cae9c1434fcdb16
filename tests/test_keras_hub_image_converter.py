"""A keras-hub image classifier's preset folder holds its image converter (``preprocessor.json``): how raw
images become the model's input. The fixture (tests/keras_hub_image_converter_fixtures.py, keras-hub 0.32)
is a tiny DeiTImageClassifier saved with its preprocessor, with keras-hub's ``preprocessor(raw)`` and
``classifier.predict(raw)`` on raw images of other sizes than the converter's image_size."""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest

from attnzoo.errors import AttnzooWarning
from attnzoo.keras import convert_keras_model

from .conftest import ROOT

DATA = ROOT / "tests" / "data" / "keras_hub_vision" / "deit"
PRESET = DATA / "classifier_preset"


def _expected() -> dict[str, np.ndarray]:
    return dict(np.load(DATA / "expected.npz"))


def test_converting_a_preset_whose_image_converter_is_left_behind_warns_naming_it():
    with pytest.warns(AttnzooWarning) as caught:
        convert_keras_model(PRESET)
    said = " ".join(str(w.message) for w in caught)
    assert "DeiTImageConverter" in said
    assert "image_size [16, 16]" in said
    assert "crop_to_aspect_ratio True" in said and "interpolation 'bilinear'" in said
    assert "0.01750700280112045" in said  # 1 / (255 * 0.224), the green channel's scale
    assert "x * scale + offset" in said


def test_a_preset_without_a_preprocessor_converts_without_a_word(tmp_path):
    folder = tmp_path / "preset"
    shutil.copytree(PRESET, folder)
    (folder / "preprocessor.json").unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("error", AttnzooWarning)
        convert_keras_model(folder)
    config = json.loads((PRESET / "preprocessor.json").read_text())
    config["config"].pop("image_converter")
    (folder / "preprocessor.json").write_text(json.dumps(config))
    with warnings.catch_warnings():
        warnings.simplefilter("error", AttnzooWarning)
        convert_keras_model(folder)
