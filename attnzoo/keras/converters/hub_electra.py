"""keras-hub's ELECTRA family: ``ElectraBackbone``, rebuilt from its arguments.

``ElectraBackbone``: BERT's inputs and embeddings (:func:`~attnzoo.keras.converters.hub_bert.bert_embeddings`)
at ``embedding_dim``, from a token table of ``vocab_size`` rows (ELECTRA's argument's name) -> where
``hidden_dim`` differs from ``embedding_dim``, ``embeddings_projection`` (a Dense to ``hidden_dim``) ->
``num_layers`` post-norm ``TransformerEncoder`` layers (gelu_approximate, ε 1e-12, masked by
``padding_mask``) -> ``sequence_output`` and ``pooled_output = tanh(pooled_dense(sequence_output[:, 0, :]))``.
"""

from __future__ import annotations

from typing import Any

from attnzoo.keras.converters.hub_bert import bert_embeddings, pooled_outputs
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import GELU_TANH, HubGraph, positive, tensor, transformer_blocks

__all__ = ["electra_graph"]


@keras_hub_model("ElectraBackbone", family="electra")
def electra_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    g = HubGraph(config.get("dtype"))
    vocabulary, width = positive(config, "vocab_size", where), positive(config, "embedding_dim", where)
    hidden = positive(config, "hidden_dim", where)
    inputs, x = bert_embeddings(g, config, where, vocabulary, width)
    if hidden != width:
        x = g.layer("Dense", "embeddings_projection", {"units": hidden}, [tensor(x)])
    sequence = transformer_blocks(g, x, config, where, GELU_TANH, 1e-12)
    return pooled_outputs(g, config, inputs, sequence, "electra_backbone")
