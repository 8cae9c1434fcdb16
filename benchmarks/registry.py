"""Start-up cost of listing: ``attnzoo list`` against ``timm.list_models()`` in the same run.

Each command runs in a fresh interpreter, the commands alternate round by round, and the median wall
time is reported with its ratio. The example plugin (examples/attnzoo-plugin-example) is pip-installed
into a temporary folder and put on PYTHONPATH for the "with plugin" rows: the difference to the same
command without it is what the entry-point scan and the plugin's import add.

    python benchmarks/registry.py [--rounds 15] [--json benchmarks/results/registry.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def wall_time(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def measure(commands: dict[str, tuple[list[str], dict[str, str]]], rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in commands}
    for cmd, env in commands.values():  # one warm-up each: file cache, .pyc files
        wall_time(cmd, env)
    for _ in range(rounds):
        for name, (cmd, env) in commands.items():
            times[name].append(wall_time(cmd, env))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", default=str(HERE / "results" / "registry.json"))
    parser.add_argument("--write-docs", action="store_true", help="write the table into docs/performance.md")
    args = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNZOO_")}
    python = sys.executable
    with tempfile.TemporaryDirectory() as site:
        subprocess.run(
            [
                python,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "--target",
                site,
                str(HERE.parent / "examples" / "attnzoo-plugin-example"),
            ],
            check=True,
        )
        with_plugin = {**env, "PYTHONPATH": site}
        commands = {
            "attnzoo list": ([python, "-m", "attnzoo", "list"], env),
            "attnzoo list, example plugin installed": ([python, "-m", "attnzoo", "list"], with_plugin),
            "attnzoo list --no-plugins, plugin installed": (
                [python, "-m", "attnzoo", "list", "--no-plugins"],
                with_plugin,
            ),
            "python -c pass": ([python, "-c", "pass"], env),
            "timm.list_models()": ([python, "-c", "import timm; timm.list_models()"], env),
        }
        times = measure(commands, args.rounds)
    medians = {name: statistics.median(t) for name, t in times.items()}
    timm = medians["timm.list_models()"]
    ours = medians["attnzoo list"]

    print(f"{'command':<46}{'median s':>10}{'min s':>9}{'timm / this':>13}")
    for name, median in medians.items():
        print(f"{name:<46}{median:>10.3f}{min(times[name]):>9.3f}{timm / median:>13.1f}")
    scan_ms = (medians["attnzoo list, example plugin installed"] - ours) * 1e3
    print(
        f"\nthe example plugin adds {scan_ms:.1f} ms to attnzoo list (target < 50 ms: "
        f"{'met' if scan_ms < 50 else 'NOT met'})"
    )
    print(
        f"attnzoo list is {timm / ours:.1f}x faster than timm.list_models() and takes {ours:.3f} s "
        f"(target >= 20x and < 0.3 s: {'met' if timm / ours >= 20 and ours < 0.3 else 'NOT met'})"
    )

    result = {
        "rounds": args.rounds,
        "python": sys.version.split()[0],
        "median_s": medians,
        "min_s": {name: min(t) for name, t in times.items()},
        "speedup_vs_timm": timm / ours,
        "plugin_scan_ms": scan_ms,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
    if args.write_docs:
        sys.path.insert(0, str(HERE))
        from common import markdown_table, update_doc_section

        rows = [[name, f"{m:.3f}", f"{min(times[name]):.3f}", f"{timm / m:.1f}x"] for name, m in medians.items()]
        text = (
            f"Measured with `python benchmarks/registry.py --write-docs` (median of {args.rounds} alternating "
            "rounds, each command in a fresh interpreter).\n\n"
            + markdown_table(["command", "median s", "min s", "timm / this"], rows)
            + f"\n\nThe example plugin adds {scan_ms:.1f} ms to `attnzoo list` (target < 50 ms); "
            f"`attnzoo list` is {timm / ours:.1f}x faster than `timm.list_models()` (target >= 20x, < 0.3 s)."
        )
        update_doc_section(HERE.parent / "docs" / "performance.md", "registry", text)


if __name__ == "__main__":
    main()
