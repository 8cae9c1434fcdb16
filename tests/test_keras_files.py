"""Keras files as people have them (issue 50): activations on Keras's axis, boolean mask inputs, dict
inputs and outputs, and the layers ``keras.applications`` ship.

Keras 3 (torch backend, tests/keras_oracle.py with the models of tests/keras_oracle_files.py) is the
oracle: it builds each model, moves every weight off its initial value, saves .keras and .h5, and runs
it on padded inputs; the converted model must agree within 1e-5 from both files.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.keras import convert_keras_model
from attnzoo.keras.nodes import build_node

from .test_keras_models import assert_matches_keras, convert_both, oracle  # noqa: F401 - the oracle fixture

SOFTMAX_FAMILIES = ["softmax_conv", "softmax_separable_depthwise", "softmax_transpose", "softmax_dense"]


def _from_both_files(oracle, tmp_path, name, batches):  # noqa: F811
    folder = convert_both(oracle, tmp_path, name=name, seed=5, batches=batches)
    models = [convert_keras_model(folder / file) for file in ("model.keras", "model.h5")]
    for model, file in zip(models, ("model.keras", "model.h5"), strict=True):
        assert_matches_keras(model, folder, f"{name} ({file})")
    return folder, models[0]


# -- activations on Keras's axis ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", SOFTMAX_FAMILIES)
def test_a_layer_s_softmax_runs_over_keras_s_last_axis(oracle, tmp_path, name):  # noqa: F811
    folder, model = _from_both_files(oracle, tmp_path, name, [[3, 4]])
    io = np.load(folder / "io.npz")
    outputs = [io[k] for k in sorted(io) if k.startswith("out/")]
    assert any(np.allclose(o.sum(-1), 1.0, atol=1e-5) for o in outputs)  # the oracle's softmax is per position


def test_a_recurrent_layer_s_softmax_activation_is_keras_s(oracle, tmp_path):  # noqa: F811
    _from_both_files(oracle, tmp_path, "softmax_recurrent", [[5, 6], [2, 3]])


def test_a_u_net_s_per_pixel_softmax_equals_keras_s_and_its_source_too(oracle, tmp_path):  # noqa: F811
    folder, model = _from_both_files(oracle, tmp_path, "unet_softmax", [[2, 1]])
    image = torch.from_numpy(np.load(folder / "io.npz")["in/0/0"])
    with torch.no_grad():
        probabilities = model(image)
    assert probabilities.shape == (2, 16, 16, 4)
    torch.testing.assert_close(probabilities.sum(-1), torch.ones(2, 16, 16), rtol=0, atol=1e-5)
    namespace: dict = {}
    source = model.to_source()
    exec(compile(source, "<port>", "exec"), namespace)  # noqa: S102 - the code under test
    port = namespace[source.split("\nclass ", 1)[1].split("(", 1)[0]]()
    port.load_state_dict(model.state_dict())
    assert re.search(r"\.movedim\(1, -1\),\s*dim=-1", source)  # the softmax reads the Keras layout
    with torch.no_grad():
        torch.testing.assert_close(port.eval()(image), probabilities, rtol=0, atol=1e-6)
    reloaded = attnzoo.load(attnzoo.save(model, tmp_path / "saved")).eval()
    assert_matches_keras(reloaded, folder, "unet_softmax reloaded")


# -- masks from inputs ----------------------------------------------------------------------------------------
def test_the_video_classifier_takes_its_bool_mask_input_as_the_gru_s_mask(oracle, tmp_path):  # noqa: F811
    folder, model = _from_both_files(oracle, tmp_path, "video_classifier", [[5, 1], [2, 1]])
    io = np.load(folder / "io.npz")
    frames, mask = torch.from_numpy(io["in/0/0"]), torch.from_numpy(io["in/0/1"])
    assert mask.dtype == torch.bool and mask[1].all() and not mask[0].all() and mask[0].any()  # padded rows
    with torch.no_grad():
        # the mask is read: the same frames with every step kept give another answer
        assert not torch.allclose(model(frames, mask), model(frames, torch.ones_like(mask)), atol=1e-4)
    with pytest.raises(ValueError, match="'frame_mask' as a bool tensor"):
        model(frames, mask.float())


def test_an_explicit_mask_from_an_input_reaches_recurrent_and_attention_layers(oracle, tmp_path):  # noqa: F811
    _from_both_files(oracle, tmp_path, "explicit_masks", [[5, 6], [2, 3]])


def test_check_makes_a_bool_input_a_padded_mask():
    from attnzoo.keras.check import padded_inputs

    class Spec:  # padded_inputs reads only the inputs' specs, and the graph for what each input is
        inputs_spec = [
            {"id": "frames", "name": "frames", "shape": [None, 6, 5], "dtype": "float32"},
            {"id": "frame_mask", "name": "frame_mask", "shape": [None, 6], "dtype": "bool"},
        ]
        graph = {"inputs": inputs_spec, "calls": []}

    frames, mask = padded_inputs(Spec(), batch=4, length=8)
    assert mask.dtype == bool and mask.shape == (4, 6)
    assert mask[0].all() and not mask[1].all() and not mask[2].all()  # full, right-, left-padded rows
    np.testing.assert_array_equal(np.abs(frames).sum(-1) > 0, mask)  # the frames are zero where the mask is False


@pytest.mark.slow
@pytest.mark.parametrize("name", ["video_classifier", "unet_softmax"])
def test_cli_check_passes_on_the_video_classifier_and_the_u_net(oracle, tmp_path, name):  # noqa: F811
    from .conftest import run_cli

    folder = convert_both(oracle, tmp_path / "k", name=name, seed=2, batches=[[2, 1]])
    proc = run_cli("convert-keras", str(folder / "model.keras"), "-o", str(tmp_path / "out"), "--check")
    assert proc.returncode == 0, proc.stderr
    assert_matches_keras(attnzoo.load(tmp_path / "out"), folder, f"{name} from the CLI")


# -- dict and nested inputs and outputs ---------------------------------------------------------------------
def _io(folder):
    io = np.load(folder / "io.npz")
    inputs = [torch.from_numpy(io[f"in/0/{i}"]) for i in range(sum(k.startswith("in/0/") for k in io))]
    return inputs, [io[f"out/0/{k}"] for k in range(sum(k.startswith("out/0/") for k in io))]


def test_a_dict_of_inputs_and_outputs_is_taken_and_returned_as_keras_does(oracle, tmp_path):  # noqa: F811
    folder = convert_both(oracle, tmp_path, name="dict_inputs", seed=3, batches=[[4, 1]])
    inputs, want = _io(folder)  # in Keras's flat order: the keys sorted (age, chol, thal)
    for file in ("model.keras", "model.h5"):
        model = convert_keras_model(folder / file)
        with torch.no_grad():
            got = model({"thal": inputs[2], "age": inputs[0], "chol": inputs[1]})
            flat = model(*inputs)
        assert isinstance(got, dict) and sorted(got) == ["risk", "score"], file
        for key, expected in zip(["risk", "score"], want, strict=True):  # Keras flattens by sorted key
            np.testing.assert_allclose(got[key].numpy(), expected, atol=1e-5, err_msg=f"{file} {key}")
            torch.testing.assert_close(flat[key], got[key])
        wrong = r"no input 'cholesterol' \(did you mean 'chol'\?\), given in the dict; missing 'chol'; its inputs"
        with pytest.raises(ValueError, match=wrong + r", in Keras's order: 'age', 'chol', 'thal'"):
            model({"age": inputs[0], "thal": inputs[2], "cholesterol": inputs[1]})
    reloaded = attnzoo.load(attnzoo.save(model, tmp_path / "saved")).eval()
    with torch.no_grad():
        again = reloaded({"thal": inputs[2], "age": inputs[0], "chol": inputs[1]})
    torch.testing.assert_close(again["score"], got["score"])


def test_nested_lists_of_inputs_and_outputs_keep_their_nesting(oracle, tmp_path):  # noqa: F811
    folder = convert_both(oracle, tmp_path, name="nested_lists", seed=3, batches=[[5, 4]])
    (a, b, c), want = _io(folder)
    for file in ("model.keras", "model.h5"):
        model = convert_keras_model(folder / file)
        with torch.no_grad():
            (first,), second = model(a, [b, c])
        np.testing.assert_allclose(first.numpy(), want[0], atol=1e-5, err_msg=file)
        np.testing.assert_allclose(second.numpy(), want[1], atol=1e-5, err_msg=file)


def test_a_nested_model_of_a_dict_of_inputs_converts(oracle, tmp_path):  # noqa: F811
    _from_both_files(oracle, tmp_path, "nested_dict_model", [[3, 1]])


def test_the_emitted_source_takes_the_inputs_by_name_and_returns_keras_s_structures(oracle, tmp_path):  # noqa: F811
    """The emitted ``forward`` takes one tensor per input, named as Keras names it (a dict's keys, the Inputs'
    names) in Keras's flat order, so ``port(**the_dict)`` is Keras's dict; it returns Keras's structure."""
    from .test_keras_port import _emitted

    for name, keras_call, port_call in [
        (
            "dict_inputs",
            lambda m, x: m({"age": x[0], "chol": x[1], "thal": x[2]}),
            lambda m, x: m(**{"thal": x[2], "age": x[0], "chol": x[1]}),
        ),
        ("nested_lists", lambda m, x: m(x[0], [x[1], x[2]]), lambda m, x: m(x[0], c=x[2], b=x[1])),
    ]:
        folder = convert_both(oracle, tmp_path / name, name=name, seed=4, batches=[[3, 2]])
        inputs, _ = _io(folder)
        model = convert_keras_model(folder / "model.keras")
        port = _emitted(model)
        with torch.no_grad():
            want, got = keras_call(model, inputs), port_call(port, inputs)
            by_name = port_call(model, inputs)  # the converted model takes the same keywords
        assert type(got) is type(want), name
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
        torch.testing.assert_close(by_name, want, rtol=0, atol=0)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dict_inputs", "nested_lists"])
