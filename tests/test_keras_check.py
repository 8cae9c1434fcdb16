"""``attnzoo convert-keras --check`` on models as keras-io writes them, and without a Keras that loads the file.

Keras 3 (KERAS_BACKEND=torch, in this process) builds each model, moves its weights off their initial values
and saves it; the check must pass, and the saved folder must predict what Keras's own ``predict`` gives on a
batch of the check's padded inputs (an oracle independent of the check's own comparison).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.cli import main

from .conftest import ROOT


def _keras(monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    return pytest.importorskip("keras")


def _moved(keras, model) -> None:
    """Every weight off its initial value (zeros, ones), as after training."""
    rng = np.random.default_rng(0)
    for weight in model.weights:
        weight.assign(rng.standard_normal(tuple(weight.shape)).astype("float32") * 0.3)


def _mnist_convnet(keras):
    """keras-io's "Simple MNIST convnet": a Sequential whose first entry is ``keras.Input``."""
    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input(shape=(28, 28, 1)),
            layers.Conv2D(4, kernel_size=(3, 3), activation="relu"),
            layers.MaxPooling2D(pool_size=(2, 2)),
            layers.Conv2D(6, kernel_size=(3, 3), activation="relu"),
            layers.MaxPooling2D(pool_size=(2, 2)),
            layers.Flatten(),
            layers.Dropout(0.5),
            layers.Dense(10, activation="softmax"),
        ]
    )


def _built_by_first_call(keras):
    """A Sequential with no ``Input``, built by calling it once (keras-io's forecasting examples)."""
    layers = keras.layers
    model = keras.Sequential(
        [layers.LSTM(8, return_sequences=True), layers.Dropout(0.2), layers.LSTM(5), layers.Dense(1)]
    )
    model(np.zeros((2, 7, 3), dtype="float32"))
    return model


def _seq2seq(keras):
    """keras-io's lstm_seq2seq training model: two inputs, the decoder LSTM started from the encoder's
    states, and the encoder's sequence output unused (unpacked into ``_``)."""
    layers = keras.layers
    encoder_inputs = keras.Input(shape=(None, 7))
    _, state_h, state_c = layers.LSTM(6, return_state=True)(encoder_inputs)
    decoder_inputs = keras.Input(shape=(None, 5))
    outputs, _, _ = layers.LSTM(6, return_sequences=True, return_state=True)(
        decoder_inputs, initial_state=[state_h, state_c]
    )
    return keras.Model([encoder_inputs, decoder_inputs], layers.Dense(5, activation="softmax")(outputs))


@pytest.mark.slow
@pytest.mark.parametrize("build", [_mnist_convnet, _built_by_first_call, _seq2seq])
def test_check_passes_on_keras_io_models(build, tmp_path, monkeypatch, capsys):
    keras = _keras(monkeypatch)
    from attnzoo.keras.check import padded_inputs

    model = build(keras)
    _moved(keras, model)
    model.save(tmp_path / "model.keras")
    out = tmp_path / "out"
    assert main(["convert-keras", "--check", "--json", str(tmp_path / "model.keras"), "-o", str(out)]) == 0
    check = json.loads(capsys.readouterr().out)["check"]
    assert check["outputs"] and max(check["outputs"]) < 1e-5, check
    assert all(d < 1e-5 for _, d in check["layers"]), check
    # every layer compared, a loaded Sequential's too (its layers also keep the nodes of its earlier builds)
    assert len(check["layers"]) == len([layer for layer in model.layers if type(layer).__name__ != "InputLayer"])
    converted = attnzoo.load(out)
    inputs = padded_inputs(converted, length=check["length"], seed=3)
    want = model.predict(inputs if len(inputs) > 1 else inputs[0], verbose=0)
    with torch.no_grad():
        got = converted(*[torch.from_numpy(x) for x in inputs])
    np.testing.assert_allclose(got.numpy(), np.asarray(want), atol=1e-5, rtol=1e-5)


# -- --reference: the predictions of the Keras that wrote the file, where keras 3 cannot load it ---------------
KERAS2 = ROOT / "tests" / "data" / "keras2"


def _reference(tmp_path, shift: float = 0.0):
    """tf_keras's stored predictions of hard_sigmoid_lstm.h5 (which keras 3 cannot load), as a user saves them."""
    stored = np.load(KERAS2 / "expected.npz")
    path = tmp_path / f"reference_{shift}.npz"
    x, y = stored["hard_sigmoid_lstm/0/in/0"], stored["hard_sigmoid_lstm/0/out/0"]
    np.savez(path, **{"in/0": x, "out/0": y + shift})
    return path


@pytest.mark.slow  # the process's first conversion: some seconds of imports
def test_check_compares_with_the_predictions_passed(tmp_path, capsys):
    out, file = tmp_path / "out", str(KERAS2 / "hard_sigmoid_lstm.h5")
    argv = ["convert-keras", file, "--check", "--json", "-o", str(out), "--reference", str(_reference(tmp_path))]
    assert main(argv) == 0
    check = json.loads(capsys.readouterr().out)["check"]
    assert check["ran"] and check["against"] == "reference" and max(check["outputs"]) < 1e-5, check
    assert (out / "config.yaml").exists()
    wrong = str(_reference(tmp_path, 1e-3))
    assert main(["convert-keras", file, "--check", "-o", str(tmp_path / "no"), "--reference", wrong]) == 1
    err = capsys.readouterr().err
    assert "differs from the predictions of --reference by 0.001" in err and "nothing was written" in err
    assert not (tmp_path / "no").exists()
    assert main(["convert-keras", file, "-o", str(tmp_path / "u"), "--reference", wrong]) == 2
    assert "add --check" in capsys.readouterr().err
