"""Inference with shipped weights: ``attnzoo predict NAME TEXT [--attention out.png]``.

Everything needed comes from the weights file's metadata: the task, its vocabulary and labels, the
decision threshold (multi-label), the phoneme inventory (G2P). ``draw_attention`` plots the weights the
model put on each token: one row per predicted label, or the phoneme-to-letter alignment for G2P.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..errors import ConfigError
from .vocab import Vocabulary, tokenize

__all__ = ["Prediction", "predict", "draw_attention"]


@dataclass
class Prediction:
    output: str  # multilabel | multiclass | g2p
    tokens: list[str]  # what the model read (words, or letters for G2P)
    labels: list[tuple[str, float]] = field(default_factory=list)  # best first, with probabilities
    phonemes: list[str] = field(default_factory=list)
    attention: torch.Tensor | None = None  # [rows, tokens]
    rows: list[str] = field(default_factory=list)  # what each attention row is

    def text(self) -> str:
        if self.output == "g2p":
            return " ".join(self.phonemes)
        return "\n".join(f"{p:.3f}  {name}" for name, p in self.labels)


def predict(model: Any, text: str, top: int = 5) -> Prediction:
    """Run a pretrained model (built by ``attnzoo.create(..., pretrained=True)``) on one text."""
    meta = getattr(model, "attnzoo_metadata", None) or {}
    if "task" not in meta:
        raise ConfigError("predict needs pretrained weights that carry their vocabulary (attnzoo list --pretrained)")
    vocab = Vocabulary.from_json(meta["vocab"])
    max_len = int(meta["task_config"].get("max_len", 64))
    model.eval()
    if meta["output"] == "g2p":
        letters = list(text.strip().lower())[:max_len]
        ids = torch.tensor([vocab.encode(letters)])
        phoneme_vocab = Vocabulary.from_json(meta["phonemes"])
        out, attention = model.generate(ids)
        symbols = []
        for i in out[0].tolist():
            if i in (0, 2):
                break
            symbols.append(phoneme_vocab.tokens[i])
        return Prediction("g2p", letters, phonemes=symbols, attention=attention[0, : len(symbols)], rows=symbols)
    words = tokenize(text)[:max_len]
    if not words:
        raise ConfigError("the text has no words to classify")
    ids = torch.tensor([vocab.encode(words)])
    with torch.no_grad():
        logits, attention = model(ids, return_attention=True)
    names = meta["labels"]
    if meta["output"] == "multilabel":
        probs = torch.sigmoid(logits[0])
        order = probs.argsort(descending=True)[:top].tolist()
        rows = attention[0, order]  # one distribution per label
    else:
        probs = torch.softmax(logits[0], -1)
        order = probs.argsort(descending=True)[:top].tolist()
        rows = attention[0:1]  # one pooling distribution
    labels = [(names[i], float(probs[i])) for i in order]
    row_names = [names[i] for i in order] if meta["output"] == "multilabel" else ["attention"]
    return Prediction(meta["output"], words, labels=labels, attention=rows, rows=row_names)


def draw_attention(prediction: Prediction, path: str | Path, title: str = "") -> Path:
    """A heat map of the attention: rows are labels (or phonemes), columns the tokens (or letters)."""
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("drawing attention needs matplotlib: pip install 'attnzoo[train]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    weights = prediction.attention.detach().float().numpy()
    height = max(2.0, 0.45 * len(prediction.rows) + 1.2)
    width = max(4.0, 0.5 * len(prediction.tokens) + 2.5)
    fig, ax = plt.subplots(figsize=(width, height))
    ax.imshow(weights, aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(prediction.tokens)), prediction.tokens, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(len(prediction.rows)), prediction.rows, fontsize=8)
    ax.set_title(title or ("alignment" if prediction.output == "g2p" else "attention over the text"), fontsize=9)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
