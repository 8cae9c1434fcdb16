"""Text: tokenisation and vocabularies that travel with the weights (as JSON in the safetensors metadata),
and :func:`printable`, the one door through which text from strangers reaches a terminal.

Words: lower case, runs of letters/digits and single punctuation marks (``"a cat's tail"`` ->
``a cat ' s tail``). Id 0 is padding and 1 the unknown token; sequence vocabularies add ``<s>`` = 1 and
``</s>`` = 2 after padding instead.

:func:`printable`: text from a file or a plugin (a Keras layer name, a card's summary) made safe to print on
a terminal. Importing this module does not import torch (the CLI escapes its error messages with it).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from attnzoo.errors import ConfigError

if TYPE_CHECKING:  # torch is imported where a batch is made: printing a table (printable) needs none
    import torch
    from torch import Tensor

__all__ = ["tokenize", "Vocabulary", "pad_batch", "Tokenizer", "TOKEN_PATTERN", "printable"]

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
        return cls.from_counts(
            Counter(t for seq in sequences for t in seq), min_freq=min_freq, max_size=max_size, specials=specials
        )

    @classmethod
    def from_counts(
        cls,
        counts: Mapping[str, int],
        *,
        min_freq: int = 1,
        max_size: int | None = None,
        specials: Sequence[str] = ("<pad>", "<unk>"),
    ) -> Vocabulary:
        """The tokens counted at least ``min_freq`` times, the most frequent first (ties in token order),
        at most ``max_size`` with the specials."""
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
    import torch

    longest = max((len(s) for s in sequences), default=1)
    length = max(1, min(longest, max_len) if max_len else longest)
    out = torch.zeros(len(sequences), length, dtype=torch.long)
    for i, seq in enumerate(sequences):
        seq = list(seq)[:length]
        out[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
    return out


class Tokenizer:
    """Texts -> ``(ids int64 [B, T], mask bool [B, T])`` with a run's vocabulary and ``max_len``.

    ``length``: the one length every row is padded to (T), where the model's exported graph takes only
    that length (a recurrent model's: its run's ``max_len``); None pads to the longest text of each batch.
    """

    def __init__(self, vocab: Vocabulary, max_len: int, *, length: int | None = None) -> None:
        for name, value in (("max_len", max_len), ("length", length)):
            if (value is not None or name == "max_len") and (
                not isinstance(value, int) or isinstance(value, bool) or value < 1
            ):
                raise ConfigError(f"tokenizer: {name} must be a positive integer, got {value!r}")
        self.vocab, self.max_len, self.length = vocab, max_len, length

    def __call__(self, texts: str | list[str], *, pad_to: int | None = None) -> tuple[Tensor, Tensor]:
        """``pad_to``: the length to pad every row to; default the tokenizer's ``length`` (what the exported
        graph takes), else the longest text of the batch. Texts are cut to ``max_len`` tokens (and to
        ``pad_to``)."""
        batch = [texts] if isinstance(texts, str) else list(texts)
        if not batch or not all(isinstance(t, str) for t in batch):
            raise ConfigError("tokenizer takes a string or a non-empty list of strings")
        if pad_to is not None and (isinstance(pad_to, bool) or not isinstance(pad_to, int) or pad_to < 1):
            raise ConfigError(f"tokenizer: pad_to must be a positive integer, got {pad_to!r}")
        pad_to = self.length if pad_to is None else pad_to
        length = self.max_len if pad_to is None else min(pad_to, self.max_len)
        ids = pad_batch([self.vocab.encode(tokenize(text)[:length]) for text in batch], length)
        if pad_to is not None and ids.shape[1] < pad_to:
            from torch.nn.functional import pad

            ids = pad(ids, (0, pad_to - ids.shape[1]))
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
            "length": self.length,
            "padding": "right",
        }

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> Tokenizer:
        try:
            specials = list(settings["specials"])
            vocab = Vocabulary(list(settings["tokens"])[len(specials) :], specials)
            length = settings.get("length")
            return cls(vocab, int(settings["max_len"]), length=None if length is None else int(length))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ConfigError(f"tokenizer settings need tokens, specials and max_len: {e}") from None

    def __repr__(self) -> str:
        padded = f", length={self.length}" if self.length is not None else ""
        return f"Tokenizer(vocabulary={len(self.vocab)} tokens, max_len={self.max_len}{padded})"


# C0 controls (newline, tab and carriage return too), DEL, C1 controls, and the bidirectional marks, embeddings,
# overrides and isolates that reorder what a terminal shows (the "Trojan Source" characters)
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` safe to print on a terminal: every C0 control character (``\\n``, ``\\t`` and ``\\r`` too),
    DEL, every C1 control, and the bidirectional marks and overrides (U+061C, U+200E, U+200F,
    U+202A-U+202E, U+2066-U+2069) written as text, ``\\xNN`` below U+0100 and ``\\uNNNN`` above (``\\x1b``,
    ``\\x0a``, ``\\u202e``); everything else, backslashes included, as it is:
    ``printable("a\\x1b[2Jb") == "a\\\\x1b[2Jb"``."""
    return _CONTROLS.sub(_escaped, str(text))
