"""A call of a Keras layer (or of a keras 3 operation) on tensors, the unit of a converted graph.

:class:`Ref` names a tensor: output ``index`` of call ``call``. :class:`Call` is one application of a layer
to tensors, its ``args`` and ``kwargs`` keeping Keras's structure with a :class:`Ref` wherever a tensor goes.
The graph reader (:mod:`attnzoo.keras.graph`) makes them and the ordering (:mod:`attnzoo.keras.order`)
sorts them; both import them from here, below both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Ref", "Call"]


@dataclass(frozen=True)
class Ref:
    """A tensor: output ``index`` of call ``call``."""

    call: str
    index: int = 0

    def __str__(self) -> str:
        return f"{self.call}:{self.index}"


@dataclass
class Call:
    """One application of layer ``layer`` (a LayerRecord key) to the tensors in ``args`` and ``kwargs``."""

    id: str
    layer: str  # a LayerRecord key
    args: list[Any]
    kwargs: dict[str, Any]

    def refs(self) -> list[Ref]:
        found: list[Ref] = []
        _collect_refs(self.args, found)
        _collect_refs(self.kwargs, found)
        return found

    def keras_tensors(self) -> list[Ref]:
        """The tensors in the order keras 3 flattens a node's arguments: args, then kwargs by key."""
        found: list[Ref] = []
        _collect_refs(self.args, found)
        for key in sorted(self.kwargs):
            _collect_refs(self.kwargs[key], found)
        return found


def _collect_refs(value: Any, found: list[Ref]) -> None:
    """Append to ``found`` every Ref of a nest of lists, tuples and dicts, depth first in their order."""
    if isinstance(value, Ref):
        found.append(value)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _collect_refs(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            _collect_refs(item, found)
