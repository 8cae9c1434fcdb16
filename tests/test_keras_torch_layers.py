"""Keras's recurrent layers as torch's own: ``run_rnn`` (attnzoo.keras.torch_layers) over ``nn.LSTM`` /
``nn.GRU`` against Keras's layers, the emitted module that declares them, and the state-dict key map that
lets a folder saved with the nodes' keys load.

Keras 3 (torch backend) is the oracle: tests/keras_rnn_cases.py ran each layer on masked sequences (right
padding, and masks with holes and an empty row) and its outputs and variables are committed under
tests/data/keras_rnn; the slow tier makes them again with the installed Keras. The weights go from
Keras's layout to torch's here, written out from Keras's documented gate orders (LSTM i, f, c, o is
torch's i, f, g, o; GRU z, r, h is torch's r, z, n reordered), not through the converter.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

import attnzoo
from attnzoo.errors import WeightsError
from attnzoo.keras import convert_keras_model
from attnzoo.keras.nodes import build_node
from attnzoo.keras.torch_layers import one_bias, run_rnn

from .conftest import ROOT, require_data

CASES = ROOT / "tests" / "data" / "keras_rnn" / "cases.npz"
DOCS = ROOT / "tests" / "data" / "keras_docs"
NAMES = sorted({key.split("/")[0] for key in np.load(CASES).files})


def _case(name: str) -> dict[str, np.ndarray]:
    arrays = np.load(CASES)
    return {key.split("/")[1]: arrays[key] for key in arrays.files if key.startswith(f"{name}/")}


def _direction(kind: str, kernel: np.ndarray, recurrent: np.ndarray, bias: np.ndarray) -> dict[str, torch.Tensor]:
    """One Keras direction's variables as torch's (transposed; a GRU's z, r, h columns as r, z, n)."""
    units = recurrent.shape[0]

    def gates(a: np.ndarray) -> np.ndarray:
        if kind == "lstm":
            return a
        z, r, h = (a[..., i * units : (i + 1) * units] for i in range(3))
        return np.concatenate([r, z, h], axis=-1)

    bias_ih, bias_hh = (bias, np.zeros_like(bias)) if kind == "lstm" else (bias[0], bias[1])
    arrays = {"weight_ih": gates(kernel).T, "weight_hh": gates(recurrent).T}
    arrays.update(bias_ih=gates(bias_ih), bias_hh=gates(bias_hh))
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}


def _torch_layer(name: str, case: dict[str, np.ndarray]) -> nn.LSTM | nn.GRU:
    kind = "lstm" if "lstm" in name else "gru"
    bidirectional = name.startswith("bi")
    units = case["w1"].shape[0]
    cls = nn.LSTM if kind == "lstm" else nn.GRU
    rnn = cls(case["x"].shape[-1], units, batch_first=True, bidirectional=bidirectional)
    state = {}
    for suffix, first in (("", 0), ("_reverse", 3)) if bidirectional else (("", 0),):
        weights = _direction(kind, *(case[f"w{first + i}"] for i in range(3)))
        state.update({f"{k}_l0{suffix}": v for k, v in weights.items()})
    rnn.load_state_dict(state)
    return one_bias(rnn) if kind == "lstm" else rnn


def _keywords(name: str) -> dict[str, bool]:
    sequences = "sequences" in name or "backwards" in name or "zero_output" in name
    return {
        "return_sequences": sequences,
        "go_backwards": "backwards" in name,
        "zero_output_for_mask": "zero_output" in name or (name.startswith("bi") and sequences),
    }


@pytest.mark.parametrize("name", NAMES)
def test_run_rnn_over_torch_s_layer_is_keras_s_layer(name):
    case = _case(name)
    rnn = _torch_layer(name, case)
    with torch.no_grad():
        got = run_rnn(rnn, torch.from_numpy(case["x"]), torch.from_numpy(case["mask"]), **_keywords(name))
    assert got.shape == case["y"].shape
    np.testing.assert_allclose(got.numpy(), case["y"], rtol=0, atol=1e-5)
    if name.endswith("_right"):  # its first row keeps every step: no mask at all is the same call
        with torch.no_grad():
            unmasked = run_rnn(rnn, torch.from_numpy(case["x"][:1]), **_keywords(name))
        np.testing.assert_allclose(unmasked.numpy(), case["y"][:1], rtol=0, atol=1e-5)