def test_cli_check_feeds_keras_the_structure_it_takes(oracle, tmp_path, name):  # noqa: F811
    from .conftest import run_cli

    folder = convert_both(oracle, tmp_path / "k", name=name, seed=2, batches=[[2, 3]])
    proc = run_cli("convert-keras", str(folder / "model.keras"), "-o", str(tmp_path / "out"), "--check")
    assert proc.returncode == 0, proc.stderr
    inputs, want = _io(folder)
    got = attnzoo.load(tmp_path / "out")(*inputs)  # the flat inputs, in Keras's order
    flat = [got[k] for k in sorted(got)] if isinstance(got, dict) else [got[0][0], got[1]]
    for g, w in zip(flat, want, strict=True):
        np.testing.assert_allclose(g.detach().numpy(), w, atol=1e-5)


# -- keras.applications' own layers, axial attention -----------------------------------------------------------
def test_applications_layers_and_axial_attention_equal_keras(oracle, tmp_path):  # noqa: F811
    folder, model = _from_both_files(oracle, tmp_path, "applications_layers", [[5, 1], [2, 1]])
    report = model.keras_report.to_text()
    for keras_class, node in [("LayerScale", "layer_scale"), ("StochasticDepth", "stochastic_depth")]:
        assert f"({keras_class}) -> {node}:" in report, report
    assert "(CustomScaleLayer) -> scaled_sum:" in report
    from .test_keras_port import _emitted

    inputs, _ = _io(folder)
    reloaded = attnzoo.load(attnzoo.save(model, tmp_path / "saved")).eval()
    with torch.no_grad():
        want = model(*inputs)
        for other in (_emitted(model), reloaded):  # the emitted source and the saved folder
            torch.testing.assert_close(other(*inputs), want, rtol=0, atol=1e-6)


