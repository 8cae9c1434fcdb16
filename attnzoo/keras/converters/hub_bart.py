"""keras-hub's BART family: ``BartBackbone`` and ``BartSeq2SeqLM``, rebuilt from their arguments.

* ``BartBackbone``: ``encoder_token_ids``, ``encoder_padding_mask``, ``decoder_token_ids``,
  ``decoder_padding_mask`` -> encoder: ``token_embedding`` (tied ``ReversibleEmbedding``, shared with the
  decoder) + ``encoder_position_embedding`` (learned, positions 0, 1, ...) -> layer norm (ε 1e-5) and dropout
  -> ``num_layers`` post-norm ``TransformerEncoder`` layers (exact gelu, masked by the encoder's padding) ->
  ``encoder_sequence_output`` [B, S, D]; decoder: ``token_embedding`` + ``decoder_position_embedding`` ->
  layer norm and dropout -> ``num_layers`` post-norm ``TransformerDecoder`` layers (causal self-attention
  masked by the decoder's padding, cross-attention to the encoder's output masked by its padding) ->
  ``decoder_sequence_output`` [B, T, D].
* ``BartSeq2SeqLM``: the backbone -> ``token_embedding(decoder_sequence_output, reverse=True)`` -> logits
  [B, T, vocabulary] (the tied head). Its ``generate`` decodes the decoder's tokens with the encoder's
  inputs fixed (:mod:`attnzoo.keras.decoding`): the decoder layers' self-attention keeps a KV cache, their
  cross-attention the encoder's keys and values, computed once.

The layers are keras-hub's common ones (:mod:`attnzoo.keras.converters.hub_layers`) and Keras's own.

Hugging Face form (:data:`BART`): ``BartModel`` and ``BartForConditionalGeneration`` (the head tied to
``shared``, ``final_logits_bias`` zeros). transformers' BART is keras-hub's: post-norm layers, the exact gelu,
ε 1e-5, the embeddings normalised (``layernorm_embedding``), no embedding scaling (``scale_embedding``
false), queries scaled by 1/sqrt(d). Its learned positions start at row 2 of ``embed_positions`` (an offset
kept from fairseq), so the table written is keras-hub's under two zero rows. The special token ids are the
tokenizer's where the door knows them, else unset (transformers' defaults, 0 / 1 / 2, would stop or force
tokens keras-hub's ``generate`` does not), and no end token is forced.
"""

from __future__ import annotations

from typing import Any

import torch

from attnzoo.errors import WeightsError
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import HubGraph, Ref, number, positive, tensor
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm

__all__ = ["bart_graph", "BART"]

_MODULE = "keras_hub.src.layers.modeling"


def _embeddings(g: HubGraph, side: str, tokens: str | Ref, config: dict[str, Any], where: str) -> str:
    """``<side>_position_embedding`` of the token embeddings, added, normalised (ε 1e-5) and dropped out."""
    length = positive(config, "max_sequence_length", where, 1024)
    positions = g.hub_layer(
        "PositionEmbedding",
        f"{side}_position_embedding",
        {"sequence_length": length},
        [tensor(tokens)],
        f"{_MODULE}.position_embedding",
    )
    x = g.layer("Add", f"{side}_embeddings_add", {}, [[tensor(tokens), tensor(positions)]])
    x = g.layer("LayerNormalization", f"{side}_embeddings_layer_norm", {"axis": [-1], "epsilon": 1e-5}, [tensor(x)])
    return g.layer(
        "Dropout", f"{side}_embeddings_dropout", {"rate": number(config, "dropout", where, 0.1)}, [tensor(x)]
    )


def _bart_config(m: HubSource) -> dict[str, Any]:
    layers, heads, width = m.size("num_layers"), m.size("num_heads"), m.size("intermediate_dim")
    dropout = float(m.arguments.get("dropout", 0.1) or 0.0)
    special = {key: m.special.get(key) for key in ("bos_token_id", "eos_token_id", "pad_token_id")}
    return {
        "vocab_size": m.size("vocabulary_size"),
        "d_model": m.size("hidden_dim"),
        "max_position_embeddings": m.size("max_sequence_length", 1024),
        "encoder_layers": layers,
        "decoder_layers": layers,
        "encoder_attention_heads": heads,
        "decoder_attention_heads": heads,
        "encoder_ffn_dim": width,
        "decoder_ffn_dim": width,
        "activation_function": "gelu",
        "dropout": dropout,
        "attention_dropout": dropout,
        "activation_dropout": dropout,
        "scale_embedding": False,
        "tie_word_embeddings": True,
        **special,
        "decoder_start_token_id": special["eos_token_id"],
        "forced_bos_token_id": None,
        "forced_eos_token_id": None,
    }


