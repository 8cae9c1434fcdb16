"""keras-hub's GPT-2 family: ``GPT2Backbone`` and ``GPT2CausalLM``, rebuilt from their arguments.

* ``GPT2Backbone``: token ids, padding mask -> ``token_embedding`` (tied ``ReversibleEmbedding``) +
  ``position_embedding`` -> dropout -> pre-norm causal ``TransformerDecoder`` layers (gelu_approximate, ε
  1e-5, masked by ``padding_mask`` as ``decoder_padding_mask``) -> final ``layer_norm`` -> [B, T, D].
* ``GPT2CausalLM``: the backbone -> ``token_embedding(state, reverse=True)`` -> logits [B, T, vocabulary]
  (:func:`attnzoo.keras.hub_graph.causal_lm_graph`).

The layers are keras-hub's common ones (:mod:`attnzoo.keras.converters.hub_layers`) and Keras's own.
"""

from __future__ import annotations

from typing import Any

from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import (
    GELU_TANH,
    HubGraph,
    number,
    position_embedding,
    positive,
    tensor,
    transformer_blocks,
)

__all__ = ["gpt2_graph"]


@keras_hub_model("GPT2Backbone", family="gpt2", causal_lm="GPT2CausalLM")
def gpt2_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    g = HubGraph(config.get("dtype"))
    hidden = positive(config, "hidden_dim", where)
    tokens, padding = g.input("token_ids"), g.input("padding_mask")
    embedding = {"input_dim": positive(config, "vocabulary_size", where), "output_dim": hidden, "tie_weights": True}
    t = g.layer("ReversibleEmbedding", "token_embedding", embedding, [tensor(tokens)])
    p = position_embedding(g, t, positive(config, "max_sequence_length", where, 1024))
    x = g.layer("Add", "embeddings_add", {}, [[tensor(t), tensor(p)]])
    x = g.layer("Dropout", "embeddings_dropout", {"rate": number(config, "dropout", where, 0.0)}, [tensor(x)])
    x = transformer_blocks(g, x, config, where, GELU_TANH, 1e-5, decoder=True)
    x = g.layer("LayerNormalization", "layer_norm", {"axis": [-1], "epsilon": 1e-5}, [tensor(x)])
    return g.functional(str(config.get("name", "gpt2_backbone")), {"token_ids": tokens, "padding_mask": padding}, x)
