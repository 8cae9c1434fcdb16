"""How a Keras model config records tensors: the arguments of a layer call (keras 3's ``__keras_tensor__``
records, slices and ellipses; keras 2's ``[layer, node, index]`` lists) and a model's ``input_layers`` /
``output_layers`` (one reference, a list, or keras 3's dicts and nested lists). :mod:`attnzoo.keras.graph`
turns what these find into calls.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_NESTING", "keras3_tensors", "keras2_tensors", "is_layer_ref", "layer_structure", "known_inputs"]

MAX_NESTING = 32  # models in models, and inputs or outputs in nested lists, at most this deep


def keras3_tensors(value: Any, resolve: Any) -> Any:
    """A keras 3 call argument with each ``__keras_tensor__`` record replaced by ``resolve(keras_history)``,
    slices as ``{"slice": [start, stop, step]}`` and ``...`` as ``{"ellipsis": True}``."""
    if isinstance(value, dict):
        if value.get("class_name") == "__keras_tensor__":
            return resolve(value.get("config", {}).get("keras_history"))
        if value.get("class_name") == "__slice__":
            c = value.get("config", {})
            return {"slice": [c.get("start"), c.get("stop"), c.get("step")]}
        if value.get("class_name") == "__ellipsis__":
            return {"ellipsis": True}
        return {k: keras3_tensors(v, resolve) for k, v in value.items()}
    if isinstance(value, list):
        return [keras3_tensors(v, resolve) for v in value]
    return value


def keras2_tensors(value: Any, resolve: Any) -> Any:
    """A keras 2 keyword argument with each tensor, written as ``[layer, node, index]``, replaced by
    ``resolve(that list)``."""
    if isinstance(value, list) and len(value) in (3, 4) and isinstance(value[0], str) and isinstance(value[1], int):
        return resolve(value)
    if isinstance(value, dict):
        return {k: keras2_tensors(v, resolve) for k, v in value.items()}
    if isinstance(value, list):
        return [keras2_tensors(v, resolve) for v in value]
    return value


def is_layer_ref(value: Any) -> bool:
    """Whether ``value`` is a reference to a layer's output as configs write it: ``[name, node, index, ...]``."""
    return isinstance(value, list) and len(value) >= 3 and isinstance(value[0], str) and isinstance(value[1], int)


def layer_structure(value: Any, what: str, fail: Any) -> tuple[list[tuple[str, int, int]], Any]:
    """``input_layers`` / ``output_layers``: one ``[name, node, index]``, a list of them, or (keras 3) a
    dict of them or nested lists. Returns the references in Keras's flat order (a dict's entries by
    sorted key, as ``keras.tree.flatten`` orders them and ``model.inputs`` lists them) and the structure
    with each leaf the position in that order; the structure is None for one reference or a flat list."""
    if is_layer_ref(value):
        value = [value]
    if not isinstance(value, (list, dict)) or not value:
        raise fail(f"the model config lists no {what} layers ({what}_layers is {str(value)[:80]})")
    flat: list[tuple[str, int, int]] = []

    def walk(item: Any, depth: int) -> Any:
        if depth > MAX_NESTING:
            raise fail(f"the model's {what}s are nested deeper than {MAX_NESTING} levels")
        if is_layer_ref(item):
            flat.append((item[0], int(item[1]), int(item[2])))
            return len(flat) - 1
        if isinstance(item, dict) and item and all(isinstance(k, str) for k in item):
            return {key: walk(item[key], depth + 1) for key in sorted(item)}
        if isinstance(item, list) and item:
            return [walk(v, depth + 1) for v in item]
        raise fail(f"an {what} layer reference {str(item)[:80]} is not [layer, node, index], a dict or a list")

    structure = walk(value, 0)
    nested = isinstance(structure, dict) or any(not isinstance(leaf, int) for leaf in structure)
    return flat, structure if nested else None


def known_inputs(node: Any, nodes: dict[tuple[str, int], str]) -> bool:
    """Whether every tensor a keras 3 inbound node reads is made by a call read already (keras 2's: always)."""
    stack = [node]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            tensor = value.get("class_name") == "__keras_tensor__"
            history = value.get("config", {}).get("keras_history") if tensor else None
            if isinstance(history, list) and len(history) >= 2:
                if (history[0], history[1]) not in nodes:
                    return False
                continue
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return True
