"""Hostile .keras archives and weights: each refused with an attnzoo error naming the member or the layer,
or (where Keras itself loads and runs the file) converted to compute what Keras computes, with a warning.

The files are small Keras 3 models edited in tmp_path: tests/data/keras_archives/small.keras (Dense, LayerNormalization,
BatchNormalization, Conv1D; tests/keras_archive_fixtures.py, keras 3 on torch) and the text models of
tests/data/keras_text. The slow tests run Keras itself (KERAS_BACKEND=torch) as the oracle of what it loads.
"""

from __future__ import annotations

import io
import json
import os
import re
import struct
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from attnzoo.errors import KerasWeightsWarning, UnsupportedKerasLayerError, WeightsError
from attnzoo.keras import archive as keras_archive
from attnzoo.keras import convert_keras_model
from attnzoo.keras import files as keras_files

from .conftest import ROOT

SMALL = ROOT / "tests" / "data" / "keras_archives" / "small.keras"
TEXT = ROOT / "tests" / "data" / "keras_text"
X = torch.from_numpy(np.random.default_rng(1).standard_normal((2, 5, 4)).astype("float32"))

pytest.importorskip("h5py")


def _members(path: Path) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(path) as archive:
        return [(info.filename, archive.read(info)) for info in archive.infolist()]


def _write(path: Path, items: list[tuple[str, bytes]], compression: int = zipfile.ZIP_STORED) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of a duplicate name, which is the point of one test
        with zipfile.ZipFile(path, "w", compression) as archive:
            for name, data in items:
                archive.writestr(name, data)
    return path


def _replaced(tmp_path: Path, source: Path, **members: bytes) -> Path:
    """``source`` with the named members' bytes replaced."""
    changes = dict(members)
    items = [(name, changes.pop(name, data)) for name, data in _members(source)]
    return _write(tmp_path / f"edited_{len(list(tmp_path.iterdir()))}.keras", items + list(changes.items()))


def _weights_edited(tmp_path: Path, edit, source: Path = SMALL) -> Path:
    """``source`` (small.keras) with its model.weights.h5 edited by ``edit(h5py.File)``."""
    import h5py

    items = dict(_members(source))
    buffer = io.BytesIO(items["model.weights.h5"])
    with h5py.File(buffer, "r+") as f:
        edit(f)
    return _replaced(tmp_path, source, **{"model.weights.h5": buffer.getvalue()})


def _set(f, path: str, value) -> None:
    del f[path]
    f[path] = np.asarray(value, dtype="float32")


def _central_size(path: Path, member: str, size: int) -> None:
    """Make the archive's central directory claim ``size`` bytes for ``member`` (its data unchanged)."""
    data = bytearray(path.read_bytes())
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        length = struct.unpack("<H", data[at + 28 : at + 30])[0]
        if data[at + 46 : at + 46 + length].decode() == member:
            data[at + 24 : at + 28] = struct.pack("<I", size)
        at = data.find(b"PK\x01\x02", at + 4)
    path.write_bytes(bytes(data))


# -- the archive: one config, names inside it, sizes from the data, JSON depth ------------------------------
def test_two_config_members_are_refused_naming_the_member(tmp_path):
    other = json.dumps({"class_name": "Functional", "config": {"layers": []}}).encode()
    for second in (other, dict(_members(SMALL))["config.json"]):  # another config, or the same one twice
        path = _write(tmp_path / "two.keras", [*_members(SMALL), ("config.json", second)])
        with pytest.raises(WeightsError, match=r"two members named 'config\.json'"):
            convert_keras_model(path)


@pytest.mark.parametrize("name", ["assets/../../evil.txt", "/etc/evil.txt", "assets\\..\\evil.txt", "C:/evil.txt"])
def test_member_names_that_leave_the_archive_are_refused(tmp_path, name):
    path = _write(tmp_path / "escape.keras", [*_members(SMALL), (name, b"payload")])
    with pytest.raises(WeightsError, match=rf"archive member {re.escape(repr(name))} names a path outside"):
        convert_keras_model(path)


