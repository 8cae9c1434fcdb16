"""Graph nodes around modules made by ``attnzoo.create``: the Keras attention layers and plugin layers.

A node records the module's registered name and config (``{"op": "zoo", "model": ..., "config": ...}``)
so a saved folder rebuilds it with ``attnzoo.create``; its weights are the node's ``layer.*`` tensors.
``call`` says how the Keras call maps onto the module:

* ``attention``: ``keras.layers.Attention`` / ``AdditiveAttention``, called on ``[query, value(, key)]``
  with masks ``[query_mask, value_mask]``; the output keeps the query's mask.
* ``mha``: ``keras.layers.MultiHeadAttention(query, value, key=None, attention_mask=None, ...)``, whose
  query and value masks are the inputs' own (Keras's implicit masks); the output keeps the query's mask.
* ``layer``: a plugin's layer, called with the Keras call's tensors positionally and, when its forward
  takes ``mask``, the incoming mask (one tensor, or a list for a list of inputs); its output carries no
  mask unless the plugin registered it with ``output_mask="input"``. ``layer_unmasked``: the same
  without the mask (registered with ``mask=False``, for a Keras layer that ignored its mask).
"""

from __future__ import annotations

import inspect
from typing import Any

from torch import Tensor

from attnzoo.keras.nodes import NODES, Node

__all__ = ["ZooNode"]


def _flat(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [item for v in value for item in _flat(v)]
    return [value]


class ZooNode(Node):
    op = "zoo"

    def __init__(
        self,
        *,
        model: str,
        config: dict[str, Any],
        call: str = "layer",
        output_mask: str = "none",
    ) -> None:
        super().__init__(model=model, config=config, call=call, output_mask=output_mask)
        from attnzoo.core.create import create
        from attnzoo.core.spec import parse_name

        # a registered layer by name, nothing fetched: a saved graph cannot make loading reach a network
        parsed = parse_name(model)
        if parsed is None or parsed.tag is not None:
            raise ValueError(f"keras_model: a zoo node names {model!r}; it must be a registered layer's name, no tag")
        self.call, self.mask_rule = call, output_mask
        self.layer = create(model, config=dict(config))
        try:
            params = inspect.signature(self.layer.forward).parameters
        except (TypeError, ValueError):
            params = {}
        self.takes_mask = "mask" in params
        # keras 3's MultiHeadAttention deletes the masks of the tensors it is called on
        self.clears_input_masks = call == "mha" and config.get("keras_semantics") == 3

    def forward(self, args, kwargs, masks):
        if self.call == "attention":
            return self._attention(args, kwargs, masks)
        if self.call == "mha":
            return self._mha(args, kwargs, masks)
        tensors = [t for t in _flat(args) if isinstance(t, Tensor)]
        extra = {}
        if self.takes_mask and self.call != "layer_unmasked" and kwargs.get("implicit_mask") is not False:
            extra["mask"] = masks[0]
        result = self.layer(*tensors, **extra)
        outputs = list(result) if isinstance(result, (tuple, list)) else [result]
        first = masks[0] if isinstance(masks[0], Tensor) else None
        out_masks = [first if self.mask_rule == "input" and i == 0 else None for i in range(len(outputs))]
        return outputs, out_masks

    def _attention(self, args, kwargs, masks):
        inputs = list(args[0])
        given = kwargs.get("mask")
        ms = list(given) if isinstance(given, (list, tuple)) else list(masks[0])
        query, value = inputs[0], inputs[1]
        key = inputs[2] if len(inputs) > 2 else None
        query_mask = ms[0] if len(ms) > 0 else None
        value_mask = ms[1] if len(ms) > 1 else None
        scores = bool(kwargs.get("return_attention_scores", False))
        out = self.layer(
            query,
            value,
            key,
            query_mask=query_mask,
            value_mask=value_mask,
            return_attention=scores,
            use_causal_mask=bool(kwargs.get("use_causal_mask", False)),
        )
        outputs = list(out) if scores else [out]
        return outputs, [query_mask] + [None] * (len(outputs) - 1)

    def _mha(self, args, kwargs, masks):
        query = args[0]
        value = args[1] if len(args) > 1 else kwargs["value"]
        key = args[2] if len(args) > 2 else kwargs.get("key")
        query_mask = masks[0]
        by_keyword = kwargs.get("kwarg_masks", {})  # Keras 2 passes value and key by keyword
        value_mask = kwargs.get("value_mask")
        if not isinstance(value_mask, Tensor):
            value_mask = masks[1] if len(masks) > 1 else by_keyword.get("value")
        key_mask = kwargs.get("key_mask")
        if not isinstance(key_mask, Tensor):
            key_mask = masks[2] if len(masks) > 2 else by_keyword.get("key")
        if isinstance(key_mask, Tensor) and key is not None and key is not value:
            value_mask = key_mask if value_mask is None else value_mask & key_mask
        scores = bool(kwargs.get("return_attention_scores", False))
        attention_mask = kwargs.get("attention_mask")
        out = self.layer(
            query,
            value,
            key,
            attention_mask=attention_mask.bool() if isinstance(attention_mask, Tensor) else None,
            query_mask=query_mask,
            value_mask=value_mask,
            return_attention=scores,
            use_causal_mask=bool(kwargs.get("use_causal_mask", False)),
        )
        outputs = list(out) if scores else [out]
        return outputs, [query_mask] + [None] * (len(outputs) - 1)


NODES[ZooNode.op] = ZooNode
