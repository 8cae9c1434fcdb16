"""Tokenisation and vocabularies that travel with the weights (as JSON in the safetensors metadata).

Words: lower case, runs of letters/digits and single punctuation marks (``"a cat's tail"`` ->
``a cat ' s tail``). Id 0 is padding and 1 the unknown token; sequence vocabularies add ``<s>`` = 1 and
``</s>`` = 2 after padding instead.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

__all__ = ["tokenize", "Vocabulary", "pad_batch", "TOKEN_PATTERN"]

# what a word is: a run of letters and digits, or one other character (after lower-casing)
TOKEN_PATTERN = re.compile(r"[a-z0-9]+|[^\sa-z0-9]")


def tokenize(text: str) -> list[str]:
    return TOKEN_PATTERN.findall(text.lower())


class Vocabulary:
    """Token <-> id. ``specials`` come first (``["<pad>", "<unk>"]`` for text)."""

    def __init__(self, tokens: Sequence[str], specials: Sequence[str] = ("<pad>", "<unk>")):
        self.tokens = list(specials) + [t for t in tokens if t not in specials]
        self.index = {t: i for i, t in enumerate(self.tokens)}
        self.specials = list(specials)
        self.unk = self.index.get("<unk>")

    @classmethod
    def build(
        cls,
        sequences: Iterable[Sequence[str]],
        *,
        min_freq: int = 1,
        max_size: int | None = None,
        specials: Sequence[str] = ("<pad>", "<unk>"),
    ) -> Vocabulary:
        counts = Counter(t for seq in sequences for t in seq)
        ranked = sorted((t for t, c in counts.items() if c >= min_freq), key=lambda t: (-counts[t], t))
        if max_size is not None:
            ranked = ranked[: max_size - len(specials)]
        return cls(ranked, specials)

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, tokens: Sequence[str]) -> list[int]:
        if self.unk is None:
            return [self.index[t] for t in tokens if t in self.index]
        return [self.index.get(t, self.unk) for t in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.tokens[i] for i in ids]

    def to_json(self) -> dict:
        return {"tokens": self.tokens[len(self.specials) :], "specials": self.specials}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Vocabulary:
        return cls(data["tokens"], data["specials"])


def pad_batch(sequences: Sequence[Sequence[int]], max_len: int | None = None) -> torch.Tensor:
    """Right-pad id sequences with 0 into a [B, T] long tensor (T = longest, at most ``max_len``)."""
    longest = max((len(s) for s in sequences), default=1)
    length = max(1, min(longest, max_len) if max_len else longest)
    out = torch.zeros(len(sequences), length, dtype=torch.long)
    for i, seq in enumerate(sequences):
        seq = list(seq)[:length]
        out[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
    return out
