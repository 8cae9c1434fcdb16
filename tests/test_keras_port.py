"""The port you own: a converted Keras model trains like Keras, gives logits, reads as PyTorch source,
is checked by the kit, and deploys at the lengths Keras left open.

Keras 3 (torch backend) is the oracle, run once as a subprocess (tests/keras_training_oracle.py): it saves
each model, calls it with ``training=True`` (and saves it with the moving statistics that call moved),
fits it a few SGD steps, and samples its dropout. Nothing expected here comes from attnzoo.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.keras import convert_keras_model

from .conftest import ROOT, require_data, run_cli, run_python
from .test_keras_models import oracle  # noqa: F401 - the Keras subprocess fixture, shared

TRAINING_MODELS = ("masked_text", "conv_classes")


@pytest.fixture(scope="module")
def keras_runs(tmp_path_factory) -> Path:
    import importlib.util

    have = importlib.util.find_spec("keras") is not None and importlib.util.find_spec("h5py") is not None
    require_data(have, "keras 3 and h5py (the test extra)")
    out = tmp_path_factory.mktemp("keras_training")
    env = {**os.environ, "KERAS_BACKEND": "torch", "PYTHONWARNINGS": "ignore"}
    script = ROOT / "tests" / "keras_training_oracle.py"
    proc = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _io(folder: Path, name: str) -> dict:
    return dict(np.load(folder / f"{name}.npz"))


@pytest.mark.slow
@pytest.mark.parametrize("name", TRAINING_MODELS)
def test_train_mode_is_keras_training_true_and_moves_the_statistics_as_keras_does(keras_runs, name):
    io = _io(keras_runs, name)
    model = convert_keras_model(keras_runs / f"{name}.keras")
    assert not model.training  # converted models come back ready to predict, as Keras's inference
    x = torch.from_numpy(io["x"])
    with torch.no_grad():
        torch.testing.assert_close(model(x).numpy(), io["eval"], rtol=1e-5, atol=1e-6)
        model.train()
        # batch statistics divide by a batch's own spread, which magnifies the last bits torch's packed LSTM
        # and Keras's step loop sum in their own orders: issue 46's 1e-5
        torch.testing.assert_close(model(x).numpy(), io["train"], rtol=1e-5, atol=1e-5)
    stepped = convert_keras_model(keras_runs / f"{name}.stepped.keras").state_dict()
    moved = [k for k in stepped if "running_" in k]
    assert moved, "the model has BatchNormalization statistics"
    for key in moved:  # Keras's momentum and its biased batch variance (masked steps left out)
        torch.testing.assert_close(model.state_dict()[key], stepped[key], rtol=1e-6, atol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize("name", TRAINING_MODELS)
def test_fine_tuning_with_logits_takes_the_sgd_steps_keras_takes(keras_runs, name):
    io = _io(keras_runs, name)
    model = convert_keras_model(keras_runs / f"{name}.keras", logits=True).train()
    dropped = " ".join(model.keras_report.outputs)
    assert "dropped its final sigmoid" in dropped if name == "masked_text" else "dropped its final softmax" in dropped
    loss = torch.nn.BCEWithLogitsLoss() if name == "masked_text" else torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    x, y = torch.from_numpy(io["x"]), torch.from_numpy(io["y"])
    for step in range(3):  # the oracle's fit: batches of 4 in order, SGD(0.1), no momentum
        batch = slice(4 * step, 4 * step + 4)
        target = y[batch] if name == "masked_text" else y[batch].argmax(-1)
        optimizer.zero_grad()
        loss(model(x[batch]), target).backward()
        optimizer.step()
    keras_after = convert_keras_model(keras_runs / f"{name}.fitted.keras", logits=True).state_dict()
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, keras_after[key], rtol=1e-5, atol=1e-5, msg=f"{key} after 3 steps")


@pytest.mark.slow
def test_the_port_trains_exactly_the_variables_keras_trains(keras_runs):
    io = _io(keras_runs, "masked_text")
    model = convert_keras_model(keras_runs / "masked_text.keras").train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    frozen = [p for p in model.parameters() if not p.requires_grad]
    statistics = [b for name, b in model.named_buffers() if "running_" in name]
    assert sum(p.numel() for p in trainable) == int(io["trainable"])
    assert sum(p.numel() for p in [*frozen, *statistics]) == int(io["frozen"])
    assert {n for n, p in model.named_parameters() if not p.requires_grad} == {
        "layers.frozen.weight",
        "layers.frozen.bias",
    }
    torch.manual_seed(0)  # dropout acts in train(): a fixed draw, so no unit is dropped by chance from every row
    model(torch.from_numpy(io["x"])).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in trainable)


@pytest.mark.slow
def test_dropout_in_recurrent_layers_is_keras_s_in_distribution(keras_runs):
    """Keras's LSTM with dropout and recurrent_dropout (a mask per gate, kept for the whole sequence) and
    GRU with dropout: the mean and variance of each output over 400 training calls, ours against Keras's."""
    io = _io(keras_runs, "rnn_dropout")
    model = convert_keras_model(keras_runs / "rnn_dropout.keras").train()
    x = torch.from_numpy(io["x"])
    torch.manual_seed(0)
    with torch.no_grad():
        calls = [[t.numpy() for t in model(x)] for _ in range(400)]
    for k in range(2):
        ours = np.stack([c[k] for c in calls])
        spread = np.sqrt((ours.var(0) + io[f"var{k}"]) / 400)
        assert (np.abs(ours.mean(0) - io[f"mean{k}"]) <= 5 * spread + 1e-6).all(), f"output {k}: means differ"
        ratio = ours.var(0).mean() / io[f"var{k}"].mean()
        assert 0.85 < ratio < 1.15, f"output {k}: variance {ratio:.2f} x Keras's"
    model.eval()
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(model(x), model(x), strict=True))


