"""``attnzoo list``: list registered models."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from attnzoo.cli.common import emit_json, metrics_text, print_table
from attnzoo.core import list_models, model_info

HELP = "list registered models"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("patterns", nargs="*", metavar="PATTERN", help="fnmatch patterns such as 'label*'")
    p.add_argument("--pretrained", action="store_true", help="list pretrained tags (arch.tag)")
    p.add_argument("--provider", help="only models of this provider (attnzoo, local, a plugin name)")
    p.add_argument("--backend", help="only variants that serve as this library's attention backend (transformers)")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from attnzoo.integrations import backend_name

    names = list_models(args.patterns or "*", pretrained=args.pretrained, provider=args.provider)
    rows = []
    for name in names:
        spec = model_info(name)
        if args.backend and args.backend not in spec.backends:
            continue
        tag = name.rsplit(".", 1)[1] if args.pretrained else None
        entry: dict[str, Any] = {"name": name, "kind": spec.kind, "provider": spec.provider, "summary": spec.summary}
        if tag is not None:
            entry["metrics"] = dict(spec.weights[tag].metrics)
            entry["dataset"] = spec.weights[tag].dataset
        if args.backend:
            entry["backend_name"] = backend_name(name)
        rows.append(entry)
    if args.json:
        emit_json(rows)
        return 0
    if not rows:
        print("no model matches" + (f" {' '.join(args.patterns)}" if args.patterns else ""), file=sys.stderr)
        return 0
    if args.backend:
        print_table(["NAME", "BACKEND NAME", "SUMMARY"], [(r["name"], r["backend_name"], r["summary"]) for r in rows])
    elif args.pretrained:
        print_table(
            ["NAME", "DATASET", "METRICS"],
            [(r["name"], r["dataset"], metrics_text(r["metrics"])) for r in rows],
            wrap=(1, 2),
        )
    else:
        print_table(
            ["NAME", "KIND", "PROVIDER", "SUMMARY"], [(r["name"], r["kind"], r["provider"], r["summary"]) for r in rows]
        )
    return 0
