"""docs/deploy.md's path, end to end: text -> the public tokenizer -> an exported ONNX file run by
onnxruntime -> label ids from the file's own metadata, against attnzoo.predict on the same texts."""

from __future__ import annotations

import json

import numpy as np
import pytest

import attnzoo
from attnzoo.train.tokenizer import Tokenizer

pytestmark = pytest.mark.slow  # each test exports and checks a file at several shapes: seconds each

TEXTS = ["a small domestic dog kept as a pet", "a large tree with hard wood and acorns", "oak"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    pytest.importorskip("onnxscript")
    path = tmp_path_factory.mktemp("deploy") / "labelwise.onnx"
    result = attnzoo.export(attnzoo.create("bilstm_labelwise", pretrained=True), path)
    return path, result


def test_an_onnx_file_runs_from_text_to_labels_as_predict_does(exported):
    ort = pytest.importorskip("onnxruntime")
    path, result = exported
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta().custom_metadata_map
    labels, threshold = json.loads(meta["labels"]), float(meta["threshold"])
    tok = Tokenizer.from_settings(json.loads(meta["tokenizer"]))
    assert [o.name for o in session.get_outputs()] == ["logits"]
    assert [i.name for i in session.get_inputs()] == ["tokens", "mask"]
    ids, mask = tok(TEXTS, pad_to=tok.max_len)  # the recurrent graph keeps the run's max_len
    assert any("max_len (64)" in note for note in result.notes)
    (logits,) = session.run(["logits"], {"tokens": ids.numpy(), "mask": mask.numpy()})
    probs = 1 / (1 + np.exp(-logits))
    for text, row in zip(TEXTS, probs, strict=True):
        want = attnzoo.predict("bilstm_labelwise", text, top=3)
        order = np.argsort(-row)[:3]
        assert [labels[i] for i in order] == [label.id for label in want.labels]
        np.testing.assert_allclose(row[order], [label.probability for label in want.labels], atol=1e-5)
        assert [bool(p >= threshold) for p in row[order]] == [label.above_threshold for label in want.labels]


def test_the_public_tokenizer_is_the_one_predict_uses():
    tok = attnzoo.tokenizer("bilstm_labelwise")
    ids, mask = tok(["A small dog!", "oak"], pad_to=4)
    assert ids.dtype.is_floating_point is False and mask.dtype.is_floating_point is False
    assert ids.shape == mask.shape == (2, 4) and mask.tolist() == [[True] * 4, [True, False, False, False]]
    words = attnzoo.predict("bilstm_labelwise", "A small dog!").tokens
    assert tok.vocab.decode(ids[0].tolist()) == words  # the same words, every one known
    assert Tokenizer.from_settings(json.loads(json.dumps(tok.settings())))(["A small dog!"], pad_to=4)[0].tolist() == [
        ids[0].tolist()
    ]
    padded, padded_mask = tok(["oak"])  # a recurrent model's graph takes its run's max_len: the default
    assert padded.shape == (1, 64) and int(padded_mask.sum()) == 1


def test_the_tokenizers_ids_go_to_the_exported_recurrent_graph_as_they_are(exported):
    """The export of a recurrent model fixes the length at its run's max_len; attnzoo.tokenizer(run) padded
    to the longest text only, so its ids were refused by the file ("Got: 9 Expected: 64"). It pads to the
    length the export takes, and so does the tokenizer rebuilt from the file; a model whose graph takes
    any length keeps padding to the longest text."""
    ort = pytest.importorskip("onnxruntime")
    path, _ = exported
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    from_file = Tokenizer.from_settings(json.loads(session.get_modelmeta().custom_metadata_map["tokenizer"]))
    for tok in (attnzoo.tokenizer("bilstm_labelwise"), from_file):
        ids, mask = tok(TEXTS)
        (logits,) = session.run(["logits"], {"tokens": ids.numpy(), "mask": mask.numpy()})
        want = [attnzoo.predict("bilstm_labelwise", text, top=None) for text in TEXTS]
        for row, prediction in zip(logits, want, strict=True):
            probs = {label.id: label.probability for label in prediction.labels}
            labels = json.loads(session.get_modelmeta().custom_metadata_map["labels"])
            np.testing.assert_allclose(1 / (1 + np.exp(-row)), [probs[k] for k in labels], atol=1e-5)
    from attnzoo.interop.export_plan import fixed_length
    from attnzoo.io.text import Vocabulary

    assert fixed_length(attnzoo.create("bilstm_labelwise", pretrained=True)) == 64
    assert fixed_length(attnzoo.create("laat", num_labels=3, hidden_size=4)) is None
    assert Tokenizer(Vocabulary(["a", "b"]), 8)(["a", "a b"])[0].shape == (2, 2)


def test_the_tokenizer_refuses_what_it_cannot_read():
    with pytest.raises(attnzoo.ConfigError, match="G2P model reads letters"):
        attnzoo.tokenizer("g2p_seq2seq")
    tok = attnzoo.tokenizer("bilstm_labelwise")
    with pytest.raises(attnzoo.ConfigError, match="string or a non-empty list"):
        tok([1, 2])
    with pytest.raises(attnzoo.ConfigError, match="pad_to must be a positive integer"):
        tok("oak", pad_to=0)


def test_a_pt2_file_carries_the_same_metadata_in_its_extra_files(tmp_path):
    import torch

    model = attnzoo.create("bilstm_labelwise", pretrained=True)
    path = tmp_path / "labelwise.pt2"
    result = attnzoo.export(model, path)
    extra = {"labels": "", "threshold": "", "tokenizer": "", "output": ""}
    torch.export.load(str(path), extra_files=extra)
    assert json.loads(extra["labels"]) == list(model.attnzoo_metadata["labels"])
    assert float(extra["threshold"]) == float(model.attnzoo_metadata["threshold"])
    assert extra["output"] == "multilabel" and set(result.metadata) >= {"labels", "threshold", "tokenizer"}
    tok = Tokenizer.from_settings(json.loads(extra["tokenizer"]))
    assert tok(TEXTS)[0].tolist() == attnzoo.tokenizer("bilstm_labelwise")(TEXTS)[0].tolist()
