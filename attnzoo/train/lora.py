"""LoRA on a port: ``train.lora: {rank, alpha, targets, save}`` (the ``lora`` extra: peft and transformers).

A port's attention projections are Keras's einsum kernels, not ``nn.Linear`` layers, so peft cannot wrap the
port itself; it wraps the port's Hugging Face form instead. The port (its head and dropout fitted, port.py)
is written with :func:`attnzoo.keras.to_transformers`, loaded with transformers' ``AutoModelForSequenceClassification``
or ``AutoModelForCausalLM``, and ``peft.get_peft_model`` puts LoRA adapters on the modules ``targets`` names
(transformers' names: ``query``, ``value`` for BERT, ``c_attn`` for GPT-2; a classifier's head is trained
whole, peft's ``SEQ_CLS`` task). :class:`LoraPort` calls it on the packed dict the tasks give, so the trainer,
its checkpoints and torchrun are the same.

The run folder holds ``base/`` (the Hugging Face folder the adapters were put on, with its tokenizer) and, by
``save``, ``adapter/`` (``peft``'s ``save_pretrained``: ``PeftModel.from_pretrained(base, adapter)``) or
``merged/`` (the adapters merged into the weights: a Hugging Face folder of its own).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from attnzoo.errors import ConfigError, extra_import_message

__all__ = ["LORA_KEYS", "check_lora", "LoraPort", "lora_port", "save_lora"]

LORA_KEYS = ("rank", "alpha", "targets", "save", "dropout")
SAVES = ("adapter", "merged")


def check_lora(value: Any, port: bool) -> dict[str, Any] | None:
    """``train.lora`` checked: ``rank`` (default 8), ``alpha`` (default the rank), ``targets`` (required:
    module names of the Hugging Face form), ``save`` (adapter or merged), ``dropout`` (default 0); None when
    absent."""
    if value is None:
        return None
    if not port:
        raise ConfigError("train.lora fine-tunes a port (--model PORT_FOLDER); a registered model trains whole")
    if not isinstance(value, dict):
        raise ConfigError("train.lora must be a mapping: {rank: 8, alpha: 16, targets: [query, value]}")
    unknown = sorted(set(value) - set(LORA_KEYS))
    if unknown:
        raise ConfigError(f"unknown key train.lora.{unknown[0]}; valid keys: {', '.join(LORA_KEYS)}")
    rank = value.get("rank", 8)
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ConfigError(f"train.lora.rank must be a whole number >= 1, got {rank!r}")
    alpha = value.get("alpha", rank)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha <= 0:
        raise ConfigError(f"train.lora.alpha must be a number > 0, got {alpha!r}")
    targets = value.get("targets")
    if isinstance(targets, str):
        targets = [targets]
    if not targets or not isinstance(targets, list) or not all(isinstance(t, str) and t for t in targets):
        raise ConfigError(
            "train.lora.targets must name the modules of the port's Hugging Face form to adapt, such as "
            "[query, value] (BERT) or [c_attn] (GPT-2)"
        )
    save = value.get("save", "adapter")
    if save not in SAVES:
        raise ConfigError(f"train.lora.save must be adapter or merged, got {save!r}")
    dropout = value.get("dropout", 0.0)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise ConfigError(f"train.lora.dropout must be a number in [0, 1), got {dropout!r}")
    return {"rank": rank, "alpha": float(alpha), "targets": list(targets), "save": save, "dropout": float(dropout)}


def _libraries() -> tuple[Any, Any]:
    try:
        import peft
        import transformers
    except ImportError as e:
        raise ConfigError(
            extra_import_message("train.lora needs peft and transformers", "lora", e, "peft", "transformers")
        ) from None
    return peft, transformers


class LoraPort(torch.nn.Module):
    """A peft-wrapped transformers model called as the port is: on ``token_ids``, ``padding_mask`` (and
    ``segment_ids``), giving the logits."""

    def __init__(self, model: Any, tokenizer: Any, base: Path, workdir: Any) -> None:
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.base = base  # the Hugging Face folder the adapters were put on
        self._workdir = workdir  # kept alive as long as the model

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        named = {"input_ids": inputs["token_ids"], "attention_mask": inputs["padding_mask"]}
        if "segment_ids" in inputs:
            named["token_type_ids"] = inputs["segment_ids"]
        return self.model(**named).logits


def lora_port(fitted: Any, settings: dict[str, Any], causal: bool) -> LoraPort:
    """The fitted port's Hugging Face form with LoRA adapters (the module docstring)."""
    from attnzoo.keras import to_transformers

    peft, transformers = _libraries()
    workdir = tempfile.TemporaryDirectory(prefix="attnzoo-lora-")
    base = Path(workdir.name) / "base"
    to_transformers(fitted, base)
    auto = transformers.AutoModelForCausalLM if causal else transformers.AutoModelForSequenceClassification
    model = auto.from_pretrained(base, dtype=torch.float32)
    # transformers' Conv1D (GPT-2's projections) holds its weight [in, out]: peft wants fan_in_fan_out for it, and
    # sets it itself with a warning a layer when not told
    targeted = [m for n, m in model.named_modules() if n.rsplit(".", 1)[-1] in settings["targets"]]
    conv1d = bool(targeted) and all(isinstance(m, transformers.pytorch_utils.Conv1D) for m in targeted)
    config = peft.LoraConfig(
        r=settings["rank"],
        lora_alpha=settings["alpha"],
        lora_dropout=settings["dropout"],
        target_modules=settings["targets"],
        task_type="CAUSAL_LM" if causal else "SEQ_CLS",
        fan_in_fan_out=conv1d,
    )
    try:
        wrapped = peft.get_peft_model(model, config)
    except ValueError as e:  # peft's own words: no module matched the targets
        # GPT-2's projections are transformers' Conv1D, which peft adapts as it adapts a Linear
        kinds = (torch.nn.Linear, transformers.pytorch_utils.Conv1D)
        head = set() if causal else {"classifier", "score"}  # peft's SEQ_CLS trains these whole, never adapts them
        found = {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, kinds)}
        whole = sorted(found & head & set(settings["targets"]))
        said = f"; the classifier's head ({', '.join(whole)}) trains whole beside the adapters" if whole else ""
        raise ConfigError(
            f"train.lora.targets {settings['targets']}: {' '.join(str(e).split())[:200]}; the Hugging Face form's "
            f"linear layers to adapt are named {', '.join(sorted(found - head)[:12])}{said}"
        ) from None
    return LoraPort(wrapped, fitted.tokenizer, base, workdir)


def save_lora(model: LoraPort, output: Path, save: str) -> None:
    """``base/`` and ``adapter/`` or ``merged/`` in the run folder (the module docstring)."""
    output.mkdir(parents=True, exist_ok=True)
    for name in ("base", *SAVES):
        shutil.rmtree(output / name, ignore_errors=True)
    shutil.copytree(model.base, output / "base")
    if save == "adapter":
        model.model.save_pretrained(output / "adapter")
        return
    merged = model.model.merge_and_unload()
    merged.save_pretrained(output / "merged")
    for file in model.base.iterdir():  # the tokenizer's files
        if file.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(file, output / "merged" / file.name)
