"""Strings in: TextVectorization, StringLookup and IntegerLookup inside a converted model, with no TensorFlow.

Keras builds these layers with TensorFlow on every backend, so the models were made once with keras 3 and
TensorFlow (tests/keras_text_fixtures.py) and are committed under tests/data/keras_text with Keras's
outputs on texts that test case, punctuation, unknown words, empty texts, texts longer and shorter than
``output_sequence_length``, tabs and newlines, non-ASCII capitals and non-ASCII spaces. The converted model
must give the same ids exactly and the same outputs within 1e-5, from the .keras file alone.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from attnzoo.keras import convert_keras_model
from attnzoo.keras.convert import UnsupportedKerasLayerError
from attnzoo.keras.converters.text import ngrams_of, split_text, standardize
from attnzoo.keras.nodes import build_node

from .conftest import ROOT, run_python

TEXT = ROOT / "tests" / "data" / "keras_text"
EXPECTED = dict(np.load(TEXT / "expected.npz"))
CASES = sorted({key.split("/")[0] for key in EXPECTED})


def batches(case: str, expected: dict = EXPECTED):
    b = 0
    while f"{case}/{b}/in/0" in expected:
        inputs, outputs = [], []
        while f"{case}/{b}/in/{len(inputs)}" in expected:
            x = expected[f"{case}/{b}/in/{len(inputs)}"]
            inputs.append(x.tolist() if x.dtype.kind == "U" else torch.from_numpy(x))
        while f"{case}/{b}/out/{len(outputs)}" in expected:
            outputs.append(expected[f"{case}/{b}/out/{len(outputs)}"])
        yield inputs, outputs
        b += 1


def assert_outputs(model, case: str, expected: dict = EXPECTED) -> None:
    seen = 0
    for inputs, want in batches(case, expected):
        with torch.no_grad():
            got = model(*inputs)
        got = list(got) if isinstance(got, tuple) else [got]
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            g = g.numpy()
            assert g.shape == w.shape, f"{case} output {k}: {g.shape}, Keras {w.shape}"
            if w.dtype.kind == "i":  # ids: exactly Keras's
                np.testing.assert_array_equal(g, w, err_msg=f"{case} output {k}")
            else:
                np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-5, err_msg=f"{case} output {k}")
        seen += 1
    assert seen


@pytest.mark.parametrize("case", CASES)
def test_strings_in_give_keras_s_ids_and_outputs(case):
    assert_outputs(convert_keras_model(TEXT / f"{case}.keras"), case)


def test_the_fixtures_test_what_they_claim():
    """The texts make a difference where a naive tokeniser would differ from TensorFlow's."""
    texts = EXPECTED["classifier/0/in/0"].tolist()
    ids = EXPECTED["classifier/0/out/0"]
    assert any(len(t.split()) > ids.shape[1] for t in texts) and "" in texts  # longer and shorter than L
    assert (ids == 1).any() and (ids == 0).any()  # unknown words, padding
    assert EXPECTED["open_length/0/out/0"].shape[1] != EXPECTED["open_length/1/out/0"].shape[1]  # batch-long


def test_a_vocabulary_given_in_the_config_converts_from_the_legacy_h5_too():
    assert_outputs(convert_keras_model(TEXT / "given_vocabulary.h5"), "given_vocabulary")


def test_an_adapted_vocabulary_in_a_legacy_h5_is_refused_with_the_reason():
    with pytest.raises(
        UnsupportedKerasLayerError,
        match=r"TextVectorization.*vocabulary \(vocabulary_size 25 in its config\) is not in the file",
    ):
        convert_keras_model(TEXT / "classifier.h5")


def test_texts_come_as_a_list_an_array_or_one_per_row():
    model = convert_keras_model(TEXT / "classifier.keras")
    texts = ["The cat sat.", "Unknown words here"]
    ids, probs = model(texts)
    for same in (np.array(texts), [[t] for t in texts], np.array(texts, dtype=object).reshape(2, 1)):
        again, again_probs = model(same)
        assert torch.equal(ids, again) and torch.equal(probs, again_probs)
    assert torch.equal(model([t.encode() for t in texts])[0], ids)  # bytes, as TensorFlow hands them out
    with pytest.raises(ValueError, match="input 'text' as a list of strings"):
        model(torch.zeros(2, 1))
    with pytest.raises(ValueError, match="list of strings"):
        model("one text, not a list")