def _bart_layer(m: HubSource, at: str, to: str, cross: bool) -> Tensors:
    pairs = [("self_attn", "attention"), ("self_attn_layer_norm", "attention_norm")]
    if cross:
        pairs += [("encoder_attn", "cross_attention"), ("encoder_attn_layer_norm", "cross_attention_norm")]
    pairs += [("fc1", "intermediate"), ("fc2", "output_dense"), ("final_layer_norm", "feedforward_norm")]
    projections = {"q_proj": "query", "k_proj": "key", "v_proj": "value", "out_proj": "output"}
    for theirs, ours in pairs:
        parts = projections.items() if ours.endswith("attention") else [("", "")]
        for their_part, our_part in parts:
            for name in ("weight", "bias"):
                left = ".".join(p for p in (theirs, their_part, name) if p)
                right = ".".join(p for p in (ours, our_part, name) if p)
                yield f"{to}{left}", m.tensor(f"{at}{right}")


def _bart_tensors(m: HubSource) -> Tensors:
    base = "model." if m.kind == "seq2seq_lm" else ""
    yield f"{base}shared.weight", m.tensor("token_embedding.weight")
    for side in ("encoder", "decoder"):
        table = m.tensor(f"{side}_position_embedding.position")
        yield f"{base}{side}.embed_positions.weight", torch.cat([table.new_zeros(2, table.shape[1]), table])
        for name in ("weight", "bias"):
            yield f"{base}{side}.layernorm_embedding.{name}", m.tensor(f"{side}_embeddings_layer_norm.{name}")
        for i in range(m.size("num_layers")):
            at, to = f"transformer_{side}_layer_{i}.", f"{base}{side}.layers.{i}."
            yield from _bart_layer(m, at, to, side == "decoder")
    if m.kind == "seq2seq_lm":
        yield "final_logits_bias", torch.zeros(1, m.size("vocabulary_size"))


BART = TransformersForm(
    "bart", {"backbone": "BartModel", "seq2seq_lm": "BartForConditionalGeneration"}, _bart_config, _bart_tensors
)


@keras_hub_model("BartBackbone", family="bart", seq2seq_lm="BartSeq2SeqLM", transformers=BART)
def bart_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    g = HubGraph(config.get("dtype"))
    hidden, heads = positive(config, "hidden_dim", where), positive(config, "num_heads", where)
    if hidden % heads:
        raise WeightsError(f"{where}: hidden_dim {hidden} is not a multiple of num_heads {heads}")
    names = ("encoder_token_ids", "encoder_padding_mask", "decoder_token_ids", "decoder_padding_mask")
    inputs = {name: g.input(name) for name in names}
    embedding = {"input_dim": positive(config, "vocabulary_size", where), "output_dim": hidden, "tie_weights": True}
    tokens = g.layer("ReversibleEmbedding", "token_embedding", embedding, [tensor(inputs["encoder_token_ids"])])
    x = _embeddings(g, "encoder", tokens, config, where)
    settings = {
        "num_heads": heads,
        "intermediate_dim": positive(config, "intermediate_dim", where),
        "activation": "gelu",
        "dropout": number(config, "dropout", where, 0.1),
        "layer_norm_epsilon": 1e-5,
        "normalize_first": False,
    }
    layers = positive(config, "num_layers", where)
    for i in range(layers):
        mask = {"padding_mask": tensor("encoder_padding_mask")}
        x = g.hub_layer(
            "TransformerEncoder",
            f"transformer_encoder_layer_{i}",
            settings,
            [tensor(x)],
            f"{_MODULE}.transformer_encoder",
            **mask,
        )
    encoder = x
    decoder_tokens = g.call_again("token_embedding", [tensor(inputs["decoder_token_ids"])])
    x = _embeddings(g, "decoder", decoder_tokens, config, where)
    for i in range(layers):
        kwargs = {
            "decoder_sequence": tensor(x),
            "encoder_sequence": tensor(encoder),
            "decoder_padding_mask": tensor("decoder_padding_mask"),
            "encoder_padding_mask": tensor("encoder_padding_mask"),
        }
        x = g.hub_layer(
            "TransformerDecoder",
            f"transformer_decoder_layer_{i}",
            settings,
            [],
            f"{_MODULE}.transformer_decoder",
            **kwargs,
        )
    outputs = {"encoder_sequence_output": encoder, "decoder_sequence_output": x}
    return g.functional(str(config.get("name", "bart_backbone")), inputs, outputs)
