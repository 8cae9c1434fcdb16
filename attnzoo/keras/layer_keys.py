"""The keys a converted model's layers sit under: Keras names where ``nn.ModuleDict`` takes them as they are.

Keras allows any string as a layer's name (``training``, ``keys``, ``''``, ``a.b``), and a hand-made
folder may even hold an int; ``nn.ModuleDict`` refuses a dot, an empty key and each of its own attributes.
The converter names its modules with :func:`module_key`, and a converted folder's graph is renamed the same
way when it loads (:func:`module_keys`), so its weights' keys always match; the Keras name stays in the
graph for the report.
"""

from __future__ import annotations

from typing import Any

from torch import nn

__all__ = ["MODULE_DICT_NAMES", "module_key", "module_keys"]

MODULE_DICT_NAMES = frozenset(dir(nn.ModuleDict()))  # the attributes a ModuleDict refuses as keys


def module_key(key: Any, used: set[str]) -> str:
    """The converted model's key for the layer named ``key``: the Keras name where ``nn.ModuleDict`` takes it
    as it is, else without dots, with ``_`` after one of the dict's own attributes (``keys``, ``training``),
    made unique (and added to ``used``)."""
    safe = str(key).replace(".", "_") or "layer"
    if safe in MODULE_DICT_NAMES:
        safe += "_"
    candidate, n = safe, 1
    while candidate in used:
        n += 1
        candidate = f"{safe}_{n}"
    used.add(candidate)
    return candidate


def module_keys(graph: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``graph`` with every layer key ``nn.ModuleDict`` takes (a hand-made folder may hold ``training``,
    ``keys``, ``''``, ``a.b`` or an int, which Keras allows as names), and new key -> the key it had, for
    the renamed ones; the Keras name stays the original for the report. The same graph is renamed the same
    way on every load, so its weights' keys always match."""
    layers = graph["layers"]
    fine = {k for k in layers if isinstance(k, str) and k and "." not in k and k not in MODULE_DICT_NAMES}
    if len(fine) == len(layers):
        return graph, {}
    used, renamed = set(fine), {}
    for key in layers:
        if key not in fine:
            renamed[key] = module_key(key, used)
    calls = [
        {**call, "layer": renamed.get(call["layer"], call["layer"])} if call.get("layer") in renamed else call
        for call in graph["calls"]
    ]
    new_layers = {renamed.get(k, k): spec for k, spec in layers.items()}
    return {**graph, "layers": new_layers, "calls": calls}, {new: old for old, new in renamed.items()}
