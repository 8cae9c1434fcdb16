"""keras-hub's ALBERT family: ``AlbertBackbone``, rebuilt from its arguments.

``AlbertBackbone``: BERT's inputs and embeddings (:func:`~attnzoo.keras.converters.hub_bert.bert_embeddings`)
at ``embedding_dim`` (the factorised embedding) -> ``embedding_projection`` (a Dense to ``hidden_dim``) ->
``num_groups`` groups of ``num_inner_repetitions`` post-norm ``TransformerEncoder`` layers
(``group_<g>_inner_layer_<i>``, gelu_approximate, ε 1e-12), each group's layers called in turn
``num_layers / num_groups`` times: one layer called several times holds its weights once, as the file does
-> ``sequence_output`` and ``pooled_output = tanh(pooled_dense(sequence_output[:, 0, :]))``.
"""

from __future__ import annotations

from typing import Any

from attnzoo.errors import WeightsError
from attnzoo.keras.converters.hub_bert import bert_embeddings, pooled_outputs
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import GELU_TANH, HubGraph, Tensor, encoder_settings, positive, tensor

__all__ = ["albert_graph"]

_MODULE = "keras_hub.src.layers.modeling.transformer_encoder"


@keras_hub_model("AlbertBackbone", family="albert")
def albert_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    g = HubGraph(config.get("dtype"))
    vocabulary, width = positive(config, "vocabulary_size", where), positive(config, "embedding_dim", where)
    inputs, embedded = bert_embeddings(g, config, where, vocabulary, width)
    units = {"units": positive(config, "hidden_dim", where)}
    x: Tensor = g.layer("Dense", "embedding_projection", units, [tensor(embedded)])
    layers, groups = positive(config, "num_layers", where), positive(config, "num_groups", where, 1)
    if layers % groups:
        raise WeightsError(f"{where}: num_layers {layers} is not a multiple of num_groups {groups}")
    settings = encoder_settings(config, where, GELU_TANH, 1e-12)
    mask = {"padding_mask": tensor("padding_mask")}
    for group in range(groups):
        for call in range(layers // groups):
            for inner in range(positive(config, "num_inner_repetitions", where, 1)):
                name = f"group_{group}_inner_layer_{inner}"
                if call:
                    x = g.call_again(name, [tensor(x)], mask)
                else:
                    x = g.hub_layer("TransformerEncoder", name, settings, [tensor(x)], _MODULE, **mask)
    return pooled_outputs(g, config, inputs, x, "albert_backbone")