def test_keras_applications_classes_go_by_the_same_keys_in_keras_and_h5_files():
    """A .keras file records LayerScale's module, a legacy .h5 none: both take Keras's converter, so a
    refusal names the class the same way in both."""
    from attnzoo.keras.files import LayerPath
    from attnzoo.keras.graph import LayerRecord
    from attnzoo.keras.registry import is_keras_own, record_keys

    for name, module in [("LayerScale", "convnext"), ("StochasticDepth", "convnext"), ("CustomScaleLayer", "x")]:
        in_keras = LayerRecord(name, LayerPath((), (), ()), name, name, f"keras.src.applications.{module}", {})
        in_h5 = LayerRecord(name, LayerPath((), (), ()), name, None, None, {})
        assert is_keras_own(in_keras) and is_keras_own(in_h5)
        assert record_keys(in_keras)[0] == record_keys(in_h5)[0] == f"keras>{name}"


def test_stochastic_depth_drops_whole_samples_in_train_mode_as_keras_s_formula():
    node = build_node({"op": "stochastic_depth", "rate": 0.4})
    x = torch.randn(400, 3, 2)
    assert node.eval().compute(x, None) is x  # the identity at inference
    torch.manual_seed(0)
    y = node.train().compute(x, None)
    kept = (y != 0).flatten(1).all(dim=1)
    dropped = (y == 0).flatten(1).all(dim=1)
    assert bool((kept | dropped).all())  # each sample is all kept or all dropped
    torch.testing.assert_close(y[kept], x[kept] / 0.6)  # Keras: x / keep_prob * floor(keep_prob + u)
    assert 0.3 < dropped.float().mean().item() < 0.5  # the drop rate, within sampling error of 0.4


