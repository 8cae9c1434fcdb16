"""Checks a layer's ``write`` makes of its spec before writing it: the values are of the plain types its
torch form computes with (a hand-edited config may hold anything; the node class then takes it, whose
arguments are written as literals whatever they hold)."""

from __future__ import annotations

import math
from typing import Any

from attnzoo.keras.codegen import literal

__all__ = ["plain", "sizes", "flags", "rank", "number", "dims", "dim_text"]


def plain(spec: dict[Any, Any], kind: type, *keys: Any) -> bool:
    """Whether ``spec``'s values at ``keys`` (default: all) are plain ``kind`` (an int for float too, never
    a bool), or absent where they have a default."""
    kinds = (int, float) if kind is float else (kind,)
    values = [spec.get(k, 1) for k in keys] if keys else list(spec.values())
    return all(isinstance(v, kinds) and not isinstance(v, bool) for v in values)


def sizes(value: Any, count: Any, least: int = 1) -> bool:
    """A list of ``count`` plain ints, each at least ``least``."""
    return (
        isinstance(value, list)
        and len(value) == count
        and plain(dict(enumerate(value)), int)
        and all(v >= least for v in value)
    )


def flags(spec: dict[str, Any], *keys: str) -> bool:
    """Whether ``spec``'s values at ``keys`` are bools, where given."""
    return all(isinstance(spec.get(k, False), bool) for k in keys)


def rank(spec: dict[str, Any]) -> bool:
    """Whether the spec's ``rank`` is 1, 2 or 3 (torch's ``Conv1d/2d/3d``, ``max_pool1d/2d/3d``, ...)."""
    return spec.get("rank") in (1, 2, 3) and plain(spec, int, "rank")


def number(value: Any) -> bool:
    """A plain finite int or float (never a bool: ``x != True`` is not what ruff lets through)."""
    if plain({0: value}, int):
        return -(2**63) <= value < 2**63  # what torch holds; a larger one stays the node's (and its error)
    return plain({0: value}, float) and math.isfinite(value)


def dims(value: Any) -> bool:
    """An axis, or a list of them, as the node would pass it to torch."""
    return plain({0: value}, int) or (isinstance(value, list) and bool(value) and plain(dict(enumerate(value)), int))


def dim_text(value: Any) -> str:
    """An axis, or a tuple of axes, as ``dim=`` text."""
    return literal(value) if isinstance(value, int) else "(" + ", ".join(map(literal, value)) + ")"