@pytest.mark.parametrize("member", ["config.json", "metadata.json", "model.weights.h5"])
@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_a_member_whose_header_lies_about_its_size_is_a_clear_error(tmp_path, member, compression):
    """A header that claims fewer bytes than the data holds: zipfile cuts the data there and its CRC
    fails (a raw BadZipFile before); the error names the member. A header that claims more than the
    data holds changes nothing: the data is read as it is, and converts to what the honest file does."""
    size = dict(_members(SMALL))[member].__len__()
    path = _write(tmp_path / "short.keras", _members(SMALL), compression)
    _central_size(path, member, size - 10)
    with pytest.raises(WeightsError, match=rf"archive member '{member}' cannot be read as its header describes it"):
        convert_keras_model(path)
    _central_size(path, member, size + 10)
    torch.testing.assert_close(convert_keras_model(path)(X), convert_keras_model(SMALL)(X))


def test_decompressed_sizes_are_counted_from_the_data(tmp_path, monkeypatch):
    """config.json of 200 KiB (whitespace after the config) under a limit of 64 KiB: refused whether its
    header says so or claims 1,000 bytes; an asset over the assets' limit, and a member that expands
    over 100 times its stored size past the bomb floor (Keras's own rule), likewise."""
    monkeypatch.setattr(keras_files, "MAX_CONFIG_BYTES", 64 << 10)
    padded = dict(_members(SMALL))["config.json"] + b" " * (200 << 10)
    path = _write(tmp_path / "big.keras", [(n, padded if n == "config.json" else d) for n, d in _members(SMALL)], 8)
    with pytest.raises(WeightsError, match=r"archive member 'config\.json' expands to more than 64 KiB"):
        convert_keras_model(path)
    _central_size(path, "config.json", 1000)
    with pytest.raises(WeightsError, match=r"archive member 'config\.json' cannot be read as its header"):
        convert_keras_model(path)

    monkeypatch.setattr(keras_archive, "MAX_ASSETS_BYTES", 1 << 20)
    path = _write(tmp_path / "assets.keras", [*_members(SMALL), ("assets/layers/dense/big.txt", b"a" * (2 << 20))], 8)
    with pytest.raises(
        WeightsError,
        match=r"'assets/layers/dense/big\.txt' expands to more than the 1 MiB all assets may take together",
    ):
        convert_keras_model(path)

    monkeypatch.setattr(keras_archive, "MAX_ASSETS_BYTES", 1 << 30)
    monkeypatch.setattr(keras_archive, "BOMB_FLOOR", 1 << 20)
    path = _write(tmp_path / "bomb.keras", [*_members(SMALL), ("assets/layers/dense/zeros.txt", bytes(4 << 20))], 8)
    with pytest.raises(WeightsError, match=r"'assets/layers/dense/zeros\.txt' expands to over 100 times .*bomb"):
        convert_keras_model(path)


@pytest.mark.parametrize("member", ["config.json", "metadata.json"])
def test_json_nested_100_000_deep_is_a_weights_error_naming_the_member(tmp_path, member):
    deep = ("[" * 100_000 + "]" * 100_000).encode()
    with pytest.raises(WeightsError, match=rf"{member} nests deeper than 200 levels"):
        convert_keras_model(_replaced(tmp_path, SMALL, **{member: deep}))
    shallow_but_deep = ('{"a": ' * 300 + "1" + "}" * 300).encode()  # parses, but walking it later might not
    with pytest.raises(WeightsError, match=rf"{member} nests deeper than 200 levels"):
        convert_keras_model(_replaced(tmp_path, SMALL, **{member: shallow_but_deep}))


def test_a_bare_config_json_nested_deep_is_a_weights_error(tmp_path):
    (tmp_path / "config.json").write_text('{"a": ' * 100_000 + "1" + "}" * 100_000)
    (tmp_path / "model.weights.h5").write_bytes(dict(_members(SMALL))["model.weights.h5"])
    with pytest.raises(WeightsError, match=r"config\.json: the model config nests deeper than 200 levels"):
        convert_keras_model(tmp_path / "config.json")


