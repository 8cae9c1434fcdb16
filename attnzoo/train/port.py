"""Fine-tuning a port: ``attnzoo train --model PORT_FOLDER --train x.csv``, where PORT_FOLDER is what
``attnzoo.save`` wrote for a converted keras-hub model with its tokenizer (``tokenizer.json`` and
``preprocessing.json`` beside the weights).

The port's tokenizer says what it is (``preprocessing.json``'s ``task``):

* ``text_classifier`` (BERT, DistilBERT, RoBERTa ``TextClassifier``): the file's text and label columns, one
  label a row; the classes are the training labels, sorted (whole numbers numerically: keras-hub's integer
  label k is output k), or a ``labels_file``'s order. When their count is
  not the head's, the head (the graph's output ``Dense``) is replaced by a new one of that many classes,
  initialised with a normal of standard deviation 0.02 and zero biases, and the log says so. Cross-entropy;
  accuracy and macro-F1.
* ``causal_lm``: the file's text column, each row packed as keras-hub's CausalLMPreprocessor packs it for
  training (start, the text's tokens, end, in ``max_len + 1`` positions: the model reads all but the last and
  learns where a text ends); next-token cross-entropy over each row's tokens (the padding masked),
  averaged per row and then over the rows, so that a step's loss is a mean over its rows as the trainer's
  accounting wants (shares.py); validation scores the mean next-token loss over every token of the split,
  its perplexity and the next-token accuracy, and keeps the epoch of the lowest loss.

Rows are encoded once with the port's tokenizer and packed per batch as its keras-hub preprocessor packs them
(``sequence_length``: ``data.max_len``, else the preprocessor's). The model's ``config`` section takes one
key, ``dropout``: every dropout rate of the graph set to it (``config.dropout=0`` makes a run deterministic,
as the torchrun test needs). The run folder is the trained port itself (float32, with its tokenizer), which
``attnzoo.load`` reads; its metadata holds the labels.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from attnzoo.errors import ConfigError
from attnzoo.train.distributed import all_sum
from attnzoo.train.file_tasks import FileSingleLabel, FromFiles
from attnzoo.train.task_kinds import Task

__all__ = [
    "is_port",
    "check_model_path",
    "port_kind",
    "load_port",
    "build_port_task",
    "fit_port",
    "PortClassifier",
    "PortCausalLM",
]

KINDS = {"text_classifier": "single_label", "causal_lm": "causal_lm"}  # the port's task -> data.task


def is_port(model: Any) -> bool:
    """Whether a recipe's ``model`` names a saved folder (a port) rather than a registered model."""
    return isinstance(model, str) and (Path(model) / "config.yaml").is_file()


def check_model_path(model: Any) -> None:
    """A ``--model`` that names a path but no saved model is refused before any work (it was read as a
    registered model's name, after the data, and refused for its letters)."""
    if not isinstance(model, str) or is_port(model):
        return
    if "/" not in model or ":" in model:  # a name (a folder of that name aside), or hf-hub:org/repo
        return
    path = Path(model)
    what = "a folder without config.yaml" if path.is_dir() else "a file" if path.exists() else "no such folder"
    raise ConfigError(
        f"--model {model}: {what}; --model takes a registered model's name (attnzoo list) or a folder "
        f"attnzoo.save wrote for a converted keras-hub model with its tokenizer (config.yaml, model.safetensors, "
        f"tokenizer.json, preprocessing.json)"
    )


def port_kind(folder: str | Path) -> str:
    """``text_classifier`` or ``causal_lm``: what the port's ``preprocessing.json`` says; a folder without a
    tokenizer is a ``ConfigError`` saying how to make one that has it, an unreadable record a ``WeightsError``
    naming the file."""
    from attnzoo.io.folders import folder_records
    from attnzoo.keras.tokenizer import Preprocessing

    path = Path(folder) / "preprocessing.json"
    name = folder_records(folder)[0]["name"]
    if not path.is_file() and name != "keras_model":
        raise ConfigError(
            f"--model {folder}: a saved {name}, not a converted keras-hub model; fine-tuning a port reads a "
            f"folder attnzoo.save wrote for one with its tokenizer. A registered model trains by its name "
            f"(--model {name}, with --resume in its run folder to continue one)"
        )
    if not path.is_file():
        raise ConfigError(
            f"--model {folder}: a saved model without a tokenizer (no preprocessing.json); fine-tuning reads the "
            f"texts with the port's own tokenizer: convert the keras-hub preset folder that holds it, or attach it "
            f"(model.tokenizer = attnzoo.keras.keras_hub_tokenizer(PRESET)), and attnzoo.save the model again"
        )
    kind = Preprocessing.from_json(path.read_bytes(), str(path)).task  # every field checked, the file named
    if kind not in KINDS:
        raise ConfigError(f"{path}: task {kind!r} is not one attnzoo fine-tunes ({', '.join(KINDS)})")
    return str(kind)


