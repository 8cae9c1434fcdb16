"""A keras-hub preset's tokenizer, converted (attnzoo.keras.keras_hub_tokenizer), carried by its converted
model (``model.tokenize``), saved and loaded with it, and written into the Hugging Face folder.

The oracle is keras-hub itself, on its default (Python) path: each family's expected.npz under
tests/data/keras_hub_lm holds its preprocessor's ids and masks for 200 texts at sequence_length 16
(tests/keras_hub_lm_fixtures.py), and tests/data/keras_hub_tokenizers/edge.json the same for the hard texts at
48, spm_cases.json SentencePiece's own ids for the SentencePiece settings the presets lack
(tests/keras_hub_tokenizer_fixtures.py), and thousand.npz the preprocessors' ids and masks for 1,000 seeded
varied texts at 128. The slow tier loads every family's Hugging Face folder (the door's whole folder, but
BLOOM's, whose tiny model it refuses) with transformers' AutoTokenizer in one child process where keras,
keras_hub and attnzoo cannot be imported.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import warnings
from collections import Counter
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import torch

import attnzoo
from attnzoo.errors import AttnzooWarning, ConfigError, WeightsError
from attnzoo.io.sentencepiece import read_sentencepiece
from attnzoo.keras import convert_keras_model, keras_hub_tokenizer, to_transformers
from attnzoo.keras.hub_tokenizers.sentencepiece import sentencepiece_tokenizer
from attnzoo.keras.transformers_tokenizer import write_tokenizer

from .conftest import ROOT, run_without_keras
from .test_sources import server  # noqa: F401 - the local Hub of test_sources, a fixture

LM = ROOT / "tests" / "data" / "keras_hub_lm"
TOKENIZERS = ROOT / "tests" / "data" / "keras_hub_tokenizers"
FAMILIES = sorted(p.name for p in LM.iterdir() if p.is_dir())
# what differs from keras-hub on the hard texts, and why (docs/keras-hub-tokenizer.md says the same)
KNOWN = {"bert": {"é" * 60: "120 bytes in 60 characters: keras-hub's word limit counts bytes, tokenizers' characters"}}


def preset(family: str) -> Path:
    return LM / family / ("classifier_preset" if family == "bert" else "causal_lm_preset")


@cache
def expected(family: str) -> dict[str, np.ndarray]:
    return dict(np.load(LM / family / "expected.npz"))


@cache
def converted_tokenizer(family: str):
    return keras_hub_tokenizer(preset(family))


@cache
def edge() -> dict:
    return json.loads((TOKENIZERS / "edge.json").read_text(encoding="utf-8"))


def texts(family: str) -> list[str]:
    return [str(t) for t in expected(family)["tokenizer/texts"]]


def test_every_family_of_the_fixtures_is_tested():
    assert len(FAMILIES) == 20 and set(FAMILIES) == set(edge()["families"])  # BLOOM twice: bloom_hf's MLP


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_s_tokenizer_gives_keras_hub_s_ids_and_masks_on_all_200_texts(family):
    e = expected(family)
    out = converted_tokenizer(family).tokenize(texts(family))
    assert sorted(out) == sorted(k.split("/")[1] for k in e if k.startswith("tokenizer/") and k != "tokenizer/texts")
    for key, value in out.items():
        assert value.dtype == torch.int64 and value.shape == (200, 16), key
        np.testing.assert_array_equal(value.numpy(), e[f"tokenizer/{key}"], err_msg=f"{family} {key}")


@pytest.mark.parametrize("family", FAMILIES)
def test_the_hard_texts_give_keras_hub_s_ids_but_where_a_difference_is_known(family):
    """Special tokens written in a text, user-defined pieces, Unicode spaces and compatibility forms, case
    folds, ignorable characters, runs of whitespace, the empty text, long words."""
    data = edge()
    want = data["families"][family]
    out = converted_tokenizer(family).tokenize(data["texts"], sequence_length=data["sequence_length"])
    differ = {text for i, text in enumerate(data["texts"]) if any(out[key][i].tolist() != want[key][i] for key in want)}
    assert sorted(out) == sorted(want)
    assert differ == set(KNOWN.get(family, {})), differ


@cache
def thousand() -> dict[str, np.ndarray]:
    return dict(np.load(TOKENIZERS / "thousand.npz"))


def _long_in_bytes(text: str) -> bool:
    """Whether ``text`` holds a Latin word of at most 100 characters but more than 100 UTF-8 bytes."""
    return any(len(w) <= 100 < len(w.encode()) for w in re.findall(r"[0-9A-Za-z\u00c0-\u024f]+", text))


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_s_tokenizer_gives_keras_hub_s_ids_and_masks_on_1000_varied_texts(family):
    """1,000 seeded texts (tests/keras_hub_tokenizer_fixtures.py ``varied_texts``): mixed scripts,
    punctuation, whitespace runs, numbers, emoji, long words, empty texts, texts cut at the sequence length.
    Equal to keras-hub's but, for BERT, where a word is over 100 bytes in at most 100 characters (KNOWN)."""
    data = thousand()
    inputs = [str(t) for t in data["texts"]]
    want = {k.split("/")[1]: v for k, v in data.items() if k.startswith(f"{family}/")}
    out = converted_tokenizer(family).tokenize(inputs, sequence_length=128)
    assert sorted(out) == sorted(want) and len(inputs) == 1000
    assert "" in inputs and (want["padding_mask"].sum(axis=1) == 128).sum() > 100  # empty texts, cut texts
    differ = {i for key in want for i in np.flatnonzero((out[key].numpy() != want[key]).any(axis=1))}
    if family in KNOWN:
        assert 0 < len(differ) <= 2 and all(_long_in_bytes(inputs[i]) for i in differ), [inputs[i] for i in differ]
    else:
        assert not differ, [inputs[i] for i in sorted(differ)[:5]]


