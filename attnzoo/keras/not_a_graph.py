"""Why a saved Keras model that is neither Sequential nor functional is not converted, and what to do: a
subclassed model (no graph in its file), or a keras-hub object that is neither a model attnzoo rebuilds
(:mod:`attnzoo.keras.hub_families`) nor a graph.
"""

from __future__ import annotations

from typing import Any

__all__ = ["not_a_graph", "CUSTOM_LAYERS"]

CUSTOM_LAYERS = "attnzoo_register_keras_layers (docs/keras-migration.md, 'Custom layers: a converter from a plugin')"


def not_a_graph(config: dict[str, Any]) -> str:
    """Why a saved model that is neither Sequential nor functional is not converted, and what to do."""
    name = str(config.get("class_name"))[:80]
    registered = config.get("registered_name") if isinstance(config.get("registered_name"), str) else None
    module = config.get("module") if isinstance(config.get("module"), str) else ""
    if module.startswith("keras_hub") or (registered or "").startswith("keras_hub>"):
        return (
            f"the file holds keras-hub's {name}, which is neither a model attnzoo rebuilds (docs/keras-hub.md) nor "
            f"a graph (keras-hub's layers TransformerEncoder, TransformerDecoder, TokenAndPositionEmbedding, "
            f"PositionEmbedding and SinePositionEncoding convert inside one). To go on: save it as a plain "
            f"functional model, "
            f"keras.Model(model.input, model.output).save('plain.keras'), and convert that: each layer attnzoo "
            f"does not convert is then named, and converts through a converter registered with {CUSTOM_LAYERS}"
        )
    key = registered or name
    return (
        f"the file holds {name!r} ({key}), a subclassed Keras model: its call() is Python code, which the file "
        f"does not hold, so it has no graph to read. Rebuild it as a functional model (keras.Model(inputs, "
        f"outputs) over the same layers) and save that; or call it inside one (inputs = keras.Input(...); "
        f"keras.Model(inputs, model(inputs))) and register a converter for {key!r} with {CUSTOM_LAYERS}"
    )
