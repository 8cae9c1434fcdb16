"""Each rank's share of the rows, and of every optimizer step's rows the ones it trains on, pass by pass.

Rows are named by their position in their split (0, 1, ... in the order the data gives them). With
``world`` processes, rank ``r`` holds the positions ``p`` with ``p % world == r`` of every split, and
reads, tokenizes and keeps only those (:func:`owns`).

The order of training does not depend on the number of processes: :func:`step_rows` makes every epoch's
steps from the positions of the whole training split and their lengths (which the ranks exchange: one
number a row), with the epoch's seeded generator. A step's rows are the rows of ``batch_size * accumulate``;
rank ``r`` trains on those it holds, in ``accumulate`` passes (:func:`passes`). A pass's loss (a mean over
its ``n`` rows) is weighted by ``n / N``, ``N`` the step's rows over every rank, so the weighted sum is
the mean over the step's rows, and DistributedDataParallel's mean over ranks, times the world size, is
that sum: one process and N processes, one pass or K, take the same step up to summation order. A rank
that holds none of a pass's rows still runs it (DDP reduces with every rank), on one of its rows with
weight 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["owns", "step_rows", "passes"]


def owns(position: int, rank: int, world: int) -> bool:
    """Whether rank ``rank`` of ``world`` holds the row at ``position`` of its split."""
    return position % world == rank


def step_rows(lengths: Sequence[int], step_size: int, generator: torch.Generator | None) -> list[list[int]]:
    """An epoch's steps over positions ``0 .. len(lengths) - 1``, ``step_size`` rows each (the last one
    smaller): shuffle, sort by length within pools of 50 steps (less padding), shuffle the steps."""
    count = len(lengths)
    order = torch.randperm(count, generator=generator).tolist() if generator is not None else list(range(count))
    pool = step_size * 50
    steps = []
    for start in range(0, count, pool):
        chunk = sorted(order[start : start + pool], key=lambda p: lengths[p])
        steps += [chunk[i : i + step_size] for i in range(0, len(chunk), step_size)]
    if generator is not None:
        steps = [steps[i] for i in torch.randperm(len(steps), generator=generator).tolist()]
    return steps


def passes(step: Sequence[int], rank: int, world: int, accumulate: int) -> list[tuple[list[int], float]]:
    """Rank ``rank``'s ``accumulate`` passes of a step: (positions, weight), the positions it holds cut into
    near-equal consecutive parts, each weighted by its share of the step's rows (an empty part: weight 0)."""
    mine = [p for p in step if owns(p, rank, world)]
    total = len(step)
    size, extra = divmod(len(mine), accumulate)
    out, start = [], 0
    for k in range(accumulate):
        end = start + size + (k < extra)
        out.append((mine[start:end], (end - start) / total))
        start = end
    return out
