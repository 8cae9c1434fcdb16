"""Texts per second of ``attnzoo.predict`` against a plain batched forward, in one run.

    python benchmarks/predict.py [--texts 2000] [--rounds 3] [--write-docs]

* **plain forward**: the texts already turned into ids, sorted by length, in batches of 64, through the
  model (``model(ids, ids != 0)``) — the floor: no tokenising, no labels, no result objects.
* **predict**: ``attnzoo.predict(model, texts, top=5)`` — tokenise, batch, forward, rank, name the labels.
* **one at a time**: ``predict_one`` per text (one forward per text, the vocabulary read for each), as
  ``predict`` worked before it batched; timed on the first 200 texts and reported per text.

The model is the pretrained ``bilstm_labelwise.wordnet``; the texts are drawn from its vocabulary, 3 to 60
words each. Writes benchmarks/results/predict.json and, with --write-docs, the table into
docs/performance.md.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    HERE,
    ROOT,
    machine_line,
    markdown_table,
    setup_threads,
    time_rounds,
    update_doc_section,
    write_json,
)

import attnzoo  # noqa: E402
from attnzoo.io.text import Vocabulary, pad_batch, tokenize  # noqa: E402
from attnzoo.train.predict import PREDICT_BATCH, predict_one  # noqa: E402

NAME = "bilstm_labelwise.wordnet"
LOOPED = 200  # texts timed one at a time


def _texts(vocab: Vocabulary, count: int) -> list[str]:
    rng = random.Random(0)
    words = [t for t in vocab.tokens[len(vocab.specials) :] if t.isalpha()]
    return [" ".join(rng.choices(words, k=rng.randint(3, 60))) for _ in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    setup_threads()
    model = attnzoo.create(NAME, pretrained=True).eval()
    meta = model.attnzoo_metadata
    vocab = Vocabulary.from_json(meta["vocab"])
    texts = _texts(vocab, args.texts)
    ids = sorted((vocab.encode(tokenize(t)[:64]) for t in texts), key=len)
    batches = [pad_batch(ids[i : i + PREDICT_BATCH]) for i in range(0, len(ids), PREDICT_BATCH)]

    def plain() -> None:
        with torch.no_grad():
            for tokens in batches:
                model(tokens, tokens != 0)

    def looped() -> None:
        for text in texts[:LOOPED]:
            predict_one(model, meta, text, top=5, threshold=None, return_attention=False)

    per_round = time_rounds(
        {
            "plain forward": plain,
            "predict": lambda: attnzoo.predict(model, texts, top=5),
            "one at a time": looped,
        },
        rounds=args.rounds,
        min_run_time=0.0,
    )
    counts = {"plain forward": len(texts), "predict": len(texts), "one at a time": LOOPED}
    rate = {name: counts[name] / statistics.median(times) for name, times in per_round.items()}
    rows = [[name, f"{rate[name]:,.0f}", f"{rate['plain forward'] / rate[name]:.2f}x"] for name in per_round]
    table = markdown_table(["path", "texts / s", "time / plain forward"], rows)
    print(table)
    write_json(
        HERE / "results" / "predict.json",
        {
            "machine": machine_line(),
            "model": NAME,
            "texts": len(texts),
            "batch": PREDICT_BATCH,
            "texts_per_second": rate,
            "rounds_seconds": per_round,
        },
    )
    if args.write_docs:
        update_doc_section(
            ROOT / "docs" / "performance.md",
            "predict",
            f"Measured with `python benchmarks/predict.py --write-docs` ({machine_line()}; {len(texts):,} texts "
            f"of 3 to 60 words, `{NAME}`, batches of {PREDICT_BATCH}):\n\n{table}\n",
        )


if __name__ == "__main__":
    main()
