"""The kinds of task a model is trained on: what every task does (data, splits, batches, loss, evaluation,
TF-IDF baseline, metadata) and how each output kind does it.

* ``MultiLabelTask``: text -> a set of labels (sigmoid per label, BCE; micro/macro F1, precision@k; the
  decision threshold tuned on validation).
* ``SingleLabelTask``: text -> one label (softmax, cross-entropy; accuracy, macro F1).
* ``Seq2SeqTask``: a sequence -> a sequence (teacher forcing; word accuracy, symbol error rate).

The bundled data sets (tasks.py) and the user's files (file_tasks.py) are subclasses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from attnzoo.io.text import Vocabulary, pad_batch, tokenize
from attnzoo.train.distributed import all_gather_objects, all_sum
from attnzoo.train.metrics import (
    f1_from_counts,
    g2p_counts,
    g2p_from_counts,
    multilabel_counts,
    precision_sum,
    single_label_counts,
    single_label_from_counts,
    without_stress,
)
from attnzoo.train.shares import owns, passes, step_rows
from attnzoo.train.sources import SOURCES
from attnzoo.train.splits import split_indices

__all__ = [
    "Task",
    "TextTask",
    "MultiLabelTask",
    "SingleLabelTask",
    "Seq2SeqTask",
    "MIN_TUNING_ROWS",
    "MIN_TUNING_POSITIVES",
]

# the least validation data the multi-label decision threshold is tuned on without a warning
MIN_TUNING_ROWS = 100
MIN_TUNING_POSITIVES = 5  # positive labels per label, on average


def _device_of(model) -> torch.device:
    return next(model.parameters()).device


class Task:
    """Base class: subclasses fill ``self.inputs`` (id lists), targets, and the metric logic."""

    name = "task"
    main_metric = "loss"
    lower_is_better = False  # whether a lower main_metric is better (a loss)
    data_keys: tuple[str, ...] = ()
    dataset = ""
    license = ""
    texts: list[str]  # one per example; load() fills it
    threshold: float | None = None  # multi-label decision threshold (tuned on validation)
    # whether loss() takes train.label_smoothing (a softmax cross-entropy over classes does)
    takes_label_smoothing = False

    # the per-row lists a task keeps (each subclass adds its targets): a rank keeps its share of each
    row_fields: tuple[str, ...] = ("texts",)
    shares_rows = False  # load() itself kept this rank's share (files: read as a stream)
    # rows a scoring pass of a text task takes on this rank; the trainer lowers it to a training pass's
    # share (batch_size / processes), so scoring holds no more activations than training does, whatever
    # the number of processes (G2P decoding keeps its batches of 512 words: short, and a loop a batch)
    score_batch = 512

    def __init__(
        self, config: dict[str, Any], metadata: dict[str, Any] | None = None, *, rank: int = 0, world: int = 1
    ) -> None:
        self.config = config
        self.rank, self.world = rank, world
        self.max_len = int(config.get("max_len", 64))
        self.load(metadata)
        self.splits = self.make_splits()
        if not self.shares_rows:
            limit = config.get("limit")
            if limit:  # tiny recipes for tests: the first examples of each split
                self.splits = {k: v[: self.limit_of(k)] for k, v in self.splits.items()}
            if world > 1:
                self._keep_share()
        if metadata is None:
            self.vocab = self.build_vocab([self.texts[i] for i in self.splits["train"]])
        else:
            self.vocab = Vocabulary.from_json(metadata["vocab"])
        self.encoded = [self.encode(t) for t in self.texts]
        self._lengths: list[int] | None = None

    def limit_of(self, split: str) -> int:
        """How many rows of ``split`` a recipe's ``limit`` keeps (the first ones)."""
        return max(1, int(self.config["limit"] * (0.8 if split == "train" else 0.1)))

    def _keep_share(self) -> None:
        """Keep only this rank's rows (:func:`~attnzoo.train.shares.owns`) of every split, renumbered."""
        kept = {k: [i for p, i in enumerate(v) if owns(p, self.rank, self.world)] for k, v in self.splits.items()}
        rows = sorted(i for v in kept.values() for i in v)
        new = {old: n for n, old in enumerate(rows)}
        for name in self.row_fields:
            values = getattr(self, name)
            setattr(self, name, [values[i] for i in rows])
        self.splits = {k: [new[i] for i in v] for k, v in kept.items()}

    # -- to implement ------------------------------------------------------------------------------
    def load(self, metadata: dict[str, Any] | None) -> None:
        raise NotImplementedError

    def model_config(self) -> dict[str, Any]:
        raise NotImplementedError

    def loss(self, model, batch: dict[str, torch.Tensor], label_smoothing: float = 0.0) -> torch.Tensor:
        """The training loss of a batch (``label_smoothing``: for the tasks that take it)."""
        raise NotImplementedError

    def evaluate(self, model, indices: list[int], batch_size: int | None = None) -> dict[str, float]:
        """The metrics the card records (and the tests re-evaluate); ``batch_size`` rows a pass (default
        ``score_batch``)."""
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

    # -- shared ------------------------------------------------------------------------------------
    def make_splits(self) -> dict[str, list[int]]:
        """Indices of ``self.texts`` per split: by default a seeded hash split (see splits.py)."""
        return split_indices(
            self.texts, int(self.config.get("split_seed", 13)), tuple(self.config.get("fractions", (0.8, 0.1, 0.1)))
        )

    def build_vocab(self, texts: list[str]) -> Vocabulary:
        """The vocabulary of the training rows: each rank counts the words of its own, the counts are
        added, and every rank builds the same vocabulary from them."""
        vocab = self.config.get("vocab", {})
        counts: Counter[str] = Counter()
        for share in all_gather_objects(Counter(word for text in texts for word in tokenize(text))):
            counts.update(share)
        return Vocabulary.from_counts(counts, min_freq=int(vocab.get("min_freq", 2)), max_size=vocab.get("max_size"))

    def encode(self, text: str) -> list[int]:
        return self.vocab.encode(tokenize(text))[: self.max_len]

    def batch(self, indices: list[int]) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def train_lengths(self) -> list[int]:
        """The length of every training row, by its position in the split (every rank's rows)."""
        if self._lengths is None:
            mine = [len(self.encoded[i]) for i in self.splits["train"]]
            shares = all_gather_objects(mine)
            count = sum(map(len, shares))
            self._lengths = [shares[p % self.world][p // self.world] for p in range(count)]
        return self._lengths

    def steps(self, batch_size: int, *, accumulate: int = 1, generator=None) -> Iterator[list[tuple[dict, float]]]:
        """An epoch's optimizer steps of ``batch_size * accumulate`` rows: for each, this rank's
        ``accumulate`` passes as (batch, weight) (see shares.py)."""
        train = self.splits["train"]
        for step in step_rows(self.train_lengths(), batch_size * accumulate, generator):
            out = []
            for positions, weight in passes(step, self.rank, self.world, accumulate):
                # a pass this rank holds no row of runs on its first row, weighted 0
                rows = [train[p // self.world] for p in positions] or train[:1]
                out.append((self.batch(rows), weight))
            yield out

    def subset(self, size: int) -> list[int]:
        """The fixed test subset that shipped weights are re-evaluated on: the first ``size`` test items (of
        them, the ones this rank holds)."""
        return self.splits["test"][: len(range(self.rank, size, self.world))]

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
        """Rows per split, over every rank."""
        names = list(self.splits)
        counts = all_sum(torch.tensor([len(self.splits[k]) for k in names], dtype=torch.float64))
        return {k: int(c) for k, c in zip(names, counts.tolist(), strict=True)}


class TextTask(Task):
    def batch(self, indices):
        tokens = pad_batch([self.encoded[i] or [1] for i in indices], self.max_len)
        return {"tokens": tokens, "indices": torch.tensor(indices)}

    def _pass_logits(self, model, rows):
        """The model's float32 logits [rows, outputs] for a scoring pass's rows, on the CPU."""
        return model(self.batch(rows)["tokens"].to(_device_of(model))).float().cpu()

    def _pass_sums(self, model, indices, sums, batch_size=None):
        """This rank's ``sums(logits, rows)`` (a pass's counts, a float64 tensor) added over its passes of
        ``batch_size`` (default ``score_batch``) rows of ``indices``: scoring holds one pass's logits [rows,
        outputs], whatever the split's size. A rank with none of the rows gets the counts of no rows."""
        model.eval()
        batch_size = batch_size or self.score_batch
        total = sums(torch.zeros(0, len(self.output_names)), [])
        with torch.no_grad():
            for start in range(0, len(indices), batch_size):
                rows = indices[start : start + batch_size]
                total = total + sums(self._pass_logits(model, rows), rows)
        return total

    def baseline(self) -> dict[str, float]:
        """TF-IDF (words 1-2 grams) + linear SVM on the same train split, scored on the test split."""
        from sklearn.feature_extraction.text import TfidfVectorizer

        vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
        train = vectorizer.fit_transform([self.texts[i] for i in self.splits["train"]])
        test = vectorizer.transform([self.texts[i] for i in self.splits["test"]])
        return self._fit_baseline(train, test)

    def _fit_baseline(self, train: Any, test: Any) -> dict[str, float]:
        raise NotImplementedError


class MultiLabelTask(TextTask):
    """Text -> any number of labels: ``self.labels`` (label ids per text), ``self.label_names``,
    ``self.threshold`` (tuned on validation). Metrics: micro/macro-F1 at the threshold, P@1 and P@5."""

    main_metric = "micro_f1"
    labels: list[list[int]]  # per text, the indices of its labels; load() fills it
    label_names: list[str]
    row_fields = ("texts", "labels")

    @property
    def output_names(self) -> list[str]:
        return self.label_names

    def model_config(self):
        return {"vocab_size": len(self.vocab), "num_labels": len(self.label_names)}

    def label_tensors(self, batch_size):
        """A batch's label-wise attention scores and weights [batch, labels, max_len] (every multi-label model
        attnzoo trains attends once per label). Scoring holds a pass's [rows, labels], its rows at most a
        batch's (``score_batch``): less."""
        labels = len(self.label_names)
        return [
            (
                f"a training batch's label-wise attention scores and weights [{batch_size}, {labels:,}, "
                f"{self.max_len}] (float32)",
                batch_size * labels * self.max_len * 4 * 2,
                "lower train.batch_size or max_len (data.max_len, task.max_len)",
            )
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
        rows, positives = all_sum(torch.tensor([len(indices), sum(len(self.labels[i]) for i in indices)])).tolist()
        per_label = positives / labels if labels else 0.0
        if rows >= MIN_TUNING_ROWS and per_label >= MIN_TUNING_POSITIVES:
            return None
        return (
            f"the validation split has {rows} rows and {positives} positive labels over {labels} labels "
            f"({per_label:.1f} per label); tuning the decision threshold wants at least {MIN_TUNING_ROWS} rows and "
            f"{MIN_TUNING_POSITIVES} positives per label"
        )

    def tune_threshold(self, model, indices) -> float:
        """The global decision threshold with the best micro-F1 on ``indices`` (the validation split)."""
        grid = [i / 100 for i in range(10, 91, 2)]

        def sums(logits, rows):  # a pass's TP, FP, FN pooled over the labels, at every threshold
            probs, target = torch.sigmoid(logits), self._targets(rows).bool()
            return torch.stack([multilabel_counts(probs >= t, target).sum(1) for t in grid])

        pooled = all_sum(self._pass_sums(model, indices, sums))  # over every rank's rows
        scores = [f1_from_counts(counts[:, None])["micro_f1"] for counts in pooled]
        self.threshold = grid[max(range(len(grid)), key=scores.__getitem__)]
        return self.threshold

    def evaluate(self, model, indices, batch_size=None):
        labels = len(self.label_names)
        # precision@k with k >= the number of labels is the labels' mean frequency whatever the model
        ks = [k for k in (1, 5) if k < labels]

        def sums(logits, rows):  # a pass's TP, FP, FN per label, then its rows and precision@k sums
            probs, target = torch.sigmoid(logits), self._targets(rows).bool()
            counts = multilabel_counts(probs >= self.threshold, target).flatten()
            local = [len(rows)] + [precision_sum(probs, target, k) for k in ks]
            return torch.cat([counts, torch.tensor(local, dtype=torch.float64)])

        total = all_sum(self._pass_sums(model, indices, sums, batch_size))
        scores = f1_from_counts(total[: 3 * labels].view(3, labels))
        rows, *sums_k = total[3 * labels :].tolist()
        return {**scores, **{f"precision_at_{k}": s / rows if rows else 0.0 for k, s in zip(ks, sums_k, strict=True)}}

    def _fit_baseline(self, train, test):
        from sklearn.multiclass import OneVsRestClassifier
        from sklearn.preprocessing import MultiLabelBinarizer
        from sklearn.svm import LinearSVC

        binarizer = MultiLabelBinarizer(classes=list(range(len(self.label_names))))
        y_train = binarizer.fit_transform([self.labels[i] for i in self.splits["train"]])
        classifier = OneVsRestClassifier(LinearSVC(C=1.0), n_jobs=1).fit(train, y_train)
        predicted = torch.from_numpy(classifier.predict(test)).bool()
        return f1_from_counts(multilabel_counts(predicted, self._targets(self.splits["test"]).bool()))

    def metadata(self):
        return {**super().metadata(), "labels": self.label_names, "threshold": self.threshold, "output": "multilabel"}


class SingleLabelTask(TextTask):
    """Text -> one class: ``self.classes`` (class id per text), ``self.class_names``. Metrics: accuracy,
    macro-F1."""

    main_metric = "accuracy"
    row_fields = ("texts", "classes")
    classes: list[int]
    class_names: list[str]

    @property
    def output_names(self) -> list[str]:
        return self.class_names

    def model_config(self):
        return {"vocab_size": len(self.vocab), "num_classes": len(self.class_names)}

    def label_tensors(self, batch_size):
        """A batch's logits and their gradient [batch, classes] (float32); scoring holds a pass's logits,
        its rows at most a batch's (``score_batch``): less."""
        classes = len(self.class_names)
        return [
            (
                f"a training batch's logits and their gradient [{batch_size}, {classes:,}] (float32)",
                batch_size * classes * 4 * 2,
                "lower train.batch_size",
            )
        ]

    def batch(self, indices):
        out = super().batch(indices)
        out["target"] = torch.tensor([self.classes[i] for i in indices])
        return out

    takes_label_smoothing = True

    def loss(self, model, batch, label_smoothing=0.0):
        return F.cross_entropy(model(batch["tokens"]), batch["target"], label_smoothing=label_smoothing)

    def evaluate(self, model, indices, batch_size=None):
        def sums(logits, rows):
            return single_label_counts(logits.argmax(-1), self._classes(rows), len(self.class_names))

        return single_label_from_counts(all_sum(self._pass_sums(model, indices, sums, batch_size)))

    def _classes(self, rows: list[int]) -> torch.Tensor:
        return torch.tensor([self.classes[i] for i in rows], dtype=torch.long)

    def _fit_baseline(self, train, test):
        from sklearn.svm import LinearSVC

        classifier = LinearSVC(C=1.0).fit(train, [self.classes[i] for i in self.splits["train"]])
        predicted = torch.from_numpy(classifier.predict(test)).long()
        counts = single_label_counts(predicted, self._classes(self.splits["test"]), len(self.class_names))
        return single_label_from_counts(all_sum(counts))

    def metadata(self):
        return {**super().metadata(), "labels": self.class_names, "output": "multiclass"}


class Seq2SeqTask(Task):
    """Letters in, a sequence of symbols out (G2P-style), whatever the data: the letter vocabulary, batches
    with teacher forcing, the cross-entropy, beam-search decoding and word / symbol error rates. A data set
    supplies ``load`` (``texts``, ``references``, ``phonemes``)."""

    stress_metrics = False  # ARPAbet data sets also score without stress digits
    main_metric = "word_accuracy"
    phonemes: Vocabulary  # the output symbols; load() fills it
    row_fields = ("texts", "references")
    references: list[list[list[str]]]  # per text, its accepted outputs; load() fills it

    def build_vocab(self, texts):
        letters = set().union(*all_gather_objects({c for t in texts for c in t}))  # every rank's rows
        return Vocabulary(sorted(letters), specials=("<pad>", "<unk>"))

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
        references = [self.references[i] for i in indices]
        counts = [g2p_counts(predictions, references)]
        if self.stress_metrics:
            plain = [[without_stress(r) for r in refs] for refs in references]
            counts.append(g2p_counts([without_stress(p) for p in predictions], plain))
        pooled = all_sum(torch.cat(counts))  # every rank's words
        scores = g2p_from_counts(pooled[:4])
        if self.stress_metrics:
            scores.update({f"stress_free_{k}": v for k, v in g2p_from_counts(pooled[4:]).items()})
        return scores

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
