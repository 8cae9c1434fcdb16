"""A SentencePiece model (keras-hub's ``vocabulary.spm``) as a ``tokenizers`` tokenizer that gives
SentencePiece's ids: keras-hub's Python path calls ``sentencepiece.SentencePieceProcessor.Encode`` (and its
TensorFlow path, tf_text's SentencePiece op, gives the same ids).

What SentencePiece does to a text, and how each step is written for ``tokenizers``:

1. **Normalise** (the proto's ``normalizer_spec``): the compiled character map (``precompiled_charsmap``,
   e.g. ``nmt_nfkc``) as ``Precompiled``; with ``remove_extra_whitespaces``, spaces at either end dropped and
   runs of spaces made one (SentencePiece counts the space character only); with ``escape_whitespaces``,
   each space as ``▁``; with ``add_dummy_prefix``, one ``▁`` before a text that is not empty.
2. **User-defined pieces** are matched in the normalised text, the longest at each place, and kept whole:
   added tokens whose text is normalised before matching (``normalized=True``). The dummy prefix is written
   as a ``Replace`` of the text's start that skips a text which is exactly one user-defined piece, so that
   the piece's own text (normalised by the same rules) keeps no prefix and is found in ``▁<piece>...`` as
   SentencePiece finds it; the one difference left is a text that is only that piece, which SentencePiece
   gives as ``▁`` and the piece, and this tokenizer as the piece alone.
3. **The model**, over each stretch between user-defined pieces:

   * ``bpe``: SentencePiece merges, again and again, the neighbouring pair whose joined text is the
     highest-scored piece (ties: the leftmost pair). That is ``tokenizers``' BPE with one merge per way of
     cutting a piece into two pieces, ranked by the joined piece's score (then id): the merges that make
     the same piece share its place in that order (the cut with the shorter left part first).
     Only ``NORMAL`` pieces merge (SentencePiece never makes a control, unknown or byte piece from text,
     and re-splits an ``UNUSED`` one, which is left out of the merges here).
   * ``unigram``: the Viterbi best path over the pieces' scores, as ``tokenizers``' Unigram computes it,
     the unknown piece scored the lowest score minus 10 in both. Control and byte pieces are scored the
     lowest normal score here, so that their text is not preferred over the normal pieces; SentencePiece
     never gives them from text at all (a text holding ``</s>`` literally can differ).

   A character that no piece holds is the unknown piece, a run of them one unknown piece (``fuse_unk``), or,
   with ``byte_fallback``, its UTF-8 bytes as the ``<0xNN>`` pieces.
4. **Control pieces** (``<s>``, ``</s>``, ``<pad>``) and the unknown piece are special tokens that text never
   produces: the tokenizer must run with ``encode_special_tokens = True`` (transformers'
   ``split_special_tokens``), which :mod:`attnzoo.keras.tokenizer` records and sets.

Refused with a ``ConfigError`` naming the file: ``treat_whitespace_as_suffix`` (no keras-hub model uses it)
and the ``word`` and ``char`` model types.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from attnzoo.errors import ConfigError, WeightsError
from attnzoo.io.sentencepiece import SentencePieceModel, read_sentencepiece
from attnzoo.keras.hub_tokenizers.library import tokenizers_library

__all__ = ["sentencepiece_tokenizer", "SPACE"]

SPACE = "▁"  # U+2581, SentencePiece's escaped space
UNK_PENALTY = 10.0  # the unknown piece scores this far below the lowest piece, in SentencePiece and tokenizers


def _escaped(text: str) -> str:
    """``text`` as an Oniguruma pattern that matches it literally."""
    return "".join(c if c.isalnum() else f"\\x{{{ord(c):x}}}" for c in text)


def _normalizer(model: SentencePieceModel) -> Any:
    tk = tokenizers_library("converting a SentencePiece tokenizer")
    n = tk.normalizers
    steps = []
    if model.precompiled_charsmap:
        steps.append(n.Precompiled(model.precompiled_charsmap))
    if model.remove_extra_whitespaces:  # SentencePiece counts the space character only, not tabs or newlines
        steps += [n.Replace(tk.Regex(r"\A +| +\z"), ""), n.Replace(tk.Regex(" {2,}"), " ")]
    if model.escape_whitespaces:
        steps.append(n.Replace(" ", SPACE))
    if model.add_dummy_prefix:
        steps.append(n.Prepend(SPACE))  # to a text left non-empty, as SentencePiece adds it
    return n.Sequence(steps)


def _user_defined_split(user_defined: list[str]) -> Any:
    """The pre-tokenizer that isolates each user-defined piece (the longest where several start at one
    place) in the normalised text, prefix included, as SentencePiece's matcher does."""
    tk = tokenizers_library("converting a SentencePiece tokenizer")
    pattern = "|".join(_escaped(piece) for piece in sorted(user_defined, key=len, reverse=True))
    return tk.pre_tokenizers.Split(tk.Regex(pattern), behavior="isolated")