@pytest.mark.parametrize("exporting", [False, pytest.param(True, marks=pytest.mark.slow)])  # scan: seconds
@pytest.mark.parametrize("name", ["bilstm_sequences_holes", "gru_last_holes", "lstm_backwards_right"])
def test_the_traced_form_is_keras_s_layer_too(name, exporting, monkeypatch):
    """Under tracing packing cannot run (it reads lengths on the host): the steps go through a loop, or
    ``scan`` when exporting (the length stays open); both equal Keras, holes in the mask included."""
    case = _case(name)
    rnn = _torch_layer(name, case)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    monkeypatch.setattr(torch.compiler, "is_exporting", lambda: exporting)
    with torch.no_grad():
        got = run_rnn(rnn, torch.from_numpy(case["x"]), torch.from_numpy(case["mask"]), **_keywords(name))
    np.testing.assert_allclose(got.numpy(), case["y"], rtol=0, atol=1e-5)


def test_run_rnn_refuses_what_keras_s_bidirectional_is_not():
    rnn = nn.LSTM(4, 3, batch_first=True, bidirectional=True)
    x = torch.randn(2, 5, 4)
    with pytest.raises(ValueError, match="zero_output_for_mask equal to return_sequences"):
        run_rnn(rnn, x, return_sequences=True)
    with pytest.raises(ValueError, match="batch_first=True"):
        run_rnn(nn.LSTM(4, 3), x)


def test_the_review_classifier_declares_torch_s_bidirectional_lstm():
    model = convert_keras_model(DOCS / "review_classifier.keras")
    source = model.to_source()
    assert (
        'self.layers["bilstm"] = one_bias(\n            nn.LSTM(16, 12, batch_first=True, bidirectional=True),'
        in source
    )
    assert "run_rnn(" in source and "Bidirectional(" not in source and "Recurrent(" not in source
    lstm = model.layers["bilstm"]
    assert type(lstm) is nn.LSTM and lstm.bidirectional
    keys = {k for k in model.state_dict() if k.startswith("layers.bilstm.")}
    names = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")
    assert keys == {f"layers.bilstm.{n}{s}" for n in names for s in ("", "_reverse")}
    # Keras's LSTM has one bias: torch's second is a zero buffer, trained by nobody
    assert {n for n, _ in lstm.named_parameters()} == {f"{n}{s}" for n in names[:3] for s in ("", "_reverse")}
    assert not lstm.bias_hh_l0.any() and not lstm.bias_hh_l0_reverse.any()


def _old_key(key: str) -> str:
    """The key a Bidirectional node held before it was written as torch's nn.LSTM (the map's inverse)."""
    layer, _, name = key.removeprefix("layers.bilstm.").partition("_l0")
    direction = "backward_layer" if name == "_reverse" else "forward_layer"
    return f"layers.bilstm.{direction}.rnn.{layer}_l0"


def _resave_with_old_keys(folder, keys) -> None:
    import hashlib

    import safetensors.torch
    from safetensors import safe_open

    path = folder / "model.safetensors"
    with safe_open(str(path), "pt") as f:
        metadata = f.metadata()
    tensors = safetensors.torch.load_file(str(path))
    renamed = {keys(k) if k.startswith("layers.bilstm.") else k: v for k, v in tensors.items()}
    safetensors.torch.save_file(renamed, str(path), metadata=metadata)
    config = folder / "config.yaml"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    lines = [f"sha256: {digest}" if line.startswith("sha256: ") else line for line in config.read_text().splitlines()]
    config.write_text("\n".join(lines) + "\n")


def test_a_folder_saved_with_the_nodes_keys_loads_and_predicts_what_keras_did(tmp_path):
    folder = attnzoo.save(convert_keras_model(DOCS / "review_classifier.keras"), tmp_path / "saved")
    _resave_with_old_keys(folder, _old_key)
    import safetensors.torch

    held = set(safetensors.torch.load_file(str(folder / "model.safetensors")))
    assert "layers.bilstm.backward_layer.rnn.weight_ih_l0" in held and "layers.bilstm.weight_ih_l0" not in held
    model = attnzoo.load(folder).eval()
    expected = np.load(DOCS / "expected.npz")
    with torch.no_grad():
        got = model(torch.from_numpy(expected["ids"])).numpy()
    np.testing.assert_allclose(got, expected["predictions"], rtol=0, atol=1e-6)
    # and through load_state_dict (its pre-hook), strictly
    fresh = convert_keras_model(DOCS / "review_classifier.keras")
    old = {(_old_key(k) if k.startswith("layers.bilstm.") else k): v for k, v in model.state_dict().items()}
    fresh.load_state_dict(old, strict=True)
    torch.testing.assert_close(fresh.state_dict(), model.state_dict())


