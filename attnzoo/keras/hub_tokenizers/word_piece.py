"""keras-hub's ``WordPieceTokenizer`` (BERT's, DistilBERT's: ``vocabulary.txt``) as a ``tokenizers``
tokenizer that gives keras-hub's ids.

keras-hub's Python path (``pretokenize_python``, then ``_tokenize_word_python``), step by step:

1. ``strip_accents``: the text in NFD, its non-spacing marks (``\\p{Mn}``) dropped (left in NFD).
2. ``split``: the text cut at whitespace (``[ \\t\\n\\r\\f]``, ``\\p{Cc}``, ``\\p{Cf}``: dropped) and at
   punctuation (ASCII's ``!-/ :-@ [-` {-~`` and ``\\p{P}``) and CJK ideographs (with ``split_on_cjk``),
   each kept as a word of its own.
3. ``lowercase``: each word, once cut, in Unicode's NFKC_Casefold: NFKC, full case folding (``ß`` -> ``ss``),
   NFKC again, the default-ignorable code points dropped.
4. WordPiece: the longest vocabulary entry at the word's start, then the longest ``##``-prefixed entry at each
   next place; a word that cannot be covered, or longer than 100 bytes, is the unknown token.

``tokenizers`` normalises before it splits, so the cut of step 2 would see step 3's output (NFKC makes
``…`` three dots and a no-break space a space, which keras-hub never cuts at). So the normaliser marks the
cuts first, on the text as keras-hub cuts it: each whitespace character becomes the mark (U+001F, itself a
control character keras-hub cuts at, and one that NFKC and case folding leave alone) and each punctuation
or CJK character gets the mark on both sides; then it lowercases; the pre-tokenizer cuts at the marks only.
Case folding is written as ``Lowercase`` followed by a ``Replace`` for each character whose fold differs from
its lower case (``ß``, ``ς``, the Cherokee letters, ...), taken from Python's own Unicode tables.

What differs from keras-hub: a word over 100 bytes but at most 100 characters (non-ASCII text) is tried
here (``tokenizers`` counts characters) where keras-hub gives the unknown token. ``special_tokens_in_strings``
keeps the special tokens found in a text whole, as added tokens matched before anything else.
"""

from __future__ import annotations

import unicodedata
from functools import cache
from pathlib import Path
from typing import Any

from attnzoo.errors import ConfigError, WeightsError
from attnzoo.io.limits import limit, over_limit
from attnzoo.keras.hub_tokenizers.library import tokenizers_library

__all__ = ["word_piece_tokenizer", "read_word_piece_vocabulary", "MARK"]

MARK = "\x1f"  # the cut mark (see the module docstring)
MAX_WORD_CHARACTERS = 100  # keras-hub's MAX_BYTES_PER_WORD, counted in characters by tokenizers
WHITESPACE = r"[ \t\n\r\f]|\p{Cc}|\p{Cf}"
PUNCTUATION = r"[!-/]|[:-@]|[\[-`]|[{-~]|\p{P}"
CJK = (
    r"[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}\x{2B740}-\x{2B81F}"
    r"\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]"
)
# the default-ignorable code points keras-hub drops after case folding (Unicode's own list)
IGNORABLE = (
    r"[\x{AD}\x{34F}\x{61C}\x{115F}-\x{1160}\x{17B4}-\x{17B5}\x{180B}-\x{180F}\x{200B}-\x{200F}"
    r"\x{202A}-\x{202E}\x{2060}-\x{206F}\x{3164}\x{FE00}-\x{FE0F}\x{FEFF}\x{FFA0}\x{FFF0}-\x{FFF8}"
    r"\x{1BCA0}-\x{1BCA3}\x{1D173}-\x{1D17A}\x{E0000}-\x{E0FFF}]"
)


def read_word_piece_vocabulary(path: Path, where: Any = None) -> dict[str, int]:
    """``vocabulary.txt``'s tokens -> ids, read as keras-hub reads it (one token a line, trailing whitespace
    dropped; a token there twice keeps its last line's id)."""
    where = where or path
    if not path.is_file():
        raise WeightsError(f"{where}: the WordPiece vocabulary is missing")
    bound = limit("ATTNZOO_MAX_TOKENIZER_BYTES")
    with open(path, "rb") as handle:
        data = handle.read(bound + 1)
    if len(data) > bound:
        raise over_limit("ATTNZOO_MAX_TOKENIZER_BYTES", f"is over {bound:,} bytes", where)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise WeightsError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    # Python's text files end lines at \n, \r\n and \r (keras-hub reads the file line by line)
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines and lines[-1] == "":  # the newline that ends the last line starts no token
        lines.pop()
    vocabulary = {line.rstrip(): index for index, line in enumerate(lines)}
    if not vocabulary:
        raise WeightsError(f"{where}: the WordPiece vocabulary is empty")
    return vocabulary


