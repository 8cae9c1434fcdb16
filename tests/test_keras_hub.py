"""keras-hub's modelling layers (TransformerEncoder, TransformerDecoder, TokenAndPositionEmbedding,
PositionEmbedding, SinePositionEncoding) convert without keras-hub.

keras-hub's wheel pulls in TensorFlow (tensorflow-text), so it is no test dependency: the models were made
once with keras 3 (torch backend) and keras-hub (tests/keras_hub_fixtures.py), the way keras-io's text
classification and translation examples build them, and are committed under tests/data/keras_hub as
.keras and .h5 with Keras's outputs on ids padded on the right, fully, on the left, in the middle and
not at all. The converted model must agree within 1e-5 wherever Keras's output is finite (a fully padded
sample's masked average is 0 / 0 in Keras).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.keras import convert_keras_model

from .conftest import ROOT

HUB = ROOT / "tests" / "data" / "keras_hub"
EXPECTED = dict(np.load(HUB / "expected.npz"))
CASES = sorted({key.split("/")[0] for key in EXPECTED})


def assert_matches(model, case: str) -> None:
    b = 0
    while f"{case}/{b}/in/0" in EXPECTED:
        inputs = []
        while f"{case}/{b}/in/{len(inputs)}" in EXPECTED:
            inputs.append(torch.from_numpy(EXPECTED[f"{case}/{b}/in/{len(inputs)}"]))
        with torch.no_grad():
            got = model(*inputs)
        got = list(got) if isinstance(got, tuple) else [got]
        for k, g in enumerate(got):
            want = EXPECTED[f"{case}/{b}/out/{k}"]
            g = g.numpy()
            assert g.shape == want.shape and np.isfinite(g).all(), f"{case} output {k}"
            finite = np.isfinite(want)
            np.testing.assert_allclose(g[finite], want[finite], atol=1e-5, rtol=1e-5, err_msg=f"{case} output {k}")
        b += 1
    assert b > 0


@pytest.mark.parametrize("file", ["keras", "h5"])
@pytest.mark.parametrize("case", CASES)
def test_keras_hub_models_predict_what_keras_predicts(case, file):
    model = convert_keras_model(HUB / f"{case}.{file}")
    assert_matches(model, case)


def test_each_keras_hub_layer_has_its_node_registered_under_keras_hub_s_name():
    report = "\n".join(
        convert_keras_model(HUB / f"{case}.keras").keras_report.to_text() for case in ("translator", "positions")
    )
    for name in (
        "TransformerEncoder",
        "TransformerDecoder",
        "TokenAndPositionEmbedding",
        "PositionEmbedding",
        "SinePositionEncoding",
    ):
        assert f"(keras_hub>{name}) -> keras_hub_" in report, (name, report)


def test_the_fixtures_exercise_the_masks():
    """The padded positions are in the compared outputs (not only pooled ones), and keras 3's deleted mask
    shows: the embedding pooled after the first encoder is an unmasked average (finite for the fully
    padded sample), the one before is masked."""
    inputs = EXPECTED["classifier/0/in/0"]
    assert (inputs == 0).all(axis=1).any() and ((inputs == 0).any(axis=1) & (inputs != 0).any(axis=1)).any()
    assert not np.isfinite(EXPECTED["classifier/0/out/0"]).all()  # the masked average of nothing
    assert np.isfinite(EXPECTED["classifier/0/out/2"]).all()  # the mask was gone


def test_a_converted_keras_hub_model_saves_and_loads(tmp_path):
    model = convert_keras_model(HUB / "translator.keras")
    again = attnzoo.load(attnzoo.save(model, tmp_path / "saved"))
    assert_matches(again, "translator")


def test_a_plugin_s_converter_of_the_same_name_wins_over_attnzoo_s(tmp_path):
    """attnzoo's keras-hub converters answer after custom_layers and plugins, as a plugin's would."""
    calls = []

    def mine(config, weights):
        calls.append(config["max_wavelength"])
        return attnzoo.create("keras_attn", num_classes=2, embed_dim=8)  # any module made by attnzoo.create

    model = convert_keras_model(HUB / "positions.keras", custom_layers={"keras_hub>SinePositionEncoding": mine})
    # the layer called plainly is custom_layers'; the one called with start_index (a call argument the
    # custom converter did not declare) falls through to attnzoo's
    assert calls == [100]
    report = model.keras_report.to_text()
    assert "registered by custom_layers for keras_hub>SinePositionEncoding" in report
    assert "-> keras_hub_sine_position_encoding" in report


def test_a_position_past_the_table_is_an_error_that_says_how_long_inputs_may_be():
    model = convert_keras_model(HUB / "classifier.keras")
    with pytest.raises(ValueError, match="past the position table's sequence_length 12; pass at most 12 steps"):
        model(torch.ones(1, 13, dtype=torch.long))


def test_register_takes_converters_of_the_one_protocol_by_name_only():
    from attnzoo.errors import ConfigError
    from attnzoo.keras.converters.hub_layers import convert_sine_position_encoding
    from attnzoo.keras.registry import ConverterTable

    table = ConverterTable()
    register = table.register_for("someone")
    register("my_pkg>Sine", convert_sine_position_encoding, protocol="node", call_arguments=("start_index",))
    (entry,) = table.candidates(["my_pkg>Sine"])
    assert entry.provider == "someone" and entry.convert is convert_sine_position_encoding
    assert entry.allows(["start_index", "mask"]) == [] and entry.allows(["cache"]) == ["cache"]
    with pytest.raises(ConfigError, match="protocol must be 'module' or 'node'"):
        register("my_pkg>Sine", convert_sine_position_encoding, protocol="records")


@pytest.mark.parametrize(
    "file",
    ["keras_hub/classifier.keras", "keras_hub/translator.keras", "keras_hub/positions.h5", "keras_text/lookups.keras"],
)
def test_the_emitted_source_of_keras_hub_and_text_models_predicts_the_same(file):
    """``to_source`` writes these nodes as calls of their classes; the module holds the same weights."""
    model = convert_keras_model(ROOT / "tests" / "data" / file)
    source = model.to_source()
    namespace: dict = {}
    exec(compile(source, "<emitted>", "exec"), namespace)  # noqa: S102 - the code under test
    port = namespace[source.split("\nclass ", 1)[1].split("(", 1)[0]]()
    port.load_state_dict(model.state_dict())
    port.eval()
    case = Path(file).stem
    expected = EXPECTED if file.startswith("keras_hub") else dict(np.load(ROOT / "tests/data/keras_text/expected.npz"))
    inputs = []
    while f"{case}/0/in/{len(inputs)}" in expected:
        x = expected[f"{case}/0/in/{len(inputs)}"]
        inputs.append(x.tolist() if x.dtype.kind == "U" else torch.from_numpy(x))
    with torch.no_grad():
        want, got = model(*inputs), port(*inputs)
    for w, g in zip(
        want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,), strict=True
    ):
        assert torch.equal(w, g)


def test_keras_io_s_keyword_call_forms_are_what_the_fixture_holds():
    """keras-io's translator calls ``TransformerEncoder(...)(inputs=x)`` and ``TransformerDecoder(...)(
    decoder_sequence=x, encoder_sequence=y)`` (no positional argument at all) on keras.Input's float32 ids;
    it converts (test above) and takes those float ids as Keras does."""
    import json
    import zipfile

    with zipfile.ZipFile(HUB / "keyword_translator.keras") as archive:
        text = archive.read("config.json").decode()
    nodes = {
        layer["class_name"]: layer["inbound_nodes"][0]
        for model in [
            json.loads(text)["config"],
            *[layer["config"] for layer in json.loads(text)["config"]["layers"] if layer["class_name"] == "Functional"],
        ]
        for layer in model["layers"]
        if layer["class_name"] in ("TransformerEncoder", "TransformerDecoder")
    }
    assert nodes["TransformerEncoder"]["args"] == [] and "inputs" in nodes["TransformerEncoder"]["kwargs"]
    assert nodes["TransformerDecoder"]["args"] == []
    assert {"decoder_sequence", "encoder_sequence"} <= set(nodes["TransformerDecoder"]["kwargs"])
    assert EXPECTED["keyword_translator/0/in/0"].dtype == np.float32
