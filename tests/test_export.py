"""Export: .pt2 and .onnx files that reproduce the model on shapes they were not traced with.

Every variant's dynamic-shape export is a conformance property (``export``, ``onnx``: the slow tier of
tests/test_conformance.py). Here: what the kit does not cover. The recurrent models, which the kit
exempts from dynamic lengths, still export with a fixed length and a dynamic batch; masks are graph
inputs; files are never overwritten unasked; the command line.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

import attnzoo
from attnzoo.errors import ConfigError
from attnzoo.export import ExportError, export

from .conftest import run_cli

HAVE_ONNX = all(importlib.util.find_spec(m) for m in ("onnx", "onnxscript", "onnxruntime"))
RECURRENT = [n for n in attnzoo.list_models() if "export" in attnzoo.model_info(n).exempt]


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".pt2", ".onnx"])
@pytest.mark.parametrize("name", RECURRENT)
def test_recurrent_models_export_with_a_fixed_length_and_a_dynamic_batch(tmp_path, name, suffix):
    if suffix == ".onnx" and not HAVE_ONNX:
        pytest.skip("onnx, onnxscript and onnxruntime are not installed")
    model = attnzoo.create(name, config=dict(attnzoo.model_info(name).example))
    seq = 12 if name != "cnn_bilstm_attn" else 64
    result = export(model, tmp_path / f"m{suffix}", seq=seq)
    assert result.max_abs_diff <= 1e-4 and result.static_axes[0] == "seq"
    assert next(iter(result.checked_on.values()))[0] == 3  # checked on another batch size than traced (2)


def test_the_mask_is_an_input_of_the_exported_graph(tmp_path):
    layer = attnzoo.create("laat", num_labels=4, attention_size=6, hidden_size=8).eval()
    result = export(layer, tmp_path / "laat.pt2")
    program = torch.export.load(str(result.path)).module()
    x = torch.randn(2, 9, 8)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, 3:] = False
    with torch.no_grad():
        torch.testing.assert_close(program(x, mask=mask), layer(x, mask=mask), atol=1e-6, rtol=1e-5)
        assert not torch.allclose(program(x, mask=mask), program(x, mask=torch.ones_like(mask)))


@pytest.mark.skipif(not HAVE_ONNX, reason="onnx, onnxscript and onnxruntime are not installed")
def test_onnx_attention_weights_can_be_exported_too(tmp_path):
    import onnxruntime

    layer = attnzoo.create("mha", embed_dim=8, num_heads=2).eval()
    result = export(layer, tmp_path / "mha.onnx", return_attention=True)
    session = onnxruntime.InferenceSession(str(result.path))
    x, mask = torch.randn(4, 11, 8), torch.ones(4, 11, dtype=torch.bool)
    mask[2, 5:] = False
    out, weights = session.run(None, {"x": x.numpy(), "mask": mask.numpy()})
    want_out, want_weights = layer(x, mask, return_attention=True)
    assert abs(out - want_out.detach().numpy()).max() < 1e-5
    assert abs(weights - want_weights.detach().numpy()).max() < 1e-5 and weights.shape == (4, 2, 11, 11)


def test_export_refuses_to_overwrite_and_cleans_up(tmp_path):
    layer = attnzoo.create("dot")
    target = tmp_path / "dot.pt2"
    target.write_bytes(b"mine")
    with pytest.raises(ExportError, match="already exists"):
        export(layer, target)
    assert target.read_bytes() == b"mine"
    with pytest.raises(ConfigError, match=r"\.pt2 .* or \.onnx"):
        export(layer, tmp_path / "dot.zip")
    export(layer, target, overwrite=True)
    assert target.read_bytes() != b"mine" and [p.name for p in tmp_path.iterdir()] == ["dot.pt2"]


def test_cli_export_from_a_name_and_from_a_saved_folder(tmp_path):
    out = tmp_path / "labelwise.pt2"
    proc = run_cli("export", "labelwise", "num_labels=5", "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["format"] == "pt2" and report["max_abs_diff"] < 1e-4 and out.is_file()
    assert report["checked_on"]["x"][:2] != [2, 7]  # another batch and length than traced
    model = attnzoo.create("labelwise_batched", num_labels=3, hidden_size=4)
    folder = attnzoo.save(model, tmp_path / "saved")
    proc = run_cli("export", str(folder), "-o", str(tmp_path / "saved.pt2"))
    assert proc.returncode == 0 and "max abs difference" in proc.stdout, proc.stderr
    assert run_cli("export", "labelwise", "num_labels=5", "-o", str(out)).returncode == 1  # exists


@pytest.mark.parametrize("name", ["labelwise", "keras_additive", "attn_pool"])
def test_a_layer_whose_sizes_came_from_its_first_call_exports_at_those_sizes(tmp_path, name):
    """The example inputs follow the materialised sizes, not the card's defaults (here 8, not 16)."""
    from attnzoo.conventions import get_convention, sample_inputs

    spec = attnzoo.model_info(name)
    model = attnzoo.create(name, config=dict(spec.example)).eval()
    convention = get_convention(spec.convention)
    sample = sample_inputs(model, convention, sizes={a: 8 for a in ("feature", "query_feature", "key_feature")})
    args, kwargs = sample.call_arguments()
    with torch.no_grad():
        model(*args, **kwargs)  # the lazy sizes are 8 from now on
    result = export(model, tmp_path / "m.pt2")
    assert all(shape[-1] == 8 for k, shape in result.checked_on.items() if k != "mask" and len(shape) == 3)


def test_export_onto_a_folder_named_like_a_file_is_refused_even_with_overwrite(tmp_path):
    folder = tmp_path / "model.pt2"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match="model.pt2 is a folder; give the file to write"):
        export(attnzoo.create("mha", embed_dim=8), folder, overwrite=True)
    assert (folder / "keep.txt").read_text() == "mine"
