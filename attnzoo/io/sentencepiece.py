"""A SentencePiece model file (``.spm``, ``.model``) read as plain data, without sentencepiece or protobuf.

The file is a serialized ``ModelProto`` (sentencepiece's ``sentencepiece_model.proto``), a protocol-buffers
message: a run of fields, each a key (``field_number << 3 | wire_type``, a varint) then its value, a varint
(wire type 0), 8 bytes (1), a length and that many bytes (2: text, bytes or a nested message) or 4 bytes
(5: a float). Only the fields a tokenizer needs are kept:

* ``pieces`` (field 1, repeated): each piece's text (1), score (2, a float) and type (3: ``NORMAL`` 1,
  ``UNKNOWN`` 2, ``CONTROL`` 3, ``USER_DEFINED`` 4, ``UNUSED`` 5, ``BYTE`` 6); its index is its id;
* ``trainer_spec`` (2): ``model_type`` (3: ``UNIGRAM`` 1, ``BPE`` 2, ``WORD`` 3, ``CHAR`` 4),
  ``treat_whitespace_as_suffix`` (24), ``byte_fallback`` (35) and ``unk_id`` (40);
* ``normalizer_spec`` (3): ``name`` (1), ``precompiled_charsmap`` (2), ``add_dummy_prefix`` (3),
  ``remove_extra_whitespaces`` (4), ``escape_whitespaces`` (5).

Every other field is skipped by its wire type, as protobuf readers do. The file comes from a stranger: its
size is bounded (``ATTNZOO_MAX_TOKENIZER_BYTES``), every length is checked against the bytes left, and
anything that is not a well-formed message is a ``WeightsError`` naming the file and the offset.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnzoo.errors import WeightsError
from attnzoo.io.limits import limit, over_limit

__all__ = ["Piece", "SentencePieceModel", "read_sentencepiece", "parse_sentencepiece", "PIECE_TYPES", "MODEL_TYPES"]

PIECE_TYPES = {1: "normal", 2: "unknown", 3: "control", 4: "user_defined", 5: "unused", 6: "byte"}
MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}


@dataclass(frozen=True)
class Piece:
    """One vocabulary entry: its text, score and kind (a value of :data:`PIECE_TYPES`)."""

    text: str
    score: float
    kind: str


@dataclass(frozen=True)
class SentencePieceModel:
    """What a tokenizer needs of a SentencePiece model; defaults are the proto's own."""

    pieces: list[Piece]
    model_type: str = "unigram"
    unk_id: int = 0
    byte_fallback: bool = False
    treat_whitespace_as_suffix: bool = False
    normalizer: str = ""
    precompiled_charsmap: bytes = b""
    add_dummy_prefix: bool = True
    remove_extra_whitespaces: bool = True
    escape_whitespaces: bool = True
    ids: dict[str, int] = field(default_factory=dict)  # piece text -> id


class _Malformed(Exception):
    """A message that does not parse; the reader names the file."""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if at >= len(data):
            raise _Malformed(f"a number runs past the end at byte {at}")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise _Malformed(f"a number longer than 10 bytes ends at byte {at}")


