"""Fine-tuning a port (attnzoo/train/port.py): a converted keras-hub TextClassifier or CausalLM, saved with its
tokenizer, trained by ``attnzoo train --model PORT_FOLDER`` on a CSV file.

References: the CSV's own labels (a classifier learns words that decide them), the keras-hub tokenizer's ids
(tests/test_keras_tokenizer.py checks them against keras-hub) packed by the folder ``attnzoo.load`` gives back,
and the next-token loss written out naively, position by position, on that loaded folder's logits. The slow
tier runs torchrun with two processes (gloo) against one.
"""

from __future__ import annotations

import csv
import json
import math
import random
import warnings
from pathlib import Path

import pytest
import torch

import attnzoo
from attnzoo.errors import ConfigError, WeightsError
from attnzoo.keras import convert_keras_model, keras_hub_tokenizer
from attnzoo.train.evaluate import evaluate_file
from attnzoo.train.port import PortCausalLM, PortClassifier, build_port_task, fit_port
from attnzoo.train.recipe import complete_recipe
from attnzoo.train.trainer import train
from attnzoo.version import __version__

from .conftest import ROOT, TORCHRUN

BERT = ROOT / "tests" / "data" / "keras_hub_lm" / "bert"
GPT2 = ROOT / "tests" / "data" / "keras_hub_lm" / "gpt2" / "causal_lm_preset"
WORDS = {"pos": ["good", "great", "happy"], "neg": ["bad", "sad", "cold"], "odd": ["red", "blue", "green"]}
FILLER = ["the", "a", "day", "was", "and", "it"]


def _rows(count: int, seed: int, labels: list[str]) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        label = rng.choice(labels)
        words = [rng.choice(FILLER) for _ in range(3)] + [rng.choice(WORDS[label]), rng.choice(FILLER)]
        out.append((" ".join(words), label))
    return out


