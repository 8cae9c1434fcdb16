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
"""

from __future__ import annotations

from typing import Any

from attnzoo.errors import WeightsError
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import HubGraph, Ref, number, positive, tensor

__all__ = ["bart_graph"]

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


@keras_hub_model("BartBackbone", family="bart", seq2seq_lm="BartSeq2SeqLM")
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
