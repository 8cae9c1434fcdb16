"""The order keras 3 runs a functional model's calls in, which the converted graph keeps.

keras 3's ``Function._run_through_graph`` runs nodes by decreasing depth from the outputs, each depth in
the order ``map_graph`` found them. The order is observable: keras 3's MultiHeadAttention deletes the
masks of its input tensors, so a layer that reads the same tensor's mask sees it or not depending on
whether it ran first.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from attnzoo.errors import WeightsError
from attnzoo.keras.calls import Call, Ref

__all__ = ["Block", "keras3_order", "needed_in_order"]


@dataclass
class Block:
    """One node of a functional model, for ordering: the calls ``start:end`` it emitted."""

    id: str
    operation: str
    start: int
    end: int
    parents: list[Ref]
    is_input: bool = False


def keras3_order(calls: list[Call], offset: int, blocks: list[Block], outputs: list[Ref]) -> list[Call]:
    """The calls of one functional model in the order keras 3 runs them (``Function._run_through_graph``:
    nodes by decreasing depth from the outputs, each depth in the order ``map_graph`` found them).

    The order is observable: keras 3's MultiHeadAttention deletes the masks of its input tensors, so a
    layer that reads the same tensor's mask sees it or not depending on whether it ran first."""
    by_id = {b.id: b for b in blocks}
    finished: set[str] = set()
    in_progress: set[str] = set()
    decreasing: list[str] = []
    operation_index: dict[str, int] = {}

    def visit(call_id: str) -> None:  # keras's _build_map_helper, iteratively safe for our depths
        if call_id in finished or call_id not in by_id:
            return
        if call_id in in_progress:
            raise WeightsError(f"the model graph has a cycle through {call_id!r}")
        block = by_id[call_id]
        operation_index.setdefault(block.operation, len(operation_index))
        in_progress.add(call_id)
        if not block.is_input:
            for ref in block.parents:
                visit(ref.call)
        in_progress.discard(call_id)
        finished.add(call_id)
        decreasing.append(call_id)

    for ref in outputs:
        visit(ref.call)
    depths: dict[str, int] = {}
    operation_depths: dict[str, int] = {}
    for call_id in reversed(decreasing):
        block = by_id[call_id]
        depth = depths.setdefault(call_id, 0)
        depth = max(depth, operation_depths.get(block.operation, 0))
        operation_depths[block.operation] = depth
        depths[call_id] = depth
        for ref in block.parents:
            if ref.call in by_id and ref.call in finished:
                depths[ref.call] = max(depth + 1, depths.get(ref.call, 0))
    by_depth: dict[int, list[str]] = {}
    for call_id, depth in depths.items():
        by_depth.setdefault(depth, []).append(call_id)
    ordered: list[Call] = []
    placed: set[int] = set()
    for depth in sorted(by_depth, reverse=True):
        for call_id in by_depth[depth]:
            block = by_id[call_id]
            for index in range(block.start, block.end):
                if index >= 0:
                    ordered.append(calls[index - offset])
                    placed.add(index - offset)
    # calls no output needs keep their place at the end (they are dropped later)
    ordered += [call for i, call in enumerate(calls) if i not in placed]
    return ordered


def needed_in_order(calls: list[Call], made: set[str], outputs: list[str]) -> list[Call]:
    """The ``calls`` the ``outputs`` (call ids) need, in an order where every input exists before use: a
    stable topological sort, the given order wherever it already puts inputs first (keras's own is);
    ``made``: the ids of the inputs, which no call makes."""
    by_id = {call.id: call for call in calls}
    needed: set[str] = set()
    stack = list(outputs)
    while stack:
        call_id = stack.pop()
        if call_id in needed or call_id not in by_id:
            continue
        needed.add(call_id)
        stack.extend(ref.call for ref in by_id[call_id].refs())
    pending = [call for call in calls if call.id in needed]
    position = {call.id: i for i, call in enumerate(pending)}
    waiting: dict[str, set[str]] = {}
    users: dict[str, list[str]] = {}
    heap: list[tuple[int, str]] = []
    for call in pending:
        deps = {ref.call for ref in call.refs()} - made
        waiting[call.id] = deps
        for dep in deps:
            users.setdefault(dep, []).append(call.id)
        if not deps:
            heapq.heappush(heap, (position[call.id], call.id))
    by_pending = {call.id: call for call in pending}
    ordered: list[Call] = []
    while heap:
        _, call_id = heapq.heappop(heap)
        ordered.append(by_pending[call_id])
        for user in users.get(call_id, []):
            waiting[user].discard(call_id)
            if not waiting[user]:
                heapq.heappush(heap, (position[user], user))
    if len(ordered) != len(pending):
        missing = sorted({d for deps in waiting.values() for d in deps} - set(position))
        raise WeightsError(f"the model graph uses tensors nothing makes: {', '.join(missing[:5]) or 'a cycle'}")
    return ordered
