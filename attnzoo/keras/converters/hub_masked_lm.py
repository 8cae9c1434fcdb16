"""keras-hub's ``MaskedLMHead`` layer and the graph of its masked LM tasks (``BertMaskedLM``), without keras-hub.

``MaskedLMHead`` (``keras_hub>MaskedLMHead``): sequence x [B, T, D] and ``mask_positions`` p [B, M] (ints in
[0, T)) -> ``h = LayerNorm(act(Dense(x[b, p[b, m], :])))`` [B, M, F] -> ``logits = h @ Eᵀ + bias`` [B, M, V],
E the backbone's tied token embedding [V, F] (keras-hub's ``token_embedding(h, reverse=True)``; an untied head
holds its own kernel [F, V] instead) -> its ``activation`` (None: the logits as they are).

A masked LM task computes ``head(backbone(inputs)["sequence_output"], mask_positions)`` with a head that
holds the backbone's token embedding. A Keras graph cannot call a nested model's layer from outside it, so
:func:`masked_lm_graph` places the head inside the backbone's graph: ``mlm_head`` called on the sequence and
a ``mask_positions`` input gives h; ``token_embedding`` is called again with ``reverse=True``; ``mlm_head``
called again with ``logits=True`` adds its bias and applies its activation. The table is held once, and the
head's own weights are read where the file keeps them, at the task's level
(:data:`~attnzoo.keras.hub_graph.WEIGHTS_AT_ROOT`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from attnzoo.errors import WeightsError
from attnzoo.keras.activations import activation as activation_fn
from attnzoo.keras.arguments import activation_of, as_tensor, expect_variables
from attnzoo.keras.hub_families import route_fix
from attnzoo.keras.hub_graph import WEIGHTS_AT_ROOT, HubGraph, Ref, backbone_record, task_over, tensor
from attnzoo.keras.hub_graph import Tensor as GraphTensor
from attnzoo.keras.nodes import Node, build_node
from attnzoo.keras.registry import Converted, Refused, keras_layer

__all__ = ["HubMaskedLMHead", "masked_lm_graph", "tied_masked_lm", "retie", "TIED"]

Builder = Callable[[dict[str, Any], str], dict[str, Any]]
# the head record's key naming the backbone layer whose reverse call gives its logits (rebuilt graphs only:
# keras-hub's own config of the layer does not name it)
TIED = "token_embedding"


class HubMaskedLMHead(Node):
    """``keras_hub.layers.MaskedLMHead`` (the module docstring has the formula). Called on (x [B, T, D],
    mask_positions [B, M]): h [B, M, F] where the head is tied, the logits [B, M, V] where it holds its own
    ``kernel``; called on the tied logits [B, M, V] with ``logits=True``: ``logits + bias``, activated."""

    op = "keras_hub_masked_lm_head"

    def __init__(
        self,
        *,
        width: int,
        features: int,
        vocabulary: int,
        intermediate_activation: str = "relu",
        activation: str = "linear",
        epsilon: float = 1e-5,
        tied: bool = True,
    ) -> None:
        super().__init__()
        self.intermediate = build_node(
            {"op": "dense", "units": features, "in_features": width, "activation": intermediate_activation}
        )
        norm = {"op": "layer_norm", "axis": [-1], "shape": [features], "epsilon": epsilon}
        self.norm = build_node({**norm, "center": True, "scale": True})
        self.kernel = None if tied else nn.Parameter(torch.zeros(features, vocabulary))
        self.bias = nn.Parameter(torch.zeros(vocabulary))
        self.activation = activation_fn(activation)

    def forward(self, args, kwargs, masks):
        if kwargs.get("logits"):
            return [self._logits(args[0])], [None]
        x, positions = args[0], args[1]
        if positions.dim() != 2 or positions.shape[0] != x.shape[0]:
            raise ValueError(f"mask_positions is {list(positions.shape)}; expected [batch {x.shape[0]}, masks]")
        length = x.shape[1]
        if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= length):
            raise ValueError(f"mask_positions holds positions outside 0..{length - 1}, the sequence's length")
        index = positions.long()[..., None].expand(-1, -1, x.shape[-1])
        (h,), _ = self.intermediate([torch.gather(x, 1, index)], {}, [None])
        (h,), _ = self.norm([h], {}, [None])
        return [h if self.kernel is None else self._logits(h @ self.kernel.to(h.dtype))], [None]

    def _logits(self, scores: Tensor) -> Tensor:
        return self.activation(scores + self.bias.to(scores.dtype))


@keras_layer(
    "MaskedLMHead",
    package="keras_hub",
    call_arguments=("logits",),
    positional=("inputs", "mask_positions"),
    child_order=("_intermediate_dense", "_intermediate_layer_norm"),
)
def convert_masked_lm_head(record, arrays, ctx):
    # its own variables first ([kernel,] bias), then the dense's and the layer norm's
    expect_variables(arrays, (5, 6), "MaskedLMHead ([kernel,] bias, dense, layer norm)")
    tied = len(arrays) == 5
    if tied and not isinstance(record.config.get(TIED), str):  # keras-hub's own config: none, or the layer's
        raise Refused(
            "its logits come from the backbone's token embedding, which the file ties to the head but does not "
            "call in its graph; attnzoo reads this head inside the keras-hub masked LM tasks it rebuilds "
            "(BertMaskedLM) or builds through keras-hub"
        )
    own, (bias, kernel, dense_bias, gamma, beta) = (None, arrays) if tied else (arrays[0], arrays[1:])
    spec = {
        "op": HubMaskedLMHead.op,
        "width": int(kernel.shape[0]),
        "features": int(kernel.shape[1]),
        "vocabulary": int(bias.shape[0]),
        "intermediate_activation": activation_of(record.config, "intermediate_activation", ctx, "relu"),
        "activation": activation_of(record.config, "activation", ctx, "linear"),
        "epsilon": float(record.config.get("layer_norm_epsilon", 1e-5)),
        "tied": tied,
    }
    state = {"intermediate.weight": as_tensor(kernel.T), "intermediate.bias": as_tensor(dense_bias)}
    state |= {"norm.weight": as_tensor(gamma), "norm.bias": as_tensor(beta), "bias": as_tensor(bias)}
    if own is not None:
        state["kernel"] = as_tensor(own)
    return Converted(spec, state, ["keras-hub MaskedLMHead: gather, dense, layer_norm, tied logits"])


def masked_lm_graph(backbones: tuple[str, ...], build_backbone: Builder, activation: Any) -> Builder:
    """The builder of a ``<X>MaskedLM`` over a Backbone of one of the classes ``backbones``: the backbone's
    inputs and ``mask_positions`` -> the backbone (nested, under its own name), its ``sequence_output`` ->
    ``mlm_head`` (intermediate ``activation``, ε 1e-5), tied to its ``token_embedding`` -> logits [B, M, V]."""

    def build(config: dict[str, Any], where: str) -> dict[str, Any]:
        inner, name, kind = backbone_record(config, where, backbones)
        built = build_backbone(inner, f"{where}: {kind}")
        head = {"vocabulary_size": None, "intermediate_activation": activation, "activation": None}
        head |= {"layer_norm_epsilon": 1e-5, TIED: TIED}
        sequence = built["config"]["output_layers"]["sequence_output"]
        task = str(config.get("name") or "masked_lm")
        return tied_masked_lm(built, name, sequence, head, task, inner.get("dtype"))

    return build


def tied_masked_lm(
    built: dict[str, Any],
    name: str,
    sequence: list[Any],
    head: dict[str, Any],
    task: str,
    dtype: Any,
    head_name: str = "mlm_head",
) -> dict[str, Any]:
    """The ``Functional`` record ``task`` of a masked LM: the backbone ``built`` (its functional record, dict
    inputs; its layers' ``dtype``) nested as ``name``, the head ``head_name`` (config ``head``, ``head[TIED]``
    naming the backbone's embedding) placed inside it on the backbone's output ``sequence`` ([layer, node,
    index]), as the module docstring says."""
    body = built["config"]
    inputs = {key: value[0] for key, value in body["input_layers"].items()}
    g = HubGraph(dtype)
    g.layers = body["layers"]
    inputs["mask_positions"] = g.input("mask_positions")
    module = "keras_hub.src.layers.modeling.masked_lm_head"
    state: GraphTensor = Ref(*sequence)
    h = g.hub_layer("MaskedLMHead", head_name, head, [tensor(state), tensor("mask_positions")], module)
    g.layers[-1][WEIGHTS_AT_ROOT] = True
    scores = g.call_again(head[TIED], [tensor(h)], {"reverse": True})
    logits = g.call_again(head_name, [tensor(scores)], {"logits": True})
    return task_over(built, g.functional(name, inputs, logits), name, task)


@route_fix
def retie(record: dict[str, Any], where: str, unwrap: Callable[[Any, str], Any]) -> dict[str, Any]:
    """keras-hub's own graph of a masked LM (the route through keras-hub, :mod:`attnzoo.keras.hub_keras`) with
    its tied head rewired as :func:`tied_masked_lm` places it; any other record as it is. keras-hub's graph
    calls the head outside the nested backbone, the embedding it reverses only named in the head's config,
    which a graph cannot call from there."""
    layers = record["config"]["layers"]
    head = next((x for x in layers if x.get("class_name") == "MaskedLMHead" and isinstance(_tie(x), dict)), None)
    if head is None:
        return record
    history = head["inbound_nodes"][0]["args"][0]["config"]["keras_history"]
    backbone = next(x for x in layers if x.get("name") == history[0])
    built = unwrap({k: v for k, v in backbone.items() if k != "inbound_nodes"}, where)
    outputs = built["config"]["output_layers"]
    flat = [outputs[key] for key in sorted(outputs)] if isinstance(outputs, dict) else [outputs]
    config = {**head["config"], TIED: _embedding(built, str(_tie(head)["config"]["name"]), where)}  # type: ignore[index]
    task, dtype = record["config"]["name"], backbone["config"].get("dtype")
    return tied_masked_lm(built, backbone["name"], flat[history[2]], config, task, dtype, head["name"])


def _embedding(built: dict[str, Any], name: str, where: str) -> str:
    """The backbone's layer whose reverse call gives the logits: the layer ``name``, or, where that is the
    inner table of a ``TokenAndPositionEmbedding`` (RoBERTa's, DistilBERT's), that layer, whose node reverses
    its token table."""
    layers = built["config"]["layers"]
    if any(layer.get("name") == name for layer in layers):
        return name
    holders = [str(layer.get("name")) for layer in layers if layer.get("class_name") == "TokenAndPositionEmbedding"]
    if len(holders) != 1:
        raise WeightsError(
            f"{where}: its MaskedLMHead reverses the backbone's {name!r}, which is no layer of the backbone's "
            f"graph nor inside its one TokenAndPositionEmbedding (found {holders})"
        )
    return holders[0]


def _tie(layer: dict[str, Any]) -> Any:
    return (layer.get("config") or {}).get(TIED)
