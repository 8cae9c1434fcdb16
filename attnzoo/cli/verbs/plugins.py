"""``attnzoo plugins``: list plugins, their status and errors."""

from __future__ import annotations

import argparse

from attnzoo.cli.common import emit_json, print_table
from attnzoo.core import list_plugins

HELP = "list plugins, their status and errors"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    infos = list_plugins()
    if args.json:
        emit_json([i.to_dict() for i in infos])
        return 0
    rows = []
    for info in infos:
        status = info.status
        if info.status == "loaded" and info.problems:
            status += f" ({len(info.problems)} problem{'s' * (len(info.problems) > 1)})"
        rows.append((info.name, info.distribution, info.version, status, len(info.models), info.error or ""))
    print_table(["NAME", "DISTRIBUTION", "VERSION", "STATUS", "MODELS", "ERROR"], rows)
    return 0
