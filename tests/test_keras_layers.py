"""The Keras layers keras-io's models use beyond the first table, and the defects real models hit.

Keras 3 (torch backend, tests/keras_oracle.py) is the oracle, as in tests/test_keras_models.py: it builds
each model, moves every weight (and adapted statistic) off its initial value, saves .keras and .h5, and
runs it; the converted model must agree within 1e-5 in both files. The rows: transposed, separable,
depthwise and 3-D convolutions, 3-D pooling, resampling, padding and cropping, Rescaling, Normalization,
CenterCrop, TimeDistributed over RNNs, nested models as outputs. Then what a user meets when something
does not convert, and ``convert-keras --check`` on a model that needs long inputs.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.errors import ConfigError
from attnzoo.keras import convert_keras_model
from attnzoo.keras.convert import UnsupportedKerasLayerError

from .conftest import run_cli
from .test_keras_models import assert_matches_keras, convert_both, oracle  # noqa: F401 - the oracle fixture

BATCHES = {
    "images": [[3, 9], [1, 9]],
    "augmented": [[3, 1]],
    "volumes": [[2, 1]],
    "sequences": [[5, 7], [2, 3]],
    "time_distributed_rnn": [[5, 4], [2, 2]],
    "nested_outputs": [[3, 5], [1, 2]],
}


@pytest.mark.parametrize("name", sorted(BATCHES))
def test_new_rows_predict_what_keras_predicts_from_both_files(oracle, tmp_path, name):  # noqa: F811
    folder = convert_both(oracle, tmp_path, name=name, seed=7, batches=BATCHES[name])
    for file in ("model.keras", "model.h5"):
        model = convert_keras_model(folder / file)
        assert_matches_keras(model, folder, f"{name} ({file})")
    reloaded = attnzoo.load(attnzoo.save(model, tmp_path / "saved")).eval()  # built on meta: buffers come back
    assert_matches_keras(reloaded, folder, f"{name} reloaded")
    outputs = np.load(folder / "io.npz")
    assert all(np.ptp(outputs[k]) > 0 for k in outputs if k.startswith("out/")), "a constant output tests nothing"


def test_the_rows_convert_to_their_own_nodes(oracle, tmp_path):  # noqa: F811
    """Each new Keras class has its node (none is approximated by another layer's)."""
    folder = convert_both(oracle, tmp_path, name="images", seed=1, batches=[[1, 9]])
    report = convert_keras_model(folder / "model.keras").keras_report.to_text()
    for keras_class, node in [
        ("Rescaling", "rescaling"),
        ("Normalization", "normalization"),
        ("Conv2DTranspose", "conv_transpose"),
        ("SeparableConv2D", "separable_conv"),
        ("DepthwiseConv2D", "conv"),
        ("UpSampling2D", "upsampling"),
        ("ZeroPadding2D", "spatial_pad"),
        ("Cropping2D", "spatial_pad"),
        ("CenterCrop", "center_crop"),
    ]:
        assert re.search(rf"\({keras_class}\) -> {node}:", report), (keras_class, report)
    assert "the adapted mean and variance" in report


def test_random_augmentations_are_the_identity_at_inference_and_augment_in_training(oracle, tmp_path):  # noqa: F811
    folder = convert_both(oracle, tmp_path, name="augmented", seed=3, batches=[[2, 1]])
    model = convert_keras_model(folder / "model.keras")
    assert_matches_keras(model, folder, "augmented, eval")  # Keras's predict is its inference
    images = torch.from_numpy(np.load(folder / "io.npz")["in/0/0"])
    with torch.no_grad():
        inference = model(images)
        model.train()
        torch.manual_seed(0)
        augmented = model(images)  # tests/test_keras_augmentation.py checks each transformation against Keras
        assert [y.shape for y in augmented] == [y.shape for y in inference]
        assert not torch.equal(augmented[0], inference[0])
        for got, want in zip(model.augmentation(False)(images), inference, strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_keras_layer_without_a_converter_is_named_as_keras_s_not_a_custom_layer(oracle, tmp_path):  # noqa: F811
    folder = convert_both(oracle, tmp_path, name="unsupported_builtin", seed=0, batches=[[2, 1]])
    for file in ("model.keras", "model.h5"):
        with pytest.raises(UnsupportedKerasLayerError) as caught:
            convert_keras_model(folder / file)
        text = str(caught.value)
        assert "no converter for Keras's GroupNormalization" in text, text
        assert "custom layer" not in text.split("\n")[1], text
        assert "register('keras>ClassName', convert)" in text  # the hook, with the key a Keras class takes
    # a bare class name is not how a Keras class is keyed: the error names the key it goes by
    with pytest.raises(ConfigError, match=r"custom_layers key 'GroupNormalization'.*'keras>GroupNormalization'"):
        convert_keras_model(folder / "model.keras", custom_layers={"GroupNormalization": lambda c, w: None})


def test_a_model_s_own_class_named_like_a_keras_hub_layer_stays_a_custom_layer(oracle, tmp_path):  # noqa: F811
    """keras-io's own TokenAndPositionEmbedding is not keras-hub's: attnzoo's keras-hub converters are
    registered under keras_hub>... only."""
    folder = convert_both(oracle, tmp_path, name="keras_io_token_and_position", seed=0, batches=[[2, 3]])
    for file in ("model.keras", "model.h5"):
        with pytest.raises(UnsupportedKerasLayerError) as caught:
            convert_keras_model(folder / file)
        text = str(caught.value)
        assert "TokenAndPositionEmbedding" in text and "a custom layer" in text, text
        assert "keras_hub" not in text


def test_an_embedding_s_out_of_range_error_says_ids_once(oracle, tmp_path):  # noqa: F811
    folder = convert_both(oracle, tmp_path, name="strided_text_classifier", seed=0, batches=[[2, 40]])
    model = convert_keras_model(folder / "model.keras")
    with pytest.raises(ValueError) as caught:
        model(torch.full((1, 40), 99))
    assert "input 'ids' holds ids from 99 to 99, but the embedding table it indexes has 30 rows" in str(caught.value)
    assert "pass ids in [0, 30)" in str(caught.value) and "ids ids" not in str(caught.value)


@pytest.mark.slow
def test_check_s_default_length_is_long_enough_for_two_strided_convolutions(oracle, tmp_path):  # noqa: F811
    """Length 8 leaves the second convolution (kernel 7, stride 3) nothing to read: --check tries 8, 16,
    32 on the converted model and takes the first that runs; a length Keras cannot run is Keras's error,
    one line, no escape codes, nothing written."""
    from attnzoo.keras.check import working_length

    folder = convert_both(oracle, tmp_path / "k", name="strided_text_classifier", seed=2, batches=[[3, 40]])
    assert working_length(convert_keras_model(folder / "model.keras")) == 32  # (32 - 7) // 3 + 1 = 9 >= 7
    short = run_cli(
        "convert-keras", str(folder / "model.keras"), "-o", str(tmp_path / "o3"), "--check", "--length", "8"
    )
    assert short.returncode == 1, short.stderr
    assert "internal error" not in short.stderr and "--length N" in short.stderr, short.stderr
    assert "\x1b" not in short.stderr  # Keras's bold escape codes do not reach a pipe
    assert not (tmp_path / "o3").exists()


@pytest.mark.slow
def test_cli_check_passes_on_two_strided_convolutions_at_its_default_length(oracle, tmp_path):  # noqa: F811
    folder = convert_both(oracle, tmp_path / "k", name="strided_text_classifier", seed=2, batches=[[3, 40]])
    out = tmp_path / "out"
    proc = run_cli("convert-keras", str(folder / "model.keras"), "-o", str(out), "--check")
    assert proc.returncode == 0, proc.stderr
    assert "checked against Keras on padded inputs of length 32" in proc.stdout, proc.stdout
    assert_matches_keras(attnzoo.load(out), folder, "strided classifier from the CLI")


def test_cli_length_goes_with_check(tmp_path, capsys):
    from attnzoo.cli.app import main

    assert main(["convert-keras", str(tmp_path / "model.keras"), "-o", str(tmp_path / "out"), "--length", "8"]) == 2
    assert "add --check" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_one_line_messages_carry_no_terminal_escape_codes():
    from attnzoo.cli.common import one_line

    keras_style = "Exception encountered when calling Conv1D.call().\n\n\x1b[1mNegative dimension\x1b[0m\n\nArgs"
    assert one_line(keras_style) == "Exception encountered when calling Conv1D.call().; Negative dimension; Args"


def test_keras2_initial_state_recorded_as_more_tensors_of_one_node_is_the_initial_state():
    """keras-io's lstm_seq2seq saved by Keras 2 (tests/data/keras2, made with tf_keras): its decoder's
    node lists [decoder_inputs, h, c]; the converted call passes h and c as initial_state and runs."""
    from .conftest import ROOT

    folder = ROOT / "tests" / "data" / "keras2"
    model = convert_keras_model(folder / "lstm_seq2seq.h5")
    decoder = [c for c in model.graph["calls"] if c["kwargs"].get("initial_state")]
    assert len(decoder) == 1 and len(decoder[0]["args"]) == 1 and len(decoder[0]["kwargs"]["initial_state"]) == 2
    expected = np.load(folder / "expected.npz")
    source, target = (torch.from_numpy(expected[f"lstm_seq2seq/0/in/{i}"]) for i in range(2))
    with torch.no_grad():
        np.testing.assert_allclose(model(source, target).numpy(), expected["lstm_seq2seq/0/out/0"], atol=1e-5)