def test_keras_hub_s_two_byte_pair_paths_differ_on_runs_of_spaces_and_the_port_gives_the_default_one():
    e = expected("gpt2")
    assert "tokenizer_tf/token_ids" in e  # keras-hub's TensorFlow path (tf.data) differs ...
    rows = np.flatnonzero((e["tokenizer_tf/token_ids"] != e["tokenizer/token_ids"]).any(axis=1))
    assert rows.size and all("  " in texts("gpt2")[i] for i in rows)  # ... on runs of spaces only
    out = converted_tokenizer("gpt2").tokenize([texts("gpt2")[i] for i in rows])["token_ids"].numpy()
    np.testing.assert_array_equal(out, e["tokenizer/token_ids"][rows])  # the Python path's: generate's


# -- SentencePiece settings the presets lack --------------------------------------------------------------


@cache
def spm_cases() -> dict:
    return json.loads((TOKENIZERS / "spm_cases.json").read_text(encoding="utf-8"))


def _special_texts(path: Path) -> list[str]:
    model = read_sentencepiece(path)
    return [p.text for p in model.pieces if p.kind in ("control", "unknown", "byte")]


def _score(path: Path, ids: list[int]) -> float:
    model = read_sentencepiece(path)
    return sum(model.pieces[i].score for i in ids)


@pytest.mark.parametrize("case", ["bpe_fallback_nfkc", "bpe_extra_whitespace", "bpe_no_prefix"])
def test_sentencepiece_bpe_gives_sentencepiece_s_ids_but_for_a_special_piece_s_text_between_user_pieces(case):
    """Byte fallback, nmt_nfkc, extra whitespace removed, user-defined pieces with and without a dummy
    prefix: SentencePiece's own ids on 1,243 texts, but where a stretch between two user-defined pieces is
    exactly a control, unknown or byte piece's text (a dummy prefix's case; docs/keras-hub-tokenizer.md)."""
    path = TOKENIZERS / "spm" / f"{case}.spm"
    tokenizer, model = sentencepiece_tokenizer(path)
    tokenizer.encode_special_tokens = True
    data = spm_cases()
    got = [e.ids for e in tokenizer.encode_batch(data["texts"], add_special_tokens=False)]
    differ = [t for t, g, w in zip(data["texts"], got, data["cases"][case], strict=True) if g != w]
    specials = _special_texts(path)
    assert all(any(f"|>{s}" in t or f"{s}<|" in t for s in specials) for t in differ), differ
    assert len(differ) <= (0 if not model.add_dummy_prefix else 2)


