"""keras-hub task preset folders whose head holds weights (a classifier's ``task.weights.h5``) convert.

``save_to_preset`` of a task writes task.json (the task's constructor arguments, its backbone's and its
preprocessor's), task.weights.h5 (the task's keras 3 weights file with the backbone's layers skipped: the
head's ``logits`` Dense), config.json and model.weights.h5 (the backbone's, saved alone). The folders were
made with keras-hub (tests/keras_hub_task_fixtures.py; BERT's, with its WordPiece tokenizer, by
tests/keras_hub_lm_fixtures.py); the logits Keras gave on right- and left-padded batches are the reference.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from attnzoo.errors import WeightsError
from attnzoo.keras import convert_keras_model

from .conftest import ROOT

MODELS = ROOT / "tests" / "data" / "keras_hub_models"
BERT = ROOT / "tests" / "data" / "keras_hub_lm" / "bert"


def _logits(model, inputs: dict[str, np.ndarray]) -> np.ndarray:
    with torch.no_grad():
        return model(*[torch.from_numpy(inputs[name]) for name in model.input_names]).numpy()


@pytest.mark.parametrize("case", ["distil_bert_classifier", "roberta_classifier"])
def test_a_classifier_preset_folder_predicts_keras_s_logits(case):
    expected = dict(np.load(MODELS / "expected.npz"))
    model = convert_keras_model(MODELS / f"{case}_preset")
    inputs = {key.split("/")[-1]: value for key, value in expected.items() if key.startswith(f"{case}/in/")}
    assert sorted(model.input_names) == sorted(inputs)
    np.testing.assert_allclose(_logits(model, inputs), expected[f"{case}/out/logits"], atol=1e-5, rtol=0)


def test_bert_s_classifier_preset_converts_with_its_tokenizer():
    expected = dict(np.load(BERT / "expected.npz"))
    model = convert_keras_model(BERT / "classifier_preset")
    for side in ("right", "left"):
        inputs = {name: expected[f"{side}/{name}"] for name in ("token_ids", "segment_ids", "padding_mask")}
        np.testing.assert_allclose(_logits(model, inputs), expected[f"{side}/logits"], atol=1e-5, rtol=0)
    texts = [str(text) for text in expected["tokenizer/texts"][:20]]
    ids = model.tokenize(texts)
    for key in ("token_ids", "segment_ids", "padding_mask"):
        np.testing.assert_array_equal(ids[key].numpy(), expected[f"tokenizer/{key}"][:20], err_msg=key)


def test_a_classifier_preset_without_its_head_s_weights_is_refused(tmp_path):
    """Without task.weights.h5 the head's Dense would find no weights (or another Dense's by position)."""
    folder = tmp_path / "preset"
    shutil.copytree(MODELS / "roberta_classifier_preset", folder)
    (folder / "task.weights.h5").unlink()
    with pytest.raises(WeightsError, match=r"keras-hub task \(task.json, without the task.weights.h5 of its head"):
        convert_keras_model(folder)


def test_a_task_weights_file_that_is_not_keras_3_s_is_refused(tmp_path):
    folder = tmp_path / "preset"
    shutil.copytree(MODELS / "roberta_classifier_preset", folder)
    shutil.copy(MODELS / "roberta_classifier_preset" / "config.json", folder / "task.weights.h5")
    with pytest.raises(WeightsError, match=r"task.weights.h5: not an HDF5 file"):
        convert_keras_model(folder)
    assert json.loads((folder / "task.json").read_text())["class_name"] == "RobertaTextClassifier"
