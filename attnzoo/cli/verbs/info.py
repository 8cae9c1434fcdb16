"""``attnzoo info``: show a model card."""

from __future__ import annotations

import argparse

from attnzoo.cli.common import emit_json, metrics_text, print_fields
from attnzoo.core import model_info
from attnzoo.io.text import printable

HELP = "show a model card"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    spec = model_info(args.name)
    data = spec.to_dict()
    if args.json:
        emit_json(data)
        return 0
    print(printable(f"{spec.name}  ({spec.kind}, provider {spec.provider})"))  # a plugin's name: shown, not sent
    print_fields([(key + ":", data[key]) for key in ("summary", "reference", "factory", "source") if data[key]])
    from attnzoo.core.signatures import config_rows

    print("  config (every constructor argument):")
    rows = config_rows(spec)
    print_fields(rows or [("(none)", "")], indent=4)
    if data["weights"]:
        print(printable("  weights:" + (f"  (default {spec.default_tag})" if spec.default_tag else "")))
        for tag, w in data["weights"].items():
            print(printable(f"    {spec.name}.{tag}"))
            fields = [("file:", f"{w['file']}  sha256 {w['sha256'][:16]}…")]
            fields += [(key + ":", w[key]) for key in ("dataset", "license", "recipe", "train_time") if w[key]]
            fields += [(key + ":", metrics_text(w[key])) for key in ("metrics", "baseline") if w[key]]
            print_fields(fields, indent=6)
    return 0
