"""Text in, labels (or phonemes) out: ``attnzoo.predict`` and ``attnzoo predict``.

    >>> import attnzoo
    >>> result = attnzoo.predict("bilstm_labelwise.wordnet", "a large wild cat with a striped coat")
    >>> [(label.name, round(label.probability, 2)) for label in result.labels]

Everything needed comes from the weights' metadata: the task, its vocabulary, labels (with display
names and descriptions where the data set has them), the decision threshold (multi-label), the
phoneme inventory (G2P). The model is a pretrained name (``bilstm_labelwise.wordnet``), a run folder or
weights file written by ``attnzoo train`` or ``attnzoo.save``, or a module that carries such metadata.

``result.plot_attention(path)`` (or ``attnzoo.plot_attention(result, path)``; :mod:`attnzoo.train.attention_map`)
draws the weights the model put on each token: one row per label with its probability (threshold marked),
or the phoneme-to-letter alignment for G2P, with a colour bar.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import torch

from attnzoo.core import create, load
from attnzoo.core.record import RunRecord
from attnzoo.errors import ConfigError, UnknownTokensWarning
from attnzoo.io.text import Vocabulary, pad_batch, printable, tokenize
from attnzoo.layers.modes import kept_modes

__all__ = [
    "Label",
    "Prediction",
    "UnknownTokensWarning",
    "predict",
    "predict_one",
    "trained_model",
    "label_info",
]

PREDICT_BATCH = 64  # texts per forward in predict (sorted by length, so little padding)
UNKNOWN_SHARE = 0.5  # warn when more than this share of a text's tokens is outside the vocabulary


@dataclass
class Label:
    id: str  # the label as the data set names it (e.g. a WordNet synset id)
    name: str  # a display name (e.g. the synset's first lemma)
    probability: float
    above_threshold: bool  # multi-label: probability >= the model's threshold; single-label: the argmax
    description: str = ""  # e.g. the WordNet gloss


@dataclass
class Prediction:
    text: str
    output: str  # multilabel | multiclass | g2p
    tokens: list[str]  # what the model read (words, or letters for G2P), unknown ones included
    unknown: int = 0  # how many of them are outside the vocabulary
    labels: list[Label] = field(default_factory=list)  # best first
    threshold: float | None = None  # multi-label decision threshold
    phonemes: list[str] = field(default_factory=list)
    attention: torch.Tensor | None = None  # [rows, tokens], with return_attention
    rows: list[str] = field(default_factory=list)  # what each attention row is
    warnings: list[str] = field(default_factory=list)

    def plot_attention(self, path: str | Path, title: str = "") -> Path:
        """Draw this prediction's attention into ``path`` (.png, .pdf, .svg): the picture ``attnzoo predict
        --attention`` draws, labels (with their probabilities and the threshold) or phonemes down, tokens
        across, texts drawn as written. Needs ``predict(..., return_attention=True)`` and matplotlib."""
        from attnzoo.train.attention_map import plot_attention

        return plot_attention(self, path, title)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the fields that mean something for this output kind."""
        out: dict[str, Any] = {
            "text": self.text,
            "output": self.output,
            "tokens": self.tokens,
            "unknown_tokens": self.unknown,
            "warnings": self.warnings,
        }
        if self.output == "g2p":
            out["phonemes"] = self.phonemes
        else:
            out["labels"] = [vars(label) for label in self.labels]
            if self.threshold is not None:
                out["threshold"] = self.threshold
        if self.attention is not None:
            out["attention"] = {"rows": self.rows, "weights": self.attention.tolist()}
        return out

    def render(self) -> str:
        """Plain text: the phonemes, or one line per label (``*`` marks those above the threshold). Label
        names and descriptions come from the run's files (a CSV's label column): every line goes through
        :func:`~attnzoo.io.text.printable`, so a name holding terminal escapes is shown, never sent."""
        if self.output == "g2p":
            lines = [" ".join(self.phonemes)]
        else:
            lines = [
                f"{'*' if label.above_threshold else ' '} {label.probability:.3f}  {label.name}"
                + (f" ({label.id})" if label.id != label.name else "")
                + (f": {label.description}" if label.description else "")
                for label in self.labels
            ]
            if self.output == "multilabel":
                lines.append(f"(* = at or above the threshold {self.threshold:.2f})")
        return "\n".join(printable(line) for line in lines + [f"warning: {w}" for w in self.warnings])


