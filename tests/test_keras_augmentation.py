"""Keras's random augmentation layers in training: RandomRotation, RandomZoom, RandomTranslation (every fill
mode and interpolation), RandomContrast, RandomBrightness, RandomCrop, and the noise layers.

Keras 3 (torch backend) is the oracle (tests/keras_augment_cases.py): its models and outputs are committed
under tests/data/keras_augment, so the fast tier needs no Keras; the slow tier makes them again with the
installed Keras. tf_keras 2.21 is the oracle of Keras 2's RandomContrast and RandomBrightness
(tests/keras2_augment_fixture.py, committed under tests/data/keras2_augment). Geometry is exact where the
factor range has zero width (Keras's transformation is then fixed); random settings are compared by the
mean and spread of each output pixel over many draws. Nothing expected here comes from attnzoo.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.keras import convert_keras_model
from attnzoo.keras.nodes import build_node

from .conftest import ROOT, require_data

COMMITTED = ROOT / "tests" / "data" / "keras_augment"


def _assert_geometry(folder: Path) -> None:
    io = dict(np.load(folder / "geometry.npz"))
    model = convert_keras_model(folder / "geometry.keras")
    x = torch.from_numpy(io["x"])
    for mode in ("train", "eval"):
        with torch.no_grad():
            got = getattr(model, mode)()(x)
        want = [io[f"{mode}/{k}"] for k in range(len(got))]
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            assert g.shape == w.shape, (mode, k, model.keras_classes)
            np.testing.assert_allclose(g.numpy(), w, atol=1e-5, rtol=0, err_msg=f"{mode} output {k}")


def test_fixed_factors_give_keras_s_geometry_in_training_and_the_input_at_inference():
    """36-degree rotations, zooms in and out, fractional shifts, in reflect, wrap, constant (0.5) and
    nearest fill, bilinear and nearest; channels_first; contrast x1.3 and brightness +0.2 clipped to the
    value range; RandomCrop's centred window and its resize of a smaller image: within 1e-5 of Keras's
    training=True, and Keras's inference (the input; keras 3's RandomCrop does not crop there)."""
    _assert_geometry(COMMITTED)


@pytest.mark.slow
def test_fixed_factors_match_the_installed_keras(tmp_path):
    have = importlib.util.find_spec("keras") is not None
    require_data(have, "keras 3 (the test extra)")
    env = {**os.environ, "KERAS_BACKEND": "torch", "PYTHONWARNINGS": "ignore"}
    script = ROOT / "tests" / "keras_augment_cases.py"
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _assert_geometry(tmp_path)


@pytest.mark.slow
def test_random_settings_spread_each_pixel_as_keras_does():
    """Over 1000 draws of one 8x8 image: each output pixel's mean within 5 standard errors of Keras's
    and its standard deviation within 20 % (rotation, zoom, translation with nearest/wrap, contrast,
    brightness, GaussianNoise, GaussianDropout)."""
    io = dict(np.load(COMMITTED / "stats.npz"))
    model = convert_keras_model(COMMITTED / "stats.keras").train()
    draws = 1000
    torch.manual_seed(0)
    with torch.no_grad():
        outputs = model(torch.from_numpy(io["x"]).repeat(draws, 1, 1, 1))
    for k, y in enumerate(outputs):
        if y.shape[1:3] != (8, 8):
            continue  # RandomCrop's: one window per batch, below
        y = y.numpy()
        mean, std = y.mean(0), y.std(0)
        error = np.sqrt((std**2 + io[f"std/{k}"] ** 2) / draws)
        assert (np.abs(mean - io[f"mean/{k}"]) <= 5 * error + 1e-6).all(), k
        np.testing.assert_allclose(std, io[f"std/{k}"], rtol=0.2, atol=0.02, err_msg=str(k))


def test_random_crop_cuts_a_window_at_each_corner_as_often_as_keras():
    """RandomCrop(5, 6) of an 8x8 image: every output is one of its 12 windows, each about as often as
    in Keras's 400 calls (both near 1/12)."""
    io = dict(np.load(COMMITTED / "stats.npz"))
    model = convert_keras_model(COMMITTED / "stats.keras")
    (crop,) = [model.layers[key] for key, c in model.keras_classes.items() if c == "RandomCrop"]
    crop.train()
    image = torch.from_numpy(io["x"])
    windows = {(i, j): image[:, i : i + 5, j : j + 6] for i in range(4) for j in range(3)}
    corners = []
    for _ in range(400):
        y = crop(image)  # the emitted module's KerasRandomCrop
        corners += [corner for corner, window in windows.items() if torch.equal(y, window)]
    assert len(corners) == 400
    ours = np.bincount([i * 3 + j for i, j in corners], minlength=12) / 400
    keras = np.bincount(io["crop_corners"] @ np.array([3, 1]), minlength=12) / len(io["crop_corners"])
    np.testing.assert_allclose(ours, keras, atol=0.07)
    assert crop.eval()(image) is image  # keras 3's inference: the input as it is


