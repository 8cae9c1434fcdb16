"""``attnzoo info``: show a model card."""

from __future__ import annotations

import argparse

from attnzoo.cli.common import emit_json, metrics_text

HELP = "show a model card"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from attnzoo.core.registry import model_info

    spec = model_info(args.name)
    data = spec.to_dict()
    if args.json:
        emit_json(data)
        return 0
    print(f"{spec.name}  ({spec.kind}, provider {spec.provider})")
    for key in ("summary", "reference", "factory", "source"):
        if data[key]:
            print(f"  {key + ':':<11}{data[key]}")
    from attnzoo.core.signatures import config_rows

    print("  config (every constructor argument):")
    rows = config_rows(spec)
    if not rows:
        print("    (none)")
    for key, described in rows:
        print(f"    {key:<20}{described}")
    if data["weights"]:
        print("  weights:" + (f"  (default {spec.default_tag})" if spec.default_tag else ""))
        for tag, w in data["weights"].items():
            print(f"    {spec.name}.{tag}")
            print(f"      {'file:':<12}{w['file']}  sha256 {w['sha256'][:16]}…")
            for key in ("dataset", "license", "recipe", "train_time"):
                if w[key]:
                    print(f"      {key + ':':<12}{w[key]}")
            if w["metrics"]:
                print(f"      {'metrics:':<12}{metrics_text(w['metrics'])}")
            if w["baseline"]:
                print(f"      {'baseline:':<12}{metrics_text(w['baseline'])}")
    return 0
