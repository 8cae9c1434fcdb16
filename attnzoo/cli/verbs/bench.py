"""``attnzoo bench``: time and memory of variants on your shapes."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from attnzoo.cli.common import UsageError, emit_json, positive_int
from attnzoo.errors import AttnzooError

HELP = "time and memory of variants on your shapes"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "names",
        nargs="+",
        metavar="NAME|key=value",
        help="one or more registered variants (alternated round by round), then config pairs for all",
    )
    p.add_argument("--batch", type=positive_int, default=8)
    p.add_argument("--seq", type=positive_int, default=512)
    p.add_argument("--dtype", default="float32", help="float32, bfloat16, float16 or float64")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    p.add_argument("--backward", action="store_true", help="time forward and backward")
    p.add_argument("--compile", action="store_true", help="torch.compile the model first (compile time reported)")
    p.add_argument("--sweep", metavar="KEY=V1,V2,...", help="vary seq, batch or a config key, e.g. seq=512,1024")
    p.add_argument("--rounds", type=positive_int, default=7, help="alternating rounds (the median is reported)")
    p.add_argument("--min-run-time", type=float, default=0.5, help="seconds of timing per variant and round")
    p.add_argument("--threads", type=positive_int, help="torch threads (default: torch's own choice)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurement")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--json", action="store_true")
    group.add_argument("--csv", action="store_true")
    p.add_argument("--plot", metavar="PNG", help="with --sweep: plot time against the swept value")


def run(args: argparse.Namespace) -> int:
    from attnzoo.core.config import parse_overrides
    from attnzoo.core.create import parse_dtype
    from attnzoo.core.registry import model_info
    from attnzoo.tools.bench import Case, format_csv, format_table, plot, run

    pairs = [p for p in args.names if "=" in p]
    names = [p for p in args.names if "=" not in p]
    if not names:
        raise UsageError("name at least one registered variant (`attnzoo list` shows them) or saved folder to measure")
    try:
        config = parse_overrides(pairs)
    except AttnzooError as e:
        raise UsageError(str(e)) from None
    from pathlib import Path

    from attnzoo.io.folders import read_folder

    folders: dict[str, dict[str, Any]] = {}  # a saved folder (a converted Keras model) measures its own config
    for name in names:
        if Path(name).is_dir():
            record = read_folder(name)
            folders[name] = {"name": record["name"], "config": {**record["config"], **config}}
            model_info(record["name"])
        else:
            model_info(name)
    parse_dtype(args.dtype)
    sweep = None
    if args.sweep:
        key, _, values = args.sweep.partition("=")
        if not key or not values:
            raise UsageError(f"--sweep wants KEY=V1,V2,..., e.g. seq=512,1024,2048; got {args.sweep!r}")
        sweep = (key, [parse_overrides([f"v={v}"])["v"] for v in values.split(",")])
    cases = [
        Case(
            folders[name]["name"] if name in folders else name,
            folders[name]["config"] if name in folders else config,
            label=Path(name).name if name in folders else "",
            batch=args.batch,
            seq=args.seq,
            dtype=args.dtype,
            device=args.device,
            backward=args.backward,
            compile=args.compile,
        )
        for name in names
    ]
    results = run(
        cases,
        sweep=sweep,
        rounds=args.rounds,
        min_run_time=args.min_run_time,
        memory=not args.no_memory,
        threads=args.threads,
        progress=_terminal_progress() if sys.stderr is not None and sys.stderr.isatty() else None,
    )
    if sys.stderr is not None and sys.stderr.isatty():
        print("\r\033[K", end="", file=sys.stderr, flush=True)
    if args.json:
        emit_json([m.to_dict() for m in results])
    elif args.csv:
        sys.stdout.write(format_csv(results))
    else:
        step = "forward+backward" if args.backward else "forward"
        print(
            f"{step} of one batch, {args.dtype}, {args.device}, {torch_threads()} threads, median of "
            f"{args.rounds} alternating rounds"
        )
        print(format_table(results, sweep[0] if sweep else None))
    if args.plot:
        if sweep is None:
            raise UsageError("--plot draws a sweep; add --sweep KEY=V1,V2,...")
        print(f"plot: {plot(results, sweep[0], args.plot)}", file=sys.stderr)
    return 0


def _terminal_progress() -> Any:
    """One status line on stderr, rewritten in place: what bench is measuring now, and for how long."""
    import time

    started = time.monotonic()

    def show(what: str) -> None:
        print(f"\r\033[K[{time.monotonic() - started:5.0f} s] {what}", end="", file=sys.stderr, flush=True)

    return show


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()