@cache
def folds() -> tuple[tuple[str, str], ...]:
    """``(c, fold)`` for each character left alone by lower-casing whose full case fold differs (NFKC
    applied to the fold, as keras-hub's second NFKC does): what ``Lowercase`` misses of ``casefold``."""
    found = []
    for code in range(0x20000):  # no cased character lies above U+1FFFF
        c = chr(code)
        if c.lower() == c and c.casefold() != c:
            found.append((c, unicodedata.normalize("NFKC", c.casefold())))
    return tuple(found)


def _normalizer(config: dict[str, Any]) -> Any:
    tk = tokenizers_library("converting a WordPiece tokenizer")
    n, regex = tk.normalizers, tk.Regex
    steps = []
    if config["strip_accents"]:
        steps += [n.NFD(), n.Replace(regex(r"\p{Mn}"), "")]
    if config["split"]:  # always: pre-split words (split=False) are refused
        kept = f"{PUNCTUATION}|{CJK}" if config["split_on_cjk"] else PUNCTUATION
        # a mark before and after each kept character; never at the text's start, where tokenizers 0.23's
        # later normalisers fail on an inserted character (and nothing comes before to be cut off)
        steps += [n.Replace(regex(WHITESPACE), MARK), n.Replace(regex(f"(?<=[\\s\\S])(?={kept})|(?<={kept})"), MARK)]
    if config["lowercase"]:
        steps += [n.NFKC(), n.Lowercase()]
        steps += [n.Replace(c, fold) for c, fold in folds()]
        steps += [n.NFKC(), n.Replace(regex(IGNORABLE), "")]
    return n.Sequence(steps)


def _config(config: dict[str, Any], where: Any) -> dict[str, Any]:
    """keras-hub's WordPieceTokenizer arguments, with its defaults, checked."""
    given = {
        "lowercase": config.get("lowercase", False),
        "strip_accents": config.get("strip_accents", False),
        "split": config.get("split", True),
        "split_on_cjk": config.get("split_on_cjk", True),
        "special_tokens_in_strings": config.get("special_tokens_in_strings", False),
    }
    for key, value in given.items():
        if not isinstance(value, bool):
            raise WeightsError(f"{where}: {key} is {value!r}, not true or false")
    for key, default in (("suffix_indicator", "##"), ("oov_token", "[UNK]")):
        value = config.get(key, default)
        if not isinstance(value, str) or not value:
            raise WeightsError(f"{where}: {key} is {value!r}, not a token")
        given[key] = value
    extra = config.get("special_tokens")
    if extra is not None and (not isinstance(extra, list) or not all(isinstance(t, str) for t in extra)):
        raise WeightsError(f"{where}: special_tokens is {extra!r}, not a list of tokens")
    given["special_tokens"] = list(extra or [])
    if not given["split"]:
        raise ConfigError(
            f"{where}: split is false (keras-hub then takes words already cut, not texts); attnzoo converts "
            f"the tokenizers that cut texts"
        )
    return given


def word_piece_tokenizer(vocabulary: dict[str, int], config: dict[str, Any], special: list[str], where: Any) -> Any:
    """The ``tokenizers.Tokenizer`` of a WordPiece ``vocabulary`` under keras-hub's ``config`` (the
    tokenizer's arguments); ``special``: the class's special tokens ([CLS], [SEP], ...)."""
    tk = tokenizers_library("converting a WordPiece tokenizer")
    settings = _config(config, where)
    if settings["oov_token"] not in vocabulary:
        raise WeightsError(f"{where}: the unknown token {settings['oov_token']!r} is not in the vocabulary")
    model = tk.models.WordPiece(
        vocabulary,
        unk_token=settings["oov_token"],
        continuing_subword_prefix=settings["suffix_indicator"],
        max_input_chars_per_word=MAX_WORD_CHARACTERS,
    )
    tokenizer = tk.Tokenizer(model)
    tokenizer.normalizer = _normalizer(settings)
    tokenizer.pre_tokenizer = tk.pre_tokenizers.Split(MARK, behavior="removed")  # the marks only
    tokenizer.decoder = tk.decoders.WordPiece(prefix=settings["suffix_indicator"], cleanup=False)
    specials = [t for t in dict.fromkeys([*special, *settings["special_tokens"]]) if t in vocabulary]
    tokenizer.add_special_tokens([tk.AddedToken(t, special=True, normalized=False) for t in specials])
    return tokenizer, settings
