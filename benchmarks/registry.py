"""Start-up cost of listing: ``attnzoo list`` against ``timm.list_models()`` in the same run.

Each command runs in a fresh interpreter, the implementations alternate round by round, and the
median wall time is reported with its ratio. With ``--plugin-cost`` it also compares ``attnzoo list``
with and without third-party plugins (``--no-plugins``): the difference is what the entry-point scan
and the installed plugins' imports add.

    python benchmarks/registry.py [--rounds 15] [--json benchmarks/results/registry.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def wall_time(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def measure(commands: dict[str, list[str]], rounds: int, env: dict[str, str]) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in commands}
    for name, cmd in commands.items():  # one warm-up each: file cache, .pyc files
        wall_time(cmd, env)
    for _ in range(rounds):
        for name, cmd in commands.items():
            times[name].append(wall_time(cmd, env))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", default=str(HERE / "results" / "registry.json"))
    args = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNZOO_")}
    python = sys.executable
    commands = {
        "attnzoo list": [python, "-m", "attnzoo", "list"],
        "attnzoo list --no-plugins": [python, "-m", "attnzoo", "list", "--no-plugins"],
        "python -c pass": [python, "-c", "pass"],
        "timm.list_models()": [python, "-c", "import timm; timm.list_models()"],
    }
    times = measure(commands, args.rounds, env)
    medians = {name: statistics.median(t) for name, t in times.items()}
    timm = medians["timm.list_models()"]

    from importlib.metadata import entry_points

    plugins = sorted(ep.name for ep in entry_points(group="attnzoo"))
    print(f"{'command':<28}{'median s':>10}{'min s':>9}{'timm / this':>13}")
    for name, median in medians.items():
        print(f"{name:<28}{median:>10.3f}{min(times[name]):>9.3f}{timm / median:>13.1f}")
    scan_ms = (medians["attnzoo list"] - medians["attnzoo list --no-plugins"]) * 1e3
    print(f"\ninstalled plugins: {', '.join(plugins) or 'none'}; plugin scan and imports add {scan_ms:.1f} ms")
    print(f"target: attnzoo list >= 20x faster than timm and < 0.3 s: "
          f"{'met' if timm / medians['attnzoo list'] >= 20 and medians['attnzoo list'] < 0.3 else 'NOT met'}")

    result = {
        "rounds": args.rounds,
        "python": sys.version.split()[0],
        "median_s": medians,
        "min_s": {name: min(t) for name, t in times.items()},
        "speedup_vs_timm": timm / medians["attnzoo list"],
        "plugins": plugins,
        "plugin_scan_ms": scan_ms,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