@pytest.mark.parametrize("case", ["unigram_fallback", "unigram_prefix"])
def test_sentencepiece_unigram_differs_only_on_ties_and_on_special_pieces_written_in_a_text(case):
    """The unigram model: SentencePiece's ids but where two segmentations score the same (SentencePiece
    keeps the one whose last piece starts later: ``..`` ``.`` where tokenizers gives ``.`` ``..``) or where a
    text holds a control or unknown piece's text (``</s>``), which SentencePiece never gives from text."""
    path = TOKENIZERS / "spm" / f"{case}.spm"
    tokenizer, _ = sentencepiece_tokenizer(path)
    tokenizer.encode_special_tokens = True
    data = spm_cases()
    specials = _special_texts(path)
    got = [e.ids for e in tokenizer.encode_batch(data["texts"], add_special_tokens=False)]
    same = 0
    for text, g, w in zip(data["texts"], got, data["cases"][case], strict=True):
        if g == w:
            same += 1
            continue
        tie = Counter(g) == Counter(w) and abs(_score(path, g) - _score(path, w)) < 1e-4
        assert tie or any(s in text for s in specials), (text, g, w)
    plain = [t for t in data["texts"][:200] if "..." not in t]  # the 200 texts but those with a tie to break
    assert same > 0.6 * len(data["texts"]) and len(plain) > 150


# -- the port carries it ------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["gpt2", "llama", "phi3", "qwen3", "opt"])
def test_a_converted_preset_carries_its_tokenizer_through_save_and_load(family, tmp_path):
    model = convert_keras_model(preset(family))
    e = expected(family)
    out = model.tokenize(texts(family))
    np.testing.assert_array_equal(out["token_ids"].numpy(), e["tokenizer/token_ids"])
    np.testing.assert_array_equal(out["padding_mask"].numpy(), e["tokenizer/padding_mask"])
    assert model.tokenize("one text", sequence_length=40)["token_ids"].shape == (1, 40)
    folder = attnzoo.save(model, tmp_path / "port")
    saved = {"config.yaml", "model.safetensors", "tokenizer.json", "preprocessing.json"}
    assert {p.name for p in folder.iterdir()} == saved
    assert json.loads((folder / "preprocessing.json").read_text())["sequence_length"] == 16
    again = attnzoo.load(folder)
    batch = again.tokenize(texts(family)[:4])
    assert torch.equal(batch["token_ids"], out["token_ids"][:4])
    logits = again(batch)  # the dict the causal LM takes, as Keras's
    assert logits.shape[:2] == (4, 16) and torch.isfinite(logits).all()
    attnzoo.save(again, folder, overwrite=True)  # its own files again: replaced, not refused
    assert torch.equal(attnzoo.load(folder).tokenize(texts(family)[:4])["token_ids"], batch["token_ids"])


def test_a_classifier_s_tokenizer_gives_segment_ids_and_an_attached_one_travels_too(tmp_path):
    model = convert_keras_model(preset("bert") / "config.json")  # the backbone of the classifier preset
    assert model.tokenizer is None
    model.tokenizer = keras_hub_tokenizer(preset("bert"))
    batch = model.tokenize(texts("bert"))
    for key in ("token_ids", "padding_mask", "segment_ids"):
        np.testing.assert_array_equal(batch[key].numpy(), expected("bert")[f"tokenizer/{key}"])
    out = attnzoo.load(attnzoo.save(model, tmp_path / "bert"))(batch)
    assert out["sequence_output"].shape == (200, 16, model.graph["keras_hub_config"]["hidden_dim"])


def test_tokenize_on_a_model_without_a_tokenizer_says_how_to_get_one(tmp_path):
    model = convert_keras_model(ROOT / "tests" / "data" / "keras_hub_models" / "gpt2_causal_lm.keras")
    with pytest.raises(ConfigError, match=r"carries no tokenizer: convert the keras-hub preset folder that holds it"):
        model.tokenize(["hello"])
    again = attnzoo.load(attnzoo.save(model, tmp_path / "plain"))  # a folder without tokenizer.json: as before
    assert again.tokenizer is None and not (tmp_path / "plain" / "tokenizer.json").exists()
    with pytest.raises(ConfigError, match="PortTokenizer"):
        model.tokenizer = "gpt2"


def test_tokenize_takes_texts_and_a_sequence_length_only():
    tokenizer = converted_tokenizer("gpt2")
    with pytest.raises(ConfigError, match="item 1 is a int"):
        tokenizer.tokenize(["a", 3])
    with pytest.raises(ConfigError, match="a str or a list of str"):
        tokenizer.tokenize(b"bytes")
    with pytest.raises(ConfigError, match="sequence_length must be a whole number >= 1"):
        tokenizer.tokenize(["a"], sequence_length=0)
    with pytest.raises(ConfigError, match=">= 2"):
        converted_tokenizer("bert").tokenize(["a"], sequence_length=1)
    assert tokenizer.tokenize([])["token_ids"].shape == (0, 16)


