"""Deploy exactly what you ported: a converted Keras model's export is right at every size Keras left
open, or it is refused.

Keras 3 (torch backend) is the oracle, run once as a subprocess (tests/keras_export_oracle.py): it saves
each model with its outputs at three sizes (odd and even, right-padded rows), and which flip its
RandomFlip applied to each of 400 images in training. Nothing expected here comes from attnzoo.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.errors import ConfigError, ExportError
from attnzoo.keras import convert_keras_model

from .conftest import ROOT, require_data, run_cli


@pytest.fixture(scope="module")
def keras_exports(tmp_path_factory) -> Path:
    import importlib.util

    have = all(importlib.util.find_spec(m) is not None for m in ("keras", "h5py", "onnxruntime", "onnxscript"))
    require_data(have, "keras 3, h5py, onnxscript and onnxruntime (the test and export extras)")
    out = tmp_path_factory.mktemp("keras_exports")
    env = {**os.environ, "KERAS_BACKEND": "torch", "PYTHONWARNINGS": "ignore"}
    script = ROOT / "tests" / "keras_export_oracle.py"
    proc = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _run_onnx(path: Path, feeds: list[np.ndarray]) -> np.ndarray:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {i.name: x for i, x in zip(session.get_inputs(), feeds, strict=True)})
    return got


@pytest.mark.slow
@pytest.mark.parametrize("name", ["text_cnn", "image_cnn", "masked_bilstm", "gru_seq2seq"])
def test_one_onnx_export_matches_keras_at_three_sizes(keras_exports, tmp_path, name):
    """Exported once (the default traced sizes), run in onnxruntime at three other sizes, odd and even,
    with right-padded rows: within 1e-5 of Keras everywhere (strided 'same' padding computed in the graph,
    recurrent layers through ONNX's Scan)."""
    io = dict(np.load(keras_exports / f"{name}.npz"))
    model = convert_keras_model(keras_exports / f"{name}.keras")
    result = attnzoo.export(model, tmp_path / f"{name}.onnx")
    assert "batch" in result.open_axes and not {"length", "height", "width"} & set(result.static_axes)
    for k in range(3):
        feeds = [io[key] for key in sorted(io) if key.startswith(f"x{k}")]
        np.testing.assert_allclose(_run_onnx(tmp_path / f"{name}.onnx", feeds), io[f"y{k}"], atol=1e-5)


@pytest.mark.slow
def test_a_dict_of_two_outputs_exports_under_the_keras_names_and_matches_keras(keras_exports, tmp_path):
    """A model returning {"topic": ..., "tags": ...}: the ONNX file's outputs are named topic and tags,
    its input ids with axes batch and length; the .pt2 takes ids and returns the dict; both within 1e-5 of
    Keras at three lengths, right-padded rows included."""
    import onnx

    io = dict(np.load(keras_exports / "two_heads.npz"))
    model = convert_keras_model(keras_exports / "two_heads.keras")
    onnx_result = attnzoo.export(model, tmp_path / "two.onnx")
    attnzoo.export(model, tmp_path / "two.pt2")
    graph = onnx.load(tmp_path / "two.onnx").graph
    assert [(i.name, [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]) for i in graph.input] == [
        ("ids", ["batch", "length"])
    ]
    assert sorted(o.name for o in graph.output) == ["tags", "topic"]
    assert len(onnx_result.checked_shapes) >= 4
    import onnxruntime

    session = onnxruntime.InferenceSession(str(tmp_path / "two.onnx"), providers=["CPUExecutionProvider"])
    program = torch.export.load(tmp_path / "two.pt2")
    assert program.graph_signature.user_inputs == ("ids",)
    for k in range(3):
        got = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"ids": io[f"x{k}"]}), strict=True))
        with torch.no_grad():
            pt2 = program.module()(torch.from_numpy(io[f"x{k}"]))
        for key in ("topic", "tags"):
            np.testing.assert_allclose(got[key], io[f"y{k}.{key}"], atol=1e-5)
            np.testing.assert_allclose(pt2[key].numpy(), io[f"y{k}.{key}"], atol=1e-5)


