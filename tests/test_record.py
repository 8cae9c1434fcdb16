"""The record a trained model carries (attnzoo.core.record.RunRecord): every field read through one checked type,
so a malformed or hostile record is refused by field name in predict, export, evaluate and the ensemble
joiner; and a run on the user's files is scored only on those files."""

from __future__ import annotations

import copy
import csv
import random

import pytest
import torch

import attnzoo
from attnzoo.core.record import RunRecord
from attnzoo.errors import ConfigError, WeightsError
from attnzoo.train.ensemble import join_weights
from attnzoo.train.evaluate import evaluate_file
from attnzoo.train.files import DataError
from attnzoo.train.recipe import complete_recipe
from attnzoo.train.tasks import task_of
from attnzoo.train.trainer import train


@pytest.fixture(scope="module")
def labelwise():
    return attnzoo.create("bilstm_labelwise.wordnet", pretrained=True).eval()


@pytest.mark.parametrize("name", ["bilstm_labelwise.wordnet", "bilstm_attn_pool.wordnet_lex", "g2p_ensemble.cmudict"])
def test_the_shipped_records_read_and_write_back_unchanged(name):
    meta = attnzoo.create(name, pretrained=True).attnzoo_metadata
    record = RunRecord.from_metadata(meta)
    assert record.to_metadata() == meta
    assert record.trained and record.max_len == meta["task_config"].get("max_len", 64)
    assert record.labels == meta.get("labels") and record.output == meta["output"]


HOSTILE = [
    ("labels", "cat dog", "'labels'"),
    ("labels", [1, 2], "'labels'"),
    ("threshold", 7.5, "'threshold'"),
    ("threshold", "0.5", "'threshold'"),
    ("vocab", {"tokens": 5}, "'vocab'"),
    ("vocab", [1], "'vocab'"),
    ("task_config", "x", "'task_config'"),
    ("task_config", {"max_len": -3}, "max_len"),
    ("task_config", {"max_len": True}, "max_len"),
    ("check_subset", "abc", "'check_subset'"),
    ("metrics", [1], "'metrics'"),
    ("seed", {"a": 1}, "'seed'"),
    ("members", "x", "'members'"),
    ("output", 3, "'output'"),
    ("label_info", [None], "'label_info'"),
]


@pytest.mark.parametrize("key, value, named", HOSTILE)
def test_a_malformed_field_is_refused_by_name_everywhere_it_is_read(labelwise, tmp_path, key, value, named):
    hostile = copy.deepcopy(labelwise)
    hostile.attnzoo_metadata = {**labelwise.attnzoo_metadata, key: value}
    with pytest.raises(WeightsError, match=named):
        RunRecord.of(hostile)
    with pytest.raises(WeightsError, match=named):
        attnzoo.predict(hostile, "a large cat")
    with pytest.raises(WeightsError, match=named):
        attnzoo.tokenizer(hostile)
    with pytest.raises(WeightsError, match=named):
        attnzoo.export(hostile, tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()


def test_extra_keys_are_kept_as_they_are():
    record = RunRecord.from_metadata({"task": "t", "keras": {"layers": 3}, "recipe": {"a": 1}})
    assert record.extra == {"keras": {"layers": 3}, "recipe": {"a": 1}}
    written = record.to_metadata()
    assert written == {"task": "t", "task_config": {}, "metrics": {}, "keras": {"layers": 3}, "recipe": {"a": 1}}


# -- a run on the user's files, scored where it was trained and elsewhere -------------------------------------
def _pronunciations(path, seed):
    rng = random.Random(seed)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["word", "sounds"])
        for _ in range(120):
            word = "".join(rng.choice("abcdgot") for _ in range(rng.randint(2, 5)))
            writer.writerow([word, " ".join(c.upper() for c in word)])


def _g2p_run(out, seed):
    recipe = complete_recipe(
        {
            "model": "g2p_seq2seq",
            "seed": seed,
            "data": {"train": "words.csv", "text": "word", "target": "sounds", "task": "seq2seq"},
            "config": {"embed_dim": 8, "hidden": 8, "decoder_hidden": 8},
            "train": {"epochs": 1, "batch_size": 16, "lr": 0.01, "threads": 1},
            "check_subset": 10,
        }
    )
    return train(recipe, output=out, baseline=False, quiet=True)


def test_runs_on_relative_files_join_and_score_only_where_their_files_are(tmp_path, monkeypatch):
    """Trained on ``words.csv`` in one folder, the runs join there; from a folder whose words.csv holds other
    rows the joiner refuses (it used to score on them), and from a folder without the file it says where."""
    here, elsewhere, empty = tmp_path / "here", tmp_path / "elsewhere", tmp_path / "empty"
    for folder in (here, elsewhere, empty):
        folder.mkdir()
    _pronunciations(here / "words.csv", 0)
    _pronunciations(elsewhere / "words.csv", 1)
    monkeypatch.chdir(here)
    for seed in (1, 2):
        _g2p_run(here / f"run{seed}", seed)
    members = [str(here / "run1"), str(here / "run2")]
    joined = join_weights(members, here / "joined.safetensors", verbose=False)
    assert joined["subset"]["size"] == 0  # no test file: the subset really scored is empty (check_subset 10)

    monkeypatch.chdir(elsewhere)
    with pytest.raises(ConfigError, match="trained on train words.csv sha256 .* now are train words.csv sha256"):
        join_weights(members, elsewhere / "joined.safetensors", verbose=False)
    assert not (elsewhere / "joined.safetensors").exists()
    monkeypatch.chdir(empty)
    with pytest.raises(DataError, match="relative ones from the folder it ran in"):
        task_of(RunRecord.of(attnzoo.load(here / "run1")), source="run1")
    # scoring a run on a file named for the purpose still works from anywhere
    scores = evaluate_file(here / "run1", elsewhere / "words.csv", columns={"text": "word", "target": "sounds"})
    assert scores["rows"] == 120
    assert torch.isfinite(torch.tensor(scores["word_accuracy"]))