def test_nothing_a_user_saved_is_replaced_and_a_changed_tokenizer_file_is_left_out(tmp_path):
    model = convert_keras_model(preset("gpt2"))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "tokenizer.json").write_text("my own")
    with pytest.raises(WeightsError, match="holds tokenizer.json of its own"):
        attnzoo.save(model, mine, overwrite=True)
    assert (mine / "tokenizer.json").read_text() == "my own" and not (mine / "model.safetensors").exists()
    folder = attnzoo.save(model, tmp_path / "port")
    (folder / "tokenizer.json").write_text("{}")
    with pytest.warns(AttnzooWarning, match="tokenizer.json: its sha256 is not the one recorded with the model"):
        again = attnzoo.load(folder)
    assert again.tokenizer is None  # the weights load; the tokenizer that is not theirs does not
    plain = convert_keras_model(ROOT / "tests" / "data" / "keras_hub_models" / "gpt2_causal_lm.keras")
    attnzoo.save(plain, folder, overwrite=True)  # a model without a tokenizer replaces one with it
    assert not (folder / "tokenizer.json").exists() and not (folder / "preprocessing.json").exists()


def test_a_record_naming_files_outside_the_folder_is_refused(tmp_path):
    folder = attnzoo.save(convert_keras_model(preset("gpt2")), tmp_path / "port")
    text = (folder / "config.yaml").read_text()
    (folder / "config.yaml").write_text(text.replace("  tokenizer.json:", "  ../tokenizer.json:"))
    with pytest.raises(WeightsError, match=r"files names '\.\./tokenizer\.json', not a file of the folder"):
        attnzoo.load(folder)