@pytest.mark.slow
def test_an_image_export_keeps_both_axes_open_and_says_which_are_fixed(keras_exports, tmp_path):
    model = convert_keras_model(keras_exports / "image_cnn.keras")
    out = tmp_path / "image.pt2"
    proc = run_cli("export", str(attnzoo.save(model, tmp_path / "saved")), "-o", str(out), "--shape", "12,20", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["open_axes"] == ["batch", "height", "width"] and report["static_axes"] == ["channels"]
    assert any("fixed: channels = 3" in note for note in report["notes"])
    heights = {shape["image"][1] for shape in report["checked_shapes"]}
    assert {12, 13, 25} <= heights and min(heights) < 12  # traced, +1, 2x+1, and below
    program = torch.export.load(out).module()
    io = dict(np.load(keras_exports / "image_cnn.npz"))
    with torch.no_grad():
        got = program(torch.from_numpy(io["x2"])).numpy()  # 32 x 17: neither traced size
    np.testing.assert_allclose(got, io["y2"], atol=1e-5)


def test_shapes_that_do_not_fit_the_keras_inputs_are_refused_with_what_to_give(keras_exports, tmp_path):
    model = convert_keras_model(keras_exports / "image_cnn.keras")
    with pytest.raises(ConfigError, match="2 open axes; give one size per open axis"):
        attnzoo.export(model, tmp_path / "m.onnx", shape=(32,))
    with pytest.raises(ConfigError, match="has size 3 on axis 3"):
        attnzoo.export(model, tmp_path / "m.onnx", shape=(32, 32, 4))
    with pytest.raises(ConfigError, match="no input of this model has an open length.*--shape H,W"):
        attnzoo.export(model, tmp_path / "m.onnx", seq=9)
    assert not list(tmp_path.iterdir())


def test_inputs_given_fix_every_axis_and_the_result_says_so(tmp_path):
    layer = torch.nn.Linear(4, 3)
    result = attnzoo.export(layer, tmp_path / "m.pt2", inputs=((torch.randn(2, 4),), {}))
    assert result.static_axes == ("input[0]", "input[1]") and result.open_axes == ()
    assert "every axis fixed, batch included" in result.notes[0]


@pytest.mark.slow
def test_a_file_that_differs_is_refused_naming_the_first_layer_that_differs(keras_exports, tmp_path, monkeypatch):
    """A convolution whose traced graph adds one (a stand-in for any exporter's mistake): the file is
    deleted and the error names the Keras layer where the graph and eager part."""
    model = convert_keras_model(keras_exports / "text_cnn.keras")
    assert type(model.layers["conv1d"]) is torch.nn.Conv1d  # the port's own convolution is torch's
    convolve = torch.nn.Conv1d._conv_forward

    def wrong_when_traced(self, x, weight, bias):
        return convolve(self, x, weight, bias) + float(torch.compiler.is_compiling())

    monkeypatch.setattr(torch.nn.Conv1d, "_conv_forward", wrong_when_traced)
    with pytest.raises(
        ExportError, match=r"differs from the model by .* the first layer that differs: conv1d \(Conv1D\)"
    ):
        attnzoo.export(model, tmp_path / "m.pt2")
    assert not list(tmp_path.iterdir())  # nothing written, no temporary left


def test_random_flip_in_training_flips_as_keras_does(keras_exports):
    """Exact geometry: every training output is the image or one of its flips, the kinds Keras applies in
    each mode (keras 3: one coin for both axes) and about as often as Keras."""
    io = dict(np.load(keras_exports / "flip.npz"))
    model = convert_keras_model(keras_exports / "flip.keras").train()
    images = torch.from_numpy(io["images"])
    torch.manual_seed(0)
    with torch.no_grad():
        outputs = model(images)
    for mode, y in zip(("horizontal", "vertical", "horizontal_and_vertical"), outputs, strict=True):
        candidates = [images, images.flip(2), images.flip(1), images.flip(1).flip(2)]
        match = torch.stack([(y == c).flatten(1).all(1) for c in candidates], dim=1)
        assert bool(match.any(1).all()), mode
        ours = np.bincount(match.int().argmax(1).numpy(), minlength=4) / len(y)
        keras = np.bincount(io[mode], minlength=4) / len(y)
        assert set(np.flatnonzero(ours)) == set(np.flatnonzero(keras)), (mode, ours, keras)
        np.testing.assert_allclose(ours, keras, atol=0.1)  # both near 1/2 for each kind Keras uses
    model.eval()
    with torch.no_grad():
        assert all(torch.equal(y, images) for y in model(images))  # the identity at inference


def test_the_kit_passes_train_step_on_a_model_with_random_flip(keras_exports, tmp_path):
    from attnzoo.testing import check_model

    folder = attnzoo.save(convert_keras_model(keras_exports / "image_cnn.keras"), tmp_path / "saved")
    report = check_model(folder, only=["train_step"])
    assert report["train_step"].status == "passed", report["train_step"].reason


@pytest.mark.slow
def test_the_kit_exports_a_converted_recurrent_model_without_an_exemption(keras_exports, tmp_path):
    from attnzoo.testing import check_model

    assert "export" not in attnzoo.model_info("keras_model").exempt
    folder = attnzoo.save(convert_keras_model(keras_exports / "masked_bilstm.keras"), tmp_path / "saved")
    report = check_model(folder, only=["export", "onnx"], slow=True)
    assert (report["export"].status, report["onnx"].status) == ("passed", "passed"), list(report)


def test_nested_outputs_are_named_by_their_keys_in_torch_export_s_order():
    from attnzoo.interop.export_plan import flat_tensors, output_paths

    t = [torch.full((1,), float(i)) for i in range(4)]
    out = {"a": {"b": t[0]}, "c": (t[1], t[2]), "d": t[3]}
    assert output_paths(out) == ["a.b", "c.0", "c.1", "d"]
    assert [float(x) for x in flat_tensors(out)] == [0.0, 1.0, 2.0, 3.0]
    assert output_paths((t[0], t[1])) is None  # a plain tuple keeps the model's own names


@pytest.mark.slow
@pytest.mark.parametrize("name", ["transposed", "residual", "spatial_out"])
def test_strided_same_transposed_and_residual_models_keep_height_and_width_open(keras_exports, tmp_path, name):
    """Models torch refuses with open named axes ("Constraints violated (height, width)"): exported with
    height and width open to ONNX and .pt2, each file within 1e-5 of Keras at six sizes (three odd, three
    even on each axis) that export never traced; the least size torch's guards allow is in the notes."""
    io = dict(np.load(keras_exports / f"{name}.npz"))
    model = convert_keras_model(keras_exports / f"{name}.keras")
    onnx_result = attnzoo.export(model, tmp_path / f"{name}.onnx")
    pt2_result = attnzoo.export(model, tmp_path / f"{name}.pt2")
    program = torch.export.load(tmp_path / f"{name}.pt2").module()
    for result in (onnx_result, pt2_result):
        assert result.open_axes == ("batch", "height", "width") and result.static_axes == ("channels",)
        assert result.max_abs_diff <= 1e-5
    sizes = {io[f"x{k}"].shape[1:3] for k in range(6)}
    assert {h % 2 for h, _ in sizes} == {0, 1} and {w % 2 for _, w in sizes} == {0, 1}
    for k in range(6):
        np.testing.assert_allclose(_run_onnx(tmp_path / f"{name}.onnx", [io[f"x{k}"]]), io[f"y{k}"], atol=1e-5)
        with torch.no_grad():
            got = program(torch.from_numpy(io[f"x{k}"])).numpy()
        np.testing.assert_allclose(got, io[f"y{k}"], atol=1e-5)


def _first_conv(model):
    return next(key for key, kind in model.keras_classes.items() if kind == "Conv2D")


@pytest.mark.slow
def test_an_axis_torch_must_fix_is_fixed_alone_and_the_layer_that_fixed_it_is_named(keras_exports, tmp_path):
    """A layer whose code compares the width with one number (torch.export can only specialise it): the
    width is fixed at its traced size, the height stays open; static_axes, the notes and the .pt2 say so."""
    model = convert_keras_model(keras_exports / "spatial_out.keras")
    key = _first_conv(model)
    layer = model.layers[key]
    inner = layer.forward

    def compares_the_width(x):  # x: NCHW after 'same' padding, the width 32 + 1 at the traced size
        return inner(x) * 2.0 if x.shape[-1] == 33 else inner(x) * 2.0  # same value, a guard on the width

    layer.forward = compares_the_width
    result = attnzoo.export(model, tmp_path / "m.pt2", shape=(24, 32))
    assert result.open_axes == ("batch", "height") and result.static_axes == ("channels", "width")
    assert result.notes[0].startswith("open: batch, height (")
    note = next(n for n in result.notes if n.startswith("fixed: width = 32"))
    assert f"in layer {model.keras_names[key]} (Conv2D)" in note and "width" in note.split(":", 2)[2]
    program = torch.export.load(tmp_path / "m.pt2").module()
    x = torch.randn(3, 41, 32, 3)
    with torch.no_grad():
        torch.testing.assert_close(program(x), model(x), atol=1e-5, rtol=0)  # another height: open
    with pytest.raises(Exception, match="width|32"):
        program(torch.randn(3, 41, 33, 3))  # another width: the file refuses it


@pytest.mark.slow
def test_a_failed_export_names_the_layer_and_keeps_torch_s_error_as_its_cause(keras_exports, tmp_path):
    """A layer that branches on its values (no size can be traced): the error names the Keras layer, and
    torch's own error is its cause (what --debug prints), nothing is written."""
    model = convert_keras_model(keras_exports / "spatial_out.keras")
    key = _first_conv(model)
    layer = model.layers[key]
    inner = layer.forward
    layer.forward = lambda x: inner(x) if float(x.sum()) > -1e30 else -inner(x)  # reads a value on the host
    with pytest.raises(ExportError, match=rf"in layer {model.keras_names[key]} \(Conv2D\)") as caught:
        attnzoo.export(model, tmp_path / "m.onnx")
    assert caught.value.__cause__ is not None
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_a_position_embedding_bounds_the_length_and_export_says_the_sizes_and_the_layer(tmp_path):
    """keras-hub's PositionEmbedding (a table of 12 positions; the model adds 2 tokens) once made torch
    refuse the open length: the length stays open within what the table holds, the notes say the
    sizes and the layer, the .pt2 matches eager at the longest length and refuses one more."""
    model = convert_keras_model(ROOT / "tests" / "data" / "keras_hub" / "positions.keras")
    result = attnzoo.export(model, tmp_path / "m.pt2")
    assert result.open_axes == ("batch", "length")
    note = next(n for n in result.notes if n.startswith("length takes sizes"))
    assert note.startswith("length takes sizes from 2 to 10") and "(PositionEmbedding)" in note
    program = torch.export.load(tmp_path / "m.pt2").module()
    ids = torch.randint(1, 20, (2, 10), dtype=torch.int32)
    with torch.no_grad():
        torch.testing.assert_close(program(ids), model(ids), atol=1e-5, rtol=0)
        with pytest.raises(Exception):  # noqa: B017 - any refusal: a position past the table
            model(torch.randint(1, 20, (2, 11), dtype=torch.int32))  # eager refuses it too
        with pytest.raises(Exception):  # noqa: B017
            program(torch.randint(1, 20, (2, 11), dtype=torch.int32))