def test_a_legacy_h5_whose_model_config_nests_deep_is_a_weights_error(tmp_path):
    import shutil

    import h5py

    path = tmp_path / "deep.h5"
    shutil.copy(ROOT / "tests" / "data" / "keras2" / "sequential.h5", path)
    with h5py.File(path, "r+") as f:
        f.attrs["model_config"] = '{"a": ' * 100_000 + "1" + "}" * 100_000
    with pytest.raises(WeightsError, match=r"deep\.h5: the model config nests deeper than 200 levels"):
        convert_keras_model(path)


def test_the_documented_limits_are_the_code_s():
    """docs/keras-source.md states the archive's limits; they are these constants."""
    text = " ".join((ROOT / "docs" / "keras-source.md").read_text().split())
    assert keras_archive.MAX_CONFIG_BYTES == 64 << 20 and "`config.json` up to 64 MiB" in text
    assert keras_archive.MAX_METADATA_BYTES == 1 << 20 and "`metadata.json` up to 1 MiB" in text
    assert keras_archive.MAX_ASSETS_BYTES == 1 << 30 and "the assets up to 1 GiB together" in text
    assert keras_archive.MAX_WEIGHTS_BYTES == 64 << 30 and "`model.weights.h5` up to 64 GiB" in text
    assert (keras_archive.BOMB_FLOOR, keras_archive.BOMB_RATIO) == (256 << 20, 100)
    assert "no member past 256 MiB that expands to more than 100 times" in text
    assert keras_files.MAX_JSON_DEPTH == 200 and "a depth limit of 200 levels" in text


# -- vocabularies, read as Keras's loader reads them ---------------------------------------------------------
def _vectorizer_ids(path: Path, text: str) -> list[int]:
    ids, _ = convert_keras_model(path)([text])
    return ids[0].tolist()


def test_text_vectorization_reads_the_copy_keras_keeps(tmp_path):
    """Keras's saving_lib calls TextVectorization.load_assets (which hands its folder's vocabulary.txt to
    its inner lookup) and then the inner lookup's own, with `_lookup_layer/vocabulary.txt`: the inner copy
    is set last and kept. "cat" and "the" swapped in that copy swap their ids (hand-computed: index 0 is
    padding, 1 [UNK], then the file's order: "the" 2, "cat" 3)."""
    original = dict(_members(TEXT / "classifier.keras"))["assets/layers/text_vectorization/vocabulary.txt"]
    swapped = original.replace(b"\nthe\ncat\n", b"\ncat\nthe\n")
    assert swapped != original
    assert _vectorizer_ids(TEXT / "classifier.keras", "the cat")[:2] == [2, 3]
    items = [
        (n, swapped if n.endswith("_lookup_layer/vocabulary.txt") else d)
        for n, d in _members(TEXT / "classifier.keras")
    ]
    assert _vectorizer_ids(_write(tmp_path / "inner.keras", items), "the cat")[:2] == [3, 2]
    items = [
        (n, swapped if n == "assets/layers/text_vectorization/vocabulary.txt" else d)
        for n, d in _members(TEXT / "classifier.keras")
    ]
    assert _vectorizer_ids(_write(tmp_path / "outer.keras", items), "the cat")[:2] == [2, 3]


@pytest.mark.parametrize("copy", ["vocabulary.txt", "_lookup_layer/vocabulary.txt"])
@pytest.mark.parametrize(
    "vocabulary, reason",
    [
        (b"\n[UNK]\nthe\ncat\nthe", r"repeats 'the' \(Keras refuses it too\)"),
        (b"[UNK]\n\nthe\ncat", r"holds the mask token '' at index 1; Keras takes it only at the head"),
        (b"\n[UNK]\nthe\n\ncat", r"holds the mask token '' at index 3"),
        (b"", r"is empty"),
    ],
)
def test_a_vocabulary_copy_keras_refuses_is_refused_naming_the_layer_and_copy(tmp_path, copy, vocabulary, reason):
    """Keras reads both copies and refuses the load when either fails set_vocabulary's checks."""
    name = f"assets/layers/text_vectorization/{copy}"
    items = [(n, vocabulary if n == name else d) for n, d in _members(TEXT / "classifier.keras")]
    config = json.loads(dict(items)["config.json"])
    config["config"]["layers"][1]["config"]["vocabulary_size"] = None  # the size check would answer first
    items = [(n, json.dumps(config).encode() if n == "config.json" else d) for n, d in items]
    with pytest.raises(
        UnsupportedKerasLayerError, match=rf"text_vectorization \(TextVectorization.*\({copy}\) {reason}"
    ):
        convert_keras_model(_write(tmp_path / "bad.keras", items))


