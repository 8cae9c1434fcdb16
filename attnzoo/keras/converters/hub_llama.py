"""keras-hub's Llama family: ``LlamaBackbone`` and ``LlamaCausalLM`` rebuilt from their arguments
(:func:`llama_graph`), and their layers converted without keras-hub: ``LlamaLayerNorm`` and
``LlamaTransformerDecoder``.

* ``LlamaLayerNorm`` (RMSNorm): x [..., D] -> ``x · rsqrt(mean(x², -1) + ε) · scale``, computed in float32;
  written as ``nn.RMSNorm(D, eps=ε)``. The same node, with an ``offset`` of 1, is Gemma's ``RMSNormalization``
  (``· (1 + scale)``), called as a node.
* ``LlamaTransformerDecoder``: the rotary decoder of :mod:`attnzoo.keras.converters.hub_rotary` (RMSNorm,
  grouped-query attention with keras-hub's rotary embedding, SwiGLU, no biases). A query row with no key to
  read (a left-padded position) gets the mean of every value, as keras's fused attention gives it
  (:func:`attnzoo.layers.attend.keras_attention`).

Llama 3.1's frequency adjustment (``rope_low_freq_factor`` and the rest) and a position scaling factor
other than 1 are refused by name here (:mod:`attnzoo.keras.converters.hub_llama3` converts Llama 3's).

Hugging Face form (:data:`LLAMA`): ``LlamaModel`` and ``LlamaForCausalLM``. keras-hub's rotary embedding
turns the two halves of each head (transformers' ``rotate_half``), so the query and key kernels go as they
are, with no permutation of their rows; ``rope_theta`` is ``rope_max_wavelength``, ``rms_norm_eps``
``layer_norm_epsilon``; an untied model's head is its ``reverse_weight`` [D, V] transposed as ``lm_head``
[V, D], a tied one (no reverse table: ``tie_word_embeddings``) writes no head. keras-hub's Llama has no
largest position (its rotary embedding has none): config.json says :data:`LLAMA_MAX_POSITIONS`, Llama 2's
context, which transformers' default rotary embedding does not depend on; set your own where a server reads
it as the longest sequence.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from attnzoo.keras.arguments import as_tensor, expect_variables
from attnzoo.keras.codegen import literal
from attnzoo.keras.converters.hub_rotary import (
    RotaryDecoder,
    rms,
    rotary_backbone_graph,
    rotary_config,
    rotary_decoder_parts,
    rotary_tensors,
)
from attnzoo.keras.emit import Writer
from attnzoo.keras.emit.checks import plain
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.nodes import Node, writes
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.keras.transformers_form import HubSource, TransformersForm

__all__ = [
    "HubRMSNorm",
    "HubLlamaDecoder",
    "LLAMA_ORDER",
    "llama_graph",
    "LLAMA",
    "LLAMA_MAX_POSITIONS",
]


class HubRMSNorm(Node):
    """``keras_hub``'s ``LlamaLayerNorm`` (and, with ``offset`` 1, Gemma's ``RMSNormalization``): x [..., D] ->
    ``x · rsqrt(mean(x², -1) + ε) · (offset + weight)``, in float32."""

    op = "keras_hub_rms_norm"
    reads_mask = False
    supports_masking = True

    def __init__(self, *, features: int, epsilon: float, offset: float = 0.0) -> None:
        super().__init__()
        self.epsilon, self.offset = epsilon, offset
        self.weight = nn.Parameter(torch.ones(features))

    def compute(self, x, mask):
        return rms(x, self.weight, self.epsilon, self.offset)


@keras_layer("LlamaLayerNorm", package="keras_hub")
def convert_rms_norm(record, arrays, ctx):
    expect_variables(arrays, 1, f"{record.class_name} (its scale)")
    epsilon = record.config.get("epsilon", 1e-6)
    if not isinstance(epsilon, (int, float)) or isinstance(epsilon, bool) or epsilon < 0:
        raise Refused(f"epsilon {epsilon!r} is not a number >= 0")
    spec = {"op": HubRMSNorm.op, "features": int(arrays[0].shape[0]), "epsilon": float(epsilon)}
    return Converted(spec, {"weight": as_tensor(arrays[0])})


@writes(HubRMSNorm)
def write_rms_norm(w: Writer, spec: dict[str, Any]) -> bool:
    """``nn.RMSNorm(D, eps=ε)`` (``weight`` is keras-hub's ``scale``); the mask passes, as the node's. Gemma's
    ``1 + scale`` (an ``offset``) is no torch layer's: its node is called."""
    x = w.tensor()
    if spec.get("offset") or x is None or not plain(spec, int, "features") or not plain(spec, float, "epsilon"):
        return False
    layer = w.declare(f"nn.RMSNorm({literal(spec['features'])}, eps={literal(spec['epsilon'])})")
    w.assign(f"{layer}({x})")
    return True


class HubLlamaDecoder(RotaryDecoder):
    """``keras_hub``'s ``LlamaTransformerDecoder`` (:class:`RotaryDecoder`), and the decoders written alike:
    Qwen2's (``attention_bias``), Qwen3's (``head_dim``, ``query_key_norm``), Phi-3's (``feedforward_dropout``)."""

    op = "keras_hub_llama_decoder"

    def __init__(
        self,
        *,
        hidden: int,
        intermediate_dim: int,
        num_query_heads: int,
        num_key_value_heads: int,
        rope_max_wavelength: float = 10000.0,
        layer_norm_epsilon: float = 1e-6,
        dropout: float = 0.0,
        head_dim: int | None = None,
        attention_bias: bool = False,
        query_key_norm: float | None = None,
        feedforward_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self._build(
            hidden,
            intermediate_dim,
            num_query_heads,
            num_key_value_heads,
            wavelength=rope_max_wavelength,
            epsilon=layer_norm_epsilon,
            dropout=dropout,
            head_dim=head_dim,
            attention_bias=attention_bias,
            query_key_norm=query_key_norm,
            feedforward_dropout=feedforward_dropout,
        )


_ATTENTION = "_self_attention_layer"
LLAMA_ORDER = (
    "_self_attention_layernorm",
    _ATTENTION,
    f"{_ATTENTION}/_query_dense",
    f"{_ATTENTION}/_key_dense",
    f"{_ATTENTION}/_value_dense",
    f"{_ATTENTION}/_output_dense",
    "_feedforward_layernorm",
    "_feedforward_gate_dense",
    "_feedforward_intermediate_dense",
    "_feedforward_output_dense",
)
_LLAMA_31 = ("rope_low_freq_factor", "rope_high_freq_factor", "rope_frequency_adjustment_factor")


@keras_layer(
    "LlamaTransformerDecoder",
    package="keras_hub",
    call_arguments=("decoder_padding_mask", "decoder_attention_mask"),
    child_order=LLAMA_ORDER,
    positional=("decoder_sequence",),
)
def convert_llama_decoder(record, arrays, ctx):
    expect_variables(arrays, 9, "LlamaTransformerDecoder (2 norms, 4 attention kernels, 3 feed-forward kernels)")
    c = record.config
    for name in (*_LLAMA_31, "rope_pretraining_sequence_length"):
        if c.get(name) is not None:
            raise Refused(f"{name}={c[name]!r} (Llama 3.1's frequency adjustment) is not supported")
    scaling = c.get("rope_position_scaling_factor", c.get("rope_scaling_factor", 1.0))
    if scaling not in (None, 1, 1.0):
        raise Refused(f"rope_position_scaling_factor={scaling!r} is not supported (only 1.0)")
    roles = ("attention_norm", "query", "key", "value", "output_dense", "feedforward_norm", "gate", "up", "down")
    sizes, state = rotary_decoder_parts(dict(zip(roles, arrays, strict=True)), "a Llama attention")
    if "head_dim" in sizes:
        raise Refused(f"attention kernels {[list(a.shape) for a in arrays[1:5]]} are not a Llama attention's")
    spec = {
        "op": HubLlamaDecoder.op,
        **sizes,
        "rope_max_wavelength": float(c.get("rope_max_wavelength", 10000)),
        "layer_norm_epsilon": float(c.get("layer_norm_epsilon", 1e-6)),
        "dropout": float(c.get("dropout", 0.0) or 0.0),
    }
    return Converted(spec, state, ["keras-hub LlamaTransformerDecoder: RMSNorm, grouped-query attention, SwiGLU"])


# -- the family's Hugging Face form -------------------------------------------------------------------------
LLAMA_MAX_POSITIONS = 4096  # Llama 2's context; keras-hub's LlamaBackbone records none


def _llama_config(m: HubSource) -> dict[str, Any]:
    for name in (*_LLAMA_31, "rope_pretraining_sequence_length"):
        if m.arguments.get(name) is not None:
            m.refuse(f"{name}={m.arguments[name]!r}: Llama 3.1's frequency adjustment is not converted")
    return {**rotary_config(m, LLAMA_MAX_POSITIONS), "attention_bias": False, "mlp_bias": False}


LLAMA = TransformersForm(
    "llama", {"backbone": "LlamaModel", "causal_lm": "LlamaForCausalLM"}, _llama_config, rotary_tensors
)


# -- the family's models -----------------------------------------------------------------------------------
_LLAMA_MODULE = "keras_hub.src.models.llama"


@keras_hub_model("LlamaBackbone", family="llama", causal_lm="LlamaCausalLM", transformers=LLAMA)
def llama_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``LlamaBackbone``: token ids, padding mask -> ``token_embedding`` (``ReversibleEmbedding``, untied
    unless ``tie_word_embeddings``) -> ``num_layers`` ``LlamaTransformerDecoder`` layers (masked by
    ``padding_mask`` as ``decoder_padding_mask``) -> ``sequence_output_layernorm`` (RMSNorm) -> [B, T, D].
    ``LlamaCausalLM``: that graph, then the embedding's reverse call for the logits."""
    return rotary_backbone_graph(
        config,
        where,
        decoder=("LlamaTransformerDecoder", f"{_LLAMA_MODULE}.llama_decoder"),
        norm=("LlamaLayerNorm", f"{_LLAMA_MODULE}.llama_layernorm"),
        settings={key: config.get(key) for key in config if key.startswith("rope_")},
        tied=bool(config.get("tie_word_embeddings", False)),
        name="llama_backbone",
    )
