"""keras-hub's FNet family: ``FNetBackbone``, rebuilt from its arguments, and its ``FNetEncoder`` layer.

* ``FNetBackbone``: token ids, segment ids (no padding mask: FNet mixes every position, padding included)
  -> ``token_embedding`` (tied ``ReversibleEmbedding``) + ``position_embedding`` + ``segment_embedding``
  (4 segments by default) -> layer norm (ε 1e-12) -> ``embedding_projection`` (a Dense, width to width) ->
  dropout -> ``num_layers`` ``FNetEncoder`` layers ``f_net_layer_<i>`` -> ``sequence_output`` and
  ``pooled_output = tanh(pooled_dense(sequence_output[:, 0, :]))``.
* ``FNetEncoder`` (``keras_hub>FNetEncoder``): Fourier mixing instead of attention, x [B, T, D] ->
  ``m = LayerNorm(x + Re(fft2(x)))`` (the 2-D discrete Fourier transform over the sequence and hidden axes,
  in float32, keras's ``ops.fft2`` on the real input with a zero imaginary part) -> ``LayerNorm(m +
  Dense(Dense(m, activation)))`` -> [B, T, D].

Hugging Face form (:data:`F_NET`): ``FNetModel``, the same graph: its Fourier sublayer is ``fftn`` over the
sequence and hidden axes, real part (``use_tpu_fourier_optimizations`` off), its embeddings BERT's with
``projection``, its pooler the tanh ``pooled_dense``; it takes no attention mask either.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attnzoo.keras.arguments import activation_of, as_tensor, expect_variables
from attnzoo.keras.converters.hub_bert import (
    ACTIVATIONS,
    embedding_tensors,
    layer_tensors,
    pooled_outputs,
    summed_embeddings,
)
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import GELU_TANH, HubGraph, number, positive, tensor
from attnzoo.keras.nodes import Node, build_node
from attnzoo.keras.registry import Converted, keras_layer
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm

__all__ = ["HubFNetEncoder", "f_net_graph", "F_NET"]


class HubFNetEncoder(Node):
    """``keras_hub.layers.FNetEncoder`` (the module docstring has the formula): x [B, T, D] -> [B, T, D]."""

    op = "keras_hub_f_net_encoder"

    def __init__(self, *, hidden: int, intermediate_dim: int, activation: str = "relu", epsilon: float = 1e-5) -> None:
        super().__init__()
        norm = {"op": "layer_norm", "axis": [-1], "shape": [hidden], "epsilon": epsilon, "center": True, "scale": True}
        self.mixing_norm, self.output_norm = build_node(norm), build_node(norm)
        self.intermediate = build_node(
            {"op": "dense", "units": intermediate_dim, "in_features": hidden, "activation": activation}
        )
        self.output_dense = build_node({"op": "dense", "units": hidden, "in_features": intermediate_dim})

    def forward(self, args, kwargs, masks):
        x: Tensor = args[0]
        mixed = torch.fft.fft2(x.float()).real.to(x.dtype)  # over the last two axes: sequence, hidden
        (x,), _ = self.mixing_norm([x + mixed], {}, [None])
        (y,), _ = self.intermediate([x], {}, [None])
        (y,), _ = self.output_dense([y], {}, [None])
        (out,), _ = self.output_norm([x + y], {}, [None])
        return [out], [None]


@keras_layer("FNetEncoder", package="keras_hub", positional=("inputs",))
def convert_f_net_encoder(record, arrays, ctx):
    # saved order: _intermediate_dense, _mixing_layer_norm, _output_dense, _output_layer_norm
    expect_variables(arrays, 8, "FNetEncoder (2 denses, 2 layer norms)")
    hidden, intermediate = (int(n) for n in arrays[0].shape)
    spec = {
        "op": HubFNetEncoder.op,
        "hidden": hidden,
        "intermediate_dim": intermediate,
        "activation": activation_of(record.config, "activation", ctx, "relu"),
        "epsilon": float(record.config.get("layer_norm_epsilon", 1e-5)),
    }
    names = ("intermediate.weight", "intermediate.bias", "mixing_norm.weight", "mixing_norm.bias")
    names += ("output_dense.weight", "output_dense.bias", "output_norm.weight", "output_norm.bias")
    state = {
        name: as_tensor(array.T if name.endswith("dense.weight") or name == "intermediate.weight" else array)
        for name, array in zip(names, arrays, strict=True)
    }
    return Converted(spec, state, ["keras-hub FNetEncoder: Fourier mixing, dense and layer_norm nodes"])


def _f_net_config(m: HubSource) -> dict[str, Any]:
    layer = m.spec("f_net_layer_0")
    activation = ACTIVATIONS.get(str(layer.get("activation")))
    if activation is None:
        m.refuse(f"its FNetEncoder layers' activation {layer.get('activation')!r} has no transformers name here")
    rate = m.rate("embeddings_dropout")
    return {
        "vocab_size": m.size("vocabulary_size"),
        "hidden_size": m.size("hidden_dim"),
        "num_hidden_layers": m.size("num_layers"),
        "intermediate_size": m.size("intermediate_dim"),
        "hidden_act": activation,
        "hidden_dropout_prob": rate,
        "max_position_embeddings": m.size("max_sequence_length", 512),
        "type_vocab_size": m.size("num_segments", 4),
        "layer_norm_eps": float(layer["epsilon"]),
        "use_tpu_fourier_optimizations": False,
        "pad_token_id": m.special.get("pad_token_id", 3),  # transformers' FNet default (<pad> of its vocabulary)
    }


# transformers' FNetLayer's modules and the FNetEncoder node's, in pairs
_LAYER = (
    ("fourier.output.LayerNorm", "mixing_norm"),
    ("intermediate.dense", "intermediate"),
    ("output.dense", "output_dense"),
    ("output.LayerNorm", "output_norm"),
)


def _f_net_tensors(m: HubSource) -> Tensors:
    yield from embedding_tensors(m, "")
    yield "embeddings.projection.weight", m.tensor("embedding_projection.weight")
    yield "embeddings.projection.bias", m.tensor("embedding_projection.bias")
    for i in range(m.size("num_layers")):
        yield from layer_tensors(m, f"f_net_layer_{i}", f"encoder.layer.{i}.", _LAYER)
    yield "pooler.dense.weight", m.tensor("pooled_dense.weight")
    yield "pooler.dense.bias", m.tensor("pooled_dense.bias")


F_NET = TransformersForm("fnet", {"backbone": "FNetModel"}, _f_net_config, _f_net_tensors)


@keras_hub_model("FNetBackbone", family="f_net", transformers=F_NET)
def f_net_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    g = HubGraph(config.get("dtype"))
    vocabulary, hidden = positive(config, "vocabulary_size", where), positive(config, "hidden_dim", where)
    tokens, segments = g.input("token_ids"), g.input("segment_ids")
    x = summed_embeddings(g, config, where, (vocabulary, hidden, 4))
    x = g.layer("LayerNormalization", "embeddings_layer_norm", {"axis": [-1], "epsilon": 1e-12}, [tensor(x)])
    x = g.layer("Dense", "embedding_projection", {"units": hidden}, [tensor(x)])
    rate = number(config, "dropout", where, 0.0)
    x = g.layer("Dropout", "embeddings_dropout", {"rate": rate}, [tensor(x)])
    layer = {"intermediate_dim": positive(config, "intermediate_dim", where), "activation": GELU_TANH}
    layer |= {"dropout": rate, "layer_norm_epsilon": 1e-12}
    for i in range(positive(config, "num_layers", where)):
        module = "keras_hub.src.layers.modeling.f_net_encoder"
        x = g.hub_layer("FNetEncoder", f"f_net_layer_{i}", layer, [tensor(x)], module)
    return pooled_outputs(g, config, {"token_ids": tokens, "segment_ids": segments}, x, "f_net_backbone")