def test_a_port_pushed_to_the_hub_comes_back_with_its_tokenizer(request, tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    local_hub = request.getfixturevalue("server")
    monkeypatch.setenv("HF_ENDPOINT", local_hub.base)
    monkeypatch.setenv("ATTNZOO_HOME", str(tmp_path / "home"))
    for name in ("ATTNZOO_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    folder = attnzoo.save(convert_keras_model(preset("gpt2")), tmp_path / "pushed")
    for path in folder.iterdir():  # the folder as pushed: the tokenizer's files beside the weights
        local_hub.files[f"/org/port/resolve/main/{path.name}"] = path.read_bytes()
    again = attnzoo.create("hf-hub:org/port")  # each file fetched against the digest config.yaml records
    out = again.tokenize(texts("gpt2"))
    np.testing.assert_array_equal(out["token_ids"].numpy(), expected("gpt2")["tokenizer/token_ids"])


# -- refusals: a preset's files missing or malformed -------------------------------------------------------


def _copy(family: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(preset(family), tmp_path / family))


ASSET = "assets/tokenizer"
DAMAGES = [  # family, file, its new content (None: removed), the error, what it says
    ("gemma", f"{ASSET}/vocabulary.spm", None, WeightsError, r"vocabulary\.spm: the SentencePiece model is missing"),
    ("gemma", f"{ASSET}/vocabulary.spm", b"\x0a\xff\xff\xff\x0f", WeightsError, r"not a SentencePiece model \(a field"),
    ("gpt2", f"{ASSET}/vocabulary.json", b"[1, 2]", WeightsError, r"vocabulary\.json: the byte-pair vocabulary is not"),
    ("gpt2", f"{ASSET}/vocabulary.json", b'{"a": "x"}', WeightsError, r"the token 'a' has the id 'x'"),
    (
        "gpt2",
        f"{ASSET}/merges.txt",
        "Ġ zz\n".encode(),
        WeightsError,
        r"merges\.txt: line 1 merges 'zz', which is not in",
    ),
    (
        "bert",
        f"{ASSET}/vocabulary.txt",
        b"a\nb\n",
        WeightsError,
        r"the unknown token '\[UNK\]' is not in the vocabulary",
    ),
    ("bert", f"{ASSET}/vocabulary.txt", b"\xff\n", WeightsError, r"vocabulary\.txt: not UTF-8 text"),
    (
        "llama",
        "preprocessor.json",
        None,
        WeightsError,
        r"preprocessor\.json: the keras-hub preprocessor config is missing",
    ),
    (
        "llama",
        "tokenizer.json",
        b'{"class_name": "T5Tokenizer", "config": {}}',
        ConfigError,
        r"T5Tokenizer is a tokenizer",
    ),
    ("qwen", "tokenizer.json", b"{" * 5000, WeightsError, r"tokenizer\.json"),
]


@pytest.mark.parametrize(("family", "file", "content", "error", "message"), DAMAGES)
def test_a_preset_whose_tokenizer_files_are_missing_or_malformed_is_refused_naming_the_file(
    family, file, content, error, message, tmp_path
):
    folder = _copy(family, tmp_path)
    if content is None:
        (folder / file).unlink()
    else:
        (folder / file).write_bytes(content)
    with pytest.raises(error, match=message):
        keras_hub_tokenizer(folder)


def test_a_special_token_the_vocabulary_lacks_and_an_oversized_vocabulary_are_refused(tmp_path, monkeypatch):
    folder = _copy("opt", tmp_path)
    vocabulary = json.loads((folder / "assets/tokenizer/vocabulary.json").read_text())
    del vocabulary["<pad>"]
    (folder / "assets/tokenizer/vocabulary.json").write_text(json.dumps(vocabulary))
    with pytest.raises(WeightsError, match="the special token '<pad>' is not in the vocabulary"):
        keras_hub_tokenizer(folder)
    monkeypatch.setenv("ATTNZOO_MAX_TOKENIZER_BYTES", "1000")
    with pytest.raises(WeightsError, match=r"vocabulary\.spm is over 1,000 bytes, .*ATTNZOO_MAX_TOKENIZER_BYTES"):
        keras_hub_tokenizer(preset("gemma"))


def test_a_preset_whose_tokenizer_does_not_convert_converts_without_it_with_a_warning(tmp_path):
    folder = _copy("gpt2", tmp_path)
    (folder / "assets/tokenizer/merges.txt").unlink()
    said = r"the model converts without its tokenizer: .*merges\.txt: the byte-pair merges is missing"
    with pytest.warns(AttnzooWarning, match=said):
        model = convert_keras_model(folder)
    assert model.tokenizer is None


def test_without_the_tokenizers_library_the_extra_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(ConfigError, match=r"pip install 'attnzoo\[tokenizers\]'"):
        keras_hub_tokenizer(preset("gpt2"))


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data["config"])
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("family", "file", "change", "message"),
    [
        ("gemma3", "preprocessor.json", lambda c: c.update(image_converter={"class_name": "X"}), "image converter"),
        ("gemma", "tokenizer.json", lambda c: c.update(add_bos=True), "add_bos is True"),
        ("gpt2", "tokenizer.json", lambda c: c.update(sequence_length=8), "pads or cuts to its own sequence_length"),
        ("bert", "tokenizer.json", lambda c: c.update(split=False), "split is false"),
        ("llama", "preprocessor.json", lambda c: c.update(sequence_length=0), "sequence_length is 0"),
    ],
)
def test_what_keras_hub_s_presets_never_set_is_refused_by_name(family, file, change, message, tmp_path):
    folder = _copy(family, tmp_path)
    _edit(folder / file, change)
    with pytest.raises((ConfigError, WeightsError), match=message):
        keras_hub_tokenizer(folder)


def _proto(*fields: tuple[int, int | bytes]) -> bytes:
    """A protocol-buffers message of ``(field number, int or bytes)`` fields, written by hand."""

    def varint(value: int) -> bytes:
        out = b""
        while True:
            low, value = value & 0x7F, value >> 7
            out += bytes([low | (0x80 if value else 0)])
            if not value:
                return out

    data = b""
    for number, value in fields:
        if isinstance(value, bytes):
            data += varint(number << 3 | 2) + varint(len(value)) + value
        else:
            data += varint(number << 3) + varint(value)
    return data


def test_a_sentencepiece_model_written_by_hand_is_read_and_a_word_model_refused(tmp_path):
    pieces = [_proto((1, b"<unk>"), (3, 2)), _proto((1, b"<s>"), (3, 3))]
    pieces += [_proto((1, text.encode())) for text in ("▁", "a", "▁a")]  # normal pieces, score 0
    trainer = _proto((3, 2), (40, 0), (43, (1 << 64) - 1))  # bpe, unk_id 0, pad_id -1 (ten bytes)
    path = tmp_path / "m.spm"
    path.write_bytes(b"".join(_proto((1, p)) for p in pieces) + _proto((2, trainer)))
    model = read_sentencepiece(path)
    assert [(p.text, p.kind) for p in model.pieces][:3] == [("<unk>", "unknown"), ("<s>", "control"), ("▁", "normal")]
    assert model.model_type == "bpe" and model.add_dummy_prefix and model.remove_extra_whitespaces
    tokenizer, _ = sentencepiece_tokenizer(path)
    tokenizer.encode_special_tokens = True
    assert tokenizer.encode("a <s>", add_special_tokens=False).tokens == ["▁a", "▁", "<unk>"]  # <s>: text
    path.write_bytes(b"".join(_proto((1, p)) for p in pieces) + _proto((2, _proto((3, 3)))))
    with pytest.raises(ConfigError, match="a SentencePiece word model; attnzoo converts the bpe and unigram"):
        sentencepiece_tokenizer(path)


