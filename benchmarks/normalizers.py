"""The sparse normalisers against the ``entmax`` package and softmax, forward and backward, in one run.

    python benchmarks/normalizers.py [--rounds 3] [--lengths 256 1024] [--batch 8] [--heads 4]

Scores [B, h, T, T] drawn from N(0, 1) (what q·k/sqrt(d) of unit-variance heads gives), one thread. For
each of sparsemax and entmax15, one forward and one backward (``torch.autograd.grad`` of the weights
against a fixed random upstream gradient) of:

* ``attnzoo``: ``attnzoo.layers.normalizers.normalize(scores, None, kind=...)``;
* ``attnzoo (causal mask)``: the same with a causal [T, T] mask (the fill the attention layers use);
* ``entmax sort``: the entmax package's ``sparsemax(scores, dim=-1)`` / ``entmax15(...)`` (a full sort);
* ``entmax top-k``: the same with ``k=64`` (its top-k path: rows whose support exceeds k sorted again);
* ``softmax``: ``torch.softmax`` (the floor).

Times are medians of rounds in which the implementations alternate; the ratios are paired per round
(``attnzoo``'s time over each other's). On a loaded machine the wall-clock time holds the waits for a
core; the thread's CPU time (``time.thread_time``, one call per implementation per round, alternating)
does not, so both are given. The script also checks that attnzoo's weights equal the full
sort's, and prints the largest support seen. Writes benchmarks/results/normalizers.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import HERE, markdown_table, paired_speedup, steady_allocator, write_json  # noqa: E402

from attnzoo.layers.normalizers import normalize  # noqa: E402
from attnzoo.tools import bench  # noqa: E402

THREADS = 1
ENTMAX_K = 64


def _step(fn, scores: torch.Tensor, upstream: torch.Tensor):
    def step():
        weights = fn(scores)
        return torch.autograd.grad(weights, scores, upstream)

    return step


def implementations(kind: str, scores: torch.Tensor) -> dict:
    import entmax

    peer = getattr(entmax, kind)
    length = scores.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    return {
        "attnzoo": lambda s: normalize(s, None, kind=kind),
        "attnzoo (causal mask)": lambda s: normalize(s, causal, kind=kind),
        "entmax sort": lambda s: peer(s, dim=-1),
        f"entmax top-k (k={ENTMAX_K})": lambda s: peer(s, dim=-1, k=ENTMAX_K),
        "softmax": lambda s: torch.softmax(s, dim=-1),
    }


def measure(kind: str, shape: tuple[int, ...], rounds: int, min_run_time: float) -> dict:
    import entmax

    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(*shape, generator=gen).requires_grad_()
    upstream = torch.randn(*shape, generator=gen)
    with torch.no_grad():  # exact: the full sort's weights
        ours, theirs = normalize(scores, None, kind=kind), getattr(entmax, kind)(scores, dim=-1)
        max_difference = (ours - theirs).abs().max().item()
        support = int((ours > 0).sum(-1).max())
    fns = implementations(kind, scores)
    per_round = bench.time_alternating(
        {name: _step(fn, scores, upstream) for name, fn in fns.items()},
        rounds=rounds,
        min_run_time=min_run_time,
        threads=THREADS,
    )
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    steps = {name: _step(fn, scores, upstream) for name, fn in fns.items()}
    for _ in range(rounds):
        for name, step in steps.items():
            start = time.thread_time()
            step()
            cpu[name].append(time.thread_time() - start)
    rows = []
    for name, times in per_round.items():
        rows.append(
            {
                "implementation": name,
                "seconds": statistics.median(times),
                "attnzoo_time_over_this": 1 / paired_speedup(times, per_round["attnzoo"]),
                "this_time_over_softmax": 1 / paired_speedup(per_round["softmax"], times),
                "cpu_seconds": statistics.median(cpu[name]),
                "attnzoo_cpu_over_this": 1 / paired_speedup(cpu[name], cpu["attnzoo"]),
            }
        )
    return {
        "kind": kind,
        "shape": list(shape),
        "max_abs_difference_from_entmax_sort": max_difference,
        "largest_support": support,
        "rows": rows,
    }


def table(result: dict) -> str:
    return markdown_table(
        ["implementation", "ms (fwd+bwd)", "attnzoo time / this", "this / softmax", "CPU ms", "attnzoo CPU / this"],
        [
            [
                f"`{r['implementation']}`",
                f"{r['seconds'] * 1e3:.1f}",
                f"{r['attnzoo_time_over_this']:.2f}",
                f"{r['this_time_over_softmax']:.2f}",
                f"{r['cpu_seconds'] * 1e3:.1f}",
                f"{r['attnzoo_cpu_over_this']:.2f}",
            ]
            for r in result["rows"]
        ],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kinds", nargs="+", default=["sparsemax", "entmax15"])
    parser.add_argument("--min-run-time", type=float, default=0.3)
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    steady_allocator()
    results = []
    for length in args.lengths:
        for kind in args.kinds:
            result = measure(kind, (args.batch, args.heads, length, length), args.rounds, args.min_run_time)
            print(
                f"\n{kind} on {result['shape']} (largest support {result['largest_support']}, "
                f"max |attnzoo - entmax sort| {result['max_abs_difference_from_entmax_sort']:.1e})"
            )
            print(table(result))
            results.append(result)
    out = {
        "command": " ".join(["python benchmarks/normalizers.py", *sys.argv[1:]]),
        "machine": f"torch {torch.__version__}, {THREADS} thread, float32, CPU (a shared machine, loaded)",
        "results": results,
    }
    write_json(HERE / "results" / "normalizers.json", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
