"""tf.keras 2 files as they were written: ``TFOpLambda`` / ``SlicingOpLambda`` layers, CuDNNLSTM / CuDNNGRU and
float ids into an Embedding.

The files were made once with tf_keras 2.21 (tests/keras2_fixtures.py: ``tf_op_lambda``, ``cudnn_rnn``,
``float_id_embedding``) and are committed under tests/data/keras2 with tf_keras's predictions on padded
batches; tests/test_keras_models.py's ``test_keras2_files_predict_what_tf_keras_predicted`` compares every
output with them (1e-5). CuDNN layers run only on a GPU, so their expected outputs come from tf_keras's own
LSTM (the two biases summed) and GRU(reset_after=True, recurrent_activation="sigmoid"). Here: what the
files hold is what the tests claim, and what is refused says which layer and what to do.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from attnzoo.keras import convert_keras_model
from attnzoo.keras.convert import UnsupportedKerasLayerError
from attnzoo.keras.converters.ops import OPERATION_NAMES
from attnzoo.keras.files import snake_case
from attnzoo.keras.tf_ops import _BINARY, _OTHER, _UNARY, operation_class, supported_functions

from .conftest import ROOT

KERAS2 = ROOT / "tests" / "data" / "keras2"


def _config(name: str) -> dict:
    with h5py.File(KERAS2 / f"{name}.h5") as f:
        return json.loads(f.attrs["model_config"])


def _edited(tmp_path: Path, name: str, edit) -> Path:
    """A copy of a committed .h5 whose model config ``edit`` changed (layers by their name)."""
    target = tmp_path / f"{name}_edited.h5"
    shutil.copy(KERAS2 / f"{name}.h5", target)
    config = _config(name)
    edit({layer["name"]: layer for layer in config["config"]["layers"]})
    with h5py.File(target, "r+") as f:
        f.attrs["model_config"] = json.dumps(config)
    return target


def _expected(case: str) -> tuple[list[torch.Tensor], list[np.ndarray]]:
    stored = dict(np.load(KERAS2 / "expected.npz"))
    inputs = [torch.from_numpy(stored[k]) for k in sorted(stored) if k.startswith(f"{case}/0/in/")]
    outputs = [stored[f"{case}/0/out/{k}"] for k in range(len(stored)) if f"{case}/0/out/{k}" in stored]
    return inputs, outputs


def test_the_fixtures_hold_what_tf_keras_writes_for_tensor_code():
    """A residual ``x + y``, a tf.reshape, slices, tf.nn and tf.math calls, a number on the left."""
    layers = _config("tf_op_lambda")["config"]["layers"]
    functions = {layer["config"].get("function") for layer in layers if "OpLambda" in layer["class_name"]}
    assert {"__operators__.add", "reshape", "__operators__.getitem", "concat", "nn.relu", "math.subtract"} <= functions
    subtract = next(layer for layer in layers if layer["name"] == "tf.math.subtract")
    assert subtract["inbound_nodes"][0][:2] == ["_CONSTANT_VALUE", -1]  # 1.0 - x: the number is the first argument
    classes = {layer["class_name"] for layer in _config("cudnn_rnn")["config"]["layers"]}
    assert {"CuDNNLSTM", "CuDNNGRU"} <= classes
    (ids,) = [
        layer for layer in _config("float_id_embedding")["config"]["layers"] if layer["class_name"] == "InputLayer"
    ]
    assert ids["config"]["dtype"] == "float32"


def test_every_tf_function_reads_as_an_operation_the_graph_runs():
    for function, name in [*_BINARY.items(), *_UNARY.items(), *((f, op) for f, (op, _) in _OTHER.items())]:
        assert name in OPERATION_NAMES, function
        assert snake_case(operation_class(name)) == name  # the class the converter reads back
    assert "tf.reshape" in supported_functions() and "tf.__operators__.getitem" in supported_functions()


def test_tf_operation_layers_are_reported_as_what_the_file_holds():
    report = convert_keras_model(KERAS2 / "tf_op_lambda.h5").keras_report.to_text()
    assert "tf.__operators__.add (TFOpLambda) -> operation" in report
    assert "tf.__operators__.getitem (SlicingOpLambda) -> operation" in report


def test_float_ids_are_cast_as_keras_2_casts_them():
    """Keras 2 casts float ids to int32 (toward zero): 2.9 is id 2, as the stored prediction shows; the
    same ids as integers give the same outputs, and a float input elsewhere is not taken as ids."""
    model = convert_keras_model(KERAS2 / "float_id_embedding.h5")
    (ids,), want = _expected("float_id_embedding")
    assert ids[0, 0] == pytest.approx(2.9)
    with torch.no_grad():
        floats, integers = model(ids), model(ids.to(torch.int64))
    for got, same, expected in zip(floats, integers, want, strict=True):
        np.testing.assert_allclose(got.numpy(), expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got, same, rtol=0, atol=0)
    with pytest.raises(ValueError, match="as integer ids"):  # ids declared as ints stay ints
        convert_keras_model(KERAS2 / "hard_sigmoid_lstm.h5")(ids)


def test_cudnn_layers_say_what_they_are():
    report = convert_keras_model(KERAS2 / "cudnn_rnn.h5").keras_report.to_text()
    assert "CuDNNLSTM: cuDNN's LSTM" in report and "CuDNNGRU: cuDNN's GRU" in report


def test_an_unknown_tf_function_is_refused_by_name_with_what_is_read(tmp_path):
    def unknown(layers):
        layers["tf.math.square"]["config"]["function"] = "math.bessel_i0"
        layers["tf.linalg.matmul"]["inbound_nodes"][0][3]["transpose_b"] = True

    with pytest.raises(UnsupportedKerasLayerError) as info:
        convert_keras_model(_edited(tmp_path, "tf_op_lambda", unknown))
    message = str(info.value)
    square = next(line for line in message.splitlines() if line.startswith("  tf.math.square"))
    assert "tf.math.bessel_i0 is not a TF function attnzoo reads" in square
    assert "tf.reshape" in square and "tf.__operators__.getitem" in square  # the list of what is read
    assert "Compute it with Keras layers" in square and "attnzoo_register_keras_layers" in square
    matmul = next(line for line in message.splitlines() if line.startswith("  tf.linalg.matmul"))
    assert "transpose_b=True" in matmul
    assert [p["layer"] for p in info.value.layers] == ["tf.math.square", "tf.linalg.matmul"]


def test_a_slice_torch_cannot_take_is_refused_by_name(tmp_path):
    def backwards(layers):
        layers["tf.__operators__.getitem"]["inbound_nodes"][0][3]["slice_spec"][2]["step"] = -1

    with pytest.raises(UnsupportedKerasLayerError, match=r"tf.__operators__.getitem .*step -1"):
        convert_keras_model(_edited(tmp_path, "tf_op_lambda", backwards))