def _csv(path: Path, rows: list[tuple[str, ...]], header: tuple[str, ...] = ("text", "labels")) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def ports(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("ports")
    classifier = convert_keras_model(BERT / "classifier.keras")  # the preset's TextClassifier, its head of 3
    classifier.tokenizer = keras_hub_tokenizer(BERT / "classifier_preset")
    return {
        "bert": attnzoo.save(classifier, folder / "bert"),
        "gpt2": attnzoo.save(convert_keras_model(GPT2), folder / "gpt2"),  # the preset folder carries it
    }


def expected_record(device: str, **ran) -> dict:
    """The record of what ran, as torch and attnzoo say, for a run on ``device`` (fp32, one process)."""
    name = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "cpu"
    fixed = {"precision": "fp32", "accumulate": 1, "world_size": 1, "device": device, "device_name": name}
    return {**fixed, "torch": torch.__version__, "attnzoo": __version__, **ran}


def _recipe(port: Path, data: dict, **train_settings) -> dict:
    settings = {"epochs": 6, "batch_size": 16, "lr": 0.003, "threads": 1, **train_settings}
    return complete_recipe(
        {"model": str(port), "tag": "t", "data": data, "train": settings, "config": {"dropout": 0.0}}
    )


def test_a_classifier_port_learns_a_csv_with_a_new_head_and_its_run_folder_loads_and_predicts(ports, tmp_path, capsys):
    train_file = _csv(tmp_path / "train.csv", _rows(48, 1, ["neg", "pos"]))
    val = _rows(16, 2, ["neg", "pos"])
    data = {"train": str(train_file), "validation": str(_csv(tmp_path / "val.csv", val))}
    report = train(_recipe(ports["bert"], data), output=tmp_path / "run", baseline=False)
    assert "head: a new head of 2 classes (neg, pos) in place of the port's 3" in capsys.readouterr().out
    history = report["history"]
    assert history[-1]["train_loss"] < 0.8 * history[0]["train_loss"]
    assert max(h["accuracy"] for h in history) >= 0.85  # chance is 0.5: the CSV's labels, learnt
    assert report["ran"] == expected_record(report["device"])  # what ran
    again = attnzoo.load(tmp_path / "run")  # the run folder is the fine-tuned port, with its tokenizer
    assert again.attnzoo_metadata["labels"] == ["neg", "pos"] and again.attnzoo_metadata["ran"] == report["ran"]
    assert json.loads((tmp_path / "run" / "report.json").read_text())["ran"] == report["ran"]
    again.eval()
    with torch.no_grad():
        predicted = again(again.tokenize([text for text, _ in val])).argmax(-1).tolist()
    right = sum(again.attnzoo_metadata["labels"][p] == label for p, (_, label) in zip(predicted, val, strict=True))
    best = history[report["best_epoch"] - 1]["accuracy"]
    assert right / len(val) == pytest.approx(best, abs=1e-9)  # the trainer's packing is the tokenizer's
    # attnzoo evaluate on the run folder scores a file as training did (it said "needs weights written by
    # attnzoo train", reading the port as a word-vocabulary model)
    assert evaluate_file(tmp_path / "run", data["validation"])["accuracy"] == pytest.approx(right / len(val), abs=1e-9)
    # and attnzoo predict gives the loaded model's softmax (it refused the run folder as evaluate did)
    with torch.no_grad():
        probabilities = again(again.tokenize([text for text, _ in val[:3]])).softmax(-1)
    predictions = attnzoo.predict(tmp_path / "run", [t for t, _ in val[:3]], top=None)
    for got, want in zip(predictions, probabilities, strict=True):
        assert {label.name: label.probability for label in got.labels} == pytest.approx(
            dict(zip(again.attnzoo_metadata["labels"], want.tolist(), strict=True)), abs=1e-6
        )
    # the Hugging Face door names the outputs by the labels the run learnt (it wrote LABEL_0, LABEL_1)
    from attnzoo.keras import to_transformers

    config = json.loads((to_transformers(again, tmp_path / "hf") / "config.json").read_text())
    assert config["id2label"] == {"0": "neg", "1": "pos"} and config["label2id"] == {"neg": 0, "pos": 1}


def test_the_head_is_kept_when_the_classes_agree_and_dropout_is_the_one_config_key(ports, tmp_path):
    port = attnzoo.load(ports["bert"])
    said: list[str] = []
    three = {"train": str(_csv(tmp_path / "three.csv", _rows(30, 3, ["neg", "odd", "pos"])))}
    task = build_port_task(_recipe(ports["bert"], three)["task"], port.tokenizer)
    kept = fit_port(port, task, {"dropout": 0.0}, said.append)
    assert said == ["head: the port's 3 classes, as the labels neg, odd, pos (in that order)"]
    for key, value in port.state_dict().items():
        assert torch.equal(kept.state_dict()[key], value), key
    rates = [v for layer in kept.graph["layers"].values() for k, v in layer.items() if k in ("dropout", "rate")]
    assert rates and set(rates) == {0.0} and kept.tokenizer is port.tokenizer
    with pytest.raises(ConfigError, match="config.hidden_dim: a port's architecture is its graph"):
        fit_port(port, task, {"hidden_dim": 8}, said.append)
    with pytest.raises(ConfigError, match=r"data.task 'multi_label': the port is a text_classifier"):
        build_port_task({**three, "name": "files", "task": "multi_label"}, port.tokenizer)
    with pytest.raises(ConfigError, match="--export writes a registered model's weights file"):
        train(_recipe(ports["bert"], three), output=tmp_path / "x", export=tmp_path)


def test_whole_number_labels_take_a_kept_head_s_outputs_in_numeric_order(ports, tmp_path):
    """keras-hub's TextClassifier learns integer labels, label k at output k. Sorted as text, labels 0..11
    gave output 2 to label "10": a kept head of 12 classes trained on its own labels was silently permuted."""
    port = attnzoo.load(ports["bert"])
    names = [str(k) for k in range(12)]
    rows = [(f"{FILLER[k % 6]} {WORDS['pos'][k % 3]}", names[k % 12]) for k in range(36)]
    data = {"name": "files", "train": str(_csv(tmp_path / "t.csv", rows)), "validation": str(tmp_path / "t.csv")}
    task = build_port_task(data, port.tokenizer)
    assert task.class_names == names
    assert [task.class_names[task.classes[i]] for i in task.splits["train"]] == [
        rows[i][1] for i in task.splits["train"]
    ]
    twelve = attnzoo.save(fit_port(port, task, {}, print), tmp_path / "twelve")  # a port whose head has 12 classes
    said: list[str] = []
    fit_port(attnzoo.load(twelve), task, {}, said.append)
    assert said == ["head: the port's 12 classes, as the labels 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 ... (in that order)"]


def test_a_classifier_s_training_rows_of_one_label_are_refused(ports, tmp_path):
    """One label gave a new head of 1 class: a softmax over it is 1 whatever the text, so the run reported
    train loss 0, accuracy 1.0 and macro-F1 1.0 and saved a model that says nothing."""
    from attnzoo.train.files import DataError
    from attnzoo.train.tasks import build_task

    rows = _csv(tmp_path / "one.csv", [(text, "pos") for text, _ in _rows(8, 1, ["pos"])])
    data = {"train": str(rows), "validation": str(rows)}
    message = r"one.csv: a single-label task chooses between at least 2 labels, and the training rows have 1 \(pos\)"
    with pytest.raises(DataError, match=message):
        train(_recipe(ports["bert"], data, epochs=1), output=tmp_path / "run", baseline=False)
    with pytest.raises(DataError, match=message):  # a registered model's file task alike
        build_task({"name": "files", "task": "single_label", **data})
    assert not (tmp_path / "run").exists()


def test_a_run_folder_trained_again_keeps_the_order_of_the_labels_its_head_learnt(ports, tmp_path, capsys):
    """A run whose labels_file put pos before neg, trained again from its folder without one: the labels were
    sorted again (neg, pos) onto the kept head, whose outputs had learnt (pos, neg), so every prediction
    flipped (accuracy 1 - a). At a learning rate of 1e-12 the second run scores the first run's accuracy a."""
    (tmp_path / "labels.txt").write_text("pos\nneg\n")
    val = _csv(tmp_path / "val.csv", _rows(16, 2, ["neg", "pos"]))
    data = {"train": str(_csv(tmp_path / "t.csv", _rows(48, 1, ["neg", "pos"]))), "validation": str(val)}
    first = train(
        _recipe(ports["bert"], {**data, "labels_file": str(tmp_path / "labels.txt")}, epochs=6),
        output=tmp_path / "one",
        baseline=False,
    )
    accuracy = first["history"][first["best_epoch"] - 1]["accuracy"]
    assert accuracy >= 0.65 and attnzoo.load(tmp_path / "one").attnzoo_metadata["labels"] == ["pos", "neg"]
    capsys.readouterr()
    again = train(_recipe(tmp_path / "one", data, epochs=1, lr=1e-12), output=tmp_path / "two", baseline=False)
    assert "head: the port's 2 classes, as the labels pos, neg (in that order)" in capsys.readouterr().out
    assert again["history"][0]["accuracy"] == pytest.approx(accuracy, abs=1e-9)
    assert attnzoo.load(tmp_path / "two").attnzoo_metadata["labels"] == ["pos", "neg"]


def test_a_folder_without_a_tokenizer_is_refused_saying_how_to_attach_one(tmp_path):
    plain = attnzoo.save(convert_keras_model(BERT / "classifier.keras"), tmp_path / "plain")
    data = {"train": str(_csv(tmp_path / "t.csv", _rows(8, 1, ["neg", "pos"])))}
    with pytest.raises(ConfigError, match=r"without a tokenizer .*keras_hub_tokenizer\(PRESET\)"):
        train(_recipe(plain, data), output=tmp_path / "run")
    # a zoo model's folder was told to attach a keras-hub tokenizer too
    zoo = attnzoo.save(attnzoo.create("bilstm_attn_pool", config={"vocab_size": 50, "num_classes": 2}), tmp_path / "z")
    with pytest.raises(
        ConfigError, match=r"a saved bilstm_attn_pool, not a converted keras-hub model; .*--model bilstm_at"
    ):
        train(_recipe(zoo, data), output=tmp_path / "run")


def test_a_model_path_that_holds_no_saved_model_is_refused_before_the_data_is_read(tmp_path):
    """A folder without config.yaml was read as a registered model's name, after the data: "'/tmp/x' is not a
    valid model name: expected [provider:]arch[.tag]"."""
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "x.txt").write_text("hi")
    data = {"train": str(tmp_path / "missing.csv")}  # never read: the model is refused first
    for model, what in [(tmp_path / "notes", "a folder without config.yaml"), (tmp_path / "gone", "no such folder")]:
        with pytest.raises(ConfigError, match=rf"--model {model}: {what}; --model takes a registered model's name"):
            train(_recipe(model, data), output=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_task_causal_lm_on_a_registered_model_says_that_it_is_a_port_s_task(tmp_path):
    """--task offers causal_lm; on a registered model it was refused as not one of the file tasks."""
    from attnzoo.train.tasks import build_task

    lines = _csv(tmp_path / "lm.csv", [("the cat sat",), ("a dog ran",)], header=("text",))
    with pytest.raises(ConfigError, match=r"data.task 'causal_lm' trains a converted keras-hub causal LM: --model"):
        build_task({"name": "files", "task": "causal_lm", "train": str(lines)})


def test_a_folder_whose_model_is_not_its_tokenizer_s_task_or_whose_record_is_unreadable_is_refused(tmp_path):
    """A backbone given a causal LM's tokenizer gave hidden states [B, L, 32] that cross-entropy read as scores
    over 32 tokens (an IndexError from torch: the ids go to 319); a classifier given a causal LM's tokenizer
    failed on a missing input; a corrupt preprocessing.json said only json's words."""
    lm = ROOT / "tests" / "data" / "keras_hub_lm" / "opt"
    backbone = convert_keras_model(lm / "backbone_preset")
    backbone.tokenizer = keras_hub_tokenizer(lm / "causal_lm_preset")
    classifier = convert_keras_model(BERT / "classifier.keras")
    classifier.tokenizer = keras_hub_tokenizer(GPT2)
    lines = _csv(tmp_path / "lm.csv", [("the cat sat",), ("a dog ran",)] * 4, header=("text",))
    data = {"train": str(lines), "validation": str(lines)}
    for model, message in [
        (backbone, r"the model is a keras-hub OPTBackbone, and its tokenizer packs for a causal_lm"),
        (classifier, r"the model is a keras-hub BertTextClassifier, and its tokenizer packs for a causal_lm"),
    ]:
        port = attnzoo.save(model, tmp_path / message.split()[5])
        with pytest.raises(ConfigError, match=message):
            train(_recipe(port, data, epochs=1), output=tmp_path / "run", baseline=False)
        assert not (tmp_path / "run").exists()
    (port / "preprocessing.json").write_text("not json")
    with pytest.raises(WeightsError, match=r"preprocessing.json: the preprocessing record is not valid JSON"):
        train(_recipe(port, data, epochs=1), output=tmp_path / "run", baseline=False)


def test_the_port_folder_is_never_the_run_folder_even_with_overwrite(ports, tmp_path):
    """With --overwrite the run replaced the port it started from, and the same command again fine-tuned the
    fine-tuned model."""
    import shutil

    port = Path(shutil.copytree(ports["bert"], tmp_path / "port"))
    before = {p.name: p.read_bytes() for p in port.iterdir()}
    rows = _csv(tmp_path / "t.csv", _rows(8, 1, ["neg", "pos"]))
    data = {"train": str(rows), "validation": str(rows)}
    for folder in (port, tmp_path / "." / "port"):
        with pytest.raises(ConfigError, match=r"is the --model port folder: the run would replace the port"):
            train(_recipe(port, data, epochs=1), output=folder, overwrite=True, baseline=False)
    assert {p.name: p.read_bytes() for p in port.iterdir()} == before


def _naive_next_token_loss(model, texts: list[str]) -> float:
    """The mean over every predicted token of -log softmax(logits)[next id], one at a time, each row alone (no
    padding), packed by hand as keras-hub's CausalLMPreprocessor packs it for training: the start token, the
    text's ids, the end token; the model reads all but the last and predicts each next one."""
    record = model.tokenizer.preprocessing
    total, count = 0.0, 0
    for ids in model.tokenizer.encode(texts):
        row = [record.start_token_id, *ids, record.end_token_id]
        assert len(row) <= record.sequence_length + 1  # none cut
        inputs = torch.tensor([row[:-1]])
        with torch.no_grad():
            logits = model({"token_ids": inputs, "padding_mask": torch.ones_like(inputs)})[0].double()
        for t in range(len(row) - 1):
            total += (torch.logsumexp(logits[t], 0) - logits[t, row[t + 1]]).item()
            count += 1
    return total / count


def test_a_causal_lm_port_learns_its_texts_and_the_loaded_run_gives_the_recorded_loss(ports, tmp_path):
    rng = random.Random(0)
    lines = ["the cat sat on the mat", "a dog ran in the park", "the sun is warm today"]
    texts = [(rng.choice(lines),) for _ in range(32)]
    train_file = _csv(tmp_path / "lm.csv", texts, header=("text",))
    data = {"train": str(train_file), "validation": str(train_file)}
    report = train(_recipe(ports["gpt2"], data, epochs=4), output=tmp_path / "run", baseline=False)
    losses = [h["loss"] for h in report["history"]]
    assert losses == sorted(losses, reverse=True) and losses[-1] < 0.85 * losses[0]
    assert report["best_epoch"] == 4  # the lowest validation loss
    again = attnzoo.load(tmp_path / "run").eval()
    assert again.attnzoo_metadata["output"] == "causal_lm"
    naive = _naive_next_token_loss(again, [t for (t,) in texts])
    assert naive == pytest.approx(losses[report["best_epoch"] - 1], abs=1e-5)
    best = report["history"][report["best_epoch"] - 1]
    assert best["perplexity"] == pytest.approx(math.exp(naive), rel=1e-5)
    assert evaluate_file(tmp_path / "run", train_file)["loss"] == pytest.approx(naive, abs=1e-5)
    with pytest.raises(ConfigError, match=r"a fine-tuned causal LM writes text: attnzoo.load\(RUN_FOLDER\).generate"):
        attnzoo.predict(tmp_path / "run", "the cat")
    with pytest.raises(ConfigError, match="data.labels: a causal LM learns the text itself"):
        build_port_task({"name": "files", **data, "labels": "labels"}, again.tokenizer)


def test_data_max_len_is_checked_against_the_preset_s_position_table_before_training(ports, tmp_path):
    """data.max_len=1 trained a causal LM on no next token at all (val loss 0, perplexity 1, saved as a run);
    0 was read as "not given"; past GPT-2's position table the first training step failed inside the model."""
    table = json.loads((GPT2 / "config.json").read_text())["config"]["max_sequence_length"]  # keras-hub's: 64
    lines = _csv(tmp_path / "lm.csv", [("the cat sat on the mat",), ("a dog ran in the park",)] * 4, ("text",))
    data = {"train": str(lines), "validation": str(lines)}
    for given, message in [
        (1, r"data.max_len must be a whole number >= 2 .*, got 1; leave it out for .* sequence_length 16"),
        (0, r"data.max_len must be a whole number >= 2"),
        ("32", r"data.max_len must be a whole number >= 2 .*, got '32'"),
        (table + 1, rf"rows packed to {table + 1} tokens .* position table of {table} positions; .*max_len={table}"),
    ]:
        with pytest.raises(ConfigError, match=message):
            train(_recipe(ports["gpt2"], {**data, "max_len": given}, epochs=1), output=tmp_path / "run")
        assert not (tmp_path / "run").exists()
    report = train(_recipe(ports["gpt2"], {**data, "max_len": table}, epochs=1), output=tmp_path / "run")
    assert report["history"][0]["loss"] > 0  # rows of up to 64 tokens fit the table
    # Phi-3's rotary positions have no table: its max_sequence_length (64 here too) is not a bound
    phi3 = convert_keras_model(ROOT / "tests" / "data" / "keras_hub_lm" / "phi3" / "causal_lm_preset")
    task = PortCausalLM.__new__(PortCausalLM)
    task.max_len = 2 * table
    assert fit_port(phi3, task, {}, print) is not None


def test_a_causal_lm_s_training_rows_end_with_the_end_token_as_keras_hub_packs_them(ports, tmp_path):
    """keras-hub's CausalLMPreprocessor (add_end_token true in every preset's preprocessor.json) packs a
    training row to sequence_length + 1 as start, the text's ids cut to leave room, end; x is all but the last
    position, y all but the first. The rows were packed as generate_preprocess packs them, without the end
    token, so a fine-tuned model never learnt to stop."""
    assert json.loads((GPT2 / "preprocessor.json").read_text())["config"]["add_end_token"] is True
    texts = ["the cat sat on the mat and the dog ran in the park", "a"]
    lines = _csv(tmp_path / "lm.csv", [(t,) for t in texts], header=("text",))
    port = attnzoo.load(ports["gpt2"])
    data = {"name": "files", "train": str(lines), "validation": str(lines), "max_len": 4}
    task = build_port_task(data, port.tokenizer)
    record = port.tokenizer.preprocessing
    long, short = port.tokenizer.encode(texts)
    assert len(long) > 4 and len(short) == 1
    start, end, pad = record.start_token_id, record.end_token_id, record.pad_token_id
    batch = task.batch([0, 1])
    assert batch["token_ids"].tolist() == [[start, *long[:3], end], [start, *short, end, pad, pad]]
    assert batch["padding_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]


@pytest.mark.parametrize("name", ["distil_bert_classifier", "roberta_classifier"])
def test_distilbert_s_and_roberta_s_classifier_heads_are_found_and_replaced(name):
    port = convert_keras_model(ROOT / "tests" / "data" / "keras_hub_models" / f"{name}.keras")
    task = PortClassifier.__new__(PortClassifier)  # only its classes matter to the head
    task.class_names = ["a", "b"]
    said: list[str] = []
    model = fit_port(port, task, {}, said.append).eval()
    assert said == ["head: a new head of 2 classes (a, b) in place of the port's 3"]
    kept = {k: v for k, v in port.state_dict().items() if not k.startswith("layers.logits.")}
    assert all(torch.equal(model.state_dict()[k], v) for k, v in kept.items()) and len(kept) > 10
    ids = torch.randint(1, 100, (2, 16))
    inputs = {"token_ids": ids, "padding_mask": torch.ones_like(ids)}
    with torch.no_grad():
        assert model(inputs).shape == (2, 2) and port(inputs).shape == (2, 3)


@pytest.mark.slow
def test_torchrun_fine_tunes_a_port_with_two_processes_as_one_does(ports, tmp_path):
    """The command line on a classifier port, one process and two (gloo): the checkpoint's float32 weights
    within 1e-5 (but the key biases, whose gradient is rounding noise) and the same validation scores."""
    from .test_train_distributed import _cli, _largest_difference, checkpoint_weights

    train_file = _csv(tmp_path / "train.csv", _rows(61, 1, ["neg", "odd", "pos"]))
    val = _csv(tmp_path / "val.csv", _rows(13, 2, ["neg", "odd", "pos"]))
    flags = ["--model", str(ports["bert"]), "--train", str(train_file), "--validation", str(val)]
    flags += ["--epochs", "2", "--batch-size", "8", "--lr", "0.003", "config.dropout=0", "train.threads=1"]
    one = _cli([*flags, "--output", str(tmp_path / "one")])
    two = _cli([*flags, "--output", str(tmp_path / "two")], runner=TORCHRUN)
    assert (one["ran"]["world_size"], two["ran"]["world_size"]) == (1, 2)
    assert two["history"][-1]["accuracy"] == pytest.approx(one["history"][-1]["accuracy"], abs=1e-6)
    assert two["history"][-1]["train_loss"] == pytest.approx(one["history"][-1]["train_loss"], abs=1e-5)
    # but the attention's key biases: q . (k + b) adds q . b to every key's score, which the softmax takes away,
    # so their gradient is zero but for rounding, and Adam makes steps of about lr out of that noise
    one_w, two_w = checkpoint_weights(tmp_path / "one"), checkpoint_weights(tmp_path / "two")
    noise = [k for k in one_w if k.endswith("attention.key.bias")]
    assert len(noise) == 2 and max((one_w[k] - two_w[k]).abs().max().item() for k in noise) < 2 * 0.003
    for k in noise:
        del one_w[k], two_w[k]
    assert _largest_difference(one_w, two_w) < 1e-5


def test_train_lora_is_checked_before_any_work_and_without_peft_says_how_to_install_it(monkeypatch):
    from attnzoo.train.lora import check_lora, lora_port

    assert check_lora({"targets": "query"}, port=True) == {
        "rank": 8,
        "alpha": 8.0,
        "targets": ["query"],
        "save": "adapter",
        "dropout": 0.0,
    }
    for value, message in [
        ({"targets": ["query"]}, None),
        ({"rank": 0, "targets": ["query"]}, "train.lora.rank must be a whole number >= 1"),
        ({"targets": []}, r"train.lora.targets must name the modules .* \[query, value\] \(BERT\)"),
        ({"targets": ["q"], "save": "both"}, "train.lora.save must be adapter or merged"),
        ({"targets": ["q"], "ranks": 4}, "unknown key train.lora.ranks"),
    ]:
        if message is None:
            with pytest.raises(ConfigError, match="train.lora fine-tunes a port"):
                check_lora(value, port=False)
            continue
        with pytest.raises(ConfigError, match=message):
            check_lora(value, port=True)
    monkeypatch.setitem(__import__("sys").modules, "peft", None)
    with pytest.raises(ConfigError, match=r"train.lora needs peft and transformers: pip install 'attnzoo\[lora\]'"):
        lora_port(None, {"rank": 8}, causal=False)


def test_lora_targets_that_match_nothing_name_gpt2_s_conv1d_projections(ports):
    """GPT-2's Hugging Face form holds its projections as transformers' Conv1D, which peft adapts (c_attn is
    the docs' example); the refusal listed only nn.Linear layers, so it offered lm_head alone."""
    pytest.importorskip("peft")
    from attnzoo.train.lora import lora_port

    port = attnzoo.load(ports["gpt2"])
    named = {"rank": 2, "alpha": 2.0, "targets": ["query"], "dropout": 0.0}
    with pytest.raises(ConfigError, match=r"targets \['query'\]: .*named (?=.*c_attn)(?=.*c_fc)(?=.*c_proj)"):
        lora_port(port, named, causal=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # peft's "fan_in_fan_out is set to False but the target module is Conv1D"
        wrapped = lora_port(port, {**named, "targets": ["c_attn"]}, causal=True)  # a name it gives, peft takes
    assert sum(name.endswith("c_attn.lora_A.default.weight") for name, _ in wrapped.named_parameters()) == 2


def test_lora_on_a_classifier_s_head_says_that_the_head_trains_whole(ports):
    """peft's SEQ_CLS trains the head (classifier) whole and never adapts it; targets [classifier] were refused
    with a list of names to adapt that offered classifier itself."""
    pytest.importorskip("peft")
    from attnzoo.train.lora import lora_port

    port = attnzoo.load(ports["bert"])
    named = {"rank": 2, "alpha": 2.0, "targets": ["classifier"], "dropout": 0.0}
    message = r"to adapt are named dense, key, query, value; the classifier's head \(classifier\) trains whole"
    with pytest.raises(ConfigError, match=message):
        lora_port(port, named, causal=False)


def test_attnzoo_load_of_a_lora_run_folder_says_how_to_load_it(tmp_path):
    """A LoRA run folder holds base/ and adapter/ (or merged/), no config.yaml: attnzoo.load said only that
    config.yaml was not found in it."""
    for save in ("adapter", "merged"):
        (tmp_path / save / "base").mkdir(parents=True)
        (tmp_path / save / save).mkdir()
        with pytest.raises(
            WeightsError, match=rf"a LoRA run of attnzoo train \(base/ and {save}/\).*transformers and peft"
        ):
            attnzoo.load(tmp_path / save)
    with pytest.raises(WeightsError, match=r"config.yaml not found in it$"):
        attnzoo.load(tmp_path / "adapter" / "base")


def _lora_logits(run: Path, texts: list[str], port) -> tuple[torch.Tensor, torch.Tensor]:
    """The run's logits from its last checkpoint (its LoRA weights put on its base/ again) and the base's."""
    import peft
    from transformers import AutoModelForSequenceClassification

    from .test_train_distributed import checkpoint_weights

    base = AutoModelForSequenceClassification.from_pretrained(run / "base").eval()
    batch = port.tokenize(texts)
    named = {"input_ids": batch["token_ids"], "attention_mask": batch["padding_mask"]}
    named["token_type_ids"] = batch["segment_ids"]
    with torch.no_grad():
        plain = base(**named).logits
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"], task_type="SEQ_CLS")
    wrapped = peft.get_peft_model(base, config)
    wrapped.load_state_dict({k.removeprefix("model."): v for k, v in checkpoint_weights(run).items()})
    with torch.no_grad():
        return wrapped.eval()(**named).logits, plain


@pytest.mark.slow
def test_a_lora_run_s_adapter_loads_with_peft_onto_the_transformers_base_and_gives_the_run_s_logits(ports, tmp_path):
    import peft
    from transformers import AutoModelForSequenceClassification

    from attnzoo.keras import to_transformers

    labels = ["neg", "odd", "pos"]  # the port's 3 classes: its head kept, trained whole beside the adapters
    val = _rows(12, 2, labels)
    data = {
        "train": str(_csv(tmp_path / "train.csv", _rows(40, 1, labels))),
        "validation": str(_csv(tmp_path / "v.csv", val)),
    }
    texts = [text for text, _ in val]
    port = attnzoo.load(ports["bert"])
    for save in ("adapter", "merged"):
        lora = {"rank": 4, "alpha": 8, "targets": ["query", "value"], "save": save}
        recipe = _recipe(ports["bert"], data, epochs=1, lr=0.01, lora=lora)
        report = train(recipe, output=tmp_path / save, baseline=False)
        assert report["best_epoch"] == 1  # the checkpoint's weights are the run's
        want, plain = _lora_logits(tmp_path / save, texts, port)
        assert (want - plain).abs().max() > 1e-3  # the adapters and the head learnt something
        batch = port.tokenize(texts)
        named = {"input_ids": batch["token_ids"], "attention_mask": batch["padding_mask"]}
        named["token_type_ids"] = batch["segment_ids"]
        if save == "adapter":
            base = to_transformers(port, tmp_path / "hf_base")  # the --to transformers base of the port
            model = peft.PeftModel.from_pretrained(
                AutoModelForSequenceClassification.from_pretrained(base), tmp_path / save / "adapter"
            )
        else:
            model = AutoModelForSequenceClassification.from_pretrained(tmp_path / save / "merged")
        with torch.no_grad():
            got = model.eval()(**named).logits
        assert (got - want).abs().max() < 1e-5, save
