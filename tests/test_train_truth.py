"""Training tells the truth: the subset it prints is the size it really scored (a 100-row test split
prints 100, not the recipe's 2000); a validation split too small to tune the multi-label threshold on is
a warning naming its numbers and offering the fixed 0.5 (``data.threshold``), which, when given, is
used as it is."""

from __future__ import annotations

import csv
import warnings

import pytest

import attnzoo
from attnzoo.errors import ConfigError, ThresholdWarning
from attnzoo.train.recipe import complete_recipe
from attnzoo.train.trainer import train

from .conftest import run_cli
from .test_train_files import TOPICS, _synthetic, _write_csv


def _recipe(folder, val_rows: int, **data):
    for name, n, seed in (("train", 200, 0), ("val", val_rows, 1), ("test", 100, 2)):
        _write_csv(folder / f"{name}.csv", _synthetic(n, seed))
    return complete_recipe(
        {
            "model": "bilstm_labelwise",
            "seed": 0,
            "data": {
                "train": str(folder / "train.csv"),
                "validation": str(folder / "val.csv"),
                "test": str(folder / "test.csv"),
                "text": "body",
                "labels": "tags",
                "task": "multi_label",
                "vocab": {"min_freq": 1},
                **data,
            },
            "config": {"embed_dim": 8, "hidden": 8},
            "train": {"epochs": 1, "batch_size": 64, "threads": 1},
        }
    )


def _positives(path) -> int:
    """Positive labels in a CSV written by _write_csv, counted from the file."""
    with open(path, newline="", encoding="utf-8") as f:
        return sum(len([t for t in row["tags"].split("|") if t]) for row in csv.DictReader(f))


def test_a_small_validation_split_is_a_warning_with_its_numbers_and_the_subset_is_the_real_size(tmp_path, capsys):
    recipe = _recipe(tmp_path, 32)
    with pytest.warns(ThresholdWarning) as caught:
        report = train(recipe, output=tmp_path / "run", baseline=False)
    log = capsys.readouterr().out
    positives = _positives(tmp_path / "val.csv")
    message = str(caught[0].message)
    assert f"32 rows and {positives} positive labels over {len(TOPICS)} labels" in message
    assert "data.threshold=0.5" in message and "--threshold 0.5" in message
    assert report["warnings"] == [message] and message not in log  # warned once, not said a second time
    assert "subset[100] (the whole test split)" in log and "subset[2000]" not in log
    assert report["subset"]["size"] == 100


def test_a_fixed_threshold_is_used_as_given_and_warns_of_nothing(tmp_path):
    recipe = _recipe(tmp_path, 32, threshold=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ThresholdWarning)
        report = train(recipe, output=tmp_path / "run", baseline=False, quiet=True)
    assert report["warnings"] == []
    assert attnzoo.load(tmp_path / "run").attnzoo_metadata["threshold"] == 0.5


def test_enough_validation_data_tunes_without_a_warning(tmp_path):
    recipe = _recipe(tmp_path, 120)
    assert _positives(tmp_path / "val.csv") >= 5 * len(TOPICS)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ThresholdWarning)
        report = train(recipe, output=tmp_path / "run", baseline=False, quiet=True)
    assert report["warnings"] == []


@pytest.mark.parametrize("value", [1.5, 0, "high", True])
def test_a_bad_fixed_threshold_fails_before_training(tmp_path, value):
    recipe = _recipe(tmp_path, 32, threshold=value)
    with pytest.raises(ConfigError, match="data.threshold must be a probability between 0 and 1"):
        train(recipe, output=tmp_path / "run", baseline=False, quiet=True)
    assert not (tmp_path / "run" / "best.safetensors").exists()


def test_the_ensemble_joiner_prints_the_subset_it_really_scored(tmp_path, monkeypatch, capsys):
    from attnzoo.train.ensemble import join_weights

    from .test_record import _pronunciations

    monkeypatch.chdir(tmp_path)
    _pronunciations(tmp_path / "words.csv", 0)
    _pronunciations(tmp_path / "test.csv", 3)  # 120 rows
    reports = []
    for seed in (1, 2):
        recipe = complete_recipe(
            {
                "model": "g2p_seq2seq",
                "seed": seed,
                "data": {
                    "train": "words.csv",
                    "test": "test.csv",
                    "text": "word",
                    "target": "sounds",
                    "task": "seq2seq",
                },
                "config": {"embed_dim": 8, "hidden": 8, "decoder_hidden": 8},
                "train": {"epochs": 1, "batch_size": 16, "threads": 1},
                "check_subset": 5000,  # more than the test split holds
            }
        )
        reports.append(train(recipe, output=tmp_path / f"run{seed}", baseline=False, quiet=True))
    test_rows = reports[0]["split_sizes"]["test"]
    assert test_rows == 120 and reports[0]["subset"]["size"] == 120
    joined = join_weights([str(tmp_path / "run1"), str(tmp_path / "run2")], tmp_path / "joined.safetensors")
    assert joined["subset"]["size"] == test_rows
    assert f"subset[{test_rows}]" in capsys.readouterr().out


@pytest.mark.slow
def test_the_command_line_piped_into_a_log_says_each_warning_once_and_draws_no_progress_bar(tmp_path):
    """``attnzoo train ... 2>&1 | tee log``: the small-validation warning once, one plain line per epoch, no
    carriage returns (a bar redrawn in place is for terminals), and no precision@5 for a 4-label task
    (the five best of four labels are all of them: a constant, not a metric)."""
    _recipe(tmp_path, 32)
    proc = run_cli(
        "train",
        "--model",
        "bilstm_labelwise",
        "--train",
        str(tmp_path / "train.csv"),
        "--validation",
        str(tmp_path / "val.csv"),
        "--test",
        str(tmp_path / "test.csv"),
        "--text",
        "body",
        "--labels",
        "tags",
        "--epochs",
        "2",
        "--output",
        str(tmp_path / "run"),
        "--no-baseline",
        "config.embed_dim=8",
        "config.hidden=8",
        "train.threads=1",
        "data.vocab.min_freq=1",
    )
    assert proc.returncode == 0, proc.stderr
    log = proc.stdout + proc.stderr
    assert "\r" not in log
    assert log.count("may not carry over to new data") == 1, log
    assert sum(line.startswith("epoch ") for line in log.splitlines()) == 2, log
    assert "precision_at_1" in log and "precision_at_5" not in log