def _noise_model(kind: str, **options):
    graph = {
        "format": 1,
        "keras_version": "3.15.1",
        "inputs": [{"id": "x", "name": "x", "shape": [None, None, 4], "dtype": "float32"}],
        "layers": {"noise": {"op": "noise", "kind": kind, **options}},
        "calls": [{"id": "noise", "layer": "noise", "args": [{"ref": ["x", 0]}], "kwargs": {}}],
        "outputs": [["noise", 0]],
    }
    return attnzoo.create("keras_model", graph=graph)


def test_the_dropout_family_acts_in_train_mode_with_keras_s_formulas():
    torch.manual_seed(0)
    x = torch.randn(16, 9, 4)
    with torch.no_grad():
        dropout = _noise_model("dropout", rate=0.3).train()
        ys = torch.stack([dropout(x) for _ in range(300)])
        assert abs((ys == 0).float().mean().item() - 0.3) < 0.01
        kept = ys != 0
        torch.testing.assert_close(ys[kept], (x / 0.7).expand_as(ys)[kept])  # kept values scaled by 1 / (1 - p)

        spatial = _noise_model("dropout", rate=0.4, shared_axes=[1]).train()  # SpatialDropout1D
        y = torch.stack([spatial(x) for _ in range(50)])
        zero = y == 0
        assert (zero.all(dim=2) | ~zero.any(dim=2)).all()  # a channel drops for every step at once
        assert abs(zero.float().mean().item() - 0.4) < 0.03

        gaussian = _noise_model("gaussian_dropout", rate=0.2).train()
        ratio = torch.stack([gaussian(x) for _ in range(300)]) / x
        assert abs(ratio.mean().item() - 1) < 0.01 and abs(ratio.var().item() - 0.2 / 0.8) < 0.01

        noise = _noise_model("gaussian_noise", rate=0.5).train()
        delta = torch.stack([noise(x) for _ in range(300)]) - x
        assert abs(delta.mean().item()) < 0.01 and abs(delta.std().item() - 0.5) < 0.01

        alpha = _noise_model("alpha_dropout", rate=0.2).train()  # keeps a standard input's mean and variance
        z = torch.stack([alpha(x) for _ in range(300)])
        assert abs(z.mean().item() - x.mean().item()) < 0.03 and abs(z.var().item() - x.var().item()) < 0.05

        for model in (dropout, spatial, gaussian, noise, alpha):
            assert model.eval()(x) is not None and torch.equal(model(x), x)  # the identity at inference