@pytest.mark.parametrize(
    ("family", "kin", "preprocessor"),
    [("qwen3", "Qwen3MoeTokenizer", "Qwen3MoeCausalLMPreprocessor"), ("bert", "DistilBertTokenizer", None)],
)
def test_a_class_of_the_table_without_a_fixture_reads_as_its_kin(family, kin, preprocessor, tmp_path):
    """Qwen3-MoE's tokenizer is Qwen 3's; DistilBERT's is BERT's, and its classifier's preprocessor returns no
    segment ids (DistilBERT takes none)."""
    folder = _copy(family, tmp_path)
    for name, cls in (
        ("tokenizer.json", kin),
        ("preprocessor.json", preprocessor or "DistilBertTextClassifierPreprocessor"),
    ):
        data = json.loads((folder / name).read_text())
        data["class_name"] = cls
        (folder / name).write_text(json.dumps(data))
    out = keras_hub_tokenizer(folder).tokenize(texts(family))
    assert sorted(out) == ["padding_mask", "token_ids"]
    np.testing.assert_array_equal(out["token_ids"].numpy(), expected(family)["tokenizer/token_ids"])


def test_the_docs_table_names_every_tokenizer_class_that_converts():
    from attnzoo.keras.hub_tokenizers.classes import TOKENIZER_CLASSES

    section = (ROOT / "docs" / "keras-hub-tokenizer.md").read_text()
    table = [line for line in section.splitlines() if line.startswith("| `")]
    named = set(re.findall(r"`(\w+Tokenizer)`", "\n".join(table)))
    assert named == set(TOKENIZER_CLASSES)


def test_without_tokenizers_a_preset_converts_without_its_tokenizer_and_says_which_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.warns(AttnzooWarning, match=r"converts without its tokenizer: .*pip install 'attnzoo\[tokenizers\]'"):
        model = convert_keras_model(preset("gpt2"))
    assert model.tokenizer is None


# -- the Hugging Face folder -------------------------------------------------------------------------------


