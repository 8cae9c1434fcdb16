"""WordNet 3.0 from Debian's ``wordnet-base``: glosses with their hypernym categories or lexicographer file.

``data.<pos>`` holds one synset a line: ``offset lex_filenum ss_type w_cnt word lex_id ... p_cnt
[ptr ...] [frames] | gloss``; hypernym pointers are ``@`` (and ``@i`` for instances) followed by the
target offset. Lines that start with two spaces are the licence header.

Two tasks:

* ``hypernym_examples``: a noun gloss -> every ancestor of its synset along hypernym pointers, the
  three roots (entity, physical entity, abstraction) left out, keeping the ``num_labels`` most frequent
  ancestors as labels (multi-label; about 4 labels a text).
* ``lexname_examples``: any gloss -> its lexicographer file (``noun.animal``, ``verb.motion``, ...:
  45 classes, single-label).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cache

from attnzoo.train.sources import locate

__all__ = ["Synset", "read_synsets", "hypernym_examples", "lexname_examples", "LEXNAMES"]

# lexnames(5WN): the lexicographer files, by number
LEXNAMES = [
    "adj.all",
    "adj.pert",
    "adv.all",
    "noun.Tops",
    "noun.act",
    "noun.animal",
    "noun.artifact",
    "noun.attribute",
    "noun.body",
    "noun.cognition",
    "noun.communication",
    "noun.event",
    "noun.feeling",
    "noun.food",
    "noun.group",
    "noun.location",
    "noun.motive",
    "noun.object",
    "noun.person",
    "noun.phenomenon",
    "noun.plant",
    "noun.possession",
    "noun.process",
    "noun.quantity",
    "noun.relation",
    "noun.shape",
    "noun.state",
    "noun.substance",
    "noun.time",
    "verb.body",
    "verb.change",
    "verb.cognition",
    "verb.communication",
    "verb.competition",
    "verb.consumption",
    "verb.contact",
    "verb.creation",
    "verb.emotion",
    "verb.motion",
    "verb.perception",
    "verb.possession",
    "verb.social",
    "verb.stative",
    "verb.weather",
    "adj.ppl",
]

ROOTS = {"00001740", "00001930", "00002137"}  # entity, physical_entity, abstraction


@dataclass(frozen=True)
class Synset:
    offset: str
    lexname: str
    words: tuple[str, ...]
    hypernyms: tuple[str, ...]
    gloss: str


@cache
def read_synsets(pos: str) -> tuple[Synset, ...]:
    """Every synset of ``data.<pos>`` (noun, verb, adj, adv), in file order."""
    synsets = []
    with open(locate(f"wordnet_{pos}"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("  "):
                continue
            head, _, gloss = line.partition(" | ")
            parts = head.split()
            n_words = int(parts[3], 16)
            words = tuple(parts[4 : 4 + 2 * n_words : 2])
            at = 4 + 2 * n_words
            n_ptrs = int(parts[at])
            ptrs = parts[at + 1 : at + 1 + 4 * n_ptrs]
            hypernyms = tuple(ptrs[i + 1] for i in range(0, len(ptrs), 4) if ptrs[i] in ("@", "@i"))
            synsets.append(Synset(parts[0], LEXNAMES[int(parts[1])], words, hypernyms, gloss.strip()))
    return tuple(synsets)


def _ancestors(offset: str, parents: dict[str, tuple[str, ...]], memo: dict[str, frozenset]) -> frozenset:
    if offset not in memo:
        found: set[str] = set()
        for parent in parents.get(offset, ()):
            found.add(parent)
            found |= _ancestors(parent, parents, memo)
        memo[offset] = frozenset(found)
    return memo[offset]


def hypernym_examples(num_labels: int = 100) -> tuple[list[str], list[list[int]], list[str]]:
    """(texts, label ids per text, label names): noun gloss -> its most frequent hypernym ancestors."""
    synsets = read_synsets("noun")
    parents = {s.offset: s.hypernyms for s in synsets}
    names = {s.offset: s.words[0].lower() for s in synsets}
    memo: dict[str, frozenset] = {}
    ancestry = [_ancestors(s.offset, parents, memo) - ROOTS for s in synsets]
    counts = Counter(a for anc in ancestry for a in anc)
    top = [offset for offset, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:num_labels]]
    index = {offset: i for i, offset in enumerate(top)}
    texts, labels = [], []
    for synset, anc in zip(synsets, ancestry, strict=True):
        ids = sorted(index[a] for a in anc if a in index)
        if ids:
            texts.append(synset.gloss)
            labels.append(ids)
    label_names = [f"{names[o]}.n.{o}" for o in top]
    return texts, labels, label_names


def lexname_examples() -> tuple[list[str], list[int], list[str]]:
    """(texts, class id per text, class names): every gloss -> its lexicographer file."""
    texts, classes = [], []
    for pos in ("noun", "verb", "adj", "adv"):
        for synset in read_synsets(pos):
            texts.append(synset.gloss)
            classes.append(LEXNAMES.index(synset.lexname))
    return texts, classes, list(LEXNAMES)


def label_descriptions(label_names: list[str]) -> list[dict[str, str]]:
    """Display name (the lemma, spaces for underscores) and gloss of each ``lemma.n.offset`` label."""
    glosses = {s.offset: s.gloss for s in read_synsets("noun")}
    out = []
    for label in label_names:
        lemma, _, offset = label.rsplit(".", 2)
        out.append({"name": lemma.replace("_", " "), "description": glosses.get(offset, "")})
    return out
