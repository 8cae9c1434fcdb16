"""``attnzoo download``: fetch pretrained weights into the cache (for offline use)."""

from __future__ import annotations

import argparse

from attnzoo.cli.common import UsageError, print_table

HELP = "fetch pretrained weights into the cache (for offline use)"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "names",
        nargs="+",
        metavar="NAME[.TAG]|hf-hub:ORG/REPO",
        help="a model (every tag), one tag, or a saved folder on the Hub",
    )
    p.add_argument(
        "--quiet", action="store_true", help="no progress bar (one is drawn on stderr only where it is a terminal)"
    )


def run(args: argparse.Namespace) -> int:
    from attnzoo.io.progress import silenced

    with silenced(args.quiet):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from attnzoo.core.hub import HUB_PREFIX, hub_folder
    from attnzoo.core.registry import resolve
    from attnzoo.io.sources import fetch, resolve_weights

    rows = []
    for name in args.names:
        if name.startswith(HUB_PREFIX):
            rows.append((name, str(hub_folder(name[len(HUB_PREFIX) :])), "fetched"))
            continue
        spec, tag = resolve(name)
        tags = [tag] if tag else list(spec.weights)
        if not tags:
            raise UsageError(
                f"{spec.name!r} has no pretrained weights; `attnzoo list --pretrained` shows the names that do"
            )
        for t in tags:
            wspec = spec.weights[t]
            path = fetch(wspec, name=f"{spec.name}.{t}") if wspec.remote else resolve_weights(spec, wspec)
            rows.append((f"{spec.name}.{t}", str(path), "cached" if wspec.remote else "bundled, nothing to fetch"))
    print_table(["NAME", "STATUS", "PATH"], [(n, st, p) for n, p, st in rows])
    return 0
