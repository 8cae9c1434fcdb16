"""``attnzoo verify``: check every weights file (bundled or cached) against its card."""

from __future__ import annotations

import argparse

from attnzoo.cli.common import FAILURE, UsageError, emit_json, print_table
from attnzoo.core import list_models, model_info

HELP = "check every weights file (bundled or cached) against its card"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("patterns", nargs="*", metavar="PATTERN")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from attnzoo.core.create import weights_path
    from attnzoo.io.weights import sha256_file

    rows, failures = [], 0
    names = list_models(args.patterns or "*", pretrained=True)
    if not names:
        raise UsageError(
            f"no pretrained model matches {' '.join(args.patterns) or '*'}; `attnzoo list --pretrained` shows them"
        )
    for name in names:
        arch, tag = name.rsplit(".", 1)
        spec = model_info(arch)
        wspec = spec.weights[tag]
        path = weights_path(spec, wspec)
        if not path.is_file():
            if wspec.remote:  # not fetched yet: nothing to check, nothing wrong
                status = f"not cached (from {wspec.source}; `attnzoo download {name}`)"
            else:
                status, failures = f"MISSING ({path})", failures + 1
        else:
            actual = sha256_file(path)
            ok = actual == wspec.sha256
            status = (
                ("ok" + (" (cached)" if wspec.remote else ""))
                if ok
                else f"MISMATCH: card {wspec.sha256[:12]}… file {actual[:12]}…"
            )
            failures += not ok
        rows.append({"name": name, "file": str(path), "status": status})
    if args.json:
        emit_json(rows)
    else:
        print_table(["NAME", "STATUS", "FILE"], [(r["name"], r["status"], r["file"]) for r in rows])
        print(
            f"{sum(r['status'].startswith('ok') for r in rows)} of {len(rows)} weight files match their cards"
            + (f"; {failures} do not" if failures else "")
        )
    return FAILURE if failures else 0
