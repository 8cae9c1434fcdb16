"""Keras's text preprocessing inside a model: TextVectorization, StringLookup and IntegerLookup.

The converted model takes the strings themselves (``model(["a text", ...])``) and turns them into ids as
Keras does, with no TensorFlow:

* ``standardize``: ``lower`` lower-cases ASCII letters only (``tf.strings.lower`` without an encoding),
  ``strip_punctuation`` removes ASCII punctuation (Keras's regex ``[!"#$%&()*+,-./:;<=>?@[\\]^_`{|}~']``);
* ``split``: ``whitespace`` splits on runs of ASCII whitespace (space, \\t, \\n, \\v, \\f, \\r) and drops
  the empty ends (``tf.strings.split``), ``character`` into Unicode code points;
* ``ngrams``: for each width in order, the space-joined n-grams of that width (``tf.strings.ngrams``);
* the lookup: index 0 is the mask token (``""``; TextVectorization, or a lookup's ``mask_token``), then
  the OOV indices (``[UNK]``; several: a hash of the token picks one), then the vocabulary in its order;
* ``output_sequence_length``: every row padded with 0 or cut to it; without it, padded to the longest row
  of the batch.

The vocabulary is the ``vocabulary`` list of the layer's config when it has one (Keras then reads no
asset), else the ``vocabulary.txt`` Keras saves among a ``.keras`` archive's assets, read as Keras reads
it: the text's lines, trailing empty lines dropped, the special tokens at its head taken off when they are
exactly there. A TextVectorization saves two copies, its own and its inner lookup's
(``_lookup_layer/vocabulary.txt``); Keras's loader reads both, the inner one last, and keeps that one:
so does attnzoo, and a copy Keras refuses (empty, a repeated token, the mask token past the head) is
refused whichever copy it is. A legacy ``.h5`` keeps no assets: an adapted layer there is refused with
that reason. TextVectorization converts with ``output_mode="int"`` (the other modes are refused by name);
StringLookup and IntegerLookup in every output mode, their ids encoded by
:func:`~attnzoo.keras.converters.categorical.encode` (in ``one_hot``, ``multi_hot``, ``count`` and
``tf_idf`` the mask token takes no index and counts for nothing, as in Keras).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from attnzoo.keras.arguments import expect_variables
from attnzoo.keras.converters.categorical import (
    OUTPUT_MODES,
    encode,
    encodes_floats,
    hash_bucket,
    refuse_sparse,
    salt_of,
)
from attnzoo.keras.converters.vocabulary import (
    LOOKUP_COPIES,
    TEXT_COPIES,
    idf_weights,
    oov_count,
    read_vocabulary,
    vocabulary_copies,
)
from attnzoo.keras.nodes import Node, build_node
from attnzoo.keras.registry import Converted, Refused, keras_layer

__all__ = [
    "TextVectorization",
    "StringLookup",
    "IntegerLookup",
    "standardize",
    "split_text",
    "ngrams_of",
    "string_input",
]

_PUNCTUATION = re.compile(r'[!"#$%&()\*\+,-\./:;<=>?@\[\\\]^_`{|}~\']')
_ASCII_WHITESPACE = re.compile(r"[ \t\n\v\f\r]+")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
STANDARDIZE = (None, "lower", "strip_punctuation", "lower_and_strip_punctuation")
SPLIT = (None, "whitespace", "character")


def standardize(text: str, mode: str | None) -> str:
    """Keras's ``standardize`` of one string (module docstring)."""
    if mode in ("lower", "lower_and_strip_punctuation"):
        text = text.translate(_ASCII_LOWER)
    if mode in ("strip_punctuation", "lower_and_strip_punctuation"):
        text = _PUNCTUATION.sub("", text)
    return text


def split_text(text: str, mode: str | None) -> list[str]:
    """Keras's ``split`` of one standardised string into tokens."""
    if mode == "whitespace":
        return [token for token in _ASCII_WHITESPACE.split(text) if token]
    if mode == "character":
        return list(text)
    return [text]


def ngrams_of(tokens: list[str], widths: Sequence[int] | None) -> list[str]:
    """``tf.strings.ngrams(tokens, widths, separator=" ")``: every width's n-grams, width by width."""
    if not widths:
        return tokens
    return [" ".join(tokens[i : i + n]) for n in widths for i in range(len(tokens) - n + 1)]


