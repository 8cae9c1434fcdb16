"""A Keras file of a mixed-precision policy computed in its own dtype on request
(``convert_keras_model(..., compute_dtype="policy")``, ``convert-keras --compute-dtype policy``), against Keras 3's
own predictions of the same file: an Embedding, MultiHeadAttention, LayerNormalization, Conv1D, BatchNormalization
and Dense in ``mixed_float16`` and in ``mixed_bfloat16``, the last Dense in float32 (tests/keras_live_cases.py;
committed under tests/data/keras_live, made again by the installed Keras in the slow tier).

Keras's torch backend on the CPU computes some float16 operations (matmul, einsum, softmax, mean) in float32 and
rounds their results to float16; torch computes them in float16, and rounds inside a layer in its own order. So
the policy's computation is within a few units in the last place of the compute dtype (at the outputs' size) of
Keras's, as the float32 computation is; it is not closer to Keras's outputs than float32 (measured on the
committed files: float16 2.3e-3 against float32's 1.7e-3, bfloat16 5.8e-2 against 4.5e-2, outputs up to 1.6 and
6.3), and asserted only within the tolerance."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.errors import ConfigError
from attnzoo.keras import convert_keras_model

from .conftest import run_cli
from .keras_live import COMMITTED, live_cases

POLICIES = {"mixed_float16": torch.float16, "mixed_bfloat16": torch.bfloat16}


def _distances(folder, name, ext):
    io = dict(np.load(folder / f"{name}.npz"))
    ids, keras = torch.from_numpy(io["in/0"]), io["out/0"]
    with torch.no_grad():
        single = convert_keras_model(folder / f"{name}.{ext}")(ids).numpy()
        policy = convert_keras_model(folder / f"{name}.{ext}", compute_dtype="policy")(ids)
    assert policy.dtype == torch.float32  # the last Dense's policy is float32
    scale = float(np.abs(keras).max())
    return np.abs(policy.numpy() - keras).max(), np.abs(single - keras).max(), scale


@pytest.mark.parametrize("ext", ["keras", "h5"])
@pytest.mark.parametrize("name", POLICIES)
def test_the_policy_s_dtype_is_within_a_few_units_of_it_from_keras(name, ext):
    policy, single, scale = _distances(COMMITTED, name, ext)
    assert policy <= 3 * torch.finfo(POLICIES[name]).eps * scale  # measured: 1.5 (float16), 1.2 (bfloat16)
    assert single <= 3 * torch.finfo(POLICIES[name]).eps * scale  # the float32 computation: 1.1, 0.9


@pytest.mark.slow
def test_the_policy_s_dtype_is_within_a_few_units_of_it_with_the_installed_keras(tmp_path):
    folder = live_cases(tmp_path, list(POLICIES))
    for name in POLICIES:
        policy, _, scale = _distances(folder, name, "keras")
        assert policy <= 3 * torch.finfo(POLICIES[name]).eps * scale


def test_each_layer_computes_in_its_policy_s_dtype_and_the_folder_keeps_it(tmp_path):
    model = convert_keras_model(COMMITTED / "mixed_float16.keras", compute_dtype="policy")
    dtypes: dict[str, set[torch.dtype]] = {}
    for key, layer in model.layers.items():
        dtypes.setdefault(model.keras_classes[key], set()).update(p.dtype for p in layer.parameters())
    assert dtypes["Dense"] == {torch.float16, torch.float32}  # the last Dense's policy is float32
    assert dtypes["Conv1D"] == dtypes["Embedding"] == dtypes["MultiHeadAttention"] == {torch.float16}
    assert dtypes["BatchNormalization"] == {torch.float32}  # Keras reads its variables without autocast
    (note,) = model.keras_report.notes
    assert "mixed_float16" in note and "compute_dtype='policy'" in note
    ids = torch.from_numpy(np.load(COMMITTED / "mixed_float16.npz")["in/0"])
    attnzoo.save(model, tmp_path / "saved")
    with torch.no_grad():
        assert torch.equal(attnzoo.load(tmp_path / "saved")(ids), model(ids))


def test_float32_is_the_default_and_says_how_to_ask_for_the_policy():
    model = convert_keras_model(COMMITTED / "mixed_bfloat16.keras")
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    (note,) = model.keras_report.notes
    assert "computes in float32" in note and "--compute-dtype policy" in note
    with pytest.raises(ConfigError, match="compute_dtype must be 'float32'.*or 'policy'.*got 'float16'"):
        convert_keras_model(COMMITTED / "mixed_bfloat16.keras", compute_dtype="float16")


def test_the_command_converts_in_the_policy_s_dtype_on_request(tmp_path):
    file = COMMITTED / "mixed_float16.keras"
    done = run_cli("convert-keras", str(file), "--compute-dtype", "policy", "--json", "-o", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert "compute_dtype='policy'" in json.loads(done.stdout)["notes"][0]
    loaded = attnzoo.load(tmp_path / "out")
    assert torch.float16 in {p.dtype for p in loaded.parameters()}
    refused = run_cli("convert-keras", str(file), "--compute-dtype", "policy", "--check", "-o", str(tmp_path / "x"))
    assert refused.returncode != 0 and "check the float32 conversion" in refused.stderr