@pytest.mark.slow
def test_logits_drops_only_a_final_squashing_and_says_so(keras_runs):
    io = _io(keras_runs, "masked_text")
    probabilities = convert_keras_model(keras_runs / "masked_text.keras")
    logits = convert_keras_model(keras_runs / "masked_text.keras", logits=True)
    x = torch.from_numpy(io["x"])
    with torch.no_grad():
        torch.testing.assert_close(torch.sigmoid(logits(x)), probabilities(x), rtol=1e-5, atol=1e-6)
    softmaxed = convert_keras_model(keras_runs / "conv_classes.keras", logits=True)
    features = torch.from_numpy(_io(keras_runs, "conv_classes")["x"])
    with torch.no_grad():
        torch.testing.assert_close(
            torch.softmax(softmaxed(features), -1).numpy(), _io(keras_runs, "conv_classes")["eval"]
        )
    with pytest.raises(attnzoo.ConfigError, match="logits must be True or False"):
        convert_keras_model(keras_runs / "masked_text.keras", logits="yes")


@pytest.mark.slow
def test_an_output_without_a_squashing_is_left_as_it_is(keras_runs):
    model = convert_keras_model(keras_runs / "rnn_dropout.keras", logits=True)
    assert all("no sigmoid or softmax; left as it is" in line for line in model.keras_report.outputs)
    assert len(model.keras_report.outputs) == 2