def _strings(value: Any, name: str) -> list[str]:
    """A batch of texts: a list of str, or of one-str lists (an input of shape [batch, 1])."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValueError(f"{name} expects a list of strings (one per sample), got {type(value).__name__}")
    texts = []
    for item in value:
        if isinstance(item, (list, tuple)) and len(item) == 1:
            item = item[0]
        if not isinstance(item, str):
            raise ValueError(f"{name} expects each sample as one str, got {type(item).__name__}: {str(item)[:40]!r}")
        texts.append(item)
    return texts


def string_input(value: Any, shape: list[Any], name: str) -> list[Any]:
    """A model's string input as nested lists of str with the input's shape ([batch], [batch, 1] or
    [batch, n]): a list of str (a str per sample, also for [batch, 1]), nested lists, or a numpy array of
    strings. Raises ``ValueError`` saying what was expected."""
    if hasattr(value, "tolist") and getattr(getattr(value, "dtype", None), "kind", "") in ("U", "S", "O"):
        value = value.tolist()
    expected = f"keras_model expects input {name!r} as a list of strings (one per sample)"
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValueError(f"{expected}, got {type(value).__name__}")
    rows = [[v] if isinstance(v, (str, bytes)) and len(shape) == 2 and shape[1] == 1 else v for v in value]
    rows = [_decoded(row, expected) for row in rows]
    if len(shape) >= 2 and any(not isinstance(r, list) or (shape[1] is not None and len(r) != shape[1]) for r in rows):
        raise ValueError(f"{expected}; each sample of shape {shape[1:]}")
    if len(shape) == 1 and any(not isinstance(r, str) for r in rows):
        raise ValueError(f"{expected}; each sample one str")
    return rows


def _decoded(value: Any, expected: str) -> Any:
    if isinstance(value, bytes):  # numpy's bytes strings (dtype S), as TensorFlow hands them out
        return value.decode("utf-8")
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return [_decoded(v, expected) for v in value]
    raise ValueError(f"{expected}, got a {type(value).__name__} among them")


class _Lookup:
    """Token -> index as Keras's IndexLookup: the mask token -> 0 (``output_mode="int"``; -1, which the
    encoding drops, in the other modes, where the mask takes no index), a known token -> its place, any
    other -> the OOV index (with ``num_oov_indices`` n > 1, ``oov_start + hash(token) mod n``: FarmHash, or
    SipHash keyed by ``salt``; with n = 0, an error)."""

    def __init__(
        self,
        tokens: Sequence[Any],
        mask_token: Any,
        num_oov_indices: int,
        int_mode: bool = True,
        salt: list[int] | None = None,
    ) -> None:
        self.mask_token, self.num_oov, self.salt = mask_token, num_oov_indices, salt
        self.oov_start = 1 if mask_token is not None and int_mode else 0
        self.mask_index = 0 if int_mode else -1
        start = self.oov_start + num_oov_indices
        self.index = {token: start + i for i, token in enumerate(tokens)}

    def __call__(self, token: Any, name: str) -> int:
        if self.mask_token is not None and token == self.mask_token:
            return self.mask_index
        found = self.index.get(token)
        if found is not None:
            return found
        if self.num_oov == 0:
            raise ValueError(f"{name}: {token!r} is not in the vocabulary and the layer has num_oov_indices=0")
        if self.num_oov > 1:
            return self.oov_start + hash_bucket(token, self.num_oov, self.salt)
        return self.oov_start


class _TextNode(Node):
    """A node whose input is Python data (strings): it makes its id tensor on the model's device, which
    ``anchor`` (an empty buffer, saved with the weights so a model loaded on ``meta`` gets it back)
    follows."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("anchor", torch.zeros(0, dtype=torch.long))

    def ids(self, rows: list[list[int]], width: int) -> Tensor:
        out = torch.zeros(len(rows), width, dtype=torch.long)
        for i, row in enumerate(rows):
            row = row[:width]
            if row:
                out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        return out.to(self.anchor.device)