def _fields(data: bytes) -> Iterator[tuple[int, int, Any]]:
    """``(field number, wire type, value)`` of each field of one message: an int for a varint, bytes for
    the others (a float's 4 bytes are unpacked by whoever reads it)."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise _Malformed(f"field number 0 at byte {at}")
        value: Any
        if wire == 0:
            value, at = _varint(data, at)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if at + size > len(data):
                raise _Malformed(f"a {size}-byte value runs past the end at byte {at}")
            value, at = data[at : at + size], at + size
        elif wire == 2:
            size, at = _varint(data, at)
            if size > len(data) - at:
                raise _Malformed(f"a field of {size:,} bytes at byte {at} runs past the end ({len(data):,} bytes)")
            value, at = data[at : at + size], at + size
        else:  # 3 and 4 are protobuf's retired groups, 6 and 7 are no wire type: not a SentencePiece model
            raise _Malformed(f"wire type {wire} of field {number} at byte {at}")
        yield number, wire, value


def _signed(value: int) -> int:
    """An int32 field as protobuf writes a negative one (ten bytes, two's complement of 64 bits)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _text(value: Any, what: str) -> str:
    if not isinstance(value, bytes):
        raise _Malformed(f"{what} is not text")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise _Malformed(f"{what} is not UTF-8 text") from None


def _piece(data: bytes, index: int) -> Piece:
    text, score, kind = None, 0.0, 1
    for number, wire, value in _fields(data):
        if number == 1 and wire == 2:
            text = _text(value, f"piece {index}")
        elif number == 2 and wire == 5:
            score = struct.unpack("<f", value)[0]
        elif number == 3 and wire == 0:
            kind = value
    if text is None:
        raise _Malformed(f"piece {index} has no text")
    if kind not in PIECE_TYPES:
        raise _Malformed(f"piece {index} ({text[:40]!r}) has type {kind}, none of SentencePiece's")
    return Piece(text, float(score), PIECE_TYPES[kind])


def _trainer(data: bytes) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for number, wire, value in _fields(data):
        if wire != 0:
            continue
        if number == 3:
            if value not in MODEL_TYPES:
                raise _Malformed(f"model_type {value} is none of SentencePiece's")
            found["model_type"] = MODEL_TYPES[value]
        elif number == 24:
            found["treat_whitespace_as_suffix"] = bool(value)
        elif number == 35:
            found["byte_fallback"] = bool(value)
        elif number == 40:
            found["unk_id"] = _signed(value)
    return found


def _normalizer(data: bytes) -> dict[str, Any]:
    found: dict[str, Any] = {}
    flags = {3: "add_dummy_prefix", 4: "remove_extra_whitespaces", 5: "escape_whitespaces"}
    for number, wire, value in _fields(data):
        if number == 1 and wire == 2:
            found["normalizer"] = _text(value, "the normalizer's name")
        elif number == 2 and wire == 2:
            found["precompiled_charsmap"] = bytes(value)
        elif number in flags and wire == 0:
            found[flags[number]] = bool(value)
    return found


def parse_sentencepiece(data: bytes, where: Any) -> SentencePieceModel:
    """The model in ``data`` (a file's bytes); a malformed one is a ``WeightsError`` naming ``where``."""
    pieces: list[Piece] = []
    settings: dict[str, Any] = {}
    try:
        for number, wire, value in _fields(data):
            if wire != 2:
                continue
            if number == 1:
                pieces.append(_piece(value, len(pieces)))
            elif number == 2:
                settings.update(_trainer(value))
            elif number == 3:
                settings.update(_normalizer(value))
    except _Malformed as e:
        raise WeightsError(f"{where}: not a SentencePiece model ({e})") from None
    if not pieces:
        raise WeightsError(f"{where}: not a SentencePiece model (it holds no pieces)")
    ids: dict[str, int] = {}
    for index, piece in enumerate(pieces):
        if piece.text in ids:
            raise WeightsError(
                f"{where}: the piece {piece.text[:40]!r} is there twice (ids {ids[piece.text]} and {index}); "
                f"SentencePiece refuses such a model"
            )
        ids[piece.text] = index
    return SentencePieceModel(pieces=pieces, ids=ids, **settings)


def read_sentencepiece(path: Path, where: Any = None) -> SentencePieceModel:
    """The SentencePiece model in the file ``path``, read within ``ATTNZOO_MAX_TOKENIZER_BYTES``."""
    where = where or path
    if not path.is_file():
        raise WeightsError(f"{where}: the SentencePiece model is missing")
    bound = limit("ATTNZOO_MAX_TOKENIZER_BYTES")
    with open(path, "rb") as handle:
        data = handle.read(bound + 1)
    if len(data) > bound:
        raise over_limit("ATTNZOO_MAX_TOKENIZER_BYTES", f"is over {bound:,} bytes", where)
    return parse_sentencepiece(data, where)
