"""keras-hub's ViTBackbone converts without keras-hub: patches by a strided Conv2d, the class token, the
position table, pre-norm encoder blocks of multi-head attention and an exact-gelu MLP, a final layer norm.

The tiny ViTs were made once with keras 3 (torch backend) and keras-hub 0.32 (tests/keras_hub_vit_fixtures.py),
every weight moved off its initial value: saved with ``model.save`` (.keras, whose config keeps only the
constructor's arguments), with ``save_to_preset`` (a folder), as the functional graph Keras writes for
``keras.Model(vit.inputs, vit.outputs)`` (keras-hub's layers recorded by bare class name), and one without
a class token or biases. Keras's own outputs are in vit_expected.npz; the converted model must agree within 1e-5.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.keras import convert_keras_model

from .conftest import ROOT, run_cli

DATA = ROOT / "tests" / "data" / "keras_hub_models"
EXPECTED = dict(np.load(DATA / "vit_expected.npz"))
IMAGES = torch.from_numpy(EXPECTED["in/images"])


@pytest.mark.parametrize(
    ("file", "case"),
    [("vit.keras", "vit"), ("vit_preset", "vit"), ("vit_functional.keras", "vit"), ("vit_plain.keras", "vit_plain")],
)
def test_a_vit_backbone_predicts_what_keras_predicts(file, case):
    model = convert_keras_model(DATA / file)
    assert model.input_names == ["images"]
    with torch.no_grad():
        got = model(IMAGES).numpy()
    assert got.shape == EXPECTED[f"{case}/out"].shape  # [3, 17, 32] with the class token, [3, 16, 32] without
    np.testing.assert_allclose(got, EXPECTED[f"{case}/out"], atol=1e-5, rtol=0)


def test_a_converted_vit_saves_and_loads_and_trains(tmp_path):
    model = attnzoo.load(attnzoo.save(convert_keras_model(DATA / "vit.keras"), tmp_path / "saved"))
    with torch.no_grad():
        np.testing.assert_allclose(model(IMAGES).numpy(), EXPECTED["vit/out"], atol=1e-5, rtol=0)
    model.train()
    model(IMAGES).square().mean().backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    assert all(g is not None and g.abs().sum() > 0 for g in grads.values()), [n for n, g in grads.items() if g is None]


def test_images_of_another_size_are_refused_with_the_size_the_model_takes():
    model = convert_keras_model(DATA / "vit.keras")
    with pytest.raises(ValueError, match=r"expects input 'images' of shape \[batch, 16, 16, 3\], got \[1, 20, 20, 3\]"):
        model(torch.zeros(1, 20, 20, 3))


def test_the_cli_converts_a_vit_preset_folder(tmp_path):
    done = run_cli("convert-keras", str(DATA / "vit_preset"), "-o", str(tmp_path / "port"))
    assert done.returncode == 0, done.stderr
    with torch.no_grad():
        got = attnzoo.load(tmp_path / "port")(IMAGES).numpy()
    np.testing.assert_allclose(got, EXPECTED["vit/out"], atol=1e-5, rtol=0)


def test_convert_keras_check_compares_with_keras_s_outputs_given_as_reference(tmp_path):
    """Keras cannot load a keras-hub file without keras-hub; ``--check --reference`` compares with Keras's
    own outputs instead, and a shifted reference is refused with nothing written."""
    reference = tmp_path / "reference.npz"
    np.savez(reference, **{"in/0": EXPECTED["in/images"], "out/0": EXPECTED["vit/out"]})
    done = run_cli(
        "convert-keras", str(DATA / "vit.keras"), "-o", str(tmp_path / "port"), "--check", "--reference", str(reference)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    np.savez(reference, **{"in/0": EXPECTED["in/images"], "out/0": EXPECTED["vit/out"] + 1e-3})
    shifted = run_cli(
        "convert-keras", str(DATA / "vit.keras"), "-o", str(tmp_path / "off"), "--check", "--reference", str(reference)
    )
    assert shifted.returncode != 0 and not (tmp_path / "off").exists()
