"""``attnzoo bench``: time and memory of variants on your shapes."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from attnzoo.cli.common import UsageError, emit_json, parse_variants, positive_int
from attnzoo.core import model_info
from attnzoo.errors import ConfigError
from attnzoo.io.text import printable

HELP = "time and memory of variants on your shapes"


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "names",
        nargs="+",
        metavar="NAME|key=value|NAME:key=value|FILE.yaml",
        help="registered variants or saved folders (alternated round by round); key=value sets a key for "
        "every variant, NAME:key=value for that one (mha:num_heads=4 gqa:num_kv_heads=2); a YAML file maps "
        "variants to their settings (mha: {num_heads: 4})",
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
    from attnzoo.tools.bench import format_csv, format_table, plot, run

    variants = parse_variants(args.names)
    if not variants.names:
        raise UsageError("name at least one registered variant (`attnzoo list` shows them) or saved folder to measure")
    from pathlib import Path

    from attnzoo.io.folders import read_folder

    cases = []
    for name in variants.names:
        config, label = variants.config(name), ""
        if Path(name).is_dir():  # a saved folder (a converted Keras model) measures its own config
            record = read_folder(name)
            name, config, label = record["name"], {**record["config"], **config}, Path(name).name
        model_info(name)
        cases.append(_case(name, config, label, args))
    parse_dtype(args.dtype)
    sweep = None
    if args.sweep:
        key, _, values = args.sweep.partition("=")
        if not key or not values:
            raise UsageError(f"--sweep wants KEY=V1,V2,..., e.g. seq=512,1024,2048; got {args.sweep!r}")
        sweep = (key, [parse_overrides([f"v={v}"])["v"] for v in values.split(",")])
    try:
        results = run(
            cases,
            sweep=sweep,
            rounds=args.rounds,
            min_run_time=args.min_run_time,
            memory=not args.no_memory,
            threads=args.threads,
            progress=_terminal_progress() if sys.stderr is not None and sys.stderr.isatty() else None,
        )
    except ConfigError as e:
        raise ConfigError(f"{e}{_shared_key_hint(str(e), variants)}") from None
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


def _shared_key_hint(message: str, variants: Any) -> str:
    """Where a key set for every variant is unknown to one of them: how to set it for some only."""
    for key, value in variants.shared.items():
        if f"unknown config key {key!r}" in message and len(variants.names) > 1:
            return f" (key=value sets a key for every variant; NAME:{key}={value} sets it for one)"
    return ""


def _case(name: str, config: dict[str, Any], label: str, args: argparse.Namespace) -> Any:
    from attnzoo.tools.bench import Case

    return Case(
        name,
        config,
        label=label,
        batch=args.batch,
        seq=args.seq,
        dtype=args.dtype,
        device=args.device,
        backward=args.backward,
        compile=args.compile,
    )


def _terminal_progress() -> Any:
    """One status line on stderr, rewritten in place: what bench is measuring now, and for how long."""
    import time

    started = time.monotonic()

    def show(what: str) -> None:
        line = printable(what)  # a saved folder's name: shown, not sent
        print(f"\r\033[K[{time.monotonic() - started:5.0f} s] {line}", end="", file=sys.stderr, flush=True)

    return show


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()