def label_info(metadata: RunRecord | dict[str, Any]) -> list[dict[str, str]]:
    """Per label: ``id``, display ``name`` and ``description`` (from the record's ``label_info`` when the
    trainer wrote it; else WordNet ids ``lemma.n.offset`` give their lemma as the name)."""
    record = _record(metadata)
    ids = list(record.labels or [])
    given = record.label_info
    if given and len(given) == len(ids):
        return [
            {"id": i, "name": g.get("name") or i, "description": g.get("description", "")}
            for i, g in zip(ids, given, strict=True)
        ]
    return [{"id": i, "name": _display_name(i), "description": ""} for i in ids]


def _display_name(label: str) -> str:
    parts = label.split(".")
    if len(parts) >= 3 and parts[-2] in ("n", "v", "a", "r", "s") and parts[-1].isdigit():
        return ".".join(parts[:-2]).replace("_", " ")
    return label


def trained_model(model_or_name: Any) -> tuple[torch.nn.Module, RunRecord]:
    """A trained model and its record, from a pretrained name, a run folder or weights file written by
    ``attnzoo train`` (loaded in eval mode), or the module itself (returned in the mode it is in: the
    caller's); a ConfigError for anything that has no record."""

    if isinstance(model_or_name, torch.nn.Module):
        model = model_or_name
    elif isinstance(model_or_name, (str, Path)):
        path = Path(model_or_name)
        model = load(path) if path.exists() else create(str(model_or_name), pretrained=True)
    else:
        raise ConfigError(f"predict takes a model, a pretrained name or a path, got {type(model_or_name).__name__}")
    record = RunRecord.of(model, model_or_name if isinstance(model_or_name, (str, Path)) else None)
    if _is_port(model) and record.task == "files" and record.output == "causal_lm":
        raise ConfigError(
            "predict gives a classifier's labels; a fine-tuned causal LM writes text: "
            "attnzoo.load(RUN_FOLDER).generate(...) (docs/keras-hub-lm.md)"
        )
    if not (record.trained or (_is_port(model) and record.task == "files")) or record.output is None:
        raise ConfigError(
            "predict needs weights that carry their vocabulary and labels: a pretrained name "
            "(attnzoo list --pretrained), or a run folder or file written by attnzoo train"
        )
    return (model if model is model_or_name else model.eval()), record


def _is_port(model: Any) -> bool:
    """A converted keras-hub model carrying its tokenizer (a fine-tuned port's run folder, port.py)."""
    return getattr(model, "tokenizer", None) is not None and hasattr(model, "graph")


def _classify_port(model, meta: RunRecord, texts: list[str], *, top: int | None) -> list[Prediction]:
    """A fine-tuned keras-hub classifier's labels: the texts packed by its own tokenizer, as training packed
    them (``max_len`` its ``data.max_len``, else the preprocessor's), softmax over the run's labels."""
    length = meta.task_config.get("max_len") or model.tokenizer.sequence_length
    device = next(model.parameters()).device
    info, results = label_info(meta), []
    with torch.no_grad():
        for start in range(0, len(texts), PREDICT_BATCH):
            chunk = texts[start : start + PREDICT_BATCH]
            packed = model.tokenizer.tokenize(chunk, sequence_length=length)
            logits = model({k: v.to(device) for k, v in packed.items()})
            probs = torch.softmax(logits.float(), -1).cpu()
            for row, text in enumerate(chunk):
                tokens = model.tokenizer.backend.encode(text, add_special_tokens=False).tokens
                results.append(_ranked(text, "multiclass", tokens, 0, probs[row], None, info, top, None, []))
    return results


def _vocabulary(record: RunRecord) -> Vocabulary:
    if record.vocab is None:
        raise ConfigError("this model's weights carry no vocabulary; predict takes models written by attnzoo train")
    return Vocabulary.from_json(record.vocab)


def _record(metadata: RunRecord | dict[str, Any]) -> RunRecord:
    return metadata if isinstance(metadata, RunRecord) else RunRecord.from_metadata(metadata)


@overload
def predict(
    model_or_name: Any,
    texts: str,
    *,
    top: int | None = 5,
    threshold: float | None = None,
    return_attention: bool = False,
    beam_size: int = 1,
) -> Prediction: ...


