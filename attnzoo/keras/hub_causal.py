"""keras-hub's causal LMs (``GPT2CausalLM``) as functional graphs, rebuilt from the arguments their files keep.

A keras-hub ``CausalLM`` holds its Backbone and computes ``backbone.token_embedding(backbone(inputs),
reverse=True)``: the logits come from the backbone's tied ``ReversibleEmbedding`` called a second time, from
outside the backbone, on its output. Its file keeps the constructor's arguments (``{"backbone": <record>,
"preprocessor": null}``) and, in model.weights.h5, the backbone's weights under the backbone's name
(``layers/gpt2_backbone/layers/...``); the head has no weights of its own.

So the task is written as the backbone's graph (:data:`attnzoo.keras.hub_models.BUILDERS`) with one more call
in it, ``token_embedding(final_state, reverse=True)``, whose output is the backbone's output, nested under the
backbone's name in a task model of keras-hub's two inputs (``padding_mask``, ``token_ids``). A second call
of a layer is a shared layer, which the graph reader reads; each weight stays where the file keeps it. The
computation is keras-hub's: the reverse call reads the backbone's final layer norm, as the task does.

A folder ``task.save_to_preset`` wrote holds the task in ``task.json`` and the backbone's weights at the root
of model.weights.h5 (the backbone saved alone): :func:`attnzoo.keras.files.read_keras_model` reads the task
there, with the backbone's layers found at the root.

:func:`causal_lm` makes a task's builder from its Backbone's class and builder; ``hub_models.BUILDERS``
registers it under the task's name (``keras_hub>GPT2CausalLM``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from attnzoo.errors import WeightsError

__all__ = ["causal_lm", "with_head"]

Builder = Callable[[dict[str, Any], str], dict[str, Any]]


def with_head(backbone: dict[str, Any], embedding: str, where: str) -> dict[str, Any]:
    """A copy of a Backbone's functional record (one output) whose output is ``embedding(output,
    reverse=True)``, the embedding layer's second call."""
    config = copy.deepcopy(backbone["config"])
    outputs = config.get("output_layers")
    if not (isinstance(outputs, list) and len(outputs) == 3 and isinstance(outputs[0], str)):
        raise WeightsError(f"{where}: the backbone's graph has {outputs!r} as outputs; a causal LM's has one")
    layer = next((entry for entry in config["layers"] if entry.get("name") == embedding), None)
    if layer is None:
        raise WeightsError(f"{where}: the backbone's graph has no {embedding!r} layer for the logits")
    state = {"class_name": "__keras_tensor__", "config": {"keras_history": outputs}}
    layer["inbound_nodes"].append({"args": [state], "kwargs": {"reverse": True}})
    config["output_layers"] = [embedding, len(layer["inbound_nodes"]) - 1, 0]
    return {**backbone, "config": config}


def causal_lm(backbone_class: str, build_backbone: Builder, embedding: str = "token_embedding") -> Builder:
    """The builder of a ``<X>CausalLM`` over a ``backbone_class`` Backbone: inputs ``padding_mask`` and
    ``token_ids`` -> the backbone (nested, under its own name) -> ``embedding(state, reverse=True)`` logits
    [B, T, vocabulary]. A task record whose backbone is of another class is a ``WeightsError``."""

    def build(config: dict[str, Any], where: str) -> dict[str, Any]:
        record = config.get("backbone")
        inner = record.get("config") if isinstance(record, dict) else None
        registered = record.get("registered_name") if isinstance(record, dict) else None
        if not isinstance(inner, dict) or registered != f"keras_hub>{backbone_class}":
            found = registered or (record.get("class_name") if isinstance(record, dict) else None)
            raise WeightsError(f"{where}: its backbone is {found!r}; attnzoo reads this task over a {backbone_class}")
        name = inner.get("name")
        if not isinstance(name, str) or not name:
            raise WeightsError(f"{where}: its backbone has no name")
        nested = with_head(build_backbone(inner, f"{where}: {backbone_class}"), embedding, where)
        tensors = {key: {"class_name": "__keras_tensor__", "config": {"keras_history": [key, 0, 0]}} for key in _INPUTS}
        layers = [
            {"class_name": "InputLayer", "name": key, "config": _input(key), "inbound_nodes": []} for key in _INPUTS
        ]
        layers.append({**nested, "name": name, "inbound_nodes": [{"args": [tensors], "kwargs": {}}]})
        # keras 3 counts a nested model's own node in output_layers: its first call is node 1
        task = {
            "name": str(config.get("name") or "causal_lm"),
            "layers": layers,
            "input_layers": {key: [key, 0, 0] for key in _INPUTS},
            "output_layers": [name, 1, 0],
        }
        return {"class_name": "Functional", "config": task}

    return build


_INPUTS = ("padding_mask", "token_ids")


def _input(name: str) -> dict[str, Any]:
    return {"batch_shape": [None, None], "dtype": "int32", "name": name}