class TextVectorization(_TextNode):
    """``TextVectorization(output_mode="int")``: texts [B] (or [B, 1]) -> ids [B, L] (module docstring);
    with ``split=None`` each text is one token: ids of the texts' shape. The output carries no mask."""

    op = "text_vectorization"

    def __init__(
        self,
        *,
        vocabulary: list[str],
        standardize: str | None = "lower_and_strip_punctuation",
        split: str | None = "whitespace",
        ngrams: list[int] | None = None,
        output_sequence_length: int | None = None,
    ) -> None:
        super().__init__()
        if standardize not in STANDARDIZE or split not in SPLIT:
            raise ValueError(f"text_vectorization: standardize {standardize!r} or split {split!r} is not Keras's")
        self.standardize, self.split, self.widths = standardize, split, ngrams
        self.length, self.vocabulary_size = output_sequence_length, len(vocabulary)
        self.lookup = _Lookup(vocabulary, "", 1)

    def forward(self, args, kwargs, masks):
        texts = _strings(args[0], "text_vectorization")
        rows = []
        for text in texts:
            tokens = ngrams_of(split_text(standardize(text, self.standardize), self.split), self.widths)
            rows.append([self.lookup(token, "text_vectorization") for token in tokens])
        if self.split is None and all(isinstance(v, str) for v in args[0]):
            # texts of shape [B], not split: Keras keeps that shape (and would pad the batch axis itself)
            if self.length is not None:
                raise ValueError("with split=None and output_sequence_length, pass the texts as [batch, 1]")
            return [self.ids(rows, 1)[:, 0]], [None]
        width = self.length if self.length is not None else max((len(r) for r in rows), default=0)
        return [self.ids(rows, width)], [None]

    def extra_repr(self) -> str:
        return (
            f"vocabulary={self.vocabulary_size} tokens, standardize={self.standardize!r}, "
            f"split={self.split!r}, ngrams={self.widths}, output_sequence_length={self.length}"
        )


