"""ConvLSTM1D/2D/3D against Keras 3 (torch backend): keras-io's next-frame model (ConvLSTM2D,
BatchNormalization, Conv3D), and the layer's options one by one: an explicit mask with rows all kept,
right-padded, left-padded, with a gap and none kept, ``return_sequences``, ``return_state``,
``go_backwards``, strides, dilation, valid and same padding, no bias, ``hard_sigmoid`` as the
recurrent activation, a softmax activation, channels_first, ``initial_state`` from another ConvLSTM's
states. ``stateful=True`` is refused by name.

The models and Keras's outputs are committed under tests/data/keras_live (tests/keras_live_cases.py);
the slow tier makes them again with the installed Keras.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnzoo.keras import convert_keras_model
from attnzoo.keras.convert import UnsupportedKerasLayerError
from attnzoo.keras.nodes import build_node

from .conftest import run_cli
from .keras_live import COMMITTED, assert_matches, live_cases

CASES = ["next_frame", "convlstm_variants", "convlstm_channels_first"]


@pytest.mark.parametrize("ext", ["keras", "h5"])
@pytest.mark.parametrize("case", CASES)
def test_conv_lstms_match_keras(case, ext):
    assert_matches(convert_keras_model(COMMITTED / f"{case}.{ext}"), COMMITTED, case)


def test_the_mask_changes_keras_s_outputs_where_it_masks():
    """The fixture tests the mask: with every step kept, the masked rows' outputs change, the others not."""
    io = dict(np.load(COMMITTED / "convlstm_variants.npz"))
    model = convert_keras_model(COMMITTED / "convlstm_variants.keras")
    inputs = [torch.from_numpy(io[f"in/{i}"]) for i in range(4)]
    keep = inputs[3]
    assert not bool(keep.all()) and bool((keep.sum(1) == 0).any())  # some padding, a row with no step
    with torch.no_grad():
        unmasked = model(*inputs[:3], torch.ones_like(keep))
    masked_rows = (keep == 0).any(1).numpy()
    for k in (0, 3, 4, 7):  # the outputs of the masked layers
        want = io[f"out/{k}"]
        diff = np.abs(unmasked[k].numpy() - want).reshape(len(want), -1).max(1)
        assert (diff[masked_rows] > 1e-4).all() and (diff[~masked_rows] < 1e-5).all()


def test_stateful_is_refused_by_name():
    with pytest.raises(UnsupportedKerasLayerError, match=r"\(ConvLSTM1D, .*stateful=True: a stateful ConvLSTM"):
        convert_keras_model(COMMITTED / "convlstm_stateful.keras")


def test_dropout_in_training_is_an_error_not_a_silent_skip():
    spec = {"rank": 1, "filters": 2, "in_channels": 1, "kernel_size": [2], "strides": [1], "dilation_rate": [1]}
    node = build_node({"op": "conv_lstm", **spec, "dropout": 0.5}).train()
    with pytest.raises(ValueError, match="dropout and recurrent_dropout act in training"):
        node([torch.zeros(1, 3, 4, 1)], {}, [None])
    node.eval()
    (out,), _ = node([torch.zeros(1, 3, 4, 1)], {}, [None])
    assert out.shape == (1, 3, 2)


@pytest.mark.slow
def test_cli_check_passes_on_the_next_frame_model(tmp_path):
    proc = run_cli("convert-keras", "--check", str(COMMITTED / "next_frame.keras"), "-o", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "checked against Keras" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_conv_lstms_match_the_installed_keras(tmp_path):
    folder = live_cases(tmp_path, CASES)
    for case in CASES:
        for ext in ("keras", "h5"):
            assert_matches(convert_keras_model(folder / f"{case}.{ext}"), folder, case)
