"""Keras's ``TimeDistributed`` wrapper: the inner layer on every step, as one call over batch x time."""

from __future__ import annotations

from typing import Any

from attnzoo.keras.graph import LayerRecord
from attnzoo.keras.nodes import Node, as_node
from attnzoo.keras.registry import Converted, Refused, builtin, keras_layer

__all__ = ["TimeDistributed"]

# the inner layers whose calls take one tensor (the attention layers take several)
_MULTI_INPUT = ("Attention", "AdditiveAttention", "MultiHeadAttention", "TimeDistributed")


class TimeDistributed(Node):
    """``TimeDistributed(layer)``: [B, T, ...] -> the inner layer on [B·T, ...] -> [B, T, ...].

    A mask with more axes than [B, T] (ids [B, T, W] through an Embedding with ``mask_zero``) goes to
    the inner layer reshaped to [B·T, W], so an inner RNN skips each step's padding. The output mask is
    Keras 2's: the inner layer's output mask reshaped to [B, T, ...], or where it makes none, the input
    mask reduced to [B, T] (a step is kept when any of its elements is). keras 3 passes the input mask
    on unchanged, which no later masked layer of keras 3 accepts when it has more axes than [B, T]."""

    op = "time_distributed"
    supports_masking = True
    layer_arguments = ("layer",)

    def __init__(self, *, layer: dict[str, Any] | Node) -> None:
        super().__init__()
        self.layer = as_node(layer)

    def forward(self, args, kwargs, masks):
        x, mask = args[0], masks[0]
        b, t = x.shape[0], x.shape[1]
        inner_mask = mask.reshape(b * t, *mask.shape[2:]) if mask is not None and mask.dim() > 2 else None
        outputs, out_masks = self.layer([x.reshape(b * t, *x.shape[2:])], {}, [inner_mask])
        y = outputs[0].reshape(b, t, *outputs[0].shape[1:])
        inner = out_masks[0] if out_masks else None
        if inner is not None:
            out_mask = inner.reshape(b, t, *inner.shape[1:])
        elif mask is not None:
            out_mask = mask.reshape(b, t, -1).any(dim=-1)
        else:
            out_mask = None
        return [y], [out_mask]


@keras_layer("TimeDistributed", child_order=("layer/forward_layer", "layer/backward_layer"))
def convert_time_distributed(record, arrays, ctx):
    inner = record.config.get("layer")
    if not isinstance(inner, dict) or not isinstance(inner.get("class_name"), str):
        raise Refused("has no inner layer config")
    name = inner["class_name"]
    entry = builtin(f"keras>{name}")
    if name in _MULTI_INPUT or entry is None:
        raise Refused(f"wraps {name!r}; Keras layers of one input (Dense, Conv, pooling, RNNs, ...) are supported")
    config = inner.get("config", {})
    if config.get("return_state"):
        raise Refused(f"wraps {name!r} with return_state=True; one output per step is supported")
    inner_record = LayerRecord(record.key, record.path, name, None, "keras.layers", config)
    converted = entry.convert(inner_record, arrays, ctx)
    spec = {"op": "time_distributed", "layer": converted.spec}
    return Converted(spec, {f"layer.{k}": v for k, v in converted.state.items()}, converted.notes)