@pytest.mark.slow
def test_an_augmented_classifier_trains_and_augmentation_false_leaves_the_data_as_it_is():
    """keras-io's RandomFlip -> RandomRotation -> RandomZoom classifier: train() augments (two calls
    differ), backward reaches every weight, and ``augmentation(False)`` makes train() compute eval()'s
    outputs."""
    model = convert_keras_model(COMMITTED / "train.keras")
    x = torch.rand(4, 16, 16, 3)
    eval_out = model(x)
    model.train()
    torch.manual_seed(0)
    first, second = model(x), model(x)
    assert first.shape == eval_out.shape and not torch.allclose(first, second)
    first.square().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    assert model.augmentation(False) is model
    torch.testing.assert_close(model(x), eval_out, rtol=0, atol=0)
    model.augmentation(True)
    assert not torch.equal(model(x), eval_out)


@pytest.mark.slow
def test_the_kit_passes_train_step_on_an_augmented_classifier(tmp_path):
    from attnzoo.testing import check_model

    folder = attnzoo.save(convert_keras_model(COMMITTED / "train.keras"), tmp_path / "saved")
    report = check_model(folder, only=["train_step"])
    assert report["train_step"].status == "passed", report["train_step"].reason


def test_keras_2_s_random_height_and_width_resize_the_batch():
    """RandomHeight(factor=(1, 1)), nearest: each row twice; RandomWidth((-0.5, -0.5)), nearest, of 4
    columns: int(4 x 0.5) = 2 columns, the half-pixel centres' 1 and 3. The identity in eval()."""
    x = torch.arange(2 * 3 * 4 * 1, dtype=torch.float32).reshape(2, 3, 4, 1)
    height = build_node({"op": "random_resize", "axis": "height", "factor": [1.0, 1.0], "interpolation": "nearest"})
    width = build_node({"op": "random_resize", "axis": "width", "factor": [-0.5, -0.5], "interpolation": "nearest"})
    (y,), _ = height.train()([x], {}, [None])
    assert torch.equal(y, x[:, [0, 0, 1, 1, 2, 2]])
    (y,), _ = width.train()([x], {}, [None])
    assert torch.equal(y, x[:, :, [1, 3]])
    assert torch.equal(width.eval()([x], {}, [None])[0][0], x)


def test_a_folder_saved_without_the_settings_says_how_to_train():
    node = build_node({"op": "augmentation", "keras_class": "RandomRotation"}).train()
    x = torch.rand(1, 4, 4, 1)
    with pytest.raises(
        ValueError, match=r"RandomRotation augments .*convert the Keras file again.*augmentation\(False\)"
    ):
        node([x], {}, [None])
    node.augment = False
    assert torch.equal(node([x], {}, [None])[0][0], x)


