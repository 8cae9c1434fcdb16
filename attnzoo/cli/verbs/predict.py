"""``attnzoo predict``: run a pretrained model or a trained run on a text (or a word, for G2P)."""

from __future__ import annotations

import argparse
import sys

from attnzoo.cli.common import UsageError, emit_json, positive_int, probability

HELP = "run a pretrained model or a trained run on a text (or a word, for G2P)"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "name",
        help="a pretrained name (bilstm_labelwise.wordnet), or a run folder or weights file written by attnzoo train",
    )
    p.add_argument("text", nargs="+")
    p.add_argument("--pretrained", metavar="TAG", help="the tag, when the name has none and the default is not wanted")
    p.add_argument("--top", type=positive_int, default=5, help="how many labels to show (a positive number)")
    p.add_argument(
        "--above-threshold",
        action="store_true",
        help="show every label at or above the decision threshold, and only those",
    )
    p.add_argument(
        "--threshold",
        type=probability,
        help="the multi-label decision threshold (default: the one stored with the weights, tuned on validation)",
    )
    p.add_argument("--beam", type=positive_int, default=1, help="G2P: beam size (1 = greedy)")
    p.add_argument("--attention", metavar="PNG", help="draw the attention map into this file")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --attention file")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    import warnings

    from attnzoo.errors import UnknownTokensWarning
    from attnzoo.train.predict import predict

    if args.attention:
        from pathlib import Path

        target = Path(args.attention)
        if target.is_dir():  # even with --overwrite: a folder is never replaced by a picture
            raise UsageError(f"--attention {target} is a folder; give the file to draw into, e.g. {target / 'map.png'}")
        if target.exists() and not args.overwrite:
            raise UsageError(f"{target} already exists; pass --overwrite to replace it")
        if not target.parent.is_dir():
            raise UsageError(f"cannot write {target}: the folder {target.parent} does not exist")
        if target.suffix.lower() not in (".png", ".pdf", ".svg", ".jpg", ".jpeg"):
            raise UsageError(f"--attention wants an image file (.png, .pdf, .svg, .jpg), got {target.name}")
    name = args.name if not args.pretrained else f"{args.name.split('.')[0]}.{args.pretrained}"
    text = " ".join(args.text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # bytes that were not UTF-8 reach argv as lone surrogates
        raise UsageError("the text is not valid UTF-8; pass it in UTF-8") from None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnknownTokensWarning)  # printed below, with the result
        result = predict(
            name,
            text,
            top=None if args.above_threshold else args.top,
            threshold=args.threshold,
            return_attention=bool(args.attention),
            beam_size=args.beam,
        )
    if args.above_threshold:
        result.labels = [label for label in result.labels if label.above_threshold]
        if result.attention is not None and result.output == "multilabel":
            result.attention = result.attention[: len(result.labels)]
            result.rows = result.rows[: len(result.labels)]
    if args.json:
        emit_json(result.to_dict())
    else:
        print(result.render())  # printable: render() escapes the labels
    if args.attention:
        path = result.plot_attention(args.attention, title=f"{args.name}: {text}")
        print(f"attention map: {path}", file=sys.stderr)
    return 0