def _string_lookup(path: Path):
    model = convert_keras_model(path)
    key = next(k for k, name in model.keras_names.items() if name.startswith("string_lookup"))
    return model.layers[key]


def test_the_oov_token_past_the_head_is_an_ordinary_token_as_in_keras(tmp_path):
    """Keras's set_vocabulary refuses an OOV token past the head only for invert=True (a mode attnzoo
    refuses); otherwise the token takes its place's index like any other. StringLookup(mask_token="",
    oov_token="[UNK]"): "" -> 0, unknown -> 1, then "blue" 2, "[UNK]" 3, "green" 4."""
    name = "assets/layers/string_lookup/vocabulary.txt"
    items = [(n, b"\n[UNK]\nblue\n[UNK]\ngreen" if n == name else d) for n, d in _members(TEXT / "lookups.keras")]
    config = json.loads(dict(items)["config.json"])
    for layer in config["config"]["layers"]:
        if layer["class_name"] == "StringLookup":
            layer["config"]["vocabulary_size"] = 5
    items = [(n, json.dumps(config).encode() if n == "config.json" else d) for n, d in items]
    node = _string_lookup(_write(tmp_path / "oov.keras", items))
    (ids,), _ = node([[["", "red", "blue", "[UNK]", "green"]]], {}, [None])
    assert ids.tolist() == [[0, 1, 2, 3, 4]]


# -- values: what Keras loads and runs converts with a warning; what it refuses, refused -------------------
def _trace(path: Path) -> dict:
    with torch.no_grad():
        return convert_keras_model(path).trace(X)


def test_nan_or_inf_in_a_kernel_converts_as_keras_runs_it_with_a_warning_naming_the_layer(tmp_path):
    for value, what in ((np.nan, "1 NaN and 0 infinite"), (np.inf, "0 NaN and 1 infinite")):

        def poison(f, value=value):
            kernel = np.array(f["layers/dense/vars/0"])
            kernel[0, 0] = value
            _set(f, "layers/dense/vars/0", kernel)

        path = _weights_edited(tmp_path, poison)
        with pytest.warns(KerasWeightsWarning, match=rf"Dense 'dense': variable 0 \[4, 4\] holds {what}"):
            out = _trace(path)["dense"][0]
        # Keras's kernel is [in, out]: y_j = sum_i x_i K_ij + b_j, so K_00 reaches output 0 alone
        assert not torch.isfinite(out[..., 0]).any() and torch.isfinite(out[..., 1:]).all()


def test_a_negative_moving_variance_converts_as_keras_runs_it_with_a_warning_naming_the_layer(tmp_path):
    """Keras loads it; at inference channel 1 is (x - mean) / sqrt(-1 + 0.001): NaN, the others as before."""
    path = _weights_edited(tmp_path, lambda f: _set(f, "layers/batch_normalization/vars/3", [1.0, -1.0, 1.0, 1.0]))
    with pytest.warns(
        KerasWeightsWarning, match=r"BatchNormalization 'bn': moving_variance is negative at channel\(s\) \[1\]"
    ):
        edited = _trace(path)["bn"][0]
    reference = _trace(_weights_edited(tmp_path, lambda f: _set(f, "layers/batch_normalization/vars/3", [1.0] * 4)))
    assert torch.isnan(edited[..., 1]).all()
    torch.testing.assert_close(edited[..., [0, 2, 3]], reference["bn"][0][..., [0, 2, 3]])


