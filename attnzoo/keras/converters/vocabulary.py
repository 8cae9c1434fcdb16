"""A lookup layer's vocabulary, read as Keras's loader reads it and checked as Keras's ``set_vocabulary``
checks it (TextVectorization, StringLookup and IntegerLookup share it; text.py converts them)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import torch
from torch import Tensor

from attnzoo.keras.arguments import expect_variables
from attnzoo.keras.converters.preprocessing import config_array
from attnzoo.keras.registry import Refused

__all__ = [
    "TEXT_COPIES",
    "LOOKUP_COPIES",
    "vocabulary_copies",
    "read_vocabulary",
    "vocabulary_tokens",
    "oov_count",
    "idf_weights",
]

# Where a layer's vocabulary copies sit among its assets, in the order Keras's loader reads them: keras 3's
# saving_lib calls a layer's load_assets before its children's, and TextVectorization's own load_assets hands
# its folder to its inner IndexLookup, which its own turn then gives `_lookup_layer/`: both copies are read,
# either one Keras refuses fails the load, and the last one read is the vocabulary the layer keeps.
TEXT_COPIES = ("vocabulary.txt", "_lookup_layer/vocabulary.txt")
LOOKUP_COPIES = ("vocabulary.txt",)


def vocabulary_copies(record, ctx, copies: tuple[str, ...]) -> list[tuple[str, list[str]]]:
    """The vocabulary's entries as Keras's loader reads them: the config's list (Keras then reads no
    asset), else each copy of ``copies`` present among the layer's assets, as ``(where, lines)``, in
    Keras's reading order (the last one is the one Keras keeps)."""
    given = record.config.get("vocabulary")
    if isinstance(given, (list, tuple)):
        return [("the config's vocabulary", [str(v) for v in given])]
    if isinstance(given, str):
        raise Refused(f"its vocabulary is a file outside the model ({given!r}); save the model with the vocabulary")
    assets = ctx.assets(record.path)
    found = []
    for name in copies:
        data = assets.get(name)
        if data is None:
            continue
        try:
            lines = data.decode("utf-8").splitlines()  # as Keras's load_assets reads it
        except UnicodeDecodeError:
            raise Refused(f"its {name} is not UTF-8 text") from None
        while lines and lines[-1] == "":
            lines.pop()
        found.append((name, lines))
    if not found:
        size = record.config.get("vocabulary_size")
        held = f" (vocabulary_size {size} in its config)" if isinstance(size, int) else ""
        raise Refused(
            f"its vocabulary{held} is not in the file: Keras keeps an adapted vocabulary among a .keras "
            f"archive's assets, which a legacy .h5 or a config.json does not have; convert the model saved as "
            f".keras (model.save('model.keras')), or give the layer its vocabulary in its config before saving "
            f"the .h5 ({record.class_name}(vocabulary=layer.get_vocabulary(), ...))"
        )
    return found


def read_vocabulary(record, ctx, copies: tuple[str, ...], mask: Any, oov: list[Any], cast: Any = None) -> list[Any]:
    """The tokens the layer keeps: every copy checked as Keras's ``set_vocabulary`` checks it (each copy
    Keras reads must pass), the last copy's tokens returned. ``oov``: the OOV token once per OOV index."""
    tokens: list[Any] = []
    for where, lines in vocabulary_copies(record, ctx, copies):
        if cast is not None:
            try:
                lines = [cast(v) for v in lines]
            except ValueError:
                raise Refused(f"its vocabulary ({where}) holds entries that are not integers") from None
        tokens = vocabulary_tokens(lines, mask, oov, record.config, where)
    return tokens


def vocabulary_tokens(entries: list[Any], mask: Any, oov: list[Any], c: dict[str, Any], where: str) -> list[Any]:
    """The vocabulary without the special tokens at its head, checked as Keras's ``set_vocabulary``
    checks it: the head is taken off only when it is exactly the special tokens in order (mask, then the
    OOV token once per OOV index); an empty vocabulary, a repeated token or the mask token anywhere else
    is refused (Keras refuses them); the OOV token elsewhere is an ordinary token with its own index, as
    in Keras (which refuses it only for ``invert=True``, a mode attnzoo refuses anyway)."""
    if not entries:
        raise Refused(f"its vocabulary ({where}) is empty (Keras refuses an empty vocabulary)")
    special = ([mask] if mask is not None else []) + oov
    tokens = entries[len(special) :] if entries[: len(special)] == special else entries
    repeated = [token for token, n in Counter(tokens).items() if n > 1]
    if repeated:
        raise Refused(f"its vocabulary ({where}) repeats {', '.join(map(repr, repeated[:5]))} (Keras refuses it too)")
    if mask is not None and mask in tokens:
        at = len(entries) - len(tokens) + tokens.index(mask)
        raise Refused(
            f"its vocabulary ({where}) holds the mask token {mask!r} at index {at}; Keras takes it only at the "
            f"head, followed by the OOV token (Keras refuses it too)"
        )
    size = len(special) + len(tokens)
    stated = c.get("vocabulary_size")
    if isinstance(stated, int) and stated != size:
        raise Refused(f"its config says vocabulary_size={stated} but the vocabulary ({where}) holds {size} entries")
    limit = c.get("max_tokens")
    if isinstance(limit, int) and size > limit:
        raise Refused(f"its vocabulary ({where}) holds {size} entries, more than max_tokens={limit}")
    return tokens


def oov_count(c: dict[str, Any], *, integers: bool) -> int:
    count = c.get("num_oov_indices", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise Refused(f"num_oov_indices {count!r} is not a non-negative int")
    return count


def idf_weights(c: dict[str, Any], arrays: list[Any], entries: list[Any], special: list[Any], depth: int) -> Tensor:
    """The idf weights of a tf_idf lookup [depth]: the saved variable (.keras), else the config's
    ``idf_weights`` padded as Keras's ``set_vocabulary`` pads them (the special tokens' places take
    their mean when the vocabulary omits them; ``pad_to_max_tokens`` adds zeros)."""
    expect_variables(arrays, (0, 1), "a tf_idf lookup (its idf_weights)")
    if arrays:
        weights = np.asarray(arrays[0], dtype=np.float32).reshape(-1)
    else:
        given = c.get("idf_weights")
        if given is None:
            raise Refused("output_mode='tf_idf' without idf_weights in the file (an .h5 keeps them in the config only)")
        weights = config_array(given, "idf_weights").reshape(-1)
        if len(weights) != len(entries):
            raise Refused(f"{len(weights)} idf_weights for a vocabulary of {len(entries)} entries")
        if entries[: len(special)] != special:
            weights = np.concatenate([np.full(len(special), weights.mean(), np.float32), weights])
        weights = np.concatenate([weights, np.zeros(max(depth - len(weights), 0), np.float32)])
    if weights.shape != (depth,):
        raise Refused(f"idf_weights {list(weights.shape)} do not fit the {depth} indices of the encoding")
    return torch.from_numpy(weights.copy())