def test_the_hugging_face_folder_holds_the_tokenizer_and_config_json_its_ids(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a preset's tokenizer converts: nothing left behind, nothing said
        folder = to_transformers(preset("gpt2"), tmp_path / "gpt2")
    files = {p.name for p in folder.iterdir()}
    assert {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"} <= files
    config = json.loads((folder / "config.json").read_text())
    e = expected("gpt2")
    start = int(e["tokenizer/token_ids"][0, 0])  # keras-hub's start token, <|endoftext|>
    assert config["bos_token_id"] == config["eos_token_id"] == start and config["pad_token_id"] is None
    assert json.loads((folder / "generation_config.json").read_text()) == {"bos_token_id": start, "eos_token_id": start}
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    assert settings["tokenizer_class"] == "PreTrainedTokenizerFast" and settings["model_max_length"] == 16
    assert settings["split_special_tokens"] is False and "pad_token" not in settings  # id 0 is "!" in GPT-2's
    plain = convert_keras_model(LM / "llama3" / "causal_lm.keras")  # the preset's model, as a .keras
    named = to_transformers(plain, tmp_path / "named", preset=preset("llama3"))  # preset= gives a .keras's
    assert (named / "tokenizer.json").read_bytes() == converted_tokenizer("llama3").tokenizer_json
    written = write_tokenizer(preset("bert"), tmp_path)
    assert written.files == ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
    assert written.special == {"pad_token_id": 0}
    assert json.loads((tmp_path / "special_tokens_map.json").read_text())["cls_token"] == "[CLS]"


def test_the_door_warns_where_transformers_autotokenizer_builds_its_own_tokenizer_instead(tmp_path):
    with pytest.warns(AttnzooWarning, match=r"AutoTokenizer loads a qwen2 folder's tokenizer as its Qwen2Tokenizer"):
        to_transformers(preset("qwen"), tmp_path / "qwen")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no tokenizer written: nothing to say; Qwen 3's is run as it is
        to_transformers(LM / "qwen" / "backbone_preset", tmp_path / "backbone")
        to_transformers(preset("qwen3"), tmp_path / "qwen3")


def test_a_preset_of_another_family_or_a_path_that_is_no_folder_is_refused_and_nothing_is_written(tmp_path):
    from attnzoo.errors import ExportError
    from attnzoo.keras.transformers_folder import _check_tokenizer_fits
    from attnzoo.keras.transformers_tokenizer import TokenizerWritten

    llama3 = convert_keras_model(LM / "llama3" / "causal_lm.keras")  # a .keras: no tokenizer of its own
    for family in ("gpt2", "gemma", "bert"):  # another family's ids are other tokens (GPT-2's: as many, 320)
        with pytest.raises(ExportError, match=r"keras-hub's \w+Tokenizer and the model a Llama3CausalLM: give preset="):
            to_transformers(llama3, tmp_path / family, preset=preset(family))
    for wrong in (tmp_path / "typo", LM / "llama3" / "causal_lm.keras"):
        with pytest.raises(ConfigError, match="preset= names the keras-hub preset folder .* is not one"):
            to_transformers(llama3, tmp_path / "wrong", preset=wrong)
    assert list(tmp_path.iterdir()) == []
    own = TokenizerWritten(files=("tokenizer.json",), size=321, keras_class="Llama3Tokenizer")
    with pytest.raises(ExportError, match="gives ids up to 320 and the model embeds 320 tokens"):
        _check_tokenizer_fits(own, "Llama3Backbone", 320)  # id 320 has no row
    _check_tokenizer_fits(own, "Llama3Backbone", 321)  # a table wider than the vocabulary is common


@pytest.mark.parametrize("family", FAMILIES)
def test_the_tokenizer_s_size_is_the_tokenizers_library_s(family):
    from attnzoo.keras.transformers_tokenizer import tokenizer_size

    port = converted_tokenizer(family)
    assert tokenizer_size(port) == port.backend.get_vocab_size(with_added_tokens=True)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gpt2", "llama3", "qwen"])
def test_generate_without_an_attention_mask_keeps_a_prompt_token_that_is_keras_hub_s_pad_id(family, tmp_path):
    """keras-hub pads these with id 0, an ordinary token (GPT-2's ``!``); config.json names no pad id, so
    transformers' ``generate`` given no ``attention_mask`` masks no prompt token: Keras's greedy tokens."""
    from transformers import AutoModelForCausalLM

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AttnzooWarning)  # Qwen's AutoTokenizer, not used here
        folder = to_transformers(preset(family), tmp_path / family)
    model = AutoModelForCausalLM.from_pretrained(folder)
    port = convert_keras_model(preset(family))
    prompt = torch.tensor([[39, 72, 0, 267, 0]])  # "Hi!" " the" "!" in the tiny byte-level vocabularies
    tokens = prompt
    with torch.no_grad():
        for _ in range(6):  # the converted model, Keras's within 1e-5 (test_keras_hub_lm), greedy
            logits = port(token_ids=tokens, padding_mask=torch.ones_like(tokens))
            tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        got = model.generate(prompt, max_new_tokens=6, do_sample=False, min_new_tokens=6)
    assert got.tolist() == tokens.tolist()


# the child: every folder loaded by AutoTokenizer, the ids of each family's texts back as JSON
AUTO = r"""
import json
import transformers

jobs = json.load(open(sys.argv[1]))
out = {"blocked": [sys.modules[n] is None for n in ("keras", "keras_hub", "attnzoo")]}
for job in jobs:
    auto = transformers.AutoTokenizer.from_pretrained(job["folder"])
    tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(job["folder"]) if job["fast"] else auto
    got = {"class": type(auto).__name__, "pad": tokenizer.pad_token}
    got["auto/bare"] = auto(job["texts"]["edge"][0], add_special_tokens=False)["input_ids"]
    for name, (texts, length) in job["texts"].items():
        got[name] = tokenizer(texts, truncation=True, max_length=length)["input_ids"]
        got[name + "/bare"] = tokenizer(texts, add_special_tokens=False)["input_ids"]
        if tokenizer.pad_token is not None:
            padded = tokenizer(texts, truncation=True, max_length=length, padding="max_length")
            got[name + "/padded"] = {key: padded[key] for key in padded}
    out[job["name"]] = got
json.dump(out, open(sys.argv[2], "w"))
"""


UNWRITTEN = {"bloom"}  # the fixture's model is refused (its MLP is not 4 x hidden_dim)
REBUILT_FAMILIES = {"qwen"}  # config.json's model_type qwen2: AutoTokenizer builds its Qwen2Tokenizer


@pytest.fixture(scope="module")
def auto_tokenized(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf_tokenizers")
    jobs = []
    for family in FAMILIES:
        if family in UNWRITTEN:  # the tokenizer's files alone
            (root / family).mkdir()
            write_tokenizer(preset(family), root / family)
        else:  # the door's whole folder: AutoTokenizer reads config.json's model_type too
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", AttnzooWarning)
                to_transformers(preset(family), root / family)
        jobs.append(
            {
                "name": family,
                "folder": str(root / family),
                "fast": family in REBUILT_FAMILIES,
                "texts": {
                    "texts": [texts(family), 16],
                    "edge": [edge()["texts"], edge()["sequence_length"]],
                    "thousand": [[str(t) for t in thousand()["texts"]], 128],
                },
            }
        )
    (root / "jobs.json").write_text(json.dumps(jobs))
    proc = run_without_keras(AUTO, str(root / "jobs.json"), str(root / "out.json"), cwd=root)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((root / "out.json").read_text())


def _rows(ids: list[list[int]], masks: list[list[int]]) -> list[list[int]]:
    return [[i for i, m in zip(row, mask, strict=True) if m] for row, mask in zip(ids, masks, strict=True)]


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_transformers_autotokenizer_gives_keras_hub_s_ids_without_keras_or_attnzoo(auto_tokenized, family):
    """``AutoTokenizer.from_pretrained(folder)(texts)`` on the door's folder (Qwen's, whose AutoTokenizer builds
    Qwen2Tokenizer and gives other ids: ``PreTrainedTokenizerFast``'s): keras-hub's tokens with its start token
    (``add_special_tokens``, transformers' default), on the 200 texts, the hard ones and the 1,000; padded to the
    sequence length, keras-hub's whole rows and masks where the family names a pad token."""
    assert all(auto_tokenized["blocked"])
    got = auto_tokenized[family]
    if family in REBUILT_FAMILIES:  # as the door warns: its own pipeline, other ids; PreTrainedTokenizerFast's
        assert got["class"] == "Qwen2Tokenizer" and got["auto/bare"] != got["edge/bare"], got["class"]
    else:
        assert got["class"] in ("PreTrainedTokenizerFast", "TokenizersBackend")
    e = expected(family)
    rows = _rows(e["tokenizer/token_ids"].tolist(), e["tokenizer/padding_mask"].tolist())
    assert got["texts"] == rows
    record = converted_tokenizer(family).preprocessing
    cut = (record.start_token_id is not None, record.task == "text_classifier")  # [CLS] ... [SEP]: both
    bare = [row[int(cut[0]) : len(row) - int(cut[1])] for row in rows]  # add_special_tokens=False: not cut
    assert all(
        g[: len(b)] == b and (len(g) == len(b) or len(r) == 16)
        for g, b, r in zip(got["texts/bare"], bare, rows, strict=True)
    )
    data = edge()
    want = data["families"][family]
    rows = _rows(want["token_ids"], want["padding_mask"])
    differ = {t for t, g, w in zip(data["texts"], got["edge"], rows, strict=True) if g != w}
    assert differ == set(KNOWN.get(family, {})), differ
    want = {k.split("/")[1]: v.tolist() for k, v in thousand().items() if k.startswith(f"{family}/")}
    rows = _rows(want["token_ids"], want["padding_mask"])
    differ = {t for t, g, w in zip(thousand()["texts"].tolist(), got["thousand"], rows, strict=True) if g != w}
    assert len(differ) <= (2 if family in KNOWN else 0) and all(map(_long_in_bytes, differ)), differ
    if got["pad"] is not None:
        padded = got["texts/padded"]
        assert padded["input_ids"] == e["tokenizer/token_ids"].tolist()
        assert padded["attention_mask"] == e["tokenizer/padding_mask"].tolist()
        if "token_type_ids" in padded:
            assert padded["token_type_ids"] == e["tokenizer/segment_ids"].tolist()
