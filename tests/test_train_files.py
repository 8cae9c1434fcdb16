"""Training on the user's own files: a recipe's data section (or flags) pointing at CSV / JSONL / TSV / Parquet,
a run folder that loads, predicts and evaluates, and bad data reported by file, line and column."""

from __future__ import annotations

import csv
import json
import random

import pytest
import torch

import attnzoo
from attnzoo.errors import ConfigError
from attnzoo.train.evaluate import evaluate_file
from attnzoo.train.files import DataError, read_table
from attnzoo.train.metrics import multilabel_f1
from attnzoo.train.recipe import complete_recipe
from attnzoo.train.trainer import train

from .conftest import run_cli
from .test_train_port import expected_record

TOPICS = {
    "sport": ["football", "tennis", "goal"],
    "food": ["bread", "cheese", "soup"],
    "music": ["guitar", "piano", "song"],
    "travel": ["train", "airport", "hotel"],
}
FILLER = [
    "the",
    "a",
    "of",
    "and",
    "to",
    "in",
    "is",
    "it",
    "that",
    "with",
    "for",
    "on",
    "was",
    "as",
    "by",
    "this",
    "day",
    "time",
    "some",
    "very",
]


def _synthetic(n: int, seed: int) -> list[tuple[str, list[str]]]:
    """Texts of filler words with 0-2 topic keywords; the labels are the keywords' topics."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        topics = rng.sample(sorted(TOPICS), rng.choice([0, 1, 1, 2]))
        words = rng.choices(FILLER, k=rng.randint(4, 10)) + [rng.choice(TOPICS[t]) for t in topics]
        rng.shuffle(words)
        rows.append((" ".join(words), sorted(topics)))
    return rows


def _write_csv(path, rows, separator="|"):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "body", "tags"])
        for i, (text, labels) in enumerate(rows):
            writer.writerow([i, text, separator.join(labels)])
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("files")
    for name, n, seed in (("train", 800, 0), ("val", 100, 1), ("test", 200, 2)):
        _write_csv(folder / f"{name}.csv", _synthetic(n, seed))
    recipe = complete_recipe(
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
            },
            "config": {"embed_dim": 16, "hidden": 16, "dropout": 0.0},
            "train": {"epochs": 6, "batch_size": 32, "lr": 0.01, "clip": 1.0, "warmup_steps": 5, "threads": 2},
        }
    )
    report = train(recipe, output=folder / "run", baseline=False, quiet=True)
    return folder, report


@pytest.mark.slow
def test_a_csv_recipe_learns_keyword_labels_and_its_run_folder_loads_predicts_and_evaluates(trained):
    folder, report = trained
    assert report["test"]["micro_f1"] >= 0.9, report["test"]
    model = attnzoo.load(folder / "run").eval()
    assert model.attnzoo_metadata["labels"] == sorted(TOPICS)
    assert report["ran"] == model.attnzoo_metadata["ran"] == expected_record(report["device"])  # what ran
    # the test metric, recomputed here from the file, the model and the stored threshold
    rows = read_table(folder / "test.csv", ["body", "tags"])
    from attnzoo.io.text import Vocabulary, pad_batch, tokenize

    vocab = Vocabulary.from_json(model.attnzoo_metadata["vocab"])
    tokens = pad_batch([vocab.encode(tokenize(r.values["body"])) for r in rows])
    with torch.no_grad():
        probs = torch.sigmoid(model(tokens))
    target = torch.tensor([[t in r.values["tags"].split("|") for t in sorted(TOPICS)] for r in rows])
    expected = multilabel_f1(probs >= model.attnzoo_metadata["threshold"], target)["micro_f1"]
    scored = evaluate_file(folder / "run", folder / "test.csv")
    assert (
        scored["micro_f1"] == pytest.approx(expected, abs=1e-9) == pytest.approx(report["test"]["micro_f1"], abs=1e-4)
    )
    assert 0.0 <= scored["precision_at_1"] <= 1.0 and scored["rows"] == 200

    proc = run_cli("evaluate", str(folder / "run"), str(folder / "test.csv"), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["micro_f1"] == pytest.approx(expected, abs=1e-9)
    shown = run_cli("predict", str(folder / "run"), "we ate bread and cheese at the airport", "--above-threshold")
    assert shown.returncode == 0, shown.stderr
    names = {line.split()[2] for line in shown.stdout.splitlines() if line.startswith("*")}
    assert names == {"food", "travel"}, shown.stdout


@pytest.mark.slow
def test_a_run_folder_is_not_trained_over_without_being_asked(trained):
    folder, _ = trained
    recipe = complete_recipe(
        {
            "model": "bilstm_labelwise",
            "data": {"train": str(folder / "train.csv"), "text": "body", "labels": "tags"},
            "train": {"epochs": 1, "batch_size": 32, "lr": 0.01},
        }
    )
    before = (folder / "run" / "config.yaml").read_bytes()
    with pytest.raises(ConfigError, match="already holds a run.*--resume.*--overwrite"):
        train(recipe, output=folder / "run", baseline=False, quiet=True)
    assert (folder / "run" / "config.yaml").read_bytes() == before


@pytest.mark.slow
def test_flags_jsonl_single_label_and_early_stopping(tmp_path):
    rows = [(text, labels[0] if labels else "none") for text, labels in _synthetic(500, 5) if len(labels) <= 1]
    with open(tmp_path / "train.jsonl", "w", encoding="utf-8") as f:
        for text, label in rows:
            f.write(json.dumps({"text": text, "topic": label}) + "\n")
    proc = run_cli(
        "train",
        "--model",
        "bilstm_attn_pool",
        "--train",
        str(tmp_path / "train.jsonl"),
        "--test",
        str(tmp_path / "train.jsonl"),
        "--labels",
        "topic",
        "--task",
        "single_label",
        "--epochs",
        "8",
        "--lr",
        "0.0",
        "--patience",
        "2",
        "--output",
        str(tmp_path / "run"),
        "--no-baseline",
        "--json",
        "config.embed_dim=8",
        "config.hidden=8",
        "train.threads=1",
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    # lr 0 never improves on epoch 1: patience 2 stops after epoch 3 of 8
    assert report["best_epoch"] == 1 and report["stopped_early"] == 3 and len(report["history"]) == 3
    assert "validation: " in proc.stdout + proc.stderr or report["split_sizes"]["val"] > 0
    assert attnzoo.load(tmp_path / "run").attnzoo_metadata["output"] == "multiclass"


@pytest.mark.parametrize(
    "damage, message",
    [
        ("missing_column", r"train.csv, line 1: no column 'tags'; the columns are 'id', 'body'"),
        ("empty_text", r"train.csv, line 5, column 'body': empty text"),  # the header is line 1
        ("unknown_label", r"val.csv, line 3, column 'tags': label 'weather' is not among the 2 labels"),
        ("not_utf8", r"train.csv, line 3: byte 0xff at character 5 is not UTF-8"),
    ],
)
def test_bad_data_is_named_by_file_line_and_column(tmp_path, damage, message):
    train_rows = "id,body,tags\n0,a football match,sport\n1,fresh bread,food\n2,more bread,food\n"
    val_rows = "id,body,tags\n0,a goal,sport\n1,rain,weather\n"
    if damage == "missing_column":
        train_rows = "id,body\n0,a football match\n"
    elif damage == "empty_text":
        train_rows += "3,,food\n"
    (tmp_path / "train.csv").write_bytes(
        train_rows.encode() if damage != "not_utf8" else train_rows.encode().replace(b"fresh", b"fr\xffsh")
    )
    (tmp_path / "val.csv").write_text(val_rows)
    recipe = complete_recipe(
        {
            "model": "bilstm_labelwise",
            "data": {
                "train": str(tmp_path / "train.csv"),
                "validation": str(tmp_path / "val.csv"),
                "text": "body",
                "labels": "tags",
            },
            "train": {"epochs": 1, "batch_size": 2, "lr": 0.01},
        }
    )
    with pytest.raises(DataError, match=message):
        train(recipe, output=tmp_path / "run", baseline=False, quiet=True)
    assert not (tmp_path / "run").exists()


def test_a_labels_file_fixes_the_order_and_admits_labels_training_lacks(tmp_path):
    (tmp_path / "train.tsv").write_text("text\tlabels\na football match\tsport\nfresh bread\tfood\n")
    (tmp_path / "val.tsv").write_text("text\tlabels\nrain and wind\tweather\n")
    (tmp_path / "labels.txt").write_text("weather\nsport\nfood\n")
    from attnzoo.train.tasks import build_task

    task = build_task(
        {
            "name": "files",
            "train": str(tmp_path / "train.tsv"),
            "validation": str(tmp_path / "val.tsv"),
            "labels_file": str(tmp_path / "labels.txt"),
            "vocab": {"min_freq": 1},
        }
    )
    assert task.label_names == ["weather", "sport", "food"]
    assert [task.labels[i] for i in task.splits["val"]] == [[0]]


@pytest.mark.slow
def test_the_wordnet_preset_through_csv_files_scores_what_the_preset_scores(tmp_path):
    """tiny_wordnet's own splits written out as CSV (and its label order as a labels_file) by
    examples/wordnet_through_csv.py train to the same test micro-F1 as the preset, within 0.01."""
    import importlib.util

    from attnzoo.train import sources
    from attnzoo.train.recipe import load_recipe

    from .conftest import ROOT, require_data

    require_data(sources.available("wordnet_noun"), sources.SOURCES["wordnet_noun"].name)
    spec = importlib.util.spec_from_file_location("wordnet_through_csv", ROOT / "examples" / "wordnet_through_csv.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    preset = load_recipe("tiny_wordnet")
    files = example.preset_as_csv(preset, tmp_path / "data")
    want = train(preset, output=tmp_path / "preset", baseline=False, quiet=True)["test"]["micro_f1"]
    got = train(files, output=tmp_path / "files", baseline=False, quiet=True)["test"]["micro_f1"]
    assert abs(got - want) <= 0.01, (got, want)
    # the data section left the task to be inferred: evaluate must infer it the same way
    scored = evaluate_file(tmp_path / "files", tmp_path / "data" / "test.csv")
    assert scored["task"] == "multi_label"
    assert scored["micro_f1"] == pytest.approx(got, abs=1e-9)


@pytest.mark.slow
def test_train_without_the_train_extra_says_so_before_any_work(tmp_path):
    """sklearn (the baseline) and tqdm are the train extra; a missing one is named at once, exit 2."""
    from .conftest import run_python

    code = f"""
