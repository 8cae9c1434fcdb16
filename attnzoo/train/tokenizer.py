"""The text -> ids step of a trained text model, on its own: what ``predict`` does before the model.

    tok = attnzoo.tokenizer("bilstm_labelwise")        # a pretrained name, a run folder or a weights file
    ids, mask = tok(["a small dog", "an oak"])         # int64 [B, T], bool [B, T] (True = a real token)
    tok.settings()                                     # plain JSON: what an exported file carries

Texts are lower-cased and split into runs of letters and digits and single other characters
(``[a-z0-9]+|[^\\sa-z0-9]``), cut to the run's ``max_len`` tokens, looked up in the run's vocabulary
(unknown words -> ``<unk>``), and right-padded with 0 (``<pad>``) to the longest text of the batch.
``Tokenizer.from_settings(settings)`` rebuilds it from the JSON an exported ``.onnx`` or ``.pt2`` holds
(``attnzoo.export`` writes it under ``tokenizer``), so a deployed file needs no attnzoo internals.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..errors import ConfigError
from ..record import RunRecord
from .vocab import TOKEN_PATTERN, Vocabulary, pad_batch, tokenize

__all__ = ["Tokenizer", "tokenizer", "tokenizer_settings"]


class Tokenizer:
    """Texts -> ``(ids int64 [B, T], mask bool [B, T])`` with a run's vocabulary and ``max_len``."""

    def __init__(self, vocab: Vocabulary, max_len: int) -> None:
        if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 1:
            raise ConfigError(f"tokenizer: max_len must be a positive integer, got {max_len!r}")
        self.vocab, self.max_len = vocab, max_len

    def __call__(self, texts: str | list[str], *, pad_to: int | None = None) -> tuple[Tensor, Tensor]:
        """``pad_to``: the length to pad every row to (a graph exported with a fixed length takes exactly
        ``max_len``); default the longest text of the batch."""
        batch = [texts] if isinstance(texts, str) else list(texts)
        if not batch or not all(isinstance(t, str) for t in batch):
            raise ConfigError("tokenizer takes a string or a non-empty list of strings")
        if pad_to is not None and (isinstance(pad_to, bool) or not isinstance(pad_to, int) or pad_to < 1):
            raise ConfigError(f"tokenizer: pad_to must be a positive integer, got {pad_to!r}")
        length = self.max_len if pad_to is None else min(pad_to, self.max_len)
        ids = pad_batch([self.vocab.encode(tokenize(text)[:length]) for text in batch], length)
        if pad_to is not None and ids.shape[1] < pad_to:
            ids = torch.nn.functional.pad(ids, (0, pad_to - ids.shape[1]))
        return ids, ids != 0

    def settings(self) -> dict[str, Any]:
        """What rebuilds it: the token pattern, the id of every token (specials first), padding, max_len."""
        return {
            "pattern": TOKEN_PATTERN.pattern,
            "lowercase": True,
            "tokens": list(self.vocab.tokens),
            "specials": list(self.vocab.specials),
            "pad_id": 0,
            "unknown_id": self.vocab.unk,
            "max_len": self.max_len,
            "padding": "right",
        }

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> Tokenizer:
        try:
            specials = list(settings["specials"])
            return cls(Vocabulary(list(settings["tokens"])[len(specials) :], specials), int(settings["max_len"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"tokenizer settings need tokens, specials and max_len: {e}") from None

    def __repr__(self) -> str:
        return f"Tokenizer(vocabulary={len(self.vocab)} tokens, max_len={self.max_len})"


def tokenizer_settings(metadata: RunRecord | Mapping[str, Any]) -> dict[str, Any] | None:
    """A word-level text model's tokenizer settings from its record, or None (no vocabulary, or a G2P
    model, which reads letters)."""
    record = metadata if isinstance(metadata, RunRecord) else RunRecord.from_metadata(metadata)
    if record.vocab is None or record.output == "g2p":
        return None
    return Tokenizer(Vocabulary.from_json(record.vocab), record.max_len).settings()


def tokenizer(name_or_folder: Any) -> Tokenizer:
    """The tokenizer ``attnzoo.predict`` uses for a text model: a pretrained name (``bilstm_labelwise``,
    ``bilstm_labelwise.wordnet``), a run folder or weights file written by ``attnzoo train``, or the
    module itself."""
    from .predict import trained_model

    if isinstance(name_or_folder, Path):
        name_or_folder = str(name_or_folder)
    model, meta = trained_model(name_or_folder)
    settings = tokenizer_settings(meta)
    if settings is None:
        raise ConfigError(
            f"{meta.task or 'this model'}: a G2P model reads letters, not words; it has no word tokenizer"
        )
    del model
    return Tokenizer.from_settings(settings)