@pytest.mark.slow
def test_the_emitted_source_loads_the_folder_s_weights_and_predicts_the_same_without_keras(keras_runs, tmp_path):
    for name in ("masked_text", "conv_classes", "rnn_dropout"):
        model = convert_keras_model(keras_runs / f"{name}.keras")
        attnzoo.save(model, tmp_path / name)
        (tmp_path / f"{name}_port.py").write_text(model.to_source())
        check = subprocess.run(  # where a user keeps it: attnzoo is a third-party package there
            [sys.executable, "-m", "ruff", "check", "--isolated", f"{name}_port.py"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        assert check.returncode == 0, check.stdout
    code = f"""
import sys
sys.modules["keras"] = None  # no Keras in this process
sys.path.insert(0, {str(tmp_path)!r})
import importlib, numpy as np, torch
from safetensors.torch import load_file
for name, cls in (("masked_text", "MaskedText"), ("conv_classes", "ConvClasses"), ("rnn_dropout", "RnnDropout")):
    port = getattr(importlib.import_module(name + "_port"), cls)()
    port.load_state_dict(load_file({str(tmp_path)!r} + "/" + name + "/model.safetensors"))
    port.eval()
    x = torch.from_numpy(np.load({str(keras_runs)!r} + "/" + name + ".npz")["x"])
    with torch.no_grad():
        out = port(x)
    out = out if isinstance(out, tuple) else (out,)
    np.savez({str(tmp_path)!r} + "/" + name + "_out.npz", *[o.numpy() for o in out])
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("masked_text", "conv_classes", "rnn_dropout"):
        model = convert_keras_model(keras_runs / f"{name}.keras")
        with torch.no_grad():
            want = model(torch.from_numpy(_io(keras_runs, name)["x"]))
        want = want if isinstance(want, tuple) else (want,)
        got = np.load(tmp_path / f"{name}_out.npz")
        for k, w in enumerate(want):
            np.testing.assert_allclose(got[f"arr_{k}"], w.numpy(), rtol=0, atol=1e-6)


@pytest.mark.slow
def test_the_emitted_source_is_torch_where_keras_is_plain_torch(keras_runs):
    source = convert_keras_model(keras_runs / "masked_text.keras").to_source()
    assert "class MaskedText(nn.Module):" in source
    assert 'self.layers["embedding"] = nn.Embedding(20, 6)' in source
    assert "F.dropout(batch_normalization, 0.0, self.training)" in source  # Dropout, as torch writes it
    assert 'self.layers["head"] = nn.Linear(3, 1)' in source
    assert "torch.sigmoid(layers.head(" in source  # a layer whose Keras name is a plain name: an attribute
    assert "import keras" not in source and "tensorflow" not in source


@pytest.mark.slow
def test_the_cli_writes_logits_and_the_source_and_the_kit_checks_the_folder(keras_runs, tmp_path):
    out, port = tmp_path / "model", tmp_path / "port.py"
    proc = run_cli(
        "convert-keras", str(keras_runs / "masked_text.keras"), "-o", str(out), "--logits", "--emit-py", str(port)
    )
    assert proc.returncode == 0, proc.stderr
    assert "dropped its final sigmoid" in proc.stdout and "class MaskedText" in proc.stdout
    assert port.is_file() and (out / "model.safetensors").is_file()
    again = run_cli("convert-keras", str(keras_runs / "masked_text.keras"), "-o", str(out), "--emit-py", str(port))
    assert again.returncode == 2 and "exists; pass --overwrite" in again.stderr
    check = run_cli("check", str(out), "--property", "padding", "--property", "fully_masked", "--json")
    assert check.returncode == 0, check.stdout + check.stderr
    import json

    (report,) = json.loads(check.stdout)
    statuses = {r["property"]: r["status"] for r in report["results"]}
    assert statuses["padding"] == "passed" and statuses["fully_masked"] == "passed"


@pytest.mark.slow
def test_the_kit_finds_a_port_whose_padding_leaks(keras_runs, tmp_path):
    """The same folder with the LSTM told to ignore its mask: the padding property fails."""
    import yaml

    model = convert_keras_model(keras_runs / "masked_text.keras")
    attnzoo.save(model, tmp_path / "leaky")
    config = yaml.safe_load((tmp_path / "leaky" / "config.yaml").read_text())
    for call in config["config"]["graph"]["calls"]:
        if call["layer"] == "lstm":
            call["kwargs"]["implicit_mask"] = False  # the RNN now reads the padded steps
    model = attnzoo.create("keras_model", graph=config["config"]["graph"])
    model.load_state_dict(attnzoo.load(tmp_path / "leaky").state_dict())
    attnzoo.save(model, tmp_path / "leaky", overwrite=True)
    from attnzoo.testing import check_model

    report = check_model(tmp_path / "leaky", only=["padding"])
    assert report["padding"].status == "failed"


@pytest.mark.slow
def test_numpy_inputs_are_taken_as_keras_takes_them(keras_runs):
    io = _io(keras_runs, "masked_text")
    model = convert_keras_model(keras_runs / "masked_text.keras")
    with torch.no_grad():
        torch.testing.assert_close(model(io["x"]), model(torch.from_numpy(io["x"])))


@pytest.mark.slow
def test_exports_keep_keras_s_integer_dtype_and_say_where_a_length_is_fixed(keras_runs, tmp_path):
    pytest.importorskip("onnxruntime")
    import onnx
    import onnxruntime

    text = convert_keras_model(keras_runs / "masked_text.keras")
    result = attnzoo.export(text, tmp_path / "text.onnx", seq=7)
    graph_input = onnx.load(tmp_path / "text.onnx").graph.input[0]
    assert graph_input.type.tensor_type.elem_type == onnx.TensorProto.INT32  # Keras declared int32 ids
    assert any("--seq" in note for note in result.notes) or result.static_axes == ()
    ids = _io(keras_runs, "masked_text")["x"]
    session = onnxruntime.InferenceSession(str(tmp_path / "text.onnx"))
    (got,) = session.run(None, {graph_input.name: ids})
    np.testing.assert_allclose(got, _io(keras_runs, "masked_text")["eval"], atol=1e-5)

    conv = convert_keras_model(keras_runs / "conv_classes.keras")
    result = attnzoo.export(conv, tmp_path / "conv.onnx")
    assert "length" in result.open_axes and "length" not in result.static_axes  # Keras left it open, so does the file
    session = onnxruntime.InferenceSession(str(tmp_path / "conv.onnx"))
    x = np.random.default_rng(0).standard_normal((3, 23, 4)).astype("float32")
    (got,) = session.run(None, {session.get_inputs()[0].name: x})
    with torch.no_grad():
        np.testing.assert_allclose(got, conv(torch.from_numpy(x)).numpy(), atol=1e-5)


def _emitted(model):
    """The class ``to_source`` writes for ``model``, executed here, holding ``model``'s weights."""
    namespace: dict = {}
    source = model.to_source()
    exec(compile(source, "<port>", "exec"), namespace)  # noqa: S102 - the code under test
    port = namespace[source.split("\nclass ", 1)[1].split("(", 1)[0]]()
    port.load_state_dict(model.state_dict())
    return port.eval()


def _same_outputs(model, port, inputs, what):
    with torch.no_grad():
        want, got = model(*inputs), port(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want), what
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-6, msg=f"{what}, output {k}")


NAMED = ["seed001", "seed003", "shared_and_nested", "two_inputs_two_outputs", "transformer", "states", "vision"]


@pytest.mark.slow
@pytest.mark.parametrize("name", [*NAMED, "shapes_and_merges"])
def test_the_emitted_source_equals_every_named_keras_model(oracle, tmp_path, name):  # noqa: F811
    batches = [[5, 7], [1, 4]] if name not in ("seed001", "vision", "shapes_and_merges") else [[3, 1], [1, 1]]
    answer = oracle.ask(dir=str(tmp_path), name=name, seed=1, batches=batches)
    io = dict(np.load(tmp_path / "io.npz"))
    for file in answer["files"]:
        model = convert_keras_model(file)
        port = _emitted(model)
        batch = 0
        while f"in/{batch}/0" in io:
            inputs = [torch.from_numpy(io[f"in/{batch}/{i}"]) for i in range(len(model.inputs_spec))]
            _same_outputs(model, port, inputs, f"{name} ({Path(file).name}), batch {batch}")
            batch += 1


@pytest.mark.parametrize("case", sorted(p.stem for p in (ROOT / "tests" / "data" / "keras2").glob("*.h5")))
def test_the_emitted_source_equals_every_keras2_fixture(case):
    folder = ROOT / "tests" / "data" / "keras2"
    expected = dict(np.load(folder / "expected.npz"))
    model = convert_keras_model(folder / f"{case}.h5")
    port = _emitted(model)
    inputs = []
    while f"{case}/0/in/{len(inputs)}" in expected:
        inputs.append(torch.from_numpy(expected[f"{case}/0/in/{len(inputs)}"]))
    _same_outputs(model, port, inputs, case)


def test_the_emitted_class_takes_only_a_python_name():
    from attnzoo.core.spec import thaw

    model = attnzoo.create("keras_model", graph=thaw(attnzoo.model_info("keras_model").example)["graph"])
    assert "\nclass MyPort(nn.Module):" in model.to_source("MyPort")
    for bad in ("my port", "class", "", 3):
        with pytest.raises(attnzoo.ConfigError, match="class_name must be a Python identifier"):
            model.to_source(bad)


@pytest.mark.slow
@pytest.mark.parametrize("name", TRAINING_MODELS)
def test_the_training_models_port_declares_torch_nn_layers(keras_runs, name):
    """At least 80 % of the declared layers are torch.nn (tests/test_torch_nn_share.py counts them)."""
    from .test_torch_nn_share import declared, share

    code = convert_keras_model(keras_runs / f"{name}.keras").code
    assert share(code) >= 0.8, declared(code)
