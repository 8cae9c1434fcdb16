"""Scoring trained weights: on a data file of the user's (``attnzoo evaluate RUN FILE``) or, for shipped
weights, on their own task's test split or fixed subset, from the weights' metadata alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from attnzoo.core import create, load
from attnzoo.core.record import RunRecord
from attnzoo.errors import ConfigError
from attnzoo.layers.modes import kept_modes
from attnzoo.train.tasks import build_task, task_of

__all__ = ["evaluate_file", "evaluate_pretrained"]


def evaluate_file(
    model_or_path: Any, path: str | Path, *, columns: dict[str, str] | None = None, threshold: float | None = None
) -> dict[str, Any]:
    """Score a trained model (a run folder, weights file, pretrained name or module) on a data file.

    The file is read with the data settings the model was trained with (columns, separator), which
    ``columns`` (``text``, ``labels``, ``target``, ``label_separator``) can override; the vocabulary,
    labels and the decision threshold (tuned on validation) come from the weights. A label the model
    does not know is an error naming the file and line."""

    if isinstance(model_or_path, torch.nn.Module):
        model = model_or_path
    elif Path(model_or_path).exists():
        model = load(model_or_path)
    else:
        model = create(str(model_or_path), pretrained=True)
    record = RunRecord.of(model, model_or_path if isinstance(model_or_path, (str, Path)) else None)
    kinds = {"multilabel": "multi_label", "multiclass": "single_label", "g2p": "seq2seq", "causal_lm": "causal_lm"}
    port = getattr(model, "tokenizer", None) is not None and hasattr(model, "graph")  # a fine-tuned port
    if not (record.trained or (port and record.task == "files")) or record.output not in kinds:
        raise ConfigError("evaluate needs weights written by attnzoo train (they carry the vocabulary and labels)")
    config = dict(record.task_config)
    if config.get("name") != "files":  # a bundled task's model, scored on the user's file
        config = {"name": "files", "task": kinds[record.output], "max_len": record.max_len}
    config.setdefault("task", kinds[record.output])  # a data: section that left the task to be inferred
    config.update({k: v for k, v in (columns or {}).items() if v is not None})
    config["evaluate_file"] = str(path)
    for key in ("train", "validation", "test", "labels_file"):
        config.pop(key, None)
    metadata = record.to_metadata()
    if threshold is not None:  # the task decides at the threshold it is built with
        metadata["threshold"] = float(threshold)
    if port:  # read with the port's own tokenizer, packed as training packed it (port.py)
        from attnzoo.train.port import build_port_task

        task = build_port_task(config, model.tokenizer, metadata=metadata)
    else:
        task = build_task(config, metadata=metadata)
    indices = task.splits["test"]
    with kept_modes(model):  # scored in eval mode; a caller's model (mid-training) gets its modes back
        scores = task.evaluate(model, indices)
    out: dict[str, Any] = {"file": str(path), "rows": len(indices), "task": config["task"], **scores}
    if getattr(task, "threshold", None) is not None and config["task"] == "multi_label":
        out["threshold"] = task.threshold
    return out


def evaluate_pretrained(name: str, *, subset: bool = True, split: str = "test") -> dict[str, float]:
    """Re-evaluate shipped weights on their task's test split (or its fixed subset), from the weights'
    own metadata: the vocabulary, labels, threshold and split settings they were trained with."""

    model = create(name, pretrained=True).eval()
    record = RunRecord.of(model, name)
    task = task_of(record, source=name)
    indices = task.subset(int(record.check_subset or 2000)) if subset else task.splits[split]
    return task.evaluate(model, indices)
