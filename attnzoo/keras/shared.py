"""A layer a Keras 3 config lists twice, read as the one layer it is.

A functional model lists every layer its graph calls. A layer of a nested model that the outer graph calls
again (a tied embedding: ``keras.Model(lm.inputs, lm.outputs)`` of keras-hub's ``GPT2CausalLM`` calls its
backbone's ``token_embedding`` on the ids inside the backbone, then with ``reverse=True`` for the logits
outside it) is therefore listed twice: in the nested model's layers and in the outer model's, with the same
name, class and arguments. Keras saves a layer's weights once, where its save walk first meets the layer
(inside the nested model), so the second listing has no weights group of its own.

:func:`held_once` reads such a listing as the layer it repeats: its calls go to the listing whose weights the
file holds, and its own record is dropped, so both calls share one set of weights (one parameter in the
state dict). Listings with a weights group each are different layers that happen to share a name, and stay.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attnzoo.keras.files import LayerPath
from attnzoo.keras.graph import MODEL_CLASSES, KerasGraph, LayerRecord

__all__ = ["held_once"]

# keras 3 numbers the objects it serialises (a dtype policy's ``shared_object_id``); the number differs
# between two listings of one layer, and says nothing about the layer
_SERIAL_KEYS = ("shared_object_id",)


def _plain(value: Any) -> Any:
    """``value`` without Keras's serialisation counters."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k not in _SERIAL_KEYS}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _repeats(listing: LayerRecord, held: LayerRecord) -> bool:
    """Whether ``listing`` is ``held`` written again: same name and class, and every argument both record
    agrees (a graph attnzoo rebuilds for a keras-hub class records fewer arguments than Keras writes)."""
    if (listing.name, listing.class_name) != (held.name, held.class_name):
        return False
    common = set(listing.config) & set(held.config)
    return all(_plain(listing.config[key]) == _plain(held.config[key]) for key in common)


def held_once(graph: KerasGraph, group: Callable[[LayerPath], Any] | None) -> KerasGraph:
    """``graph`` with each weightless repeated listing's calls sent to the listing the file holds weights for.
    ``group``: the file's weights group at a layer's path (None where absent); None for a file whose
    weights are not found by path (a legacy ``.h5``), which is returned as it is."""
    if group is None:
        return graph
    layers = [r for r in graph.layers.values() if r.key and not r.is_operation and r.class_name not in MODEL_CLASSES]
    by_name: dict[str, list[LayerRecord]] = {}
    for record in layers:
        by_name.setdefault(record.name, []).append(record)
    moved: dict[str, str] = {}
    for records in by_name.values():
        if len(records) < 2:
            continue
        held = [r for r in records if group(r.path) is not None]
        if len(held) != 1:  # none, or several layers with weights of their own: not one layer listed twice
            continue
        moved |= {r.key: held[0].key for r in records if r is not held[0] and _repeats(r, held[0])}
    if not moved:
        return graph
    for call in graph.calls:
        call.layer = moved.get(call.layer, call.layer)
    graph.layers = {key: record for key, record in graph.layers.items() if key not in moved}
    return graph
