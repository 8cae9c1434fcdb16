"""Structured data in: CategoryEncoding, StringLookup/IntegerLookup in every output mode, Hashing,
HashedCrossing, Discretization and Normalization (invert) inside a converted model, with no TensorFlow.

Keras builds the lookups and the hashing layers with TensorFlow on every backend (and runs a model on
strings with the TensorFlow backend only), so those models were made once with keras 3 and TensorFlow
(tests/keras_structured_fixtures.py) and are committed under tests/data/keras_structured with Keras's
outputs. The numeric layers, which Keras runs on torch, are checked against Keras's torch backend
(tests/keras_live_cases.py; again with the installed Keras in the slow tier). The hashes must be
Keras's bit for bit.
"""

from __future__ import annotations

import json
import re
import shutil
import zipfile

import h5py
import numpy as np
import pytest
import torch

from attnzoo.keras import convert_keras_model
from attnzoo.keras.convert import UnsupportedKerasLayerError
from attnzoo.keras.converters.categorical import hash_bucket
from attnzoo.keras.nodes import build_node

from .conftest import ROOT, run_cli
from .keras_live import COMMITTED, assert_matches, live_cases
from .test_keras_text import _edited, assert_outputs

DATA = ROOT / "tests" / "data" / "keras_structured"
EXPECTED = dict(np.load(DATA / "expected.npz"))
BIG = 2**62 + 17  # the fixture's bin count: bins show (almost) the whole 64-bit hash
SALTS = (None, [7, 7], [12345678901234, -5])


@pytest.mark.parametrize("salt", range(len(SALTS)))
def test_hashes_are_keras_s_bit_for_bit(salt):
    """FarmHash Fingerprint64 (no salt) and SipHash-2-4 (salt) of strings of every length class,
    unicode, empty and NUL, and of integers (their decimal text), as Keras's Hashing bins them."""
    strings, integers = EXPECTED["hashes/strings"].tolist(), EXPECTED["hashes/integers"].tolist()
    assert (
        "" in strings and max(len(s.encode()) for s in strings) > 64 and any(ord(max(s or "a")) > 255 for s in strings)
    )
    got = [hash_bucket(s, BIG, SALTS[salt]) for s in strings]
    np.testing.assert_array_equal(np.array(got, dtype=np.int64), EXPECTED[f"hashes/{salt}/strings"])
    got = [hash_bucket(v, BIG, SALTS[salt]) for v in integers]
    np.testing.assert_array_equal(np.array(got, dtype=np.int64), EXPECTED[f"hashes/{salt}/integers"])


@pytest.mark.parametrize("case", ["structured", "lookup_modes", "hashing", "given"])
def test_structured_models_match_keras(case):
    """keras-io's structured-data classifier (a list of column inputs, lookups, Hashing, CategoryEncoding,
    Normalization, Discretization, a Dense head), the lookups in every output mode (mask token, hashed
    OOV indices with and without salt, pad_to_max_tokens, tf_idf), Hashing and HashedCrossing in every
    mode: bins and ids exactly, floats within 1e-5."""
    assert_outputs(convert_keras_model(DATA / f"{case}.keras"), case, EXPECTED)


