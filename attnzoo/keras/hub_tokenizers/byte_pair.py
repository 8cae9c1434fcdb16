"""keras-hub's byte-level ``BytePairTokenizer`` (GPT-2, Llama 3, Qwen, OPT, BLOOM, GPT-NeoX, Falcon:
``vocabulary.json`` + ``merges.txt``) as a ``tokenizers`` tokenizer that gives keras-hub's default ids.

keras-hub has two paths that disagree. Its Python path, the default wherever a text is tokenized outside
``tf.data`` (``preprocessor(texts)``, ``generate``), builds a ``tokenizers`` BPE itself: the vocabulary and
merges, the ``unsplittable_tokens`` as special tokens (found whole in a text before anything else), and a
pre-tokenizer of two steps, ``Split(pattern=<Llama 3's word pattern>, behavior="isolated")`` then
``ByteLevel(add_prefix_space, use_regex=False)``. The pattern reaches ``Split`` as a plain ``str``, which
``tokenizers`` reads as a literal text to find, not a regular expression: no text holds it, so nothing is
split, and the merges run over the whole text as one word (byte-level: a space is ``Ġ``). Its TensorFlow path
(inside ``tf.data``) first cuts words with GPT-2's pattern. The two agree except on runs of spaces: ``"a  b"``
is ``a``, ``ĠĠ``-merges, ``b`` on the Python path and ``a``, ``Ġ``, ``Ġb`` on the TensorFlow one.

This converter gives the Python path's ids, keras-hub's default (what ``generate`` and a direct call give),
and leaves the literal ``Split`` out: it splits only a text holding the pattern's own 90 characters, and it
would read as a bug in a ``tokenizer.json`` meant to be kept. The ids equal keras-hub's on every text but one
containing that literal. Merges that never cross a word in training (the vocabularies keras-hub ships were
trained on cut words) give the same ids as cut words, save the runs of spaces above.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnzoo.errors import WeightsError
from attnzoo.io.limits import limit, load_json, over_limit
from attnzoo.keras.hub_tokenizers.library import tokenizers_library

__all__ = ["byte_pair_tokenizer", "read_byte_pair_assets"]


def _bounded(path: Path, where: Any, what: str) -> bytes:
    if not path.is_file():
        raise WeightsError(f"{where}: the {what} is missing")
    bound = limit("ATTNZOO_MAX_TOKENIZER_BYTES")
    with open(path, "rb") as handle:
        data = handle.read(bound + 1)
    if len(data) > bound:
        raise over_limit("ATTNZOO_MAX_TOKENIZER_BYTES", f"is over {bound:,} bytes", where)
    return data


def _vocabulary(path: Path) -> dict[str, int]:
    value = load_json(_bounded(path, path, "byte-pair vocabulary"), path, "the byte-pair vocabulary")
    if not isinstance(value, dict) or not value:
        raise WeightsError(f"{path}: the byte-pair vocabulary is not a JSON object of tokens and ids")
    seen: dict[int, str] = {}
    for token, index in value.items():
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < 1 << 31:
            raise WeightsError(f"{path}: the token {token[:40]!r} has the id {index!r:.40}, not a whole number >= 0")
        if index in seen:
            raise WeightsError(f"{path}: the tokens {seen[index][:40]!r} and {token[:40]!r} share the id {index}")
        seen[index] = token
    return value


def _merges(path: Path, vocabulary: dict[str, int]) -> list[tuple[str, str]]:
    data = _bounded(path, path, "byte-pair merges")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise WeightsError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    merges = []
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for number, line in enumerate(lines, start=1):
        line = line.rstrip()
        if "#version:" in line.lstrip():  # the header GPT-2's merges.txt opens with, skipped as keras-hub does
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise WeightsError(f"{path}: line {number} ({line[:60]!r}) is not two tokens joined by one space")
        for part in parts:
            if part not in vocabulary:
                raise WeightsError(f"{path}: line {number} merges {part[:40]!r}, which is not in the vocabulary")
        merges.append((parts[0], parts[1]))
    return merges


def read_byte_pair_assets(folder: Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """``vocabulary.json`` and ``merges.txt`` of a preset's ``assets/tokenizer``, checked as keras-hub
    checks them (every merged token is in the vocabulary) and beyond (one id per token)."""
    vocabulary = _vocabulary(folder / "vocabulary.json")
    return vocabulary, _merges(folder / "merges.txt", vocabulary)


def byte_pair_tokenizer(
    vocabulary: dict[str, int], merges: list[tuple[str, str]], unsplittable: list[str], add_prefix_space: bool
) -> Any:
    """The ``tokenizers.Tokenizer`` keras-hub's Python path builds (less the literal ``Split``; the module
    docstring), with no start or end token."""
    tk = tokenizers_library("converting a byte-pair tokenizer")
    tokenizer = tk.Tokenizer(tk.models.BPE(vocab=vocabulary, merges=merges))
    tokenizer.add_special_tokens([tk.AddedToken(t, special=True, normalized=False) for t in unsplittable])
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=False)
    tokenizer.decoder = tk.decoders.ByteLevel()
    return tokenizer
