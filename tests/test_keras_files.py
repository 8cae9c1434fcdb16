"""Keras files as people have them (issue 50): activations on Keras's axis, boolean mask inputs, dict
inputs and outputs, and the layers ``keras.applications`` ship.

Keras 3 (torch backend, tests/keras_oracle.py with the models of tests/keras_oracle_files.py) is the
oracle: it builds each model, moves every weight off its initial value, saves .keras and .h5, and runs
it on padded inputs; the converted model must agree within 1e-5 from both files.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.keras import convert_keras_model

from .test_keras_models import assert_matches_keras, convert_both, oracle  # noqa: F401 - the oracle fixture

SOFTMAX_FAMILIES = ["softmax_conv", "softmax_separable_depthwise", "softmax_transpose", "softmax_dense"]


def _from_both_files(oracle, tmp_path, name, batches):  # noqa: F811
    folder = convert_both(oracle, tmp_path, name=name, seed=5, batches=batches)
    models = [convert_keras_model(folder / file) for file in ("model.keras", "model.h5")]
    for model, file in zip(models, ("model.keras", "model.h5"), strict=True):
        assert_matches_keras(model, folder, f"{name} ({file})")
    return folder, models[0]


# -- activations on Keras's axis ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", SOFTMAX_FAMILIES)
def test_a_layer_s_softmax_runs_over_keras_s_last_axis(oracle, tmp_path, name):  # noqa: F811
    folder, model = _from_both_files(oracle, tmp_path, name, [[3, 4]])
    io = np.load(folder / "io.npz")
    outputs = [io[k] for k in sorted(io) if k.startswith("out/")]
    assert any(np.allclose(o.sum(-1), 1.0, atol=1e-5) for o in outputs)  # the oracle's softmax is per position


def test_a_recurrent_layer_s_softmax_activation_is_keras_s(oracle, tmp_path):  # noqa: F811
    _from_both_files(oracle, tmp_path, "softmax_recurrent", [[5, 6], [2, 3]])


def test_a_u_net_s_per_pixel_softmax_equals_keras_s_and_its_source_too(oracle, tmp_path):  # noqa: F811
    folder, model = _from_both_files(oracle, tmp_path, "unet_softmax", [[2, 1]])
    image = torch.from_numpy(np.load(folder / "io.npz")["in/0/0"])
    with torch.no_grad():
        probabilities = model(image)
    assert probabilities.shape == (2, 16, 16, 4)
    torch.testing.assert_close(probabilities.sum(-1), torch.ones(2, 16, 16), rtol=0, atol=1e-5)
    namespace: dict = {}
    source = model.to_source()
    exec(compile(source, "<port>", "exec"), namespace)  # noqa: S102 - the code under test
    port = namespace[source.split("\nclass ", 1)[1].split("(", 1)[0]]()
    port.load_state_dict(model.state_dict())
    assert ".movedim(1, -1), dim=-1)" in source  # the softmax reads the Keras layout
    with torch.no_grad():
        torch.testing.assert_close(port.eval()(image), probabilities, rtol=0, atol=1e-6)
    reloaded = attnzoo.load(attnzoo.save(model, tmp_path / "saved")).eval()
    assert_matches_keras(reloaded, folder, "unet_softmax reloaded")