import sys
sys.modules["sklearn"] = None
import importlib.util
real = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name.split(".")[0] == "sklearn" else real(name, *a)
from attnzoo.cli import main
code = main(["train", "tiny_wordnet", "--output", {str(tmp_path / "run")!r}])
print("exit", code)
"""
    proc = run_python(code)
    assert "exit 2" in proc.stdout, proc.stderr
    assert "pip install 'attnzoo[train]'" in proc.stderr and "--no-baseline" in proc.stderr
    assert not (tmp_path / "run").exists()  # nothing was trained


def test_an_output_folder_with_someone_elses_weights_is_not_written_over(tmp_path):
    from attnzoo.errors import ConfigError
    from attnzoo.train.recipe import load_recipe
    from attnzoo.train.trainer import train

    output = tmp_path / "mine"
    output.mkdir()
    (output / "model.safetensors").write_bytes(b"someone's weights")
    (output / "best.safetensors").write_bytes(b"and their best")
    with pytest.raises(ConfigError, match="no run of attnzoo train"):
        train(load_recipe("tiny_wordnet"), output=output, quiet=True, baseline=False)
    assert (output / "model.safetensors").read_bytes() == b"someone's weights"
    assert sorted(p.name for p in output.iterdir()) == ["best.safetensors", "model.safetensors"]


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.epoch=1", "unknown key train.epoch; did you mean train.epochs"),
        ("trian.epochs=1", "unknown key trian"),
        ("task.maxlen=8", "unknown key task.maxlen; did you mean task.max_len"),
        ("sed=1", "unknown key sed; did you mean seed"),
        ("task.vocab.min_frq=2", "unknown key task.vocab.min_frq; did you mean task.vocab.min_freq"),
    ],
)
def test_a_typo_in_a_recipe_is_an_error_naming_the_closest_key(override, message):
    from attnzoo.errors import ConfigError
    from attnzoo.train.recipe import load_recipe

    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load_recipe("tiny_wordnet", [override])


def test_a_typo_in_a_data_section_and_a_train_section_with_only_epochs(tmp_path):
    from attnzoo.errors import ConfigError
    from attnzoo.train.recipe import TRAIN_DEFAULTS, load_recipe

    recipe = tmp_path / "mine.yaml"
    recipe.write_text("model: bilstm_labelwise\ntag: mine\ndata: {train: t.csv, maxlen: 8}\ntrain: {epochs: 3}\n")
    with pytest.raises(ConfigError, match=r"unknown key data\.maxlen; did you mean data\.max_len"):
        load_recipe(recipe)
    recipe.write_text("model: bilstm_labelwise\ntag: mine\ndata: {train: t.csv}\ntrain: {epochs: 3}\n")
    loaded = load_recipe(recipe)
    assert loaded["train"] == {**TRAIN_DEFAULTS, "epochs": 3}  # the documented defaults fill the rest


# -- files as users have them (issue 31) ----------------------------------------------------------------
def test_csv_rows_end_only_at_newlines_and_a_long_field_reads_whole(tmp_path):
    long_text = "word " * 40_000  # 200 KB in one field, past csv's 128 KiB default
    (tmp_path / "t.csv").write_text(f'text,labels\na page\fbreak,x\nline\u2028separator,y\n"{long_text}",z\n')
    rows = read_table(tmp_path / "t.csv", ["text", "labels"])
    assert [r.values["text"] for r in rows] == ["a page\fbreak", "line\u2028separator", long_text]
    assert [r.line for r in rows] == [2, 3, 4]
    import csv as csv_module

    assert csv_module.field_size_limit() == 131072  # csv's global limit is given back


def test_jsonl_lines_may_hold_u2028_and_form_feeds(tmp_path):
    (tmp_path / "t.jsonl").write_text(
        json.dumps({"text": "a\u2028b", "labels": ["x"]}, ensure_ascii=False)
        + "\r\n"
        + json.dumps({"text": "c\fd", "labels": ["y"]}, ensure_ascii=False)
        + "\n"
    )
    rows = read_table(tmp_path / "t.jsonl", ["text", "labels"])
    assert [r.values["text"] for r in rows] == ["a\u2028b", "c\fd"] and [r.line for r in rows] == [1, 2]


def test_a_duplicated_header_column_is_refused(tmp_path):
    (tmp_path / "t.csv").write_text("text,labels,text\na,x,b\n")
    with pytest.raises(DataError, match=r"t.csv, line 1: the header names the column 'text' twice"):
        read_table(tmp_path / "t.csv", ["text", "labels"])


@pytest.mark.parametrize(
    "record, message",
    [
        ({"text": 12345, "labels": ["x"]}, r"line 1, column 'text': the text is a int \(12345\), not a string"),
        ({"text": "ok", "labels": [1, "x"]}, r"line 1.*: a label is a int \(1\); labels are strings"),
        ({"text": "ok", "labels": [None]}, r"line 1.*: a label is a NoneType"),
        ({"text": "ok", "labels": {"a": 1}}, r"line 1.*: the labels are a dict"),
        ({"text": "ok", "labels": 7}, r"line 1.*: the labels are a int \(7\)"),
    ],
)
def test_texts_and_labels_that_are_not_strings_are_refused_not_stringified(tmp_path, record, message):
    from attnzoo.train.tasks import build_task

    (tmp_path / "train.jsonl").write_text(json.dumps(record) + "\n" + json.dumps({"text": "b", "labels": ["x"]}) + "\n")
    with pytest.raises(DataError, match=message):
        build_task({"name": "files", "train": str(tmp_path / "train.jsonl"), "vocab": {"min_freq": 1}}).load(None)


def test_a_labels_file_of_100005_labels_is_read_in_one_pass(tmp_path):
    import time

    from attnzoo.train.tasks import build_task

    (tmp_path / "labels.txt").write_text("\n".join(f"label{i}" for i in range(100_005)) + "\n")
    (tmp_path / "train.csv").write_text("text,labels\na,label3\n")
    task = build_task(
        {
            "name": "files",
            "train": str(tmp_path / "train.csv"),
            "validation": str(tmp_path / "train.csv"),
            "labels_file": str(tmp_path / "labels.txt"),
        }
    )
    start = time.perf_counter()
    names = task._label_names(None, [])
    assert len(names) == 100_005 and names[3] == "label3"
    assert time.perf_counter() - start < 30  # the quadratic check took hours; one pass takes milliseconds
    (tmp_path / "labels.txt").write_text("a\nb\na\n")
    with pytest.raises(DataError, match="labels listed twice: a"):
        task._label_names(None, [])


def test_a_held_out_split_that_comes_out_empty_is_a_data_error_before_training(tmp_path):
    (tmp_path / "train.csv").write_text("text,labels\na football match,sport\nfresh bread,food\n")
    recipe = complete_recipe(
        {
            "model": "bilstm_labelwise",
            "data": {"train": str(tmp_path / "train.csv")},
            "train": {"epochs": 1, "batch_size": 2},
        }
    )
    with pytest.raises(DataError, match=r"train.csv: holding out validation_fraction 0.1 of its 2 rows leaves the"):
        train(recipe, output=tmp_path / "run", baseline=False, quiet=True)
    assert not (tmp_path / "run").exists()


def test_one_unbalanced_quote_is_refused_by_line_not_read_as_the_rest_of_the_file(tmp_path):
    """Row 151 of 200 opens a quote it never closes: csv would read the 50 rows after it as one text with
    no label and training would go on with 151 rows; it is refused, naming the line and what it swallows."""
    rows = [f"text number {i} of the file,label{i % 3}" for i in range(1, 201)]
    rows[150] = '"text number 151 opens a quote,label0'
    path = tmp_path / "train.csv"
    path.write_text("text,labels\n" + "\n".join(rows) + "\n")
    with pytest.raises(DataError, match=r"train.csv, line 152: a field opens a quote .* never closed, so the 49 line"):
        read_table(path, ["text", "labels"])
    proc = run_cli("train", "--model", "bilstm_labelwise", "--train", str(path), "--output", str(tmp_path / "run"))
    assert proc.returncode == 1 and "line 152: a field opens a quote" in proc.stderr, proc.stderr
    assert not (tmp_path / "run").exists()
    rows[150] = '"text number 151, with a comma and ""quotes"" inside",label0'  # quoting done right still reads
    path.write_text("text,labels\n" + "\n".join(rows) + "\n")
    read = read_table(path, ["text", "labels"])
    assert len(read) == 200 and read[150].values["text"] == 'text number 151, with a comma and "quotes" inside'