def test_keras_2_s_random_crop_crops_the_centre_at_inference():
    """Keras 2's RandomCrop(5, 9) of a 7x9 image at inference: rows 1 to 5 (smart_resize's centred window);
    in training, any 5 rows of it (at least as large: a random window)."""
    x = torch.arange(7 * 9, dtype=torch.float32).reshape(1, 7, 9, 1)
    crop = build_node({"op": "random_crop", "height": 5, "width": 9, "keras2": True})
    assert torch.equal(crop.eval()([x], {}, [None])[0][0], x[:, 1:6])
    (y,), _ = crop.train()([x], {}, [None])
    assert any(torch.equal(y, x[:, i : i + 5]) for i in range(3))


# -- tf.keras 2's RandomContrast and RandomBrightness (tests/keras2_augment_fixture.py made the draws) ---------
KERAS2 = ROOT / "tests" / "data" / "keras2_augment"


def _fitted(x: np.ndarray, y: np.ndarray, kind: str) -> np.ndarray:
    """Each image's contrast factor f (``y = (x - m) f + m``, m its per-channel mean) or brightness shift d
    (``y = x + d``), fitted over the pixels the clip to [0, 255] left alone: [calls, batch]."""
    kept = (y > 0.0) & (y < 255.0)
    if kind == "shift":
        return np.where(kept, y - x, 0.0).sum(axis=(2, 3, 4)) / kept.sum(axis=(2, 3, 4))
    m = x.mean(axis=(1, 2), keepdims=True)
    return np.where(kept, (y - m) * (x - m), 0.0).sum(axis=(2, 3, 4)) / np.where(kept, (x - m) ** 2, 0.0).sum(
        axis=(2, 3, 4)
    )


def test_keras2_contrast_draws_one_factor_a_batch_and_brightness_one_shift_an_image_as_tf_keras_does():
    """tf_keras 2.21: RandomContrast(0.3) scales every image of a call by one f ~ U(0.7, 1.3) and clips to
    [0, 255]; RandomBrightness((-0.2, 0.4), value_range=(0, 255)) shifts each image by its own d ~ 255 ·
    U(-0.2, 0.4). The converted model draws so too (its numbers are torch's), and for Keras's own f and d
    computes Keras's outputs."""
    io = dict(np.load(KERAS2 / "augment_draws.npz"))
    model = convert_keras_model(KERAS2 / "augment_draws.h5")
    x = torch.from_numpy(io["x"])
    with torch.no_grad():
        np.testing.assert_array_equal(model.eval()(x)[0].numpy(), io["eval_contrast"])
        np.testing.assert_array_equal(model(x)[1].numpy(), io["eval_brightness"])
        torch.manual_seed(0)
        ours = [model.train()(x) for _ in range(len(io["contrast"]))]
    draws = {
        "keras": (_fitted(io["x"], io["contrast"], "factor"), _fitted(io["x"], io["brightness"], "shift")),
        "ours": (
            _fitted(io["x"], np.stack([c.numpy() for c, _ in ours]), "factor"),
            _fitted(io["x"], np.stack([b.numpy() for _, b in ours]), "shift"),
        ),
    }
    for who, (factors, shifts) in draws.items():
        assert np.ptp(factors, axis=1).max() < 1e-4, who  # one factor for the batch
        assert 0.7 - 1e-5 <= factors.min() < 0.8 and 1.2 < factors.max() <= 1.3 + 1e-5, who
        assert np.ptp(shifts, axis=1).min() > 1.0, who  # a shift an image
        assert -51.0 - 1e-3 <= shifts.min() < -30.0 and 80.0 < shifts.max() <= 102.0 + 1e-3, who
    contrast, brightness = (model.layers[k] for k in ("contrast", "brightness"))
    for call in range(5):  # Keras's draws replayed: a factor range of zero width is that draw
        f, d = float(np.median(draws["keras"][0][call])), draws["keras"][1][call]
        contrast.factor = (1.0 - f, f - 1.0)
        torch.testing.assert_close(contrast(x), torch.from_numpy(io["contrast"][call]), rtol=1e-5, atol=2e-3)
        for image in range(len(x)):
            brightness.factor = (float(d[image]) / 255.0,) * 2
            torch.testing.assert_close(
                brightness(x[image : image + 1])[0], torch.from_numpy(io["brightness"][call, image]), atol=2e-3, rtol=0
            )