def test_a_key_the_map_does_not_know_is_an_error_not_dropped():
    model = convert_keras_model(DOCS / "review_classifier.keras")
    state = dict(model.state_dict())
    stray = {**state, "layers.bilstm.forward_layer.rnn.weight_ih_l1": state["layers.bilstm.weight_ih_l0"]}
    for strict in (True, False):
        with pytest.raises(WeightsError, match="weight_ih_l1"):
            model.load_state_dict(stray, strict=strict)
    twice = {**state, "layers.bilstm.forward_layer.rnn.weight_ih_l0": state["layers.bilstm.weight_ih_l0"]}
    with pytest.raises(WeightsError, match="both"):
        model.load_state_dict(twice)


@pytest.mark.parametrize(
    ("file", "layer", "why"),
    [("gru_reset_before.h5", "gru", "reset_after=False")],
)
def test_a_layer_torch_s_cell_does_not_compute_stays_its_node(file, layer, why):
    model = convert_keras_model(ROOT / "tests" / "data" / "keras2" / file)
    assert type(model.layers[layer]).__name__ == "Recurrent", why
    assert f'self.layers["{layer}"] = Recurrent(' in model.to_source()


@pytest.mark.slow
def test_the_committed_cases_are_what_the_installed_keras_gives(tmp_path):
    import importlib.util

    require_data(importlib.util.find_spec("keras") is not None, "keras 3 (the test extra)")
    env = {**os.environ, "KERAS_BACKEND": "torch", "PYTHONWARNINGS": "ignore"}
    script = ROOT / "tests" / "keras_rnn_cases.py"
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], env=env, capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fresh, committed = np.load(tmp_path / "cases.npz"), np.load(CASES)
    assert sorted(fresh.files) == sorted(committed.files)
    for key in committed.files:
        np.testing.assert_allclose(fresh[key], committed[key], rtol=0, atol=1e-6, err_msg=key)


def _rewrite_weights(folder, change) -> None:
    """The saved folder's weights replaced by ``change(tensors)``, its recorded digest made to match."""
    import hashlib

    import safetensors.torch
    from safetensors import safe_open

    path = folder / "model.safetensors"
    with safe_open(str(path), "pt") as f:
        metadata = f.metadata()
    safetensors.torch.save_file(change(safetensors.torch.load_file(str(path))), str(path), metadata=metadata)
    config = folder / "config.yaml"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    lines = [f"sha256: {digest}" if line.startswith("sha256: ") else line for line in config.read_text().splitlines()]
    config.write_text("\n".join(lines) + "\n")


def _predicts_what_keras_did(model) -> None:
    expected = np.load(ROOT / "tests" / "data" / "keras2" / "expected.npz")
    with torch.no_grad():
        got = model(torch.from_numpy(expected["keras_io_vision/0/in/0"]))
    for i, g in enumerate(got):
        np.testing.assert_allclose(g.numpy(), expected[f"keras_io_vision/0/out/{i}"], rtol=1e-5, atol=1e-5)


def test_a_folder_saved_with_a_separable_conv_node_s_keys_loads_and_predicts_what_keras_did(tmp_path):
    """SeparableConv2D is written as nn.Sequential of two convolutions (``0.weight``, ``1.weight``,
    ``1.bias``); a folder saved while it was attnzoo's node (``depthwise``, ``pointwise``, ``bias``) loads."""
    file, old = ROOT / "tests" / "data" / "keras2" / "keras_io_vision.h5", "layers.separable_conv2d."
    folder = attnzoo.save(convert_keras_model(file), tmp_path / "saved")
    names = {"0.weight": "depthwise", "1.weight": "pointwise", "1.bias": "bias"}

    def rename(tensors):
        renamed = {(old + names[k[len(old) :]] if k.startswith(old) else k): v for k, v in tensors.items()}
        assert f"{old}depthwise" in renamed and f"{old}0.weight" not in renamed
        return renamed

    _rewrite_weights(folder, rename)
    model = attnzoo.load(folder)
    assert isinstance(model.layers["separable_conv2d"], nn.Sequential)
    _predicts_what_keras_did(model)


def test_a_folder_saved_with_rescaling_s_buffers_loads_where_they_equal_the_literals(tmp_path):
    """Rescaling is written as ``x * scale + offset`` with its config's numbers, so its weights hold
    nothing; a folder saved while its node held ``scale`` and ``offset`` (1 / 127.5 and -1 in the fixture)
    loads, those two dropped, and predicts what Keras did; a value other than the literal's is an error."""
    file = ROOT / "tests" / "data" / "keras2" / "keras_io_vision.h5"
    converted = convert_keras_model(file)
    assert "rescaling * 0.007843137718737125 + -1.0" in converted.code.replace("input_11", "rescaling")
    assert not [k for k in converted.state_dict() if k.startswith("layers.rescaling.")]
    folder = attnzoo.save(converted, tmp_path / "saved")
    scale, offset = torch.tensor(1 / 127.5, dtype=torch.float32), torch.tensor(-1.0)
    _rewrite_weights(folder, lambda t: {**t, "layers.rescaling.scale": scale, "layers.rescaling.offset": offset})
    _predicts_what_keras_did(attnzoo.load(folder).eval())
    state = {**converted.state_dict(), "layers.rescaling.scale": scale, "layers.rescaling.offset": offset}
    convert_keras_model(file).load_state_dict(state, strict=True)  # through the pre-hook, strictly
    for strict in (True, False):
        with pytest.raises(WeightsError, match="layers.rescaling.offset"):
            convert_keras_model(file).load_state_dict({**state, "layers.rescaling.offset": offset + 1}, strict=strict)