@pytest.mark.slow
def test_a_string_model_saves_and_loads_and_runs_without_tensorflow_or_keras(tmp_path):
    code = f"""
import sys
for blocked in ("keras", "tensorflow", "tf_keras"):
    sys.modules[blocked] = None
import numpy as np, torch, attnzoo
from attnzoo.keras import convert_keras_model
model = convert_keras_model({str(TEXT / "classifier.keras")!r})
attnzoo.save(model, {str(tmp_path / "saved")!r})
again = attnzoo.load({str(tmp_path / "saved")!r})
texts = ["The CAT sat.", "", "the zebra quacked"]
with torch.no_grad():
    a, b = model(texts), again(texts)
assert all(torch.equal(x, y) for x, y in zip(a, b))
loaded = [m for m, v in sys.modules.items() if v is not None and m.split(".")[0] in ("keras", "tensorflow", "tf_keras")]
print(sorted(loaded), a[0].tolist())
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    modules, _ = proc.stdout.strip().split("] ", 1)
    assert modules == "["


def _edited(tmp_path: Path, case: str, edit, folder: Path = TEXT) -> Path:
    target = tmp_path / f"{case}.keras"
    with zipfile.ZipFile(folder / f"{case}.keras") as old, zipfile.ZipFile(target, "w") as new:
        for item in old.infolist():
            data = old.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                for layer in config["config"]["layers"]:
                    edit(layer)
                data = json.dumps(config).encode()
            new.writestr(item, data)
    return target


@pytest.mark.parametrize(
    ("case", "class_name", "key", "value", "reason"),
    [
        ("classifier", "TextVectorization", "output_mode", "multi_hot", "output_mode 'multi_hot' is not supported"),
        ("classifier", "TextVectorization", "output_mode", "tf_idf", "output_mode 'tf_idf' is not supported"),
        ("classifier", "TextVectorization", "standardize", "my_cleaner", "standardize='my_cleaner' is a custom"),
        ("classifier", "TextVectorization", "ragged", True, "ragged=True is not supported"),
        ("lookups", "StringLookup", "sparse", True, "sparse=True is not supported"),
        ("lookups", "StringLookup", "invert", True, "invert=True is not supported"),
        ("lookups", "IntegerLookup", "oov_method", "sha", "oov_method 'sha' is not floormod or farmhash"),
        ("lookups", "IntegerLookup", "output_mode", "bogus", "output_mode 'bogus' is not one of"),
    ],
)
def test_other_modes_are_refused_by_name(tmp_path, case, class_name, key, value, reason):
    def edit(layer):
        if layer["class_name"] == class_name:
            layer["config"][key] = value

    with pytest.raises(UnsupportedKerasLayerError, match=rf"\({class_name}, .*{reason}"):
        convert_keras_model(_edited(tmp_path, case, edit))


def test_lookups_index_as_keras_does_written_out():
    """mask token -> 0, then the OOV indices, then the vocabulary; IntegerLookup's extra OOV indices by
    floormod; with no OOV index an unknown value is an error naming it."""
    integers = build_node({"op": "integer_lookup", "vocabulary": [7, 9, 11], "mask_token": 0, "num_oov_indices": 2})
    got = integers.compute(torch.tensor([[7, 0, 8, 11], [-3, 9, 10, 5]]), None)
    assert got.tolist() == [[3, 0, 1, 5], [2, 4, 1, 2]]  # 8 % 2 = 0, -3 % 2 = 1, 10 % 2 = 0, 5 % 2 = 1
    strict = build_node({"op": "integer_lookup", "vocabulary": [7, 9], "num_oov_indices": 0})
    assert strict.compute(torch.tensor([9, 7]), None).tolist() == [1, 0]
    with pytest.raises(ValueError, match=r"\[8\] are not in the vocabulary"):
        strict.compute(torch.tensor([7, 8]), None)
    strings = build_node({"op": "string_lookup", "vocabulary": ["red", "blue"], "mask_token": "", "num_oov_indices": 1})
    (ids,), _ = strings([[["red", ""], ["pink", "blue"]]], {}, [None])
    assert ids.tolist() == [[2, 0], [1, 3]]


def test_standardize_and_split_against_tensorflow_s_rules_written_out():
    """tf.strings.lower without an encoding lower-cases ASCII only; Keras's punctuation is ASCII's; split
    on ASCII whitespace only; ngrams width by width."""
    assert standardize("ÉCOLE, Don't STOP!", "lower_and_strip_punctuation") == "École dont stop"
    assert standardize("ÉCOLE, Don't", "lower") == "École, don't"
    assert standardize("a-b_c [d] {e} ~f` «g»", "strip_punctuation") == "abc d e f «g»"
    assert split_text(" a\tb\n\x0bc\x0cd\re\u00a0f\u2003g  ", "whitespace") == ["a", "b", "c", "d", "e\u00a0f\u2003g"]
    assert split_text("ab c", "character") == ["a", "b", " ", "c"]
    assert split_text("ab c", None) == ["ab c"]
    assert ngrams_of(["a", "b", "c"], [1, 2]) == ["a", "b", "c", "a b", "b c"]
    assert ngrams_of(["a"], [2]) == []
