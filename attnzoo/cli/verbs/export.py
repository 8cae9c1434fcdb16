"""``attnzoo export``: export a model to .pt2 (torch.export) or .onnx, checked."""

from __future__ import annotations

import argparse

from attnzoo.cli.common import UsageError, config_overrides, emit_json, positive_int, say
from attnzoo.core import create, load, model_info
from attnzoo.interop.export import export

HELP = "export a model to .pt2 (torch.export) or .onnx, checked"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", metavar="NAME|FOLDER", help="a registered name or a folder written by attnzoo.save")
    p.add_argument(
        "overrides", nargs="*", metavar="key=value", help="config of NAME (its card's example fills the rest)"
    )
    p.add_argument("-o", "--output", required=True, help="OUT.pt2 or OUT.onnx")
    p.add_argument(
        "--pretrained", nargs="?", const=True, default=False, metavar="TAG", help="export pretrained weights"
    )
    p.add_argument(
        "--static", action="store_true", help="fix every axis at the traced size (default: batch and sequence dynamic)"
    )
    p.add_argument("--return-attention", action="store_true", help="export the attention weights as an output too")
    p.add_argument("--batch", type=positive_int, default=2, help="batch size to trace with (it stays dynamic)")
    p.add_argument(
        "--shape",
        type=_sizes,
        metavar="H,W|T",
        help="sizes of the open axes to trace with (an image's height and width, a sequence's length); they "
        "stay open (default: a converted Keras model's declared shape, its open axes at 32 for images, 16 else)",
    )
    p.add_argument(
        "--seq", type=positive_int, help="sequence length to trace with (--shape T); fixed for attnzoo's own RNNs"
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--quiet", action="store_true", help="no progress bar (one is drawn on stderr only where it is a terminal)"
    )


def _sizes(text: str) -> tuple[int, ...]:
    """``32,32`` or ``64``: positive whole numbers separated by commas (or x)."""
    parts = [p for p in text.replace("x", ",").split(",") if p.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"expected sizes such as 32,32 or 64, got {text!r}")
    return tuple(positive_int(p.strip()) for p in parts)


def run(args: argparse.Namespace) -> int:
    from attnzoo.io.progress import silenced

    with silenced(args.quiet):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    overrides = config_overrides(args.overrides)
    if Path(args.source).is_dir():
        if overrides:
            raise UsageError("a saved folder rebuilds its own config; key=value pairs apply to a NAME only")
        model = load(args.source)
    else:
        spec = model_info(args.source)
        # the card's example fills what the command line leaves open, so `attnzoo export laat` works
        config = {**dict(spec.example), **overrides} if not args.pretrained else overrides
        model = create(args.source, pretrained=args.pretrained, config=config or None)
    result = export(
        model,
        args.output,
        dynamic=not args.static,
        return_attention=args.return_attention,
        overwrite=args.overwrite,
        batch=args.batch,
        seq=args.seq,
        shape=args.shape,
    )
    if args.json:
        emit_json(
            {
                "path": str(result.path),
                "format": result.format,
                "max_abs_diff": result.max_abs_diff,
                "checked_on": result.checked_on,
                "open_axes": list(result.open_axes),
                "static_axes": list(result.static_axes),
                "checked_shapes": list(result.checked_shapes),
                "metadata": sorted(result.metadata or {}),
                "notes": list(result.notes),
            }
        )
        return 0
    fixed = f"; open: {', '.join(result.open_axes) or 'none'}"
    fixed += f"; fixed: {', '.join(result.static_axes)}" if result.static_axes else ""
    shapes = "; ".join(", ".join(f"{k} {v}" for k, v in s.items()) for s in result.checked_shapes)
    print(
        f"wrote {result.path} ({result.format}); checked against the eager model on {shapes}: max abs "
        f"difference {result.max_abs_diff:.3g}{fixed}"
    )
    if result.metadata:
        say(f"the file carries: {', '.join(sorted(result.metadata))}")
    for note in result.notes:
        say(f"note: {note}")  # notes name the layers of a converted folder
    return 0