def test_one_small_application_converts_from_both_files(oracle, tmp_path):  # noqa: F811
    _from_both_files(oracle, tmp_path, "application_small", [[2, 1]])


APPLICATIONS = [
    "ConvNeXtTiny",
    "DenseNet121",
    "EfficientNetB0",
    "EfficientNetV2B0",
    "InceptionResNetV2",
    "InceptionV3",
    "MobileNet",
    "MobileNetV2",
    "MobileNetV3Small",
    "ResNet50",
    "ResNet50V2",
    "VGG16",
    "Xception",
]  # the smallest of each keras.applications family (tests/keras_oracle_files.py builds them); NASNetMobile
# is not here: Keras 3.15's torch backend, the oracle, refuses to build it ("not available with the torch
# backend at this time due to an outstanding bug")


@pytest.mark.slow
@pytest.mark.parametrize("name", APPLICATIONS)
def test_every_keras_application_converts_from_both_files(oracle, tmp_path, name):  # noqa: F811
    _from_both_files(oracle, tmp_path, f"application_{name}", [[2, 1]])


def test_a_refused_input_list_names_what_the_config_holds():
    from attnzoo.errors import WeightsError
    from attnzoo.keras.graph import parse_model

    layer = {"class_name": "InputLayer", "name": "a", "config": {"name": "a", "batch_shape": [None, 3]}}
    model = {"class_name": "Functional", "config": {"name": "m", "layers": [layer], "output_layers": ["a", 0, 0]}}
    parsed = parse_model({**model, "config": {**model["config"], "input_layers": {"a": ["a", 0, 0]}}}, "m.keras")
    assert [spec.name for spec, _ in parsed.inputs] == ["a"] and parsed.input_structure == {"a": 0}
    for bad, said in [({}, "lists no input layers (input_layers is {})"), ({"a": 3}, "an input layer reference 3")]:
        with pytest.raises(WeightsError, match=re.escape(said)):
            parse_model({**model, "config": {**model["config"], "input_layers": bad}}, "m.keras")


def test_the_kit_s_inputs_for_a_model_with_a_bool_input_give_it_a_bool_mask(oracle, tmp_path):  # noqa: F811
    from attnzoo.conventions import get_convention, model_config, sample_inputs

    folder = convert_both(oracle, tmp_path, name="explicit_masks", seed=1, batches=[[2, 3]])
    model = convert_keras_model(folder / "model.keras")
    convention = get_convention(attnzoo.model_info("keras_model").convention).for_config(model_config(model))
    sample = sample_inputs(model, convention, batch=3, seq=5)
    args, kwargs = sample.call_arguments()
    assert args[1].dtype == torch.bool and args[1].shape == (3, 5) and not args[1].all()  # the last row padded
    with torch.no_grad():
        assert len(model(*args, **kwargs)) == 4


def test_check_speaks_of_images_as_images_and_of_sequences_by_their_length():
    """``convert-keras --check``'s line: an image model's inputs by their shape (open axes at the check's
    size), a sequence model's by the padded length."""
    from types import SimpleNamespace

    from attnzoo.cli.verbs.convert_keras import _checked_inputs

    image = SimpleNamespace(inputs_spec=[{"name": "x", "shape": [None, None, None, 3], "dtype": "float32"}])
    assert _checked_inputs(image, 32) == "images of shape [4, 32, 32, 3] (rows of zeros as padding in some of them)"
    fixed = SimpleNamespace(inputs_spec=[{"name": "x", "shape": [None, 28, 28, 1], "dtype": "float32"}])
    assert _checked_inputs(fixed, 8) == "images of shape [4, 28, 28, 1]"
    text = SimpleNamespace(inputs_spec=[{"name": "ids", "shape": [None, None], "dtype": "int32"}])
    assert _checked_inputs(text, 16) == "padded inputs of length 16"