@overload
def predict(
    model_or_name: Any,
    texts: list[str],
    *,
    top: int | None = 5,
    threshold: float | None = None,
    return_attention: bool = False,
    beam_size: int = 1,
) -> list[Prediction]: ...


def predict(
    model_or_name: Any,
    texts: str | list[str],
    *,
    top: int | None = 5,
    threshold: float | None = None,
    return_attention: bool = False,
    beam_size: int = 1,
) -> Prediction | list[Prediction]:
    """Run a model with its vocabulary on one text (-> a :class:`Prediction`) or a list (-> a list).

    ``top``: how many labels to return, best first (None: all). ``threshold``: the multi-label decision
    threshold (default: the one tuned on validation and stored with the weights). ``return_attention``:
    attach the attention rows. ``beam_size``: G2P decoding (1 = greedy). A text whose tokens are mostly
    unknown to the vocabulary gets an :class:`UnknownTokensWarning` and a line in ``warnings``.
    """
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise ConfigError(f"top must be a positive integer or None, got {top!r}")
    if threshold is not None and (
        isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or not 0.0 <= threshold <= 1.0
    ):
        raise ConfigError(f"threshold must be a probability in [0, 1] (a number) or None, got {threshold!r:.40}")
    single = isinstance(texts, str)
    iterable = isinstance(texts, Iterable) and not isinstance(texts, (bytes, Mapping))  # a list, a pandas column
    batch = [texts] if isinstance(texts, str) else list(texts) if iterable else None
    if batch is None or not all(isinstance(t, str) for t in batch):
        shown = type(texts).__name__ if batch is None else "a list holding something else"
        raise ConfigError(f"predict takes a text (a string) or a list of texts, got {shown}")
    model, meta = trained_model(model_or_name)
    with kept_modes(model):  # a caller's model (mid-training, say) gets its modes back: dropout stays on
        model.eval()
        if _is_port(model):
            if return_attention:
                raise ConfigError("return_attention: a fine-tuned port's attention is not drawn; leave it out")
            results = _classify_port(model, meta, batch, top=top)
        elif meta.output != "g2p":
            results = _classify(model, meta, batch, top=top, threshold=threshold, return_attention=return_attention)
        else:
            results = []
            for text in batch:  # a loop, not a comprehension, so that warnings point at the caller's line
                results.append(
                    predict_one(
                        model,
                        meta,
                        text,
                        top=top,
                        threshold=threshold,
                        return_attention=return_attention,
                        beam_size=beam_size,
                        _stack=4,
                    )
                )
    return results[0] if single else results


def predict_one(
    model,
    meta: RunRecord | dict[str, Any],
    text: str,
    *,
    top: int | None,
    threshold: float | None,
    return_attention: bool,
    beam_size: int = 1,
    _stack: int = 3,
) -> Prediction:
    """One text through a resolved model and its record (see :func:`predict`)."""
    meta = _record(meta)
    if meta.output == "g2p":
        device = next(model.parameters()).device
        return _predict_g2p(model, meta, text, beam_size, return_attention, device, _stack + 1)
    return _classify(
        model, meta, [text], top=top, threshold=threshold, return_attention=return_attention, stack=_stack + 1
    )[0]


