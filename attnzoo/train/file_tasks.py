"""Tasks on the user's own files (``attnzoo train --train FILE ...``, a recipe's ``data:`` section): CSV,
TSV, JSON lines or Parquet, read and split by train/files.py and splits.py, for each kind of task."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnzoo.io.text import Vocabulary
from attnzoo.train.distributed import all_gather_objects
from attnzoo.train.shares import owns
from attnzoo.train.splits import assign_split
from attnzoo.train.task_kinds import MultiLabelTask, Seq2SeqTask, SingleLabelTask

__all__ = ["FILE_TASKS", "FileMultiLabel", "FileSingleLabel", "FileSeq2Seq"]


class FromFiles:
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

    shares_rows = True  # _read keeps this rank's rows as it reads them
    rank: int
    world: int
    held_out: float | None  # the validation share of train, when there is no validation file

    limit_of: Callable[[str], int]  # Task's

    def _read(self, metadata: dict[str, Any] | None, target_column: str) -> list[tuple[str, Any, Any]]:
        """This rank's rows (text, target, row) of every file, each with its split in ``split_of``. Every
        rank reads every row's text (to check it and to find its split) but keeps only its own."""
        from attnzoo.train.files import DataError, iter_table

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
        held_out = None if only or cfg.get("validation") else float(cfg.get("validation_fraction", 0.1))
        seed, limit = int(cfg.get("split_seed", 13)), cfg.get("limit")
        rows: list[tuple[str, Any, Any]] = []
        self.split_of: list[str] = []
        self.notes: list[str] = []
        self.split_counts: Counter[str] = Counter()  # every rank's rows of each split
        described: list[str] = []
        for split, path in sources.items():
            if not path:
                continue
            count = 0
            for row in iter_table(path, [self.text_column, target_column]):
                count += 1
                text = self._checked_text(row)
                side = split
                if held_out is not None and split == "train":
                    side = "train" if assign_split(text, seed, (1 - held_out, held_out, 0)) == "train" else "val"
                position = self.split_counts[side]
                self.split_counts[side] += 1
                if (limit and position >= self.limit_of(side)) or not owns(position, self.rank, self.world):
                    continue
                rows.append((text, row.values[target_column], row))
                self.split_of.append(side)
            if not count:
                raise DataError(f"{path}: no rows")
            described.append(f"{split} {path} ({count} rows)")
        self.dataset = "files: " + "; ".join(described)
        self.held_out = held_out
        return rows

    def _checked_text(self, row: Any) -> str:
        from attnzoo.train.files import DataError

        text = row.values[self.text_column]
        if text is not None and not isinstance(text, str):
            raise DataError(
                f"{row.where(self.text_column)}: the text is a {type(text).__name__} ({text!r:.40}), not a "
                f"string; write it as a JSON string"
            )
        if not text or not text.strip():
            raise DataError(f"{row.where(self.text_column)}: empty text; every row needs one")
        return text

    def _check_held_out(self, fraction: float) -> None:
        """The validation share of train: said, and refused when it leaves either side empty."""
        train, val = self.split_counts["train"], self.split_counts["val"]
        self.notes.append(
            f"validation: {val} of the {train + val} training rows (seeded, validation_fraction {fraction})"
        )
        if not (train and val):
            from attnzoo.train.files import DataError

            empty = "validation" if not val else "training"
            raise DataError(
                f"{self.config.get('train')}: holding out validation_fraction {fraction} of its {train + val} "
                f"rows leaves the {empty} split empty ({train} train, {val} validation); give a validation "
                f"file, more rows, or another validation_fraction"
            )

    def make_splits(self):
        if self.held_out is not None:  # after load(): the rows' own errors are said first
            self._check_held_out(self.held_out)
        splits: dict[str, list[int]] = {"train": [], "val": [], "test": []}
        for i, split in enumerate(self.split_of):
            splits[split].append(i)
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
        seen = {label for labels, split in found if split == "train" for label in labels}
        return sorted(set().union(*all_gather_objects(seen)))  # every rank's training rows

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
        from attnzoo.io.weights import sha256_file
        from attnzoo.train.files import files_of

        parts = []
        for key in ("train", "validation", "test", "evaluate_file", "labels_file"):
            if self.config.get(key):
                for file in files_of(self.config[key]) if key != "labels_file" else [Path(self.config[key])]:
                    parts.append(f"{key} {file.name} sha256 {sha256_file(file)}")  # read in blocks
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


class FileMultiLabel(FromFiles, MultiLabelTask):
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


class FileSingleLabel(FromFiles, SingleLabelTask):
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
        if metadata is None and len(self.class_names) < 2:  # a softmax over one class: loss 0, accuracy 1
            origin = "the labels_file lists" if self.config.get("labels_file") else "the training rows have"
            raise DataError(
                f"{self.config.get('labels_file') or self.config.get('train')}: a single-label task chooses "
                f"between at least 2 labels, and {origin} {len(self.class_names)} "
                f"({', '.join(self.class_names) or 'none'}); give rows of another label, or list every label "
                f"in a labels_file"
            )
        self.classes = [ids[0] for ids in self._index_labels(rows, parsed, self.class_names)]
        self.texts = [text for text, _, _ in rows]


class FileSeq2Seq(FromFiles, Seq2SeqTask):
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
            train = [refs for refs, split in zip(self.references, self.split_of, strict=True) if split == "train"]
            seen = {p for refs in train for ref in refs for p in ref}
            symbols = sorted(set().union(*all_gather_objects(seen)))  # every rank's training rows
            self.phonemes = Vocabulary(symbols, specials=("<pad>", "<s>", "</s>"))
        else:
            self.phonemes = Vocabulary.from_json(metadata["phonemes"])
            unknown = {p for refs in self.references for ref in refs for p in ref} - set(self.phonemes.tokens)
            if unknown:
                raise DataError(f"target symbols the model was not trained on: {', '.join(sorted(unknown)[:10])}")


FILE_TASKS = {"multi_label": FileMultiLabel, "single_label": FileSingleLabel, "seq2seq": FileSeq2Seq}
