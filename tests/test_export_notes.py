"""Issue 67: an export's notes say what is true of the written file.

A keras-hub BertBackbone (tests/data/keras_hub_models/bert.keras, keras-hub's own file: three inputs of one
length, a position table of ``max_sequence_length`` rows, read here from its config.json) exported to ONNX:
the note lists the sizes the file ran at (result.checked_shapes, never a shape its one length leaves out),
the length's bound is said as the position table, and a length past it is refused before anything runs.
A stack of grouped convolutions (RegNetX's blocks) whose outputs reach ~1,000 exports within the tolerance
at the outputs' scale, and a file off by 1e-3 of that scale is still refused.
"""

from __future__ import annotations

import json
import re
import zipfile

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.core import create
from attnzoo.errors import ExportError
from attnzoo.keras import convert_keras_model

from .conftest import ROOT

BERT = ROOT / "tests" / "data" / "keras_hub_models" / "bert.keras"
INPUTS = ("padding_mask", "segment_ids", "token_ids")

pytest.importorskip("h5py")


def _table_rows() -> int:
    """BertBackbone's max_sequence_length, as keras-hub saved it."""
    with zipfile.ZipFile(BERT) as archive:
        config = json.loads(archive.read("config.json"))
    return int(config["config"]["max_sequence_length"])


def _inputs(length: int, batch: int = 2) -> dict[str, torch.Tensor]:
    ids = torch.randint(1, 100, (batch, length), dtype=torch.int32)
    return {"padding_mask": torch.ones_like(ids), "segment_ids": torch.zeros_like(ids), "token_ids": ids}


def test_a_length_past_the_position_table_is_refused_before_tracing_naming_the_table(tmp_path):
    rows = _table_rows()
    model = convert_keras_model(BERT)
    with pytest.raises(
        ExportError, match=rf"'position_embedding' \(PositionEmbedding\): .* sequence_length {rows}"
    ) as e:
        attnzoo.export(model, tmp_path / "never.onnx", seq=rows + 1)
    assert str(e.value).endswith("; trace at sizes it takes (seq=, shape=; --seq, --shape)")
    assert not list(tmp_path.iterdir())


@pytest.mark.slow  # an ONNX export of BERT checked at several shapes: about 10 s
def test_bert_s_onnx_notes_list_the_sizes_run_and_the_table_that_bounds_the_length(tmp_path):
    pytest.importorskip("onnxruntime")
    import onnx
    import onnxruntime

    rows = _table_rows()
    model = convert_keras_model(BERT)
    result = attnzoo.export(model, tmp_path / "bert.onnx")
    # the sizes said are the sizes run: each checked shape's length, for the three inputs alike
    ran = sorted({tuple(shape[name][1] for name in INPUTS) for shape in result.checked_shapes})
    said = re.search(r"checked at ([^)]*)\)", result.notes[0]).group(1)
    assert said == "; ".join(", ".join(map(str, sizes)) for sizes in ran), result.notes[0]
    assert all(length <= rows and len(set(sizes)) == 1 for sizes in ran for length in sizes)
    # the bound: the table in words, not torch's Eq(...) between two inputs
    (bound,) = [n for n in result.notes if "taking sizes" in n or "takes sizes" in n]
    assert bound.startswith("padding_mask.length, segment_ids.length and token_ids.length are one length")
    assert f"from 2 to {rows}: layer position_embedding (PositionEmbedding) holds a table of {rows} positions" in bound
    assert f"pad or cut inputs to at most {rows}" in bound and "Eq(" not in bound
    # the bound the runtime does not check travels in the file, for the caller to check before running
    carried = {p.key: p.value for p in onnx.load(tmp_path / "bert.onnx").metadata_props}
    assert json.loads(carried["attnzoo.axis_bounds"]) == {f"{name}.length": [2, rows] for name in INPUTS}
    # what the note says of lengths: at the bound the file agrees with the model, past it the runtime fails
    session = onnxruntime.InferenceSession(str(tmp_path / "bert.onnx"), providers=["CPUExecutionProvider"])
    feed = _inputs(rows)
    with torch.no_grad():
        want = model(**feed)
    got = session.run(None, {k: v.numpy() for k, v in feed.items()})
    names = [o.name for o in session.get_outputs()]
    for name, value in zip(names, got, strict=True):
        np.testing.assert_allclose(value, want[name].numpy(), atol=1e-4, rtol=0)
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime's own words ("invalid expand shape")
        session.run(None, {k: v.numpy() for k, v in _inputs(rows + 1).items()})
    with pytest.raises(ValueError, match=rf"past the position table's sequence_length {rows}"):
        model(**_inputs(rows + 1))


