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
A listing whose layer another layer holds inside it (OPT's ``token_embedding``, inside its backbone's
``TokenAndPositionEmbedding``) has no record of its own to go to: its calls go to the holder where the holder's
node computes them (:data:`INNER_CALLS`), else it stays, refused as a layer without weights.
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
# a layer another layer holds inside it, its weights group a child of the holder's: the holder's class ->
# the inner layer's class -> (the attribute it is held as, the call keyword the holder's node computes it
# for). keras-hub's TokenAndPositionEmbedding holds its token_embedding, and its node's `reverse=True` call
# is that table's reverse call (x @ tokenᵀ, attnzoo.keras.converters.hub_layers): OPT's causal LM re-wrapped
INNER_CALLS: dict[str, dict[str, tuple[str, str]]] = {
    "TokenAndPositionEmbedding": {"ReversibleEmbedding": ("token_embedding", "reverse")}
}


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


def _inner_holder(listing: LayerRecord, layers: list[LayerRecord], group: Callable[[LayerPath], Any]) -> str | None:
    """The key of the layer that holds ``listing`` as its inner layer (its weights group has a child group
    of that layer's name), where that layer's node computes the listing's call (:data:`INNER_CALLS`)."""
    found = []
    for record in layers:
        inner_call = INNER_CALLS.get(record.class_name, {}).get(listing.class_name)
        held = group(record.path) if inner_call is not None else None
        inner = held.get(inner_call[0]) if held is not None and inner_call is not None else None
        own = inner.get("vars") if inner is not None else None
        if own is not None and own.attrs.get("name") in (listing.name, listing.name.encode()):
            found.append(record.key)
    return found[0] if len(found) == 1 else None


def _aliases(layers: list[LayerRecord], group: Callable[[LayerPath], Any]) -> tuple[dict[str, str], dict[str, str]]:
    """Weightless repeated listings, by key: those of a layer listed with weights elsewhere (to that
    listing's key), and those of a layer held inside another (to the holder's key)."""
    by_name: dict[str, list[LayerRecord]] = {}
    for record in layers:
        by_name.setdefault(record.name, []).append(record)
    moved: dict[str, str] = {}
    inside: dict[str, str] = {}
    for records in by_name.values():
        held = [r for r in records if group(r.path) is not None]
        if len(held) == 1:
            moved |= {r.key: held[0].key for r in records if r is not held[0] and _repeats(r, held[0])}
        elif not held and len(records) == 1:  # listed once: maybe an inner layer of another layer
            holder = _inner_holder(records[0], layers, group)
            inside |= {records[0].key: holder} if holder is not None else {}
    return moved, inside


def held_once(graph: KerasGraph, group: Callable[[LayerPath], Any] | None) -> KerasGraph:
    """``graph`` with each weightless repeated listing's calls sent to the layer the file holds its weights
    for. ``group``: the file's weights group at a layer's path (None where absent); None for a file whose
    weights are not found by path (a legacy ``.h5``), which is returned as it is."""
    if group is None:
        return graph
    layers = [r for r in graph.layers.values() if r.key and not r.is_operation and r.class_name not in MODEL_CLASSES]
    moved, inside = _aliases(layers, group)
    for key, holder in inside.items():
        calls = [call for call in graph.calls if call.layer == key]
        needs = INNER_CALLS[graph.layers[holder].class_name][graph.layers[key].class_name]
        if calls and all(call.kwargs.get(needs[1]) is True for call in calls):  # only the call the holder computes
            moved[key] = holder
    if not moved:
        return graph
    for call in graph.calls:
        call.layer = moved.get(call.layer, call.layer)
    graph.layers = {key: record for key, record in graph.layers.items() if key not in moved}
    return graph