def _bpe_merges(model: SentencePieceModel) -> list[tuple[str, str]]:
    """Every way of cutting a mergeable piece into two mergeable pieces, the best-scored piece first."""
    mergeable = {p.text: i for i, p in enumerate(model.pieces) if p.kind == "normal"}
    ranked = sorted(mergeable, key=lambda text: (-model.pieces[mergeable[text]].score, mergeable[text]))
    merges = []
    for text in ranked:
        for cut in range(1, len(text)):
            left, right = text[:cut], text[cut:]
            if left in mergeable and right in mergeable:
                merges.append((left, right))
    return merges


def _model(model: SentencePieceModel, unk: str, whole_user_defined: bool) -> Any:
    tk = tokenizers_library("converting a SentencePiece tokenizer")
    if model.model_type == "bpe":
        vocab = {p.text: i for i, p in enumerate(model.pieces)}
        return tk.models.BPE(
            vocab=vocab,
            merges=_bpe_merges(model),
            unk_token=unk,
            fuse_unk=True,
            byte_fallback=model.byte_fallback,
            ignore_merges=whole_user_defined,  # an isolated user-defined piece is in the vocabulary: taken whole
        )
    normal = [p.score for p in model.pieces if p.kind in ("normal", "user_defined")]
    floor = min(normal) if normal else 0.0
    scored = [(p.text, p.score if p.kind in ("normal", "user_defined") else floor) for p in model.pieces]
    return tk.models.Unigram(scored, model.unk_id, model.byte_fallback)


def _decoder(model: SentencePieceModel) -> Any:
    tk = tokenizers_library("converting a SentencePiece tokenizer")
    d = tk.decoders
    steps = [d.Replace(SPACE, " "), d.ByteFallback(), d.Fuse()]
    if model.add_dummy_prefix:
        steps.append(d.Strip(" ", 1, 0))
    return d.Sequence(steps)


def _checked(model: SentencePieceModel, where: Any) -> str:
    """The unknown piece's text, once what cannot be converted is refused."""
    if model.model_type not in ("bpe", "unigram"):
        raise ConfigError(
            f"{where}: a SentencePiece {model.model_type} model; attnzoo converts the bpe and unigram models "
            f"(every keras-hub SentencePiece tokenizer's)"
        )
    if model.treat_whitespace_as_suffix:
        raise ConfigError(f"{where}: treat_whitespace_as_suffix is set; attnzoo converts the prefix form only")
    if not 0 <= model.unk_id < len(model.pieces) or model.pieces[model.unk_id].kind != "unknown":
        raise WeightsError(f"{where}: unk_id {model.unk_id} is not the model's unknown piece")
    return model.pieces[model.unk_id].text


def sentencepiece_tokenizer(path: Path, where: Any = None) -> tuple[Any, SentencePieceModel]:
    """The ``tokenizers.Tokenizer`` that gives the SentencePiece model at ``path`` its ids (without start
    or end tokens: keras-hub's tokenizers add none), and the model as read."""
    tk = tokenizers_library("converting a SentencePiece tokenizer")
    where = where or path
    model = read_sentencepiece(path, where)
    unk = _checked(model, where)
    user_defined = [p.text for p in model.pieces if p.kind == "user_defined" and p.text]
    # with a dummy prefix, user-defined pieces are isolated after it (a pre-tokenizer); without one, they are
    # added tokens found in the normalised text (the module docstring says why each)
    split = model.add_dummy_prefix and bool(user_defined)
    tokenizer = tk.Tokenizer(_model(model, unk, whole_user_defined=split))
    tokenizer.normalizer = _normalizer(model)
    tokenizer.decoder = _decoder(model)
    special = [p.text for p in model.pieces if p.kind in ("control", "unknown") and p.text]
    tokenizer.add_special_tokens([tk.AddedToken(t, special=True, normalized=False) for t in special])
    if split:
        tokenizer.pre_tokenizer = _user_defined_split(user_defined)
    elif user_defined:
        tokenizer.add_tokens([tk.AddedToken(t, special=False, normalized=True) for t in user_defined])
    return tokenizer, model


def is_byte_piece(text: str) -> bool:
    """Whether ``text`` is one of SentencePiece's byte pieces (``<0x41>``)."""
    return re.fullmatch(r"<0x[0-9A-F]{2}>", text) is not None