def load_port(folder: str | Path) -> Any:
    """The port a folder holds, with its tokenizer (``attnzoo.load``); its model must be the task its
    tokenizer packs for (:func:`_check_fits`)."""
    from attnzoo.core import load

    port_kind(folder)  # a folder without a tokenizer: said how to give it one
    model = load(folder)
    if getattr(model, "tokenizer", None) is None or not hasattr(model, "graph"):
        raise ConfigError(f"--model {folder}: not a converted keras-hub model carrying its tokenizer")
    _check_fits(model, folder)
    return model


def _check_fits(model: Any, folder: str | Path) -> None:
    """The model is a keras-hub task of its tokenizer's kind (a causal LM's logits, not a backbone's hidden
    states, which cross-entropy would read as scores over a vocabulary of the hidden size), and the tokenizer's
    ids index the model's vocabulary."""
    from attnzoo.keras.hub_families import hub_models

    record = model.tokenizer.preprocessing
    graph = model.graph if isinstance(model.graph, dict) else {}
    name = graph.get("keras_hub_class")
    entry = hub_models().get(name) if isinstance(name, str) else None
    if record.task == "causal_lm":
        fits, wanted = entry is not None and entry.kind == "causal_lm", "CausalLM"
    else:
        fits, wanted = isinstance(name, str) and name.endswith("TextClassifier"), "TextClassifier"
    if not fits:
        what = f"a keras-hub {name}" if isinstance(name, str) else f"the Keras model {str(graph.get('name'))[:60]!r}"
        raise ConfigError(
            f"--model {folder}: the model is {what}, and its tokenizer packs for a {record.task} "
            f"({record.preprocessor_class}); fine-tuning takes a keras-hub {wanted} with its own preset's "
            f"tokenizer: convert the task's preset or file (save_to_preset or model.save of the {wanted}), "
            f"not its backbone, and attnzoo.save it"
        )
    vocabulary = (graph.get("keras_hub_config") or {}).get("vocabulary_size")
    size = model.tokenizer.backend.get_vocab_size(with_added_tokens=True)
    if isinstance(vocabulary, int) and size > vocabulary:
        raise ConfigError(
            f"--model {folder}: its tokenizer has {size:,} tokens and the model's vocabulary {vocabulary:,}: the "
            f"tokenizer is not the model's own; attach the preset's (attnzoo.keras.keras_hub_tokenizer(PRESET))"
        )


def build_port_task(
    config: dict[str, Any],
    tokenizer: Any,
    *,
    rank: int = 0,
    world: int = 1,
    metadata: dict[str, Any] | None = None,
    head_labels: Any = None,
) -> Task:
    """The task of a port's data section: its ``data.task`` (default the port's own) must be the port's.
    ``metadata``: a fine-tuned port's, scoring an ``evaluate_file`` with the labels it was trained on;
    ``head_labels``: the labels a fine-tuned port's head was trained on, in its order (training it again)."""
    record = tokenizer.preprocessing
    kind = KINDS[record.task]
    given = config.get("task", kind)
    if given != kind:
        raise ConfigError(
            f"data.task {given!r}: the port is a {record.task} ({record.tokenizer_class}), which trains as "
            f"{kind!r}; leave data.task out"
        )
    if kind == "causal_lm" and config.get("labels") is not None:
        raise ConfigError("data.labels: a causal LM learns the text itself; remove --labels / data.labels")
    task = PortClassifier if kind == "single_label" else PortCausalLM
    return task(config, tokenizer, rank=rank, world=world, metadata=metadata, head_labels=head_labels)


def _output_dense(graph: dict[str, Any]) -> str | None:
    """The layer of the graph's one output when it is a ``Dense`` (a classifier's head), else None."""
    outputs = graph.get("outputs") or []
    if len(outputs) != 1:
        return None
    node = next((c for c in graph.get("calls", []) if c.get("id") == outputs[0][0]), None)
    name = node["layer"] if node is not None else None
    layer = graph["layers"].get(name) if name is not None else None
    return name if layer is not None and layer.get("op") == "dense" else None


def _with_dropout(graph: dict[str, Any], rate: float) -> None:
    if isinstance(graph.get("keras_hub_config"), dict) and "dropout" in graph["keras_hub_config"]:
        graph["keras_hub_config"]["dropout"] = rate
    for layer in graph["layers"].values():
        if "dropout" in layer and isinstance(layer["dropout"], (int, float)):
            layer["dropout"] = rate
        if layer.get("op") == "noise" and layer.get("kind") == "dropout":
            layer["rate"] = rate


