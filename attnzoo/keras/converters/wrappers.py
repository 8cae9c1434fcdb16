"""Keras's ``TimeDistributed`` wrapper: the inner layer on every step, as one call over batch x time."""

from __future__ import annotations

from attnzoo.keras.converters.recurrent import CELLS
from attnzoo.keras.graph import LayerRecord
from attnzoo.keras.nodes import Node, build_node
from attnzoo.keras.registry import Converted, Refused, builtin, keras_layer

__all__ = ["TimeDistributed"]


class TimeDistributed(Node):
    """``TimeDistributed(layer)``: [B, T, ...] -> the inner layer on [B·T, ...] -> [B, T, ...]; the mask
    passes on."""

    op = "time_distributed"
    supports_masking = True

    def __init__(self, *, layer: dict) -> None:
        super().__init__(layer=layer)
        self.layer = build_node(layer)

    def compute(self, x, mask):
        b, t = x.shape[0], x.shape[1]
        (y,), _ = self.layer([x.reshape(b * t, *x.shape[2:])], {}, [None])
        return y.reshape(b, t, *y.shape[1:])


@keras_layer("TimeDistributed")
def convert_time_distributed(record, arrays, ctx):
    inner = record.config.get("layer")
    if not isinstance(inner, dict) or not isinstance(inner.get("class_name"), str):
        raise Refused("has no inner layer config")
    name = inner["class_name"]
    entry = builtin(f"keras>{name}")
    if name in CELLS or name in ("Bidirectional", "TimeDistributed") or entry is None:
        raise Refused(f"wraps {name!r}; stateless Keras layers (Dense, Conv, pooling, ...) are supported")
    inner_record = LayerRecord(record.key, record.path, name, None, "keras.layers", inner.get("config", {}))
    converted = entry.convert(inner_record, arrays, ctx)
    spec = {"op": "time_distributed", "layer": converted.spec}
    return Converted(spec, {f"layer.{k}": v for k, v in converted.state.items()}, converted.notes)