def test_the_docs_call_gives_keras_s_outputs():
    """docs/keras-migration.md's call: a string column as a list of str, the others as tensors."""
    model = convert_keras_model(DATA / "structured.keras")
    with torch.no_grad():
        probs = model(
            ["red", "pink"], torch.tensor([[3], [7]]), torch.tensor([[23.0], [70.0]]), torch.tensor([[0], [5]])
        )
    want = EXPECTED["structured/0/out/0"][:2]
    assert EXPECTED["structured/0/in/0"][:2].tolist() == [["red"], ["pink"]]
    np.testing.assert_allclose(probs.numpy(), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("case", ["given", "hashing"])
def test_the_legacy_h5_converts_where_it_holds_the_vocabularies(case):
    """Vocabularies and idf weights in the config, and hashing layers (nothing adapted)."""
    assert_outputs(convert_keras_model(DATA / f"{case}.h5"), case, EXPECTED)


def test_an_adapted_lookup_in_a_legacy_h5_is_refused_with_the_reason():
    """Keras 3 writes an adapted vocabulary among a .keras archive's assets only: the legacy .h5 of the same
    model holds none (``"vocabulary": null``), and the refusal says what to do instead."""
    with pytest.raises(UnsupportedKerasLayerError) as refused:
        convert_keras_model(DATA / "structured.h5")
    said = str(refused.value)
    assert re.search(r"StringLookup.*its vocabulary \(vocabulary_size 5 in its config\) is not in the file", said)
    assert "model.save('model.keras')" in said and "StringLookup(vocabulary=layer.get_vocabulary(), ...)" in said


def test_the_refusal_s_advice_converts_the_legacy_h5(tmp_path):
    """The .h5 of the adapted model with each lookup given ``vocabulary=layer.get_vocabulary()`` (the .keras
    file's vocabulary, its mask and OOV tokens at the head) in its config, as the refusal advises: Keras's
    outputs of the adapted model."""
    with zipfile.ZipFile(DATA / "structured.keras") as archive:
        vocabularies = {
            name: archive.read(f"assets/layers/{name}/vocabulary.txt").decode().split("\n")
            for name in ("string_lookup", "integer_lookup")
        }
    target = tmp_path / "structured.h5"
    shutil.copy(DATA / "structured.h5", target)
    with h5py.File(target, "r+") as file:
        config = json.loads(file.attrs["model_config"])
        for layer in config["config"]["layers"]:
            vocabulary = vocabularies.get(layer["config"]["name"])
            if vocabulary is not None:
                assert layer["config"]["vocabulary"] is None  # adapted: nothing in the .h5
                cast = int if layer["class_name"] == "IntegerLookup" else str
                layer["config"]["vocabulary"] = [cast(v) for v in vocabulary]
        file.attrs["model_config"] = json.dumps(config)
    assert_outputs(convert_keras_model(target), "structured", EXPECTED)


def test_the_fixtures_test_what_they_claim():
    """Unknown values meet several OOV indices, a mask token is dropped from the encodings, bins differ."""
    lookup_in = EXPECTED["lookup_modes/0/in/0"]
    assert "purple" in lookup_in and "" in lookup_in  # an unknown token, the mask token
    bins = EXPECTED["hashing/0/out/0"]
    assert len(np.unique(bins)) > 3
    tf_idf = EXPECTED["lookup_modes/0/out/18"]  # StringLookup(tf_idf) of the words
    assert tf_idf.dtype.kind == "f" and len(np.unique(tf_idf)) > 3


@pytest.mark.parametrize(
    ("class_name", "key", "value", "reason"),
    [
        ("CategoryEncoding", "sparse", True, "sparse=True is not supported"),
        ("Hashing", "salt", "pepper", "salt 'pepper' is not an int or two ints"),
        ("HashedCrossing", "output_mode", "count", "output_mode 'count' is not one of int, one_hot"),
        ("Discretization", "bin_boundaries", [3.0, 1.0], "are not sorted"),
        ("StringLookup", "invert", True, "invert=True is not supported"),
    ],
)
def test_what_does_not_convert_is_refused_by_name(tmp_path, class_name, key, value, reason):
    case = "hashing" if class_name in ("Hashing", "HashedCrossing") else "structured"

    def edit(layer):
        if layer["class_name"] == class_name:
            layer["config"][key] = value

    with pytest.raises(UnsupportedKerasLayerError, match=rf"\({class_name}, .*{reason}"):
        convert_keras_model(_edited(tmp_path, case, edit, DATA))


def test_category_encoding_s_out_of_range_value_is_an_error_naming_it():
    """Keras's backends disagree on a value past num_tokens (TensorFlow drops it, torch fails): an error."""
    node = build_node({"op": "category_encoding", "num_tokens": 3, "output_mode": "multi_hot"})
    assert node.compute(torch.tensor([[0, 2, 2], [1, 1, 1]]), None).tolist() == [[1, 0, 1], [0, 1, 0]]
    with pytest.raises(ValueError, match="index 3 is not below the encoding's depth 3"):
        node.compute(torch.tensor([[0, 3]]), None)
    with pytest.raises(ValueError, match=r"expects values in \[0, 3\)"):
        node.compute(torch.tensor([[-1, 0]]), None)


def test_hashing_truncates_floats_after_comparing_them_with_the_mask_value_written_out():
    """Keras's Hashing compares a float input with ``mask_value`` first, then casts it to int64 (toward
    zero) and hashes the decimal text; ``multi_hot`` takes rank 2 at most."""
    node = build_node({"op": "hashing", "num_bins": 9, "mask_value": 2})
    (bins,), _ = node([torch.tensor([[2.0, 2.5, -2.7, 7.0]])], {}, [None])
    expected = [0, 1 + hash_bucket("2", 8, None), 1 + hash_bucket("-2", 8, None), 1 + hash_bucket("7", 8, None)]
    assert bins.tolist() == [expected]
    multi_hot = build_node({"op": "hashing", "num_bins": 4, "output_mode": "multi_hot"})
    with pytest.raises(ValueError, match="rank 2 at most"):
        multi_hot([torch.zeros(2, 2, 2, dtype=torch.long)], {}, [None])


@pytest.mark.parametrize("ext", ["keras", "h5"])
def test_numeric_preprocessing_matches_keras_on_torch(ext):
    """CategoryEncoding (one_hot of [B], [B, 1] and [B, n]; multi_hot; count), Discretization (int,
    one_hot, multi_hot, count; a value on a boundary), an adapted Normalization and one with
    invert=True, against Keras's torch backend, from both files."""
    model = convert_keras_model(COMMITTED / f"numeric_preprocessing.{ext}")
    assert_matches(model, COMMITTED, "numeric_preprocessing")


@pytest.mark.slow
def test_cli_check_passes_on_the_numeric_preprocessing_model(tmp_path):
    """``--check`` draws a CategoryEncoding's input below its num_tokens (the smallest of its readers)."""
    model = str(COMMITTED / "numeric_preprocessing.keras")
    proc = run_cli("convert-keras", "--check", model, "-o", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "checked against Keras" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_numeric_preprocessing_matches_the_installed_keras(tmp_path):
    folder = live_cases(tmp_path, ["numeric_preprocessing"])
    for ext in ("keras", "h5"):
        assert_matches(convert_keras_model(folder / f"numeric_preprocessing.{ext}"), folder, "numeric_preprocessing")
