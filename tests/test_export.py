"""Export: .pt2 and .onnx files that reproduce the model on shapes they were not traced with.

Every variant's dynamic-shape export is a conformance property (``export``, ``onnx``: the slow tier of
tests/test_conformance.py). Here: what the kit does not cover. The recurrent models, which the kit
exempts from dynamic lengths, still export with a fixed length and a dynamic batch; masks are graph
inputs; files are never overwritten unasked; the command line.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
import torch

import attnzoo
from attnzoo.errors import ConfigError
from attnzoo.interop.export import ExportError, export

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
        torch.testing.assert_close(program(x, mask), layer(x, mask), atol=1e-6, rtol=1e-5)
        assert not torch.allclose(program(x, mask), program(x, torch.ones_like(mask)))


@pytest.mark.slow
def test_a_pt2_program_takes_tensors_positionally_and_flags_and_context_by_name(tmp_path):
    """As the layer is called: ``program(x, mask)``; ``return_attention`` and the keyword-only context of a
    cross-attention card stay keywords."""
    mha = attnzoo.create("mha", embed_dim=8, num_heads=2).eval()
    program = torch.export.load(str(export(mha, tmp_path / "mha.pt2", return_attention=True).path)).module()
    x, mask = torch.randn(3, 7, 8), torch.ones(3, 7, dtype=torch.bool)
    mask[1, 4:] = False
    with torch.no_grad():
        for got, want in zip(program(x, mask, return_attention=True), mha(x, mask, return_attention=True), strict=True):
            torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    cross = attnzoo.create("rope_cross", embed_dim=8, num_heads=2, context_dim=6).eval()
    program = torch.export.load(str(export(cross, tmp_path / "cross.pt2").path)).module()
    context, context_mask = torch.randn(3, 5, 6), torch.ones(3, 5, dtype=torch.bool)
    context_mask[0, 2:] = False
    with torch.no_grad():
        torch.testing.assert_close(
            program(x, context=context, context_mask=context_mask),  # the cross_attention convention: no x mask
            cross(x, context=context, context_mask=context_mask),
            atol=1e-6,
            rtol=1e-5,
        )


@pytest.mark.skipif(not HAVE_ONNX, reason="onnx, onnxscript and onnxruntime are not installed")
@pytest.mark.slow  # an export checked at several shapes takes seconds
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


@pytest.mark.slow  # an export checked at several shapes takes seconds
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


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".pt2", ".onnx"])
def test_export_onto_a_full_disk_is_an_error_and_leaves_the_old_file(tmp_path, suffix):
    """A file-size limit stands for a full disk (writes past it fail as they would): the export reports it in
    one line and exits normally; torch's own zip writer used to abort the process with a C++ trace."""
    if suffix == ".onnx" and not HAVE_ONNX:
        pytest.skip("onnx, onnxscript and onnxruntime are not installed")
    target = tmp_path / f"m{suffix}"
    target.write_bytes(b"the user's file")
    script = f"""
import resource, signal, sys
import attnzoo
from attnzoo.errors import AttnzooError
layer = attnzoo.create("mha", embed_dim=64, num_heads=2).eval()
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of a signal
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    attnzoo.export(layer, {str(target)!r}, overwrite=True)
except AttnzooError as e:
    print("refused:", e)
    sys.exit(3)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "cannot write" in proc.stdout and "nothing was written" in proc.stdout
    assert target.read_bytes() == b"the user's file"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]
