"""keras-hub's OPT family: ``OPTBackbone`` and ``OPTCausalLM``, rebuilt from their arguments.

* ``OPTBackbone``: token ids, padding mask -> ``embeddings`` (a ``TokenAndPositionEmbedding``: the token table
  [V, D] plus the learned position table [``max_sequence_length``, D], positions 0, 1, ... from the first
  column) -> ``num_layers`` pre-norm causal ``TransformerDecoder`` layers (relu, ε 1e-5, masked by
  ``padding_mask`` as ``decoder_padding_mask``) -> ``layer_norm`` -> [B, T, D].
* ``OPTCausalLM``: the backbone -> the token table of ``embeddings`` called in reverse, ``x @ tokenᵀ`` ->
  logits [B, T, V] (:func:`attnzoo.keras.hub_graph.causal_lm_graph` with ``embedding="embeddings"``).

The layers are keras-hub's common ones (:mod:`attnzoo.keras.converters.hub_layers`) and Keras's own, so a
left-padded row's padding (a query with no key) is what keras 3's ``MultiHeadAttention`` gives it: zeros
while ``dropout`` > 0 (its masked Softmax path; keras-hub's OPT default is 0.1), the mean of the values at 0
(its fused path). Cached decoding is the decoder's and the position table's (:mod:`attnzoo.keras.decoding`);
a prompt and new tokens past ``max_sequence_length`` positions are refused before decoding.

Hugging Face form (:data:`OPT`): ``OPTModel`` and ``OPTForCausalLM`` (its head tied to ``embed_tokens``).
transformers' ``OPTLearnedPositionalEmbedding`` keeps two rows before position 0 (the ``offset`` 2 of
fairseq's padding convention) and counts a token's position over the tokens ``attention_mask`` keeps
(``cumsum(mask) - 1``, a padded token at -1, its row 1): the table is written with two rows of zeros first
(``max_position_embeddings`` is keras-hub's ``max_sequence_length``), so every real token of a right-padded
batch reads keras-hub's row, and every position does where ``position_ids`` 0, 1, ... are given.
"""

from __future__ import annotations

from typing import Any

import torch

from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import HubGraph, tensor, token_and_position_embedding, transformer_blocks
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm

__all__ = ["opt_graph", "OPT", "OPT_POSITION_OFFSET"]

OPT_POSITION_OFFSET = 2  # transformers' OPTLearnedPositionalEmbedding reads row position + 2
_EPSILON = 1e-5  # keras-hub's OPT fixes its layer norms' epsilon


def _opt_config(m: HubSource) -> dict[str, Any]:
    layer = m.spec("transformer_layer_0")
    if layer.get("activation") != "relu" or not layer.get("normalize_first"):
        m.refuse(f"its decoder layers are {layer.get('activation')!r}, normalize_first={layer.get('normalize_first')}")
    dropout = float(layer.get("dropout", 0.0))
    return {
        "vocab_size": m.size("vocabulary_size"),
        "hidden_size": m.size("hidden_dim"),
        "word_embed_proj_dim": m.size("hidden_dim"),
        "num_hidden_layers": m.size("num_layers"),
        "num_attention_heads": m.size("num_heads"),
        "ffn_dim": m.size("intermediate_dim"),
        "max_position_embeddings": m.size("max_sequence_length", 2048),
        "activation_function": "relu",
        "do_layer_norm_before": True,
        "enable_bias": True,
        "layer_norm_elementwise_affine": True,
        "dropout": dropout,
        "attention_dropout": dropout,
        "tie_word_embeddings": True,
        **{key: m.special.get(key) for key in ("bos_token_id", "eos_token_id", "pad_token_id")},
    }


_OPT_LAYER = (
    ("self_attn_layer_norm", "attention_norm"),
    ("fc1", "intermediate"),
    ("fc2", "output_dense"),
    ("final_layer_norm", "feedforward_norm"),
)


def _opt_tensors(m: HubSource) -> Tensors:
    """transformers' OPT weights: the position table behind its two offset rows; the attention's projections
    from the converted ``keras_mha`` node, the rest as the converted ``nn.Linear`` / ``nn.LayerNorm`` hold them."""
    if m.holds("embeddings.reverse"):
        m.refuse("its token embedding has a reverse table of its own; transformers' OPT head is the tied table")
    base = "model.decoder." if m.kind == "causal_lm" else "decoder."
    yield f"{base}embed_tokens.weight", m.tensor("embeddings.token")
    table = m.tensor("embeddings.position")
    yield f"{base}embed_positions.weight", torch.cat([table.new_zeros(OPT_POSITION_OFFSET, table.shape[1]), table])
    for i in range(m.size("num_layers")):
        at, to = f"transformer_layer_{i}.", f"{base}layers.{i}."
        for theirs, ours in (("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value"), ("out_proj", "output")):
            for kind in ("weight", "bias"):
                yield f"{to}self_attn.{theirs}.{kind}", m.tensor(f"{at}attention.{ours}.{kind}")
        for theirs, ours in _OPT_LAYER:
            for kind in ("weight", "bias"):
                yield f"{to}{theirs}.{kind}", m.tensor(f"{at}{ours}.{kind}")
    yield f"{base}final_layer_norm.weight", m.tensor("layer_norm.weight")
    yield f"{base}final_layer_norm.bias", m.tensor("layer_norm.bias")


OPT = TransformersForm("opt", {"backbone": "OPTModel", "causal_lm": "OPTForCausalLM"}, _opt_config, _opt_tensors)


@keras_hub_model("OPTBackbone", family="opt", causal_lm="OPTCausalLM", embedding="embeddings", transformers=OPT)
def opt_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``OPTBackbone`` (the module docstring has the graph); ``OPTCausalLM``: then ``embeddings`` in reverse."""
    g = HubGraph(config.get("dtype"))
    tokens, padding = g.input("token_ids"), g.input("padding_mask")
    x = token_and_position_embedding(g, tokens, config, where, "embeddings", 2048)
    x = transformer_blocks(g, x, {"dropout": 0.1, **config}, where, "relu", _EPSILON, decoder=True)
    x = g.layer("LayerNormalization", "layer_norm", {"axis": [-1], "epsilon": _EPSILON}, [tensor(x)])
    return g.functional(str(config.get("name", "opt_backbone")), {"token_ids": tokens, "padding_mask": padding}, x)
