"""``attnzoo cache``: show or empty the weights cache."""

from __future__ import annotations

import argparse
import sys

from attnzoo.cli.common import emit_json, print_table

HELP = "show or empty the weights cache"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["list", "path", "clear"])
    p.add_argument("pattern", nargs="?", help="fnmatch pattern over name, source or sha256 (list, clear)")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from attnzoo.io.sources import cache_entries, cache_home, clear_cache

    if args.action == "path":
        print(cache_home())
        return 0
    if args.action == "list":
        import fnmatch

        entries = [
            e
            for e in cache_entries()
            if args.pattern is None
            or any(fnmatch.fnmatchcase(k, args.pattern) for k in (e["name"], e["source"], e["sha256"]) if k)
        ]
        if args.json:
            emit_json(entries)
        elif not entries:
            print(
                f"the cache ({cache_home()}) holds nothing" + (f" matching {args.pattern}" if args.pattern else ""),
                file=sys.stderr,
            )
        else:
            print_table(
                ["NAME", "MiB", "SHA256", "SOURCE"],
                [
                    (
                        e["name"] or "-",
                        f"{e['bytes'] / 2**20:.1f}" + (" (partial)" if e["partial"] else ""),
                        e["sha256"][:12] + "…",
                        e["source"],
                    )
                    for e in entries
                ],
            )
        return 0
    removed = clear_cache(args.pattern)
    print(f"removed {len(removed)} file(s) from {cache_home()}")
    return 0
