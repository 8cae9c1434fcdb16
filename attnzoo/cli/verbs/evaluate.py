"""``attnzoo evaluate``: score a trained model on a data file."""

from __future__ import annotations

import argparse

from attnzoo.cli.common import emit_json, probability, say

HELP = "score a trained model on a data file"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="a run folder or weights file from attnzoo train (or a pretrained name)")
    p.add_argument("file", help="a .csv, .tsv, .jsonl or .parquet file (or folder) with the training columns")
    p.add_argument("--text", metavar="COL", help="override the text column")
    p.add_argument("--labels", metavar="COL", help="override the label column")
    p.add_argument("--target", metavar="COL", help="override the seq2seq target column")
    p.add_argument("--label-separator", metavar="S")
    p.add_argument("--threshold", type=probability, help="multi-label threshold (default: tuned on validation)")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from attnzoo.train.evaluate import evaluate_file

    columns = {"text": args.text, "labels": args.labels, "target": args.target, "label_separator": args.label_separator}
    scores = evaluate_file(args.model, args.file, columns=columns, threshold=args.threshold)
    if args.json:
        emit_json(scores)
    else:
        for key, value in scores.items():
            say(f"{key}: {value:.4f}" if isinstance(value, float) else f"{key}: {value}")  # label names
    return 0