def _grouped_stack() -> torch.nn.Module:
    """RegNetX's pattern: a 1x1 convolution to the block's width, then a 3x3 grouped one (groups of 8
    channels), strided every other block; weights scaled so the outputs reach ~1,000, as a trained
    network's may."""

    def conv(cin: int, cout: int, groups: int, kernel: int, stride: int) -> dict:
        return {
            "op": "conv", "rank": 2, "filters": cout, "in_channels": cin, "kernel_size": [kernel, kernel],
            "strides": [stride, stride], "dilation_rate": [1, 1], "padding": "same", "groups": groups,
            "activation": "relu",
        }  # fmt: skip

    layers, chain, width = {"stem": conv(3, 32, 1, 3, 2)}, ["stem"], 32
    for i, (out, stride) in enumerate([(24, 1), (24, 2), (56, 1), (56, 2), (152, 1), (152, 2), (368, 2)]):
        layers[f"p{i}"], layers[f"g{i}"] = conv(width, out, 1, 1, 1), conv(out, out, out // 8, 3, stride)
        chain += [f"p{i}", f"g{i}"]
        width = out
    graph = {
        "format": 1,
        "keras_version": "2.15.0",
        "inputs": [{"id": "x", "name": "images", "shape": [None, 32, 32, 3], "dtype": "float32"}],
        "layers": {k: {**v, "keras": {"name": k, "class": "Conv2D"}} for k, v in layers.items()},
        "calls": [
            {"id": k, "layer": k, "args": [{"ref": [chain[i - 1] if i else "x", 0]}], "kwargs": {}}
            for i, k in enumerate(chain)
        ],
        "outputs": [[chain[-1], 0]],
    }
    torch.manual_seed(0)
    model = create("keras_model", graph=graph).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(3.5)
    return model


@pytest.mark.slow  # two ONNX exports of 15 convolutions: about 20 s
def test_grouped_convolutions_export_within_the_tolerance_at_the_outputs_scale(tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    import onnxruntime

    from attnzoo.interop import export as export_module

    model = _grouped_stack()
    x = torch.randn(2, 32, 32, 3)
    with torch.no_grad():
        want = model(x)
    scale = float(want.abs().max())
    assert scale > 100  # outputs where float32's rounding passes an absolute 1e-4 (onnxruntime here: 4.6e-4)
    result = attnzoo.export(model, tmp_path / "g.onnx")
    session = onnxruntime.InferenceSession(str(tmp_path / "g.onnx"), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"images": x.numpy()})
    assert float(np.abs(got - want.numpy()).max()) <= 1e-4 * scale and result.max_abs_diff <= 1e-4 * scale
    # a file off by 1e-3 of the outputs' scale is refused, and nothing is written
    runner = export_module.onnx_runner
    monkeypatch.setattr(
        export_module,
        "onnx_runner",
        lambda path, m: lambda a, k: [o + 1e-3 * float(o.abs().max()) for o in runner(path, m)(a, k)],
    )
    with pytest.raises(ExportError, match=r"differs from the model by .* \(tolerance 0\.0001 x max\(1, "):
        attnzoo.export(model, tmp_path / "off.onnx")
    assert not (tmp_path / "off.onnx").exists()