def _classify(
    model,
    meta: RunRecord,
    texts: list[str],
    *,
    top: int | None,
    threshold: float | None,
    return_attention: bool,
    stack: int = 4,
) -> list[Prediction]:
    """Texts through a text classifier in batches of ``PREDICT_BATCH``, each batch of similar lengths.

    The vocabulary and label table are read once; every text is checked (and warned about) before the
    first forward. Rows are right-padded with 0 and masked (``mask = ids != 0``, the text models' own
    default), so a text's result does not depend on the batch it lands in.
    """
    vocab = _vocabulary(meta)
    max_len = meta.max_len
    device = next(model.parameters()).device
    words, ids, unknown, notes = [], [], [], []
    for text in texts:  # a loop, so that warnings point at the caller's line
        read = tokenize(text)[:max_len]
        if not read:
            raise ConfigError(f"the text {text!r} has no words to classify")
        encoded = vocab.encode(read)
        words.append(read)
        ids.append(encoded)
        unknown.append(sum(i == vocab.unk for i in encoded))
        notes.append(_unknown_warning(text, unknown[-1], len(read), stack))
    info = label_info(meta)
    multilabel = meta.output == "multilabel"
    recorded = 0.5 if meta.threshold is None else meta.threshold
    cut = (float(recorded) if threshold is None else float(threshold)) if multilabel else None
    results: list[Prediction | None] = [None] * len(texts)
    by_length = sorted(range(len(texts)), key=lambda i: len(ids[i]))
    with torch.no_grad():
        for start in range(0, len(by_length), PREDICT_BATCH):
            chunk = by_length[start : start + PREDICT_BATCH]
            tokens = pad_batch([ids[i] for i in chunk]).to(device)
            out = model(tokens, tokens != 0, return_attention=return_attention)
            logits, attention = out if return_attention else (out, None)
            probs = (torch.sigmoid(logits.float()) if multilabel else torch.softmax(logits.float(), -1)).cpu()
            for row, i in enumerate(chunk):
                results[i] = _ranked(
                    texts[i],
                    str(meta.output),
                    [vocab.tokens[t] if t != vocab.unk else w for t, w in zip(ids[i], words[i], strict=True)],
                    unknown[i],
                    probs[row],
                    None if attention is None else attention[row, ..., : len(ids[i])],
                    info,
                    top,
                    cut,
                    notes[i],
                )
    return [r for r in results if r is not None]


def _ranked(
    text: str,
    output: str,
    tokens: list[str],
    unknown: int,
    probs: torch.Tensor,
    attention: torch.Tensor | None,
    info: list[dict[str, str]],
    top: int | None,
    cut: float | None,
    notes: list[str],
) -> Prediction:
    """One text's :class:`Prediction` from its probabilities [L] and attention ([L, T] per label for a
    multi-label model, [T] for a pooling one)."""
    order = probs.argsort(descending=True).tolist()[:top]
    # multi-label: each label against the threshold; single-label: the argmax only
    flags = [bool(probs[k] >= cut) for k in order] if cut is not None else [n == 0 for n in range(len(order))]
    labels = [
        Label(info[k]["id"], info[k]["name"], float(probs[k]), flag, info[k]["description"])
        for k, flag in zip(order, flags, strict=True)
    ]
    rows, names = None, []
    if attention is not None:  # one distribution per label shown, or the one pooling distribution
        rows = attention[order] if output == "multilabel" else attention.unsqueeze(0)
        names = [label.name for label in labels] if output == "multilabel" else ["attention"]
    return Prediction(
        text,
        output,
        tokens,
        unknown,
        labels,
        cut,
        attention=None if rows is None else rows.float().cpu(),
        rows=names,
        warnings=notes,
    )


def _predict_g2p(model, meta: RunRecord, text, beam_size, return_attention, device, stack) -> Prediction:
    vocab = _vocabulary(meta)
    letters = list(text.strip().lower())[: meta.max_len]
    if not letters:
        raise ConfigError("the text is empty: give a word to pronounce")
    ids = vocab.encode(letters)
    unknown = sum(i == vocab.unk for i in ids)
    if meta.phonemes is None:
        raise ConfigError("this G2P model's weights carry no phoneme vocabulary; it was not written by attnzoo train")
    phoneme_vocab = Vocabulary.from_json(meta.phonemes)
    out, attention = model.generate(torch.tensor([ids], device=device), beam_size=beam_size)
    symbols = []
    for i in out[0].tolist():
        if i in (0, 2):
            break
        symbols.append(phoneme_vocab.tokens[i])
    return Prediction(
        text,
        "g2p",
        letters,
        unknown,
        phonemes=symbols,
        attention=attention[0, : len(symbols)].float().cpu() if return_attention else None,
        rows=symbols if return_attention else [],
        warnings=_unknown_warning(text, unknown, len(letters), stack),
    )


def _unknown_warning(text: str, unknown: int, total: int, stack: int) -> list[str]:
    if total and unknown / total > UNKNOWN_SHARE:
        message = (
            f"{unknown} of the {total} tokens of {text[:60]!r} are not in the model's vocabulary: the "
            f"prediction rests on {total - unknown} known token(s) and says little"
        )
        warnings.warn(message, UnknownTokensWarning, stacklevel=stack)
        return [message]
    return []