class StringLookup(_TextNode):
    """``StringLookup``: strings of any shape (nested lists) -> ids of that shape (``output_mode="int"``),
    or their encoding over ``depth`` indices (``one_hot``, ``multi_hot``, ``count``, ``tf_idf`` with the
    layer's ``idf_weights``; :func:`~attnzoo.keras.converters.categorical.encode`)."""

    op = "string_lookup"
    makes_float32 = encodes_floats("int")

    def __init__(
        self,
        *,
        vocabulary: list[str],
        mask_token: str | None = None,
        num_oov_indices: int = 1,
        output_mode: str = "int",
        depth: int | None = None,
        salt: list[int] | None = None,
    ) -> None:
        super().__init__()
        self.output_mode, self.depth, self.mask_token = output_mode, depth, mask_token
        self.vocabulary_size = len(vocabulary)
        self.lookup = _Lookup(vocabulary, mask_token, num_oov_indices, output_mode == "int", salt)
        if output_mode == "tf_idf":
            self.register_buffer("idf_weights", torch.zeros(int(depth or 0)))

    def _map(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.lookup(value, "string_lookup")
        if isinstance(value, (list, tuple)):
            return [self._map(v) for v in value]
        raise ValueError(f"string_lookup expects strings (nested lists of str), got {type(value).__name__}")

    def forward(self, args, kwargs, masks):
        ids = self._map(args[0])
        try:
            out = torch.tensor(ids, dtype=torch.long)
        except ValueError:
            raise ValueError(
                "string_lookup expects a rectangular batch of strings (every row the same length)"
            ) from None
        out = out.to(self.anchor.device)
        if self.output_mode != "int":
            out = encode(
                out, self.output_mode, int(self.depth or 0), "string_lookup", getattr(self, "idf_weights", None)
            )
        return [out], [None]

    def extra_repr(self) -> str:
        return (
            f"vocabulary={self.vocabulary_size} tokens, mask_token={self.mask_token!r}, "
            f"output_mode={self.output_mode!r}"
        )


class IntegerLookup(Node):
    """``IntegerLookup``: integer values [any shape] -> indices (a sorted key table and ``searchsorted``;
    with ``num_oov_indices`` n > 1 an unknown value v goes to ``oov_start + v mod n``, Keras's
    ``floormod``, or with ``oov_method="farmhash"`` to the hash of its decimal text, as StringLookup's),
    then their encoding in the other output modes (as :class:`StringLookup`)."""

    op = "integer_lookup"
    makes_float32 = encodes_floats("int")
    reads_mask = False  # compute never reads the mask: the emitted call passes none

    def __init__(
        self,
        *,
        vocabulary: list[int],
        mask_token: int | None = None,
        num_oov_indices: int = 1,
        output_mode: str = "int",
        depth: int | None = None,
        oov_method: str = "floormod",
        salt: list[int] | None = None,
    ) -> None:
        super().__init__()
        self.mask_token, self.num_oov, self.vocabulary_size = mask_token, num_oov_indices, len(vocabulary)
        self.output_mode, self.depth, self.oov_method, self.salt = output_mode, depth, oov_method, salt
        self.oov_start = 1 if mask_token is not None and output_mode == "int" else 0
        start = self.oov_start + num_oov_indices
        keys = torch.tensor(vocabulary, dtype=torch.long).reshape(-1)
        order = torch.argsort(keys)
        self.register_buffer("keys", keys[order])
        self.register_buffer("values", order + start)
        if output_mode == "tf_idf":
            self.register_buffer("idf_weights", torch.zeros(int(depth or 0)))

    def _oov(self, x: Tensor) -> Tensor:
        if self.num_oov <= 1:
            return torch.zeros_like(x)
        if self.oov_method == "farmhash":  # the hash of the decimal text, element by element
            hashed = [hash_bucket(v, self.num_oov, self.salt) for v in x.reshape(-1).tolist()]
            return torch.tensor(hashed, dtype=torch.long, device=x.device).reshape(x.shape)
        return torch.remainder(x, self.num_oov)

    def compute(self, x, mask):
        if x.is_floating_point() or x.dtype == torch.bool:
            raise ValueError(f"integer_lookup expects integer values, got {x.dtype}")
        x = x.long()
        at = torch.searchsorted(self.keys, x).clamp(max=max(len(self.keys) - 1, 0))
        known = (self.keys[at] == x) if len(self.keys) else torch.zeros_like(x, dtype=torch.bool)
        if self.num_oov == 0 and not bool(known.all()):
            raise ValueError(
                f"integer_lookup: {x[~known][:5].tolist()} are not in the vocabulary and the layer has "
                f"num_oov_indices=0"
            )
        out = torch.where(known, self.values[at], self.oov_start + self._oov(x))
        if self.mask_token is not None:
            masked = torch.full_like(out, 0 if self.output_mode == "int" else -1)
            out = torch.where(x == self.mask_token, masked, out)
        if self.output_mode == "int":
            return out
        return encode(out, self.output_mode, int(self.depth or 0), "integer_lookup", getattr(self, "idf_weights", None))

    def extra_repr(self) -> str:
        return (
            f"vocabulary={self.vocabulary_size} values, mask_token={self.mask_token!r}, "
            f"output_mode={self.output_mode!r}"
        )


def _text_state() -> dict[str, Tensor]:
    """The state every string node holds: its empty device anchor."""
    return {"anchor": torch.zeros(0, dtype=torch.long)}


# -- reading a layer's vocabulary ----------------------------------------------------------------------------
def _refuse_text_modes(c: dict[str, Any]) -> None:
    mode = c.get("output_mode", "int")
    if mode != "int":
        raise Refused(f"output_mode {mode!r} is not supported; TextVectorization converts with output_mode='int'")
    for key in ("invert", "sparse", "ragged"):
        if c.get(key):
            raise Refused(f"{key}=True is not supported")
    if str(c.get("encoding", "utf-8")).lower().replace("_", "-") not in ("utf-8", "utf8"):
        raise Refused(f"encoding {c.get('encoding')!r} is not supported (utf-8 is)")


@keras_layer("TextVectorization")
def convert_text_vectorization(record, arrays, ctx):
    c = record.config
    _refuse_text_modes(c)
    for key, allowed, default in (
        ("standardize", STANDARDIZE, "lower_and_strip_punctuation"),
        ("split", SPLIT, "whitespace"),
    ):
        value = c.get(key, default)
        if value not in allowed:
            name = value.get("config", value) if isinstance(value, dict) else value
            raise Refused(f"{key}={name!r} is a custom function; attnzoo runs Keras's built-in {key} modes")
    widths = c.get("ngrams")
    if isinstance(widths, int) and not isinstance(widths, bool):
        widths = list(range(1, widths + 1))
    if widths is not None and not (isinstance(widths, (list, tuple)) and all(isinstance(w, int) for w in widths)):
        raise Refused(f"ngrams {widths!r} is not an int or a list of ints")
    expect_variables(arrays, 0, "TextVectorization with output_mode='int'")
    tokens = read_vocabulary(record, ctx, TEXT_COPIES, "", ["[UNK]"])
    length = c.get("output_sequence_length")
    spec = {
        "op": "text_vectorization",
        "vocabulary": tokens,
        "standardize": c.get("standardize", "lower_and_strip_punctuation"),
        "split": c.get("split", "whitespace"),
        "ngrams": None if widths is None else list(widths),
        "output_sequence_length": length if isinstance(length, int) else None,
    }
    return Converted(spec, _text_state(), [f"{len(tokens)} tokens + padding and [UNK]; strings in, ids out"])


def _lookup_mode(c: dict[str, Any]) -> str:
    """A lookup's ``output_mode`` (Keras's old names read as its new ones); ``invert`` is refused."""
    mode = c.get("output_mode", "int")
    mode = {"binary": "multi_hot", "tf-idf": "tf_idf"}.get(mode, mode)
    if mode not in OUTPUT_MODES:
        raise Refused(f"output_mode {mode!r} is not one of {', '.join(OUTPUT_MODES)}")
    if c.get("invert"):
        raise Refused("invert=True is not supported")
    refuse_sparse(c)
    if str(c.get("encoding", "utf-8")).lower().replace("_", "-") not in ("utf-8", "utf8"):
        raise Refused(f"encoding {c.get('encoding')!r} is not supported (utf-8 is)")
    return mode


def _lookup(record, arrays, ctx, *, integers: bool) -> tuple[dict[str, Any], dict[str, Tensor], list[str]]:
    """The spec, idf state and notes shared by StringLookup and IntegerLookup in every output mode."""
    c = record.config
    mode = _lookup_mode(c)
    mask, count = c.get("mask_token"), oov_count(c, integers=integers)
    oov = int(c.get("oov_token", -1)) if integers else str(c.get("oov_token", "[UNK]"))
    salt = salt_of(c.get("salt")) if count > 1 else None
    if integers:
        mask = None if mask is None else int(mask)
    # the mask takes index 0 in int mode only; in the other modes it is dropped from the encoding
    head_mask = mask if mode == "int" else None
    special = ([head_mask] if head_mask is not None else []) + [oov] * count
    tokens = read_vocabulary(record, ctx, LOOKUP_COPIES, head_mask, [oov] * count, cast=int if integers else None)
    entries: list[Any] = vocabulary_copies(record, ctx, LOOKUP_COPIES)[-1][1]  # as read, specials included
    entries = [int(v) for v in entries] if integers else entries  # read_vocabulary checked they are integers
    spec: dict[str, Any] = {"vocabulary": tokens, "mask_token": mask, "num_oov_indices": count, "output_mode": mode}
    if salt is not None:
        spec["salt"] = salt
    notes = [f"{len(tokens)} {'values' if integers else 'tokens'}, output_mode={mode!r}"]
    if count > 1 and (not integers or c.get("oov_method") == "farmhash"):
        notes.append(f"unknown values hashed into {count} OOV indices ({'SipHash' if salt else 'FarmHash'})")
    state: dict[str, Tensor] = {}
    if mode != "int":
        depth = len(special) + len(tokens)
        if c.get("pad_to_max_tokens"):
            limit = c.get("max_tokens")
            if not isinstance(limit, int) or isinstance(limit, bool):
                raise Refused(f"pad_to_max_tokens=True needs max_tokens, got {limit!r}")
            depth = limit
        spec["depth"] = depth
        if mode == "tf_idf":
            state["idf_weights"] = idf_weights(c, arrays, entries, special, depth)
    if mode != "tf_idf":
        expect_variables(arrays, 0, f"a lookup with output_mode={mode!r}")
    return spec, state, notes


@keras_layer("StringLookup")
def convert_string_lookup(record, arrays, ctx):
    spec, state, notes = _lookup(record, arrays, ctx, integers=False)
    notes.append("strings in")
    return Converted({"op": "string_lookup", **spec}, {**_text_state(), **state}, notes)


@keras_layer("IntegerLookup")
def convert_integer_lookup(record, arrays, ctx):
    spec, state, notes = _lookup(record, arrays, ctx, integers=True)
    oov_method = record.config.get("oov_method", "floormod")
    if oov_method not in ("floormod", "farmhash"):
        raise Refused(f"oov_method {oov_method!r} is not floormod or farmhash")
    spec["oov_method"] = oov_method
    spec = {"op": "integer_lookup", **spec}
    table_state = dict(build_node(spec).state_dict())
    table_state.update(state)
    return Converted(spec, table_state, notes)
