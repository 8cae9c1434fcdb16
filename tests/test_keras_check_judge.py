"""``attnzoo convert-keras --check`` never refuses a right port and still refuses a wrong one (issue 67).

References: keras-hub's own logits of a tiny Llama on left-padded rows (tests/data/keras_hub_lm/llama/
expected.npz, made by keras-hub), Keras 3 running the committed mixed_float16 file in this process (slow
tier), keras.applications' ResNet50 (slow tier), and hand cases of the rule written out below.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnzoo.keras.check_judge import SLACK, Difference, difference

from .conftest import ROOT

LLAMA = ROOT / "tests" / "data" / "keras_hub_lm" / "llama"
MIXED = ROOT / "tests" / "data" / "keras_live" / "mixed_float16.keras"


def test_the_tolerance_is_relative_to_the_output_s_scale_and_float64_tells_rounding_from_error():
    keras = np.array([[40.0, -2.0], [1.0, 0.5]], dtype=np.float32)
    ours = keras + np.float32(3.9e-4)  # past 1e-5 absolute, within 1e-5 x 40
    assert difference(ours, keras).within(1e-5) and not difference(ours, keras).within(1e-6)
    small = np.array([0.1, 0.2], dtype=np.float32)
    assert not difference(small + np.float32(2e-5), small).within(1e-5)  # the scale is max(1, |y|)
    # past the tolerance, judged by the float64 run: float32 rounding (the exact run is as close to Keras
    # as a few of the port's own roundings) passes; a port whose exact run is as far from Keras fails
    rounding = Difference(value=3e-7, scale=1.0, float64=2e-7, rounding=1e-7)
    assert rounding.within(1e-9)
    wrong = Difference(value=1e-3, scale=1.0, float64=1e-3, rounding=1e-7)
    assert not wrong.within(1e-5)
    assert not Difference(1.0, 1.0, float64=1e-9 + SLACK * 1e-6 * 1.01, rounding=1e-6).within(1e-9)
    # only the kept positions of per-position outputs, where a keep mask is given; a shape that differs fails
    keep = np.array([[True, False], [True, True]])
    padded = keras.copy()
    padded[0, 1] = 99.0
    assert difference(padded, keras, keep).value == 0.0 and difference(padded, keras).value > 100
    assert difference(keras[:1], keras).value == float("inf")


@pytest.fixture(scope="module")
def llama():
    from attnzoo.keras import convert_keras_model

    return convert_keras_model(LLAMA / "causal_lm_preset")


def _left_reference(model, folder):
    """keras-hub's logits on left-padded rows (12, 7, 1 and 10 tokens), as ``--reference`` takes them."""
    expected = np.load(LLAMA / "expected.npz")
    assert (expected["left/padding_mask"][:, 0] == 0).any()  # left-padded: rows whose first query sees no key
    names = [spec["name"] for spec in model.inputs_spec]
    path = folder / "reference.npz"
    np.savez(
        path,
        **{f"in/{i}": expected[f"left/{name}"] for i, name in enumerate(names)},
        **{"out/0": expected["left/logits"]},
    )
    return path


def test_a_left_padded_llama_passes_and_the_same_port_changed_by_1e_3_fails(llama, tmp_path):
    import copy

    from attnzoo.keras.check import check_against_reference

    reference = _left_reference(llama, tmp_path)
    result = check_against_reference(reference, llama)
    assert result.ok and result.kept and not result.float64, result.to_dict()
    # a tolerance float32 cannot meet: the float64 port shows the difference is rounding
    tight = check_against_reference(reference, llama, tolerance=1e-9)
    assert tight.ok and tight.float64 and tight.differences[0].float64 < 1e-5, tight.to_dict()
    wrong = copy.deepcopy(llama)
    weight = dict(wrong.named_parameters())["layers.llama_backbone/transformer_layer_0.query.weight"]
    with torch.no_grad():
        weight.view(-1)[7] += 1e-3
    for tolerance in (1e-5, 1e-9):
        refused = check_against_reference(reference, wrong, tolerance=tolerance)
        assert not refused.ok and refused.differences[0].float64 > 1e-3, refused.to_dict()


def _keras(monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    return pytest.importorskip("keras")


@pytest.mark.slow  # Keras runs the file in this process
def test_a_mixed_float16_file_is_checked_in_float32_and_a_changed_weight_is_named(tmp_path, monkeypatch, capsys):
    _keras(monkeypatch)
    from attnzoo.cli import main
    from attnzoo.keras import convert_keras_model
    from attnzoo.keras.check import check_against_keras

    assert main(["convert-keras", str(MIXED), "--check", "-o", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "the file computes in mixed_float16; Keras ran it in float32 here" in out
    model = convert_keras_model(MIXED)
    weight = model.layers["conv1d"].weight
    with torch.no_grad():
        weight[3, 5, 1] += 1e-3
    result = check_against_keras(MIXED, model)
    assert not result.ok and result.first_divergence is not None and result.first_divergence[0] == "conv1d"
    assert [name for name, d in result.layers if d > 1e-5][0] == "conv1d"
    assert result.note is not None and "mixed_float16" in result.note


@pytest.mark.slow  # keras.applications' ResNet50 built, saved and run by Keras
def test_resnet50_passes_with_the_float64_port_where_the_tolerance_is_past_float32(tmp_path, monkeypatch, capsys):
    keras = _keras(monkeypatch)
    from attnzoo.cli import main

    file = tmp_path / "resnet50.keras"
    keras.applications.ResNet50(weights=None, input_shape=(64, 64, 3), classes=10, classifier_activation=None).save(
        file
    )
    argv = ["convert-keras", str(file), "--check", "--json", "--tolerance", "1e-9", "-o", str(tmp_path / "out")]
    assert main(argv) == 0
    check = json.loads(capsys.readouterr().out)["check"]
    assert check["ok"] and check["per_output"][0]["float64"] is not None, check
    assert main(["convert-keras", str(file), "-o", str(tmp_path / "u"), "--tolerance", "1e-3"]) == 2
    assert "--tolerance X is --check's; add --check" in capsys.readouterr().err
