"""A keras-hub image classifier's preset folder holds its image converter (``preprocessor.json``): how raw
images become the model's input. The converted model carries it (``model.preprocess(images)``), saved and
loaded with it. The fixture (tests/keras_hub_image_converter_fixtures.py, keras-hub 0.32, torch backend) is a
tiny DeiTImageClassifier saved with its preprocessor (16x16, ImageNet's per-channel scale and offset,
bilinear, crop_to_aspect_ratio), with keras-hub's ``preprocessor(raw)`` and ``classifier.predict(raw)`` on raw
images of other sizes than 16x16, and bare ImageConverters of other settings on the wide batch."""

from __future__ import annotations

import json
import re
import shutil
import warnings

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.errors import AttnzooWarning, ConfigError, WeightsError
from attnzoo.keras import convert_keras_model, keras_hub_image_converter
from attnzoo.keras.image_converter import ImageConversion, PortImageConverter

from .conftest import ROOT

DATA = ROOT / "tests" / "data" / "keras_hub_vision" / "deit"
PRESET = DATA / "classifier_preset"
BATCHES = ("wide", "tall", "small", "uint8")
SETTINGS = json.loads((DATA / "converter_settings.json").read_text())


def _expected() -> dict[str, np.ndarray]:
    return dict(np.load(DATA / "expected.npz"))


def _quiet_convert(folder):
    with warnings.catch_warnings():
        warnings.simplefilter("error", AttnzooWarning)
        return convert_keras_model(folder)


@pytest.mark.parametrize("batch", BATCHES)
def test_preprocess_gives_keras_hub_s_preprocessor_output(batch):
    expected = _expected()
    model = _quiet_convert(PRESET)
    raw = expected[f"converter/raw/{batch}"]
    got = model.preprocess(raw)
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), expected[f"converter/pre/{batch}"], atol=1e-5, rtol=0)
    one = model.preprocess(torch.from_numpy(raw[0]))  # one image [H, W, C]
    np.testing.assert_allclose(one.numpy(), expected[f"converter/pre/{batch}"][0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("batch", BATCHES)
def test_the_model_on_preprocessed_raw_images_gives_keras_hub_s_predict(batch):
    expected = _expected()
    model = _quiet_convert(PRESET)
    # keras-hub's predict casts uint8 images to float32 before its preprocessor (so the resize is not rounded
    # back to uint8, as preprocessor(uint8) rounds it): the same float32 images here
    raw = expected[f"converter/raw/{batch}"].astype("float32")
    want = expected[f"converter/out/{batch}"]
    with torch.no_grad():
        got = model(model.preprocess(raw)).numpy()
    np.testing.assert_allclose(got, want, atol=1e-4 * max(1.0, float(np.abs(want).max())), rtol=0)


@pytest.mark.parametrize("setting", list(SETTINGS["settings"]))
def test_each_setting_computes_keras_s_image_converter(setting):
    config = {**SETTINGS["converter"], **SETTINGS["settings"][setting]}
    converter = PortImageConverter(ImageConversion.of("ImageConverter", config, "the test"))
    expected = _expected()
    got = converter(expected["converter/raw/wide"])
    np.testing.assert_allclose(got.numpy(), expected[f"converter/{setting}/wide"], atol=1e-5, rtol=0)


def test_the_image_converter_is_saved_and_loaded_with_the_model(tmp_path):
    expected = _expected()
    folder = attnzoo.save(_quiet_convert(PRESET), tmp_path / "port")
    assert (folder / "image_converter.json").is_file()
    model = attnzoo.load(folder)
    raw = expected["converter/raw/tall"]
    np.testing.assert_allclose(model.preprocess(raw).numpy(), expected["converter/pre/tall"], atol=1e-5, rtol=0)
    with torch.no_grad():
        np.testing.assert_allclose(model(model.preprocess(raw)).numpy(), expected["converter/out/tall"], atol=1e-4)
    model.image_converter = None  # a model without one saves without the file
    attnzoo.save(model, folder, overwrite=True)
    assert not (folder / "image_converter.json").exists()
    with pytest.raises(ConfigError, match="carries no image converter.*keras_hub_image_converter"):
        attnzoo.load(folder).preprocess(raw)


def _edited(tmp_path, **changes):
    folder = tmp_path / "preset"
    shutil.copytree(PRESET, folder)
    config = json.loads((PRESET / "preprocessor.json").read_text())
    config["config"]["image_converter"]["config"].update(changes.pop("config", {}))
    config["config"]["image_converter"].update(changes)
    (folder / "preprocessor.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"config": {"interpolation": "lanczos3"}}, r"interpolation is 'lanczos3'; attnzoo computes bilinear"),
        ({"config": {"pad_to_aspect_ratio": True, "crop_to_aspect_ratio": False}}, "pads to the aspect ratio"),
        ({"config": {"dtype": "bfloat16"}}, "computes in 'bfloat16'"),
        ({"class_name": "Gemma3ImageConverter"}, "Gemma3ImageConverter is an image converter attnzoo does not"),
        ({"config": {"scale": "imagenet"}}, r"scale is 'imagenet', not a number or a list"),
    ],
)
def test_a_converter_attnzoo_does_not_compute_is_left_behind_with_a_warning_naming_it(tmp_path, changes, message):
    folder = _edited(tmp_path, **changes)
    with pytest.raises((ConfigError, WeightsError), match=message):
        keras_hub_image_converter(folder)
    with pytest.warns(AttnzooWarning) as caught:
        model = convert_keras_model(folder)
    assert model.image_converter is None
    said = " ".join(str(w.message) for w in caught)
    assert "image_size [16, 16]" in said and "-2.0357142857142856" in said  # -0.456 / 0.224: green's offset
    assert "x * scale + offset" in said and re.search(message, said)


def test_a_preset_without_an_image_converter_converts_without_one_or_a_word(tmp_path):
    folder = tmp_path / "preset"
    shutil.copytree(PRESET, folder)
    config = json.loads((PRESET / "preprocessor.json").read_text())
    config["config"].pop("image_converter")
    (folder / "preprocessor.json").write_text(json.dumps(config))
    assert _quiet_convert(folder).image_converter is None
    (folder / "preprocessor.json").unlink()
    assert _quiet_convert(folder).image_converter is None
    with pytest.raises(WeightsError, match="no preprocessor.json with an image_converter"):
        keras_hub_image_converter(folder)


def test_images_of_another_channel_count_or_rank_are_refused():
    converter = keras_hub_image_converter(PRESET)
    with pytest.raises(ConfigError, match="one value per channel for 3 channels; the images have 4"):
        converter(torch.zeros(1, 20, 20, 4))
    with pytest.raises(ConfigError, match=r"\[batch, height, width, channels\].*got 2 dimensions"):
        converter(torch.zeros(20, 20))


@pytest.mark.parametrize(
    ("field", "value"), [("image_size", [16]), ("antialias", "yes"), ("offset", [float("nan")] * 3)]
)
def test_a_malformed_record_is_refused_naming_the_field(field, value):
    record = json.loads(keras_hub_image_converter(PRESET).conversion.to_json())
    record[field] = value
    with pytest.raises(WeightsError, match=field):
        ImageConversion.from_json(json.dumps(record).encode(), "image_converter.json")