def fit_port(port: Any, task: Any, config: dict[str, Any], say: Any) -> Any:
    """The port to train: its dropout as ``config.dropout`` says, and for a classifier a head of the task's
    class count (the port's own when the counts agree). The model is rebuilt from its edited graph and given
    the port's weights; the new head's are drawn from the current torch seed."""
    from attnzoo.core import create

    unknown = sorted(set(config) - {"dropout"})
    if unknown:
        raise ConfigError(
            f"config.{unknown[0]}: a port's architecture is its graph; fine-tuning takes config.dropout only"
        )
    graph = copy.deepcopy(port.graph)
    if "dropout" in config:
        rate = config["dropout"]
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate < 1:
            raise ConfigError(f"config.dropout must be a number in [0, 1), got {rate!r}")
        _with_dropout(graph, float(rate))
    # a learnt position table (GPT-2's, OPT's, BERT's) ends at its sequence_length; rotary positions do not end
    tables = [
        layer["sequence_length"]
        for layer in graph["layers"].values()
        if "position_embedding" in str(layer.get("op")) and isinstance(layer.get("sequence_length"), int)
    ]
    table, length = min(tables, default=None), getattr(task, "max_len", None)
    if table is not None and isinstance(length, int) and length > table:
        raise ConfigError(
            f"rows packed to {length} tokens (data.max_len, else the preprocessor's sequence_length) are past the "
            f"port's position table of {table} positions; give data.max_len={table} or less"
        )
    state, head = port.state_dict(), None
    if isinstance(task, PortClassifier):
        head = _output_dense(graph)
        if head is None:
            raise ConfigError("the port's output is not a Dense layer: not a keras-hub TextClassifier to fine-tune")
        classes, had = len(task.class_names), graph["layers"][head]["units"]
        shown = ", ".join(task.class_names[:10]) + (" ..." if classes > 10 else "")
        if classes != had:
            graph["layers"][head]["units"] = classes
            state = {k: v for k, v in state.items() if not k.startswith(f"layers.{head}.")}
            say(f"head: a new head of {classes} classes ({shown}) in place of the port's {had}")
        else:
            say(f"head: the port's {had} classes, as the labels {shown} (in that order)")
    model = create("keras_model", config={"graph": graph})
    missing, unexpected = model.load_state_dict(state, strict=False)
    new = [k for k in missing if head is not None and k.startswith(f"layers.{head}.")]
    if unexpected or set(missing) - set(new):
        raise ConfigError(
            f"the port's weights do not fit its graph (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    with torch.no_grad():
        for key in new:
            parameter = model.get_parameter(key)
            parameter.normal_(0.0, 0.02) if parameter.dim() > 1 else parameter.zero_()
    model.tokenizer = port.tokenizer
    return model


class PortTask:
    """What both port tasks share: rows read by :class:`FromFiles`, encoded with the port's tokenizer once,
    packed per batch; the model called on the packed dict."""

    name = "files"
    license = "the user's data"
    score_batch = 64  # a transformer's activations: smaller scoring passes than the zoo's models'
    config: dict[str, Any]
    texts: list[str]
    splits: dict[str, list[int]]

    def __init__(
        self,
        config: dict[str, Any],
        tokenizer: Any,
        *,
        rank: int = 0,
        world: int = 1,
        metadata: Any = None,
        head_labels: Any = None,
    ) -> None:
        self.config, self.rank, self.world, self.tokenizer = config, rank, world, tokenizer
        self.head_labels = list(head_labels) if isinstance(head_labels, list) else None
        self.max_len = _max_len(config.get("max_len"), tokenizer.sequence_length)
        self.load(metadata)  # type: ignore[attr-defined]
        self.splits = self.make_splits()  # type: ignore[attr-defined]
        self.encoded = tokenizer.encode(self.texts) if self.texts else []
        self._lengths: list[int] | None = None
        self.vocab: Any = None  # the port's tokenizer reads the texts

    def inputs(self, indices: list[int]) -> dict[str, torch.Tensor]:
        return self.tokenizer.pack([self.encoded[i] for i in indices], sequence_length=self.max_len)

    def metadata(self) -> dict[str, Any]:
        return {"task": self.name, "task_config": self.config, "data": self.describe_data()}  # type: ignore[attr-defined]


def _max_len(given: Any, default: int) -> int:
    """``data.max_len`` checked (0 was taken for "not given"): a row's start token and at least one more."""
    if given is None:
        return int(default)
    if isinstance(given, bool) or not isinstance(given, int) or given < 2:
        raise ConfigError(
            f"data.max_len must be a whole number >= 2 (a row's start token and one more), got {given!r:.40}; "
            f"leave it out for the preprocessor's sequence_length {default}"
        )
    return given


def _on(batch: dict[str, torch.Tensor], model: Any) -> dict[str, torch.Tensor]:
    device = next(model.parameters()).device
    return {k: v.to(device) for k, v in batch.items()}


class PortClassifier(PortTask, FileSingleLabel):
    """A keras-hub TextClassifier port on the file's text and label columns (the module docstring)."""

    def _label_names(self, metadata, found):
        """The sorted training labels, but a fine-tuned port's own order where they are the labels its head
        learnt (training it again), and whole numbers in their numeric order: keras-hub's classifiers learn
        integer labels, label k at output k, so a kept head's output 2 is label 2, not "10" of 12."""
        names = super()._label_names(metadata, found)
        if metadata is not None or self.config.get("labels_file"):
            return names
        if self.head_labels is not None and sorted(self.head_labels) == names:
            return list(self.head_labels)
        return sorted(names, key=int) if all(n.isascii() and n.isdigit() for n in names) else names

    def batch(self, indices):
        return {**self.inputs(indices), "target": torch.tensor([self.classes[i] for i in indices])}

    def loss(self, model, batch, label_smoothing=0.0):
        inputs = {k: v for k, v in batch.items() if k != "target"}
        return F.cross_entropy(model(inputs), batch["target"], label_smoothing=label_smoothing)

    def _pass_logits(self, model, rows):
        return model(_on(self.inputs(rows), model)).float().cpu()

    def metadata(self):
        return {**PortTask.metadata(self), "labels": self.class_names, "output": "multiclass"}


def _token_losses(model, batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each next-token prediction's loss [B, L], whether it counts and whether it is right: keras-hub's
    ``(x, y, sample_weight)`` of rows packed to L + 1 (:meth:`PortCausalLM.inputs`), the model reading
    ``x = token_ids[:, :-1]`` and predicting ``y = token_ids[:, 1:]`` where ``padding_mask[:, 1:]``."""
    ids, mask = batch["token_ids"], batch["padding_mask"]
    logits = model({k: v[:, :-1] for k, v in batch.items()}).float()
    target = ids[:, 1:]
    losses = F.cross_entropy(logits.transpose(1, 2), target, reduction="none")
    return losses, mask[:, 1:].bool(), logits.argmax(-1) == target


class PortCausalLM(PortTask, FromFiles, Task):
    """A keras-hub CausalLM port on the file's text column (the module docstring)."""

    main_metric = "loss"
    lower_is_better = True
    row_fields = ("texts",)

    def load(self, metadata):
        rows = self._read(metadata, self.config.get("text", "text"))
        self.texts = [text for text, _, _ in rows]

    def inputs(self, indices):
        """As keras-hub's CausalLMPreprocessor packs a row for training (not ``generate_preprocess``): the start
        token, the text's tokens cut to leave room for both, the end token, padded to ``max_len + 1``."""
        record = self.tokenizer.preprocessing
        tail = [record.end_token_id] if record.end_token_id is not None else []
        room = self.max_len + 1 - len(tail) - (record.start_token_id is not None)
        rows = [self.encoded[i][:room] + tail for i in indices]
        return self.tokenizer.pack(rows, sequence_length=self.max_len + 1)

    def batch(self, indices):
        return self.inputs(indices)

    def loss(self, model, batch, label_smoothing=0.0):
        losses, counts, _ = _token_losses(model, batch)
        per_row = (losses * counts).sum(1) / counts.sum(1).clamp(min=1)
        return per_row.mean()

    def evaluate(self, model, indices, batch_size=None):
        model.eval()
        sums = torch.zeros(3, dtype=torch.float64)  # loss, tokens, right
        batch_size = batch_size or self.score_batch
        with torch.no_grad():
            for start in range(0, len(indices), batch_size):
                losses, counts, right = _token_losses(
                    model, _on(self.batch(indices[start : start + batch_size]), model)
                )
                sums += torch.tensor(
                    [(losses * counts).sum().item(), counts.sum().item(), (right & counts).sum().item()]
                )
        loss, tokens, hits = all_sum(sums).tolist()
        mean = loss / tokens if tokens else 0.0
        return {
            "loss": mean,
            "perplexity": math.exp(min(mean, 50.0)),
            "token_accuracy": hits / tokens if tokens else 0.0,
        }

    def label_tensors(self, batch_size):
        size = self.tokenizer.backend.get_vocab_size(with_added_tokens=True)
        return [
            (
                f"a training batch's logits and their gradient [{batch_size}, {self.max_len}, {size:,}] (float32)",
                batch_size * self.max_len * size * 4 * 2,
                "lower train.batch_size or data.max_len",
            )
        ]

    def metadata(self):
        return {**PortTask.metadata(self), "output": "causal_lm"}
