"""How long a StringLookup's vocabulary takes to convert against its size (issue 67: linear, no longer quadratic).

    PYTHONPATH=. python benchmarks/keras_vocabulary.py [--sizes 250000,500000,1000000,2000000] [--rounds 1]

Each size is a copy of tests/data/keras_text/lookups.keras (a StringLookup and an IntegerLookup feeding
embeddings) whose StringLookup vocabulary is replaced by that many distinct words (``w0``, ``w1``, ...),
converted by ``attnzoo.keras.convert_keras_model`` in this process. The table gives the median wall time
of ``--rounds`` and the time per thousand words; a linear conversion keeps the last column flat as the
size doubles. Before issue 67's fixes it grew with the size (25,000 words took 12.0 s, 50,000 took 41.4 s:
each word's position in the emitted statement was found by splitting the whole statement); a long list
of strings is now written into the emitted module as one string split at its newlines. What still
grows a little faster than the size at 2 million words is Python's garbage collector (with it off, 1M
words took 4.8 s and 2M 9.9 s; on, 5.0 s and 13.6 s).
Run it from the repository root with ``PYTHONPATH=.`` so the checkout's attnzoo is the one timed.
Writes benchmarks/results/keras_vocabulary.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "torch")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import HERE, ROOT, machine_line, markdown_table, write_json  # noqa: E402

from attnzoo.keras import convert_keras_model  # noqa: E402

SOURCE = ROOT / "tests" / "data" / "keras_text" / "lookups.keras"
MEMBER = "assets/layers/string_lookup/vocabulary.txt"


def with_vocabulary(words: int, path: Path) -> Path:
    """``lookups.keras`` with a StringLookup vocabulary of ``words`` lines (its config's size to match)."""
    with zipfile.ZipFile(SOURCE) as source, zipfile.ZipFile(path, "w") as out:
        for info in source.infolist():
            data = source.read(info)
            if info.filename == MEMBER:
                data = "\n".join(f"w{i}" for i in range(words)).encode()
            elif info.filename == "config.json":
                config = json.loads(data)
                for layer in config["config"]["layers"]:
                    if layer["class_name"] == "StringLookup":
                        layer["config"]["vocabulary_size"] = words + 2  # the mask and OOV tokens come first
                data = json.dumps(config).encode()
            out.writestr(info.filename, data)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="250000,500000,1000000,2000000")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    convert_keras_model(SOURCE)  # imports and first-call costs outside the timed rows
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for words in (int(s) for s in args.sizes.split(",")):
            path = with_vocabulary(words, Path(folder) / f"v{words}.keras")
            times = []
            for _ in range(args.rounds):
                started = time.perf_counter()
                convert_keras_model(path)
                times.append(time.perf_counter() - started)
            rows.append({"words": words, "seconds": statistics.median(times)})
    print(machine_line())
    table = [[f"{r['words']:,}", f"{r['seconds']:.2f}", f"{1000 * r['seconds'] / r['words']:.3f}"] for r in rows]
    print(markdown_table(["words", "convert (s)", "s per 1,000 words"], table))
    write_json(HERE / "results" / "keras_vocabulary.json", {"machine": machine_line(), "rows": rows})


if __name__ == "__main__":
    main()