@pytest.mark.parametrize(
    "edit, message",
    [
        # gamma [1] for a 4-wide LayerNormalization: Keras refuses to assign it (build_config says 4)
        (
            lambda f: _set(f, "layers/layer_normalization/vars/0", [1.0]),
            r"norm \(LayerNormalization, variables \[1\], \[4\]\) \(its gamma is \[1\] in the file, but the layer "
            r"makes it \[4\]\)",
        ),
        (
            lambda f: [_set(f, f"layers/layer_normalization/vars/{i}", [1.0]) for i in (0, 1)],
            r"norm \(LayerNormalization.*its gamma is \[1\] in the file, but the layer makes it \[4\]",
        ),
        (
            lambda f: [_set(f, f"layers/batch_normalization/vars/{i}", [1.0]) for i in range(4)],
            r"bn \(BatchNormalization.*its gamma is \[1\] in the file, but the layer makes it \[4\]",
        ),
        # a kernel [5, 4] takes 5 features where Keras built the Dense for [batch, 5, 4]: it would fail at run
        (
            lambda f: _set(f, "layers/dense/vars/0", np.ones((5, 4))),
            r"dense \(Dense.*its kernel takes inputs 5 wide, but Keras built the layer for inputs of shape "
            r"\[None, 5, 4\]",
        ),
        # a kernel 3 steps wide where the config says kernel_size 2: it would silently convolve over 3
        (
            lambda f: _set(f, "layers/conv1d/vars/0", np.ones((3, 4, 3))),
            r"conv \(Conv1D.*its config says kernel_size=\[2\] but the kernel is \[3, 4, 3\]",
        ),
    ],
)
def test_a_variable_of_the_wrong_shape_is_refused_naming_the_layer_and_both_shapes(tmp_path, edit, message):
    with pytest.raises(UnsupportedKerasLayerError, match=message):
        convert_keras_model(_weights_edited(tmp_path, edit))


def test_a_recurrent_kernel_of_another_input_width_is_refused_naming_the_layer(tmp_path):
    """keras_text/open_length.keras: an LSTM(4) built for [batch, steps, 5]; a kernel [6, 16] (the four
    gates fit) takes 6 features: refused at conversion, where it failed at the first call before."""
    path = _weights_edited(
        tmp_path, lambda f: _set(f, "layers/lstm/cell/vars/0", np.ones((6, 16))), TEXT / "open_length.keras"
    )
    with pytest.raises(
        UnsupportedKerasLayerError,
        match=r"lstm \(LSTM.*its kernel takes inputs 6 wide, but Keras built the layer for inputs of shape "
        r"\[None, None, 5\]",
    ):
        convert_keras_model(path)


def test_a_bias_the_converter_does_not_check_is_caught_before_load_state_dict(tmp_path):
    """Conv1D's bias [4] for 3 filters: torch's "size mismatch for layers.conv.bias" before; now the
    Keras layer and both shapes."""
    path = _weights_edited(tmp_path, lambda f: _set(f, "layers/conv1d/vars/1", [0.0] * 4))
    with pytest.raises(
        WeightsError, match=r"layer 'conv' \(Conv1D\): its bias is \[4\] in the file, .* needs \[3\]"
    ) as err:
        convert_keras_model(path)
    assert "size mismatch" not in str(err.value)


# -- Keras itself as the oracle (slow: it starts Keras) -------------------------------------------------------
_KERAS_VERDICTS = """
import json, os, sys, warnings
os.environ["KERAS_BACKEND"] = "torch"
warnings.simplefilter("ignore")
import keras, numpy as np
x = np.load(sys.argv[1])
out = {}
for path in sys.argv[2:]:
    try:
        model = keras.saving.load_model(path)
    except Exception as e:
        out[path] = None
        continue
    out[path] = np.asarray(model.predict(x, verbose=0)).tolist()
print(json.dumps(out))
"""


