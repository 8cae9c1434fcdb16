"""``attnzoo convert-checkpoint``: convert a CAML, LAAT, PLM-ICD or medical-coding checkpoint into safetensors."""

from __future__ import annotations

import argparse

from attnzoo.cli.common import config_overrides, say

HELP = "convert a CAML, LAAT, PLM-ICD or medical-coding checkpoint into safetensors"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="the reference's .pth, .bin or .safetensors file")
    p.add_argument("--from", dest="source", required=True, choices=["caml", "laat", "plm-icd", "medical-coding"])
    p.add_argument(
        "--model",
        required=True,
        help="the attnzoo model (conv_caml, caml, bilstm_laat, laat, bilstm_joint_laat, joint_laat)",
    )
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config the shapes do not say (split_size=...)")
    p.add_argument("-o", "--output", required=True, help="the .safetensors file to write")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output file")


def run(args: argparse.Namespace) -> int:
    from attnzoo.interop.convert import convert_checkpoint

    overrides = config_overrides(args.overrides)
    _, converted = convert_checkpoint(
        args.file, args.source, args.model, config=overrides, output=args.output, overwrite=args.overwrite
    )
    sizes = ", ".join(f"{k}={v}" for k, v in converted.config.items())
    say(f"wrote {args.output} ({args.model}: {sizes}); attnzoo.load({str(args.output)!r}) rebuilds it")
    for key, why in sorted(converted.dropped.items()):
        say(f"  left out {key}: {why}")  # keys from the checkpoint file
    return 0
