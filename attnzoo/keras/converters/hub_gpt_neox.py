"""keras-hub's GPT-NeoX family: ``GPTNeoXBackbone`` and ``GPTNeoXCausalLM`` rebuilt from their arguments
(:func:`gpt_neox_graph`), and its layer converted without keras-hub: ``GPTNeoXDecoder``.

* ``GPTNeoXBackbone``: token ids, padding mask -> ``token_embedding`` (tied ``ReversibleEmbedding``) ->
  ``embeddings_dropout`` -> ``num_layers`` ``GPTNeoXDecoder`` layers (masked by ``padding_mask`` as
  ``decoder_padding_mask``) -> ``layer_norm`` -> [B, T, D]. ``GPTNeoXCausalLM``: then the embedding's reverse
  call for the logits.
* ``GPTNeoXDecoder``: x [B, T, D] -> ``x + attention(ln₁(x)) + W₂ · gelu_tanh(W₁ · ln₂(x) + b₁) + b₂``
  (the parallel residual: both branches read x). The attention has H heads of d = D / H from one biased
  projection [D, H, 3d] (each head's query, key and value side by side), keras-hub's rotary embedding on the
  first ``r = int(d · rotary_percentage)`` features of each query and key head (the halves of those r
  turned by ``θ_j = rotary_max_wavelength^(-2j/r)``, the rest passed through: :func:`~.hub_llama.rotate`),
  scores ``q kᵀ / √d`` masked causally and by the padding, then the biased output projection. A query row
  with no key (a left-padded position) gets what keras gives it: the mean of every value while ``dropout``
  is 0 (keras-hub then calls keras's fused ``dot_product_attention``, on the torch and jax backends), zeros
  otherwise (its masked ``Softmax``).

The decoder shares :class:`~attnzoo.keras.converters.hub_bloom.HubClassicDecoder` (layer norms, the mask, the
cache) with BLOOM's and Falcon's. Decoding is the plain forward's: the converted model decodes the greedy
tokens of the causal LM called on the whole sequence each step. keras-hub 0.32's own ``generate`` differs:
its cached step turns the new query as position 0 (its rotary layer gets no start index) while the keys
cached before it were turned at their own positions.

Hugging Face form (:data:`GPT_NEOX`): ``GPTNeoXModel`` and ``GPTNeoXForCausalLM`` (``use_parallel_residual``,
the head tied to ``embed_in``, as keras-hub's is). transformers' ``query_key_value`` [3D, D] is keras-hub's
projection as it is (head by head, query, key, value), and its rotary embedding is keras-hub's over
``partial_rotary_factor`` of each head; the activation is the tanh gelu (``gelu_new``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.keras.arguments import activation_of, as_tensor, expect_variables
from attnzoo.keras.converters.hub_bloom import (
    HubClassicDecoder,
    decoder_graph,
    decoder_stack,
    norm_and_feedforward,
    tied_embedding,
)
from attnzoo.keras.converters.hub_rotary import rotate
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import GELU_TANH, HubGraph, number, positive, tensor
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm
from attnzoo.layers.attend import keras_attention

__all__ = ["HubGPTNeoXDecoder", "gpt_neox_graph", "GPT_NEOX"]

# transformers' name of each activation a GPTNeoXDecoder may have (keras-hub's backbone gives gelu_approximate)
_ACTIVATIONS = {"gelu_approximate": "gelu_new", "gelu": "gelu", "relu": "relu"}
_FUNCTIONS = {
    "gelu_approximate": lambda x: F.gelu(x, approximate="tanh"),
    "gelu": F.gelu,
    "relu": F.relu,
}


class HubGPTNeoXDecoder(HubClassicDecoder):
    """``keras_hub``'s ``GPTNeoXDecoder`` (the module docstring has the formula): x [B, T, D] -> [B, T, D];
    the output keeps the input's mask."""

    op = "keras_hub_gpt_neox_decoder"

    def __init__(
        self,
        *,
        hidden: int,
        intermediate_dim: int,
        num_heads: int,
        rotary_dim: int,
        rotary_max_wavelength: float = 10000.0,
        layer_norm_epsilon: float = 1e-5,
        activation: str = "gelu_approximate",
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if activation not in _FUNCTIONS:
            raise ValueError(f"activation must be one of {', '.join(_FUNCTIONS)}, got {activation!r}")
        self.heads, self.rotary_dim, self.wavelength = num_heads, rotary_dim, rotary_max_wavelength
        self.activation, self.dropout = activation, dropout
        self.attention_norm = nn.LayerNorm(hidden, eps=layer_norm_epsilon)
        self.query_key_value = nn.Linear(hidden, 3 * hidden)
        self.output_dense = nn.Linear(hidden, hidden)
        self.feedforward_norm = nn.LayerNorm(hidden, eps=layer_norm_epsilon)
        self.intermediate = nn.Linear(hidden, intermediate_dim)
        self.output = nn.Linear(intermediate_dim, hidden)

    def _rotate(self, x: Tensor, start: int) -> Tensor:
        turned = rotate(x[..., : self.rotary_dim], start, self.wavelength)
        return torch.cat([turned, x[..., self.rotary_dim :]], dim=-1)

    def _attend(self, x: Tensor, kwargs: dict[str, Any]) -> Tensor:
        t, kv = x.shape[1], self.keys_values(kwargs, x.shape[0])
        start = 0 if kv is None else kv.length  # the call's first position: after the tokens cached
        q, k, v = self._heads(self.query_key_value(x), self.heads).chunk(3, dim=-1)  # [B, H, t, d] each
        k, v = self._cached(kv, self._rotate(k, start), v)
        q = self._rotate(q, start)
        allowed = self._allowed(t, k.shape[-2], kwargs, x.device, kv is not None)
        # keras-hub calls keras's fused attention (a row with no key: the mean of the values) without dropout
        empty = "mean" if self.dropout == 0 else "zeros"
        rate = self.dropout if self.training else 0.0
        out = keras_attention(q, k, v, allowed, scale=q.shape[-1] ** -0.5, empty=empty, dropout=rate)
        return F.dropout(self.output_dense(self._merge(out)), self.dropout, self.training)

    def forward(self, args, kwargs, masks):
        x = args[0]
        attention = self._attend(self._norm(self.attention_norm, x), kwargs)
        y = _FUNCTIONS[self.activation](self.intermediate(self._norm(self.feedforward_norm, x)))
        return [self.output(y) + attention + x], [masks[0]]


_ATTENTION = "_self_attention_layer"
_GPT_NEOX_ORDER = (
    "_self_attention_layer_norm",
    _ATTENTION,
    f"{_ATTENTION}/_qkv_dense",
    f"{_ATTENTION}/_output_dense",
    "_feedforward_layer_norm",
    "_feedforward_intermediate_dense",
    "_feedforward_output_dense",
)


@keras_layer(
    "GPTNeoXDecoder",
    package="keras_hub",
    call_arguments=("decoder_padding_mask", "decoder_attention_mask"),
    child_order=_GPT_NEOX_ORDER,
    positional=("decoder_sequence",),
)
def convert_gpt_neox_decoder(record, arrays, ctx):
    expect_variables(arrays, 12, "GPTNeoXDecoder (2 layer norms, the fused and output projections, 2 denses)")
    c = record.config
    hidden, heads = int(arrays[0].shape[0]), c.get("num_heads")
    if not isinstance(heads, int) or heads < 1 or hidden % heads:
        raise Refused(f"num_heads {heads!r} does not divide the width {hidden}")
    head_dim = hidden // heads
    qkv, qkv_bias, output, output_bias = arrays[2:6]
    if qkv.shape != (hidden, heads, 3 * head_dim) or qkv_bias.shape != (heads, 3 * head_dim):
        raise Refused(f"query_key_value {list(qkv.shape)} is not [{hidden}, {heads}, {3 * head_dim}]")
    percentage = c.get("rotary_percentage", 0.25)
    rotary_dim = int(head_dim * percentage) if isinstance(percentage, (int, float)) else -1
    if not 0 <= rotary_dim <= head_dim or rotary_dim % 2:
        raise Refused(f"rotary_percentage {percentage!r} of heads of {head_dim} is not an even number of features")
    state = norm_and_feedforward([*arrays[:2], *arrays[6:]], "attention_norm", "feedforward_norm")
    state["query_key_value.weight"] = as_tensor(qkv.reshape(hidden, -1).T)
    state["query_key_value.bias"] = as_tensor(qkv_bias.reshape(-1))
    state["output_dense.weight"], state["output_dense.bias"] = as_tensor(output.T), as_tensor(output_bias)
    spec = {
        "op": HubGPTNeoXDecoder.op,
        "hidden": hidden,
        "intermediate_dim": int(arrays[8].shape[1]),
        "num_heads": heads,
        "rotary_dim": rotary_dim,
        "rotary_max_wavelength": float(c.get("rotary_max_wavelength", 10000)),
        "layer_norm_epsilon": float(c.get("layer_norm_epsilon", 1e-5)),
        "activation": _activation(c, ctx),
        "dropout": float(c.get("dropout", 0.0) or 0.0),
    }
    return Converted(spec, state, ["keras-hub GPTNeoXDecoder: partial rotary attention, parallel residual"])


def _activation(c: dict[str, Any], ctx: Any) -> str:
    name = activation_of(c, "activation", ctx, "relu")
    if name not in _FUNCTIONS:
        raise Refused(f"activation {name!r}: a GPTNeoXDecoder of {', '.join(_FUNCTIONS)} converts")
    return name


# -- the family's Hugging Face form -------------------------------------------------------------------------
def _gpt_neox_config(m: HubSource) -> dict[str, Any]:
    layer = m.spec("transformer_layer_0")
    heads, hidden = m.size("num_heads"), m.size("hidden_dim")
    theta = float(layer["rotary_max_wavelength"])
    factor = int(layer["rotary_dim"]) / (hidden // heads)  # exactly the rotary features transformers turns
    dropout = float(layer.get("dropout", 0.0))
    return {
        "vocab_size": m.size("vocabulary_size"),
        "hidden_size": hidden,
        "num_hidden_layers": m.size("num_layers"),
        "num_attention_heads": heads,
        "intermediate_size": m.size("intermediate_dim"),
        "hidden_act": _ACTIVATIONS[str(layer["activation"])],
        "rotary_pct": factor,  # transformers 4's keys; 5 reads rope_parameters (and takes these too)
        "rotary_emb_base": theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": factor},
        "max_position_embeddings": m.size("max_sequence_length", 512),
        "layer_norm_eps": float(m.spec("layer_norm")["epsilon"]),
        "use_parallel_residual": True,
        "attention_bias": True,
        "attention_dropout": dropout,
        "hidden_dropout": dropout,
        "tie_word_embeddings": True,
        **{key: m.special.get(key) for key in ("bos_token_id", "eos_token_id", "pad_token_id")},
    }


_GPT_NEOX_WEIGHTS = (
    ("input_layernorm", "attention_norm"),
    ("attention.query_key_value", "query_key_value"),
    ("attention.dense", "output_dense"),
    ("post_attention_layernorm", "feedforward_norm"),
    ("mlp.dense_h_to_4h", "intermediate"),
    ("mlp.dense_4h_to_h", "output"),
)


def _gpt_neox_tensors(m: HubSource) -> Tensors:
    """transformers' GPT-NeoX weights: the converted ``nn.Linear`` / ``nn.LayerNorm`` weights as they are."""
    base = "gpt_neox." if m.kind == "causal_lm" else ""
    yield f"{base}embed_in.weight", m.tensor("token_embedding.weight")
    for i in range(m.size("num_layers")):
        for theirs, ours in _GPT_NEOX_WEIGHTS:
            for kind in ("weight", "bias"):
                yield f"{base}layers.{i}.{theirs}.{kind}", m.tensor(f"transformer_layer_{i}.{ours}.{kind}")
    for kind in ("weight", "bias"):
        yield f"{base}final_layer_norm.{kind}", m.tensor(f"layer_norm.{kind}")


GPT_NEOX = TransformersForm(
    "gpt_neox",
    {"backbone": "GPTNeoXModel", "causal_lm": "GPTNeoXForCausalLM"},
    _gpt_neox_config,
    _gpt_neox_tensors,
)


# -- the family's models -----------------------------------------------------------------------------------
@keras_hub_model("GPTNeoXBackbone", family="gpt_neox", causal_lm="GPTNeoXCausalLM", transformers=GPT_NEOX)
def gpt_neox_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``GPTNeoXBackbone`` (the module docstring has the graph); ``GPTNeoXCausalLM``: then the reverse call."""
    g = HubGraph(config.get("dtype"))
    x, heads = tied_embedding(g, config, where, "num_heads")
    dropout = number(config, "dropout", where, 0.0)
    x = g.layer("Dropout", "embeddings_dropout", {"rate": dropout}, [tensor(x)])
    settings = {
        "intermediate_dim": positive(config, "intermediate_dim", where),
        "num_heads": heads,
        "dropout": dropout,
        "max_sequence_length": positive(config, "max_sequence_length", where, 512),
        "rotary_percentage": number(config, "rotary_percentage", where, 0.25),
        "rotary_max_wavelength": number(config, "rotary_max_wavelength", where, 10000.0),
        "layer_norm_epsilon": number(config, "layer_norm_epsilon", where, 1e-5),
        "activation": GELU_TANH,
    }
    x = decoder_stack(g, x, config, where, "gpt_neo_x.gpt_neo_x_decoder.GPTNeoXDecoder", settings)
    epsilon = settings["layer_norm_epsilon"]
    x = g.layer("LayerNormalization", "layer_norm", {"axis": [-1], "epsilon": epsilon}, [tensor(x)])
    return decoder_graph(g, x, config, "gpt_neo_x_backbone")
