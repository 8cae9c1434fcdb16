"""Deterministic, seeded train/validation/test splits that keep near-duplicate texts on one side.

A text's group is its normalised form (lower case, letters and digits only, one space between
words): WordNet repeats glosses and CMUdict repeats spellings up to case and punctuation, and a
model must not be tested on a text it saw with different commas. Each group goes to one split by a
hash of (seed, group): the assignment of a text never depends on the other texts, on their order, or
on the machine.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["group_key", "assign_split", "split_indices"]


def group_key(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def assign_split(text: str, seed: int, fractions: tuple[float, float, float]) -> str:
    digest = hashlib.sha256(f"{seed}:{group_key(text)}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    if u < fractions[0]:
        return "train"
    if u < fractions[0] + fractions[1]:
        return "val"
    return "test"


def split_indices(texts: list[str], seed: int, fractions=(0.8, 0.1, 0.1)) -> dict[str, list[int]]:
    """Indices of ``texts`` in each split, in their original order."""
    out: dict[str, list[int]] = {"train": [], "val": [], "test": []}
    for i, text in enumerate(texts):
        out[assign_split(text, seed, fractions)].append(i)
    return out
