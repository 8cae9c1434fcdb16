"""keras-hub's Falcon family: ``FalconBackbone`` and ``FalconCausalLM`` rebuilt from their arguments
(:func:`falcon_graph`), and its layer converted without keras-hub: ``FalconTransformerDecoder``.

* ``FalconBackbone``: token ids, padding mask -> ``token_embedding`` (tied ``ReversibleEmbedding``) ->
  ``num_layers`` ``FalconTransformerDecoder`` layers (masked by ``padding_mask`` as ``decoder_padding_mask``)
  -> ``final_layernorm`` (ε ``layer_norm_epsilon``) -> [B, T, D]. ``FalconCausalLM``: then the embedding's
  reverse call for the logits.
* ``FalconTransformerDecoder``: x [B, T, D] -> ``h = x + Wo · attention(ln₁(x)) + bo``, then
  ``h + W₂ · gelu(W₁ · ln₂(h) + b₁) + b₂`` (the exact gelu; attention and MLP one after the other, each
  layer norm of ε 1e-5: keras-hub's backbone gives its decoders no epsilon). The attention is keras-hub's
  ``FalconAttention``: H heads of d = D / H (as many key/value heads as query heads), biased projections,
  scores ``(q kᵀ + m_h · p_j) / √d`` with ALiBi added before the scaling, ``p_j`` key j's position counted
  over the padding mask's real tokens (``cumsum(mask) - 1``, 0 at the padding), masked causally and by the
  padding, softmax in float32. A query row with no key weighs nothing (keras's ``Softmax`` layer).

keras-hub's Falcon has no rotary, multi-query or parallel attention option: it is Falcon-RW's layer. The
decoder shares :class:`~attnzoo.keras.converters.hub_bloom.HubClassicDecoder` with BLOOM's, whose layer
it is but for the ALiBi positions, their scaling and the gelu. Decoding: keras-hub's cached call counts the
positions over every cached key (0 .. S - 1), as the converted decoder does while decoding.

Hugging Face form (:data:`FALCON`): ``FalconModel`` and ``FalconForCausalLM`` with ``alibi``, ``bias``, no
``parallel_attn``, ``multi_query`` or ``new_decoder_architecture`` (the layer above; ``query_key_value`` holds
each head's query, key and value rows side by side). transformers' Falcon rounds its ALiBi bias to bfloat16
(``slopes.bfloat16() * positions``): it is keras-hub's where the slopes and their multiples are bfloat16
numbers, that is with 1, 2, 4 or 8 heads (slopes 2^-8/H·i) over fewer than 257 positions. A model of another
head count is refused (its slopes round at every position); a longer sequence differs by transformers'
rounding. A decoder epsilon other than the final norm's (transformers' Falcon has one) is refused too.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attnzoo.keras.arguments import expect_variables
from attnzoo.keras.converters.hub_bloom import (
    HubBloomDecoder,
    attention_state,
    bloom_layer_tensors,
    decoder_graph,
    decoder_stack,
    norm_and_feedforward,
    tied_embedding,
)
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import HubGraph, number, positive, tensor
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm
from attnzoo.layers.positions import alibi_slopes

__all__ = ["HubFalconDecoder", "falcon_graph", "FALCON", "FALCON_DECODER_EPSILON"]

FALCON_DECODER_EPSILON = 1e-5  # FalconBackbone passes no epsilon to its decoders: their default


class HubFalconDecoder(HubBloomDecoder):
    """``keras_hub``'s ``FalconTransformerDecoder`` (the module docstring has the formula): x [B, T, D] ->
    [B, T, D]; the output keeps the input's mask. ``dropout`` is its attention's dropout rate (on the weights
    and on the attention's output), ``feedforward_dropout`` the MLP's."""

    # Bloom's constructor, with feedforward_dropout given (the converter always gives layer_norm_epsilon:
    # FalconBackbone passes none to its decoders, whose default is FALCON_DECODER_EPSILON)
    op = "keras_hub_falcon_decoder"

    def _activation(self, x: Tensor) -> Tensor:
        return F.gelu(x)

    def _scores(self, q: Tensor, kwargs: dict[str, Any], s: int, decoding: bool) -> tuple[float, Tensor]:
        """(1 / √d, the ALiBi bias / √d [B or 1, H, 1, S]): ``m_h · p_j`` with ``p_j`` counted over the padding
        mask's real tokens, or 0 .. S - 1 while decoding and without a mask, as keras-hub counts them."""
        padding = None if decoding else kwargs.get("decoder_padding_mask")
        if padding is None:
            positions = torch.arange(s, device=q.device, dtype=torch.float32)[None]
        else:
            real = padding.to(torch.int64)
            positions = ((real.cumsum(dim=-1) - 1) * real).to(torch.float32)
        scale = q.shape[-1] ** -0.5
        bias = alibi_slopes(self.heads).to(q.device)[None, :, None] * positions[:, None, :]
        return scale, (bias[:, :, None, :] * scale).to(q.dtype)


_FALCON_ORDER = (
    "input_layernorm",
    "attention_layer",
    "attention_layer/query_dense",
    "attention_layer/key_dense",
    "attention_layer/value_dense",
    "attention_layer/output_dense",
    "post_attention_layernorm",
    "dense_h_to_4h",
    "dense_4h_to_h",
)


@keras_layer(
    "FalconTransformerDecoder",
    package="keras_hub",
    call_arguments=("decoder_padding_mask", "decoder_attention_mask"),
    child_order=_FALCON_ORDER,
    positional=("inputs",),  # FalconBackbone calls it as transformer_layer(inputs=x, ...)
)
def convert_falcon_decoder(record, arrays, ctx):
    expect_variables(arrays, 16, "FalconTransformerDecoder (2 layer norms, 4 attention projections, 2 denses)")
    c = record.config
    heads = c.get("num_attention_heads")
    hidden = int(arrays[0].shape[0])
    if not isinstance(heads, int) or heads < 1 or hidden % heads:
        raise Refused(f"num_attention_heads {heads!r} does not divide the width {hidden}")
    state = attention_state(arrays[2:10], hidden, "FalconTransformerDecoder")
    state |= norm_and_feedforward([*arrays[:2], *arrays[10:]], "attention_norm", "feedforward_norm")
    spec = {
        "op": HubFalconDecoder.op,
        "hidden": hidden,
        "intermediate_dim": int(arrays[12].shape[1]),
        "num_heads": heads,
        "layer_norm_epsilon": float(c.get("layer_norm_epsilon", FALCON_DECODER_EPSILON)),
        "dropout": float(c.get("attention_dropout_rate", 0.0) or 0.0),
        "feedforward_dropout": float(c.get("feedforward_dropout_rate", 0.0) or 0.0),
    }
    return Converted(spec, state, ["keras-hub FalconTransformerDecoder: layer norms, ALiBi attention, gelu MLP"])


# -- the family's Hugging Face form -------------------------------------------------------------------------
def _falcon_config(m: HubSource) -> dict[str, Any]:
    heads = m.size("num_attention_heads")
    slopes = alibi_slopes(heads)
    if not torch.equal(slopes.bfloat16().float(), slopes):
        m.refuse(
            f"transformers' Falcon rounds its ALiBi slopes to bfloat16, and those of {heads} heads are not "
            "bfloat16 numbers (1, 2, 4 or 8 heads' are): its attention would differ from Keras's at every position"
        )
    epsilon = float(m.spec("final_layernorm")["epsilon"])
    layer = m.spec("transformer_layer_0")
    if float(layer.get("layer_norm_epsilon", FALCON_DECODER_EPSILON)) != epsilon:
        m.refuse(
            f"its decoders' layer norms have ε {layer.get('layer_norm_epsilon')} and its final one {epsilon}; "
            "transformers' Falcon has one layer_norm_epsilon"
        )
    return {
        "vocab_size": m.size("vocabulary_size"),
        "hidden_size": m.size("hidden_dim"),
        "num_hidden_layers": m.size("num_layers"),
        "num_attention_heads": heads,
        "num_kv_heads": heads,
        "ffn_hidden_size": m.size("intermediate_dim"),
        "layer_norm_epsilon": epsilon,
        "alibi": True,
        "bias": True,
        "parallel_attn": False,
        "multi_query": False,
        "new_decoder_architecture": False,
        "activation": "gelu",
        "attention_dropout": float(layer.get("dropout", 0.0)),
        "hidden_dropout": float(layer.get("feedforward_dropout", 0.0)),
        "tie_word_embeddings": True,
        **{key: m.special.get(key) for key in ("bos_token_id", "eos_token_id", "pad_token_id")},
    }


def _falcon_tensors(m: HubSource) -> Tensors:
    """transformers' Falcon weights: the embeddings, then the BLOOM-named layers of Falcon-RW."""
    base = "transformer." if m.kind == "causal_lm" else ""
    yield f"{base}word_embeddings.weight", m.tensor("token_embedding.weight")
    yield from bloom_layer_tensors(m, base, m.size("num_attention_heads"))


FALCON = TransformersForm(
    "falcon", {"backbone": "FalconModel", "causal_lm": "FalconForCausalLM"}, _falcon_config, _falcon_tensors
)


# -- the family's models -----------------------------------------------------------------------------------
@keras_hub_model("FalconBackbone", family="falcon", causal_lm="FalconCausalLM", transformers=FALCON)
def falcon_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``FalconBackbone`` (the module docstring has the graph); ``FalconCausalLM``: then the reverse call."""
    g = HubGraph(config.get("dtype"))
    x, heads = tied_embedding(g, config, where, "num_attention_heads")
    settings = {
        "num_attention_heads": heads,
        "intermediate_dim": positive(config, "intermediate_dim", where),
        "attention_dropout_rate": number(config, "attention_dropout_rate", where, 0.0),
        "feedforward_dropout_rate": number(config, "feedforward_dropout_rate", where, 0.0),
    }
    x = decoder_stack(g, x, config, where, "falcon.falcon_transformer_decoder.FalconTransformerDecoder", settings)
    epsilon = number(config, "layer_norm_epsilon", where, 1e-5)
    x = g.layer("LayerNormalization", "final_layernorm", {"axis": [-1], "epsilon": epsilon}, [tensor(x)])
    return decoder_graph(g, x, config, "falcon_backbone")