@pytest.mark.slow
def test_keras_loads_what_attnzoo_converts_with_a_warning_and_refuses_what_attnzoo_refuses(tmp_path):
    """For every value and shape case above, Keras 3 (torch backend) is asked to load and run the file:
    where it refuses, attnzoo refuses; where it runs, attnzoo computes the same (NaN where Keras has NaN)."""
    cases = {
        "nan": lambda f: _set(
            f, "layers/dense/vars/0", np.where(np.eye(4) > 0, np.nan, np.array(f["layers/dense/vars/0"]))
        ),
        "inf": lambda f: _set(f, "layers/conv1d/vars/1", [np.inf, 0.0, -np.inf]),
        "negative_variance": lambda f: _set(f, "layers/batch_normalization/vars/3", [1.0, -1.0, 1.0, 1e-4]),
        "gamma_1": lambda f: _set(f, "layers/layer_normalization/vars/0", [1.0]),
        "gammas_1": lambda f: [_set(f, f"layers/layer_normalization/vars/{i}", [1.0]) for i in (0, 1)],
        "bias_4": lambda f: _set(f, "layers/conv1d/vars/1", [0.0] * 4),
        "bn_1": lambda f: [_set(f, f"layers/batch_normalization/vars/{i}", [1.0]) for i in range(4)],
        "dense_in_5": lambda f: _set(f, "layers/dense/vars/0", np.ones((5, 4))),
        "conv_kernel_3": lambda f: _set(f, "layers/conv1d/vars/0", np.ones((3, 4, 3))),
    }
    paths = {name: str(_weights_edited(tmp_path, edit)) for name, edit in cases.items()}
    np.save(tmp_path / "x.npy", X.numpy())
    proc = subprocess.run(
        [sys.executable, "-c", _KERAS_VERDICTS, str(tmp_path / "x.npy"), *paths.values()],
        capture_output=True,
        text=True,
        env={**os.environ, "KERAS_BACKEND": "torch"},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    verdicts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [name for name, path in paths.items() if verdicts[path] is None] == [
        "gamma_1",
        "gammas_1",
        "bias_4",
        "bn_1",
        "dense_in_5",
        "conv_kernel_3",
    ]
    for path in paths.values():
        if verdicts[path] is None:
            with pytest.raises(WeightsError, match=r"'?(norm|conv|bn|dense)'? \("):
                convert_keras_model(path)
            continue
        with pytest.warns(KerasWeightsWarning):
            ours = convert_keras_model(path)(X).detach().numpy()
        np.testing.assert_allclose(ours, np.asarray(verdicts[path], dtype="float32"), rtol=1e-4, atol=1e-5)


_KERAS_SET_VOCABULARY = """
import json, os, sys, types
os.environ["KERAS_BACKEND"] = "torch"
from keras.src.layers.preprocessing import index_lookup

# set_vocabulary asks TensorFlow only whether it runs eagerly and whether the vocabulary is a tensor
# before its checks; the table it then builds is recorded instead (TensorFlow is not installed here)
index_lookup.tf = types.SimpleNamespace(executing_eagerly=lambda: True, is_tensor=lambda value: False)
IndexLookup = index_lookup.IndexLookup


class Lookup:
    output_mode, invert, max_tokens, num_oov_indices = "int", False, None, 1
    _oov_start_index = IndexLookup._oov_start_index
    _token_start_index = IndexLookup._token_start_index
    _find_repeated_tokens = IndexLookup._find_repeated_tokens

    def __init__(self, mask_token, oov_token):
        self.mask_token, self.oov_token, self.kept = mask_token, oov_token, None

    def _lookup_table_from_tokens(self, tokens):
        self.kept = [str(t) for t in tokens]

    def _record_vocabulary_size(self):
        pass


out = []
for mask, vocabulary in json.loads(sys.argv[1]):
    lookup = Lookup(mask, "[UNK]")
    try:
        IndexLookup.set_vocabulary(lookup, vocabulary)
    except ValueError:
        pass
    out.append(lookup.kept)
print(json.dumps(out))
"""


@pytest.mark.slow
def test_vocabularies_are_refused_and_kept_as_keras_s_own_set_vocabulary_does():
    """Keras's IndexLookup.set_vocabulary itself (TensorFlow stubbed out of its two eager checks) is the
    oracle of which vocabularies it refuses and which tokens it keeps; attnzoo's reading agrees on each."""
    from attnzoo.keras.converters.vocabulary import vocabulary_tokens as _tokens
    from attnzoo.keras.registry import Refused

    cases = [
        ("", ["", "[UNK]", "the", "cat"]),
        ("", ["the", "cat"]),
        ("", ["", "[UNK]", "the", "cat", "the"]),
        ("", ["[UNK]", "", "the", "cat"]),
        ("", ["", "[UNK]", "the", "", "cat"]),
        ("", ["", "[UNK]", "the", "[UNK]", "cat"]),
        ("", ["[UNK]", "the", "cat"]),
        (None, ["[UNK]", "blue", "[UNK]"]),
        (None, ["blue", "[UNK]", "green"]),
        (None, ["", "blue"]),
    ]
    proc = subprocess.run(
        [sys.executable, "-c", _KERAS_SET_VOCABULARY, json.dumps(cases)],
        capture_output=True,
        text=True,
        env={**os.environ, "KERAS_BACKEND": "torch"},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    keras_kept = json.loads(proc.stdout.strip().splitlines()[-1])
    assert keras_kept.count(None) == 3, keras_kept  # the oracle refuses some: the cases test both sides
    for (mask, vocabulary), kept in zip(cases, keras_kept, strict=True):
        try:
            ours = _tokens(vocabulary, mask, ["[UNK]"], {}, "vocabulary.txt")
        except Refused:
            ours = None
        assert ours == kept, (mask, vocabulary)


_KERAS_COPY_ORDER = """
import os, sys, zipfile
os.environ["KERAS_BACKEND"] = "torch"
import keras


class Inner(keras.layers.Layer):  # IndexLookup's save_assets / load_assets, reduced to the file
    def save_assets(self, folder):
        with open(os.path.join(folder, "vocabulary.txt"), "w") as f:
            f.write("saved")

    def load_assets(self, folder):
        with open(os.path.join(folder, "vocabulary.txt")) as f:
            self.kept = f.read()


@keras.saving.register_keras_serializable("probe")
class Outer(keras.layers.Layer):  # TextVectorization's: it hands its own folder to its inner lookup
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._lookup_layer = Inner()

    def call(self, x):
        return x

    def save_assets(self, folder):
        self._lookup_layer.save_assets(folder)

    def load_assets(self, folder):
        self._lookup_layer.load_assets(folder)


saved, edited = sys.argv[1], sys.argv[2]
keras.Sequential([keras.Input((3,)), Outer(name="outer")]).save(saved)
with zipfile.ZipFile(saved) as old, zipfile.ZipFile(edited, "w") as new:
    for item in old.infolist():
        data = old.read(item)
        if item.filename.endswith("vocabulary.txt"):
            data = item.filename.encode()  # each copy says where it is
        new.writestr(item, data)
print(keras.saving.load_model(edited).layers[-1]._lookup_layer.kept)
"""


@pytest.mark.slow
def test_keras_keeps_the_inner_lookup_s_vocabulary_copy_and_so_does_attnzoo(tmp_path):
    """Keras's own loader (saving_lib) on a layer built as TextVectorization is (its load_assets hands
    its folder to an inner `_lookup_layer`, which the loader then visits with its own folder): the copy
    set last, the one Keras keeps, is `_lookup_layer/vocabulary.txt`; attnzoo reads that one."""
    proc = subprocess.run(
        [sys.executable, "-c", _KERAS_COPY_ORDER, str(tmp_path / "saved.keras"), str(tmp_path / "edited.keras")],
        capture_output=True,
        text=True,
        env={**os.environ, "KERAS_BACKEND": "torch"},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "assets/layers/outer/_lookup_layer/vocabulary.txt"
    original = dict(_members(TEXT / "classifier.keras"))["assets/layers/text_vectorization/vocabulary.txt"]
    swapped = original.replace(b"\nthe\ncat\n", b"\ncat\nthe\n")
    items = [
        (n, swapped if n.endswith("/_lookup_layer/vocabulary.txt") else d)
        for n, d in _members(TEXT / "classifier.keras")
    ]
    assert _vectorizer_ids(_write(tmp_path / "inner.keras", items), "the cat")[:2] == [3, 2]