def _states_graph(cell: str, return_sequences: bool, masked: bool) -> dict:
    """x [2, 6, 3] (through Masking where ``masked``) and the initial states h0 (and c0) [2, 4] -> a Keras
    ``LSTM`` / ``GRU`` of 4 units with ``initial_state`` and ``return_state`` -> every output it returns."""
    count = 2 if cell == "lstm" else 1
    inputs = [{"id": "x", "name": "x", "shape": [None, None, None], "dtype": "float32"}]
    inputs += [{"id": f"s{i}", "name": f"s{i}", "shape": [None, None], "dtype": "float32"} for i in range(count)]
    spec = {"op": "recurrent", "cell": cell, "units": 4, "input_size": 3, "return_sequences": return_sequences}
    layers = {"rnn": {**spec, "return_state": True, "keras": {"name": "rnn", "class": "LSTM"}}}
    calls = []
    source = {"ref": ["x", 0]}
    if masked:
        layers["masking"] = {"op": "masking"}
        calls.append({"id": "masking", "layer": "masking", "args": [source], "kwargs": {}})
        source = {"ref": ["masking", 0]}
    states = [{"ref": [f"s{i}", 0]} for i in range(count)]
    calls.append({"id": "rnn", "layer": "rnn", "args": [source], "kwargs": {"initial_state": states}})
    graph = {"format": 1, "keras_version": "2.15.0", "inputs": inputs, "layers": layers, "calls": calls}
    return {**graph, "outputs": [["rnn", i] for i in range(1 + count)]}


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("return_sequences", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_initial_and_returned_states_run_as_torch_and_equal_the_node(cell, return_sequences, masked):
    """keras-io's seq2seq form: the written module calls ``run_rnn(..., initial_state=(h, c),
    return_state=True)`` on an ``nn.LSTM`` / ``nn.GRU``; its outputs and states, and the gradients of the
    inputs, the initial states and the weights, are the Keras node's (a masked batch holds right padding,
    a hole, and a row the mask keeps nothing of, which keeps its initial states)."""
    torch.manual_seed(0)
    graph = _states_graph(cell, return_sequences, masked)
    model = attnzoo.create("keras_model", graph=graph)
    source = model.to_source()
    assert "Recurrent(" not in source and "initial_state=(" in source and "return_state=True" in source
    node = build_node({k: v for k, v in graph["layers"]["rnn"].items() if k != "keras"})
    with torch.no_grad():
        for parameter in node.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.5)
    model.load_state_dict({f"layers.rnn.{k}": v for k, v in node.state_dict().items()})
    x = torch.randn(3, 6, 3)
    if masked:
        x[0, -2:], x[1, 2], x[2] = 0.0, 0.0, 0.0
    states = [torch.randn(3, 4) for _ in range(2 if cell == "lstm" else 1)]
    ours = [t.clone().requires_grad_() for t in (x, *states)]
    theirs = [t.clone().requires_grad_() for t in (x, *states)]
    got = model(*ours)
    keep = (theirs[0] != 0).any(dim=-1) if masked else None
    given = theirs[0] * keep.unsqueeze(-1) if masked else theirs[0]
    want, _ = node([given], {"initial_state": list(theirs[1:])}, [keep])
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    if masked:  # the row the mask keeps nothing of ends in its initial states
        torch.testing.assert_close(got[1][2], states[0][2])
    sum(g.square().sum() for g in got).backward()
    sum(w.square().sum() for w in want).backward()
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6)
    ours_grads = {n.removeprefix("layers.rnn."): p.grad for n, p in model.named_parameters() if "rnn" in n}
    theirs_grads = {n.removeprefix("rnn."): p.grad for n, p in node.named_parameters()}
    assert sorted(ours_grads) == sorted(theirs_grads)
    for name, grad in theirs_grads.items():
        torch.testing.assert_close(ours_grads[name], grad, rtol=1e-5, atol=1e-6)
