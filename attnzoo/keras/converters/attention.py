"""Nodes around modules made by ``attnzoo.create``: Keras's attention layers, the seeds' layers, plugins' layers.

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
import math
from typing import Any

import numpy as np
from torch import Tensor

from attnzoo.core import create
from attnzoo.errors import ConfigError, WeightsError
from attnzoo.keras.emit import Writer
from attnzoo.keras.emit.draft import is_ref
from attnzoo.keras.importer import load_keras_arrays
from attnzoo.keras.masks import reads_mask
from attnzoo.keras.nodes import Node, writes
from attnzoo.keras.registry import STYLE_ARGUMENTS, Converted, Refused, keras_layer, module_node
from attnzoo.layers.keras_layers import KerasAdditiveAttention, KerasDotAttention

__all__ = ["ZooNode", "write_keras_attention"]


def _flat(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [item for v in value for item in _flat(v)]
    return [value]


class ZooNode(Node):
    op = "zoo"
    options_argument = "config"

    def __init__(
        self,
        *,
        model: str,
        config: dict[str, Any] | None = None,
        call: str = "layer",
        output_mask: str = "none",
        attention_axes: list[int] | None = None,
        **options: Any,
    ) -> None:
        """``model``: a registered layer's name; ``config`` (or its entries as keyword arguments, ``options``):
        the settings ``attnzoo.create`` builds it with."""
        super().__init__()
        config = {**(config or {}), **options}
        self.attention_axes = None if attention_axes is None else [int(a) for a in attention_axes]
        from attnzoo.core.spec import parse_name

        # a registered layer by name, nothing fetched: a saved graph cannot make loading reach a network
        parsed = parse_name(model)
        if parsed is None or parsed.tag is not None:
            raise ValueError(f"keras_model: a zoo node names {model!r}; it must be a registered layer's name, no tag")
        if parsed.arch == "keras_model":  # the converter writes a nested model inline, never as a zoo node
            raise ConfigError(
                "keras_model: a zoo node holds another keras_model; a converted graph holds its nested models "
                "inline (convert the Keras file again)"
            )
        self.call, self.mask_rule = call, output_mask
        self.layer = create(model, config=dict(config))
        try:
            params = inspect.signature(self.layer.forward).parameters
        except (TypeError, ValueError):
            params = {}
        self.takes_mask = "mask" in params
        # keras 3's MultiHeadAttention deletes the masks of the tensors it is called on
        self.clears_input_masks = call == "mha" and config.get("keras_semantics") == 3

    @classmethod
    def torch_key(cls, key: str) -> str:
        """``layer.scale`` -> ``scale``: the node's keys in the attnzoo layer the emitted module declares in
        its place (:func:`write_keras_attention`)."""
        return key.removeprefix("layer.")

    def forward(self, args, kwargs, masks):
        if self.call == "attention":
            return self._attention(args, kwargs, masks)
        if self.call == "mha":
            return self._mha(args, kwargs, masks)
        tensors = [t for t in _flat(args) if isinstance(t, Tensor)]
        extra = {}
        if self.takes_mask and self.call != "layer_unmasked" and reads_mask(kwargs):
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
        if query.dim() > 3:  # Keras's attention_axes (by default every axis between batch and features)
            if any(isinstance(m, Tensor) for m in (query_mask, value_mask)):
                raise ValueError(
                    "MultiHeadAttention with attention_axes over inputs of more than 3 axes takes its mask as "
                    "attention_mask; a Keras mask on its inputs is not supported"
                )
            return self._axial(query, value, key, attention_mask, scores, bool(kwargs.get("use_causal_mask")))
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

    def _axial(self, query, value, key, attention_mask, scores: bool, causal: bool):
        """Keras's ``attention_axes`` over [B, *axes, C] inputs: the other inner axes join the batch, the
        attention axes become one sequence (Keras's softmax runs over all of them together), the 3-D
        attention runs, and its output goes back to [B, *axes, C_out]. ``attention_mask`` is Keras's
        [B, *other, *query attention axes, *key attention axes]; scores come back as Keras's
        [B, *other, heads, *query attention axes, *key attention axes]."""
        rank = query.dim()
        axes = sorted({a % rank for a in (self.attention_axes or range(1, rank - 1))})
        if any(a in (0, rank - 1) for a in axes):
            raise ValueError(f"attention_axes {self.attention_axes} must name inner axes of a {rank}-D input")
        other = [a for a in range(1, rank - 1) if a not in axes]
        order = [0, *other, *axes, rank - 1]
        batch_dims = [query.shape[a] for a in (0, *other)]
        q_axes = [query.shape[a] for a in axes]
        k_axes = [value.shape[a] for a in axes]

        def fold(x: Tensor) -> Tensor:
            x = x.permute(order)
            return x.reshape(math.prod(batch_dims), -1, x.shape[-1])

        mask = None
        if isinstance(attention_mask, Tensor):
            mask = attention_mask.bool().expand(*batch_dims, *q_axes, *k_axes)
            mask = mask.reshape(math.prod(batch_dims), math.prod(q_axes), math.prod(k_axes))
        out = self.layer(
            fold(query),
            fold(value),
            None if key is None else fold(key),
            attention_mask=mask,
            # Keras's explicit path (its masked softmax, not the fused kernel) is the one it takes for
            # projections of more than 4 axes; asking for the weights takes the same path here
            return_attention=True,
            use_causal_mask=causal,
        )
        out, weights = out
        out = out.reshape(*batch_dims, *q_axes, out.shape[-1]).permute([order.index(a) for a in range(rank)])
        if not scores:
            return [out], [None]
        weights = weights.reshape(*batch_dims, weights.shape[1], *q_axes, *k_axes)
        return [out, weights], [None, None]


# Keras's Attention and AdditiveAttention as the attnzoo layers their nodes run, which the emitted module declares
_ATTENTION_FORMS = {"keras_dot": KerasDotAttention, "keras_additive": KerasAdditiveAttention}
_ZOO_KEYS = {"op", "keras", "model", "config", "call", "output_mask"}


def _attention_masks(w: Writer, inputs: list[Any]) -> list[str | None] | None:
    """The query's and the value's masks as the node reads them: the call's ``mask=[query_mask, value_mask]``,
    else the inputs' own; None where one is not a variable that holds a tensor whenever the code runs."""
    given = w.explicit
    if given is not None and not isinstance(given, list):
        return None
    masks = [w.value(m) if m is not None else None for m in given] if given is not None else []
    if given is None:
        masks = [w.mask_of(w.value(x)) for x in inputs]
    masks = (masks + [None, None])[:2]
    return masks if all(m is None or w.sure(m) for m in masks) else None


@writes(ZooNode, keywords=("return_attention_scores", "use_causal_mask"), outputs=True)
def write_keras_attention(w: Writer, spec: dict[str, Any]) -> bool:
    """``Attention`` / ``AdditiveAttention``: attnzoo's :class:`~attnzoo.layers.keras_layers.KerasDotAttention`
    / ``KerasAdditiveAttention`` (the layer the node runs), declared itself and called with typed arguments,
    ``layer(query, value[, key], query_mask=..., value_mask=...)`` (and ``use_causal_mask=True``,
    ``return_attention=True`` where the call asks); the output carries the query's mask, as the node's.
    Every other zoo node (MultiHeadAttention, a plugin's layer) stays a node call."""
    config, form = spec.get("config"), _ATTENTION_FORMS.get(str(spec.get("model")))
    if form is None or spec.get("call") != "attention" or spec.get("output_mask") != "input":
        return False
    if set(spec) - _ZOO_KEYS or not isinstance(config, dict):
        return False
    args = w.args
    if len(args) != 1 or not isinstance(args[0], list) or not 2 <= len(args[0]) <= 3:
        return False
    inputs = args[0]
    flags = [w.keyword(k) for k in ("use_causal_mask", "return_attention_scores")]
    masks = _attention_masks(w, inputs) if all(is_ref(x) for x in inputs) else None
    if masks is None or not all(f is None or isinstance(f, bool) for f in flags):
        return False
    causal, scores = (bool(f) for f in flags)
    if len(w.outs) > (2 if scores else 1):
        return False
    layer = w.declare(w.construct("attnzoo.layers.keras_layers", form, config))
    given = [w.value(x) for x in inputs]
    given += [f"{k}={m}" for k, m in zip(("query_mask", "value_mask"), masks, strict=True) if m is not None]
    given += ["use_causal_mask=True"] * causal + ["return_attention=True"] * scores
    expression = f"{layer}({', '.join(given)})"
    if scores:
        w.assign_all(expression, 2)
    else:
        w.assign(expression)
    w.mask_is(masks[0])
    return True


# -- attnzoo's own Keras layers: a Keras class -> a registered attnzoo layer with the Keras weights loaded ---
def _zoo(name: str, config: dict[str, Any], arrays: list[np.ndarray], where: str, **call: Any) -> Converted:
    try:
        module = load_keras_arrays(create(name, config=config), [a.copy() for a in arrays], where=where)
    except (ValueError, ConfigError, WeightsError) as e:
        raise Refused(str(e)) from None
    return module_node(module, source=f"attnzoo for {where}", **call)


_INPUT_MASK = {"call": "attention", "mask": True, "output_mask": "input"}


@keras_layer("Attention", call_arguments=STYLE_ARGUMENTS["attention"])
def convert_attention(record, arrays, ctx):
    c = record.config
    config = {
        "use_scale": bool(c.get("use_scale", False)),
        "score_mode": c.get("score_mode", "dot"),
        "dropout": float(c.get("dropout", 0.0) or 0.0),
        "keras_semantics": ctx.major,
    }
    return _zoo("keras_dot", config, arrays, "Attention", **_INPUT_MASK)


@keras_layer("AdditiveAttention", call_arguments=STYLE_ARGUMENTS["attention"])
def convert_additive_attention(record, arrays, ctx):
    use_scale = bool(record.config.get("use_scale", True))
    config = {
        "use_scale": use_scale,
        "dropout": float(record.config.get("dropout", 0.0) or 0.0),
        "keras_semantics": ctx.major,
    }
    if use_scale and arrays:
        config["dim"] = int(arrays[0].shape[0])
    return _zoo("keras_additive", config, arrays, "AdditiveAttention", **_INPUT_MASK)


def _attention_axes(c: dict[str, Any]) -> list[int] | None:
    """Keras's ``attention_axes`` as a list of ints (None: the axes before the last, Keras's default)."""
    axes = c.get("attention_axes")
    if axes is None:
        return None
    axes = [axes] if isinstance(axes, int) else axes
    if not isinstance(axes, (list, tuple)) or not axes or not all(type(a) is int for a in axes):
        raise Refused(f"attention_axes={axes!r} is not an int or a list of ints")
    return [int(a) for a in axes]


def _mha_output_shape(c: dict[str, Any]) -> int | None:
    for key in ("use_gate", "sliding_window"):
        if c.get(key) not in (None, False):
            raise Refused(f"{key}={c.get(key)!r} is not supported")
    output_shape = c.get("output_shape")
    if isinstance(output_shape, (list, tuple)):
        if len(output_shape) != 1:
            raise Refused(f"output_shape={output_shape!r}: one output dimension is supported")
        output_shape = output_shape[0]
    return None if output_shape is None else int(output_shape)


@keras_layer(
    "MultiHeadAttention",
    call_arguments=STYLE_ARGUMENTS["mha"],
    child_order=("query_dense", "key_dense", "value_dense", "output_dense"),
)
def convert_multi_head_attention(record, arrays, ctx):
    c = record.config
    output_shape = _mha_output_shape(c)
    use_bias = bool(c.get("use_bias", True))
    if len(arrays) != (8 if use_bias else 4):
        raise Refused(f"has {len(arrays)} variables, MultiHeadAttention has {8 if use_bias else 4}")
    step = 2 if use_bias else 1
    query, key, value = arrays[0], arrays[step], arrays[2 * step]
    config = {
        "num_heads": int(c["num_heads"]),
        "key_dim": int(c["key_dim"]),
        "value_dim": int(c.get("value_dim") or c["key_dim"]),
        "dropout": float(c.get("dropout", 0.0) or 0.0),
        "use_bias": use_bias,
        "output_shape": output_shape,
        "query_size": int(query.shape[0]),
        "key_size": int(key.shape[0]),
        "value_size": int(value.shape[0]),
        "keras_semantics": ctx.major,
    }
    converted = _zoo("keras_mha", config, arrays, "MultiHeadAttention", call="mha", mask=True, output_mask="input")
    axes = _attention_axes(c)
    if axes is not None:  # axial attention over inputs of more than 3 axes: the node folds the others away
        converted.spec["attention_axes"] = axes
        converted.notes.append(f"attention over axes {axes}, the other inner axes taken as batch")
    return converted


# Chalkidis et al.'s LabelWiseAttention (lmtc-eurlex57k) and seed 000's layer are custom classes of those
# bare names; both ignore the mask
@keras_layer("LabelWiseAttention", custom=True)
def convert_label_wise_attention(record, arrays, ctx):
    if len(arrays) != 3 or arrays[0].ndim != 2:
        raise Refused(f"LabelWiseAttention has Wa [L, h], Wo [L, h], bo [L]; got {[list(a.shape) for a in arrays]}")
    labels, hidden = arrays[0].shape
    config = {"num_labels": labels, "hidden_size": hidden, "output": "probs"}
    return _zoo("lwan", config, arrays, "lwan", call="layer", mask=False, output_mask="none")


@keras_layer("Attention", custom=True)
def convert_seed000_attention(record, arrays, ctx):
    if len(arrays) != 1 or arrays[0].ndim != 2:
        raise Refused(f"seed 000's Attention has one weight Ws [C, E]; got {[list(a.shape) for a in arrays]}")
    classes, embed = arrays[0].shape
    config = {"num_classes": classes, "embed_dim": embed}
    return _zoo("keras_attn", config, arrays, "keras_attn", call="layer", mask=False, output_mask="none")
