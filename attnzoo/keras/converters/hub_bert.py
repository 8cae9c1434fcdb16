"""keras-hub's BERT family: ``BertBackbone`` and ``BertTextClassifier``, rebuilt from their arguments.

* ``BertBackbone``: token ids, segment ids, padding mask (dict inputs) -> ``token_embedding`` (tied
  ``ReversibleEmbedding``) + ``position_embedding`` + ``segment_embedding`` -> layer norm (ε 1e-12) and
  dropout -> ``num_layers`` post-norm ``TransformerEncoder`` layers (gelu_approximate, masked by
  ``padding_mask``) -> ``sequence_output`` [B, T, D] and ``pooled_output = tanh(dense(sequence_output[:, 0,
  :]))`` [B, D].
* ``BertTextClassifier``: its ``BertBackbone`` (a nested model) -> ``pooled_output`` -> dropout ->
  ``Dense(num_classes)`` ``logits`` [B, num_classes]. Its preprocessor (the tokenizer) is no part of the graph.

The layers are keras-hub's common ones (:mod:`attnzoo.keras.converters.hub_layers`) and Keras's own.
"""

from __future__ import annotations

from typing import Any

from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import (
    GELU_TANH,
    HubGraph,
    classifier_head,
    first_token,
    norm_and_dropout,
    position_embedding,
    positive,
    task_backbone,
    tensor,
    transformer_blocks,
)

__all__ = ["bert_graph", "bert_classifier_graph"]


def bert_classifier_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``BertTextClassifier``: the backbone's inputs -> its ``pooled_output`` (the first of its outputs by
    sorted key) -> dropout -> ``Dense(num_classes, activation)`` named ``logits``."""
    g = HubGraph(config.get("dtype"))
    backbone = task_backbone(g, config, where, ("token_ids", "segment_ids", "padding_mask"))
    return classifier_head(g, backbone, config, where, "classifier_dropout")


@keras_hub_model("BertBackbone", family="bert", tasks={"BertTextClassifier": bert_classifier_graph})
def bert_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    g = HubGraph(config.get("dtype"))
    vocabulary, hidden = positive(config, "vocabulary_size", where), positive(config, "hidden_dim", where)
    tokens, segments, padding = g.input("token_ids"), g.input("segment_ids"), g.input("padding_mask")
    embedding = {"input_dim": vocabulary, "output_dim": hidden, "tie_weights": True, "mask_zero": False}
    t = g.layer("ReversibleEmbedding", "token_embedding", embedding, [tensor(tokens)])
    p = position_embedding(g, t, positive(config, "max_sequence_length", where, 512))
    segment = {"input_dim": positive(config, "num_segments", where, 2), "output_dim": hidden, "mask_zero": False}
    s = g.layer("Embedding", "segment_embedding", segment, [tensor(segments)])
    x = g.layer("Add", "embeddings_add", {}, [[tensor(t), tensor(p), tensor(s)]])
    x = norm_and_dropout(g, x, 1e-12, config, where)
    sequence = transformer_blocks(g, x, config, where, GELU_TANH, 1e-12)
    first = first_token(g, sequence)
    pooled = g.layer("Dense", "pooled_dense", {"units": hidden, "activation": "tanh"}, [tensor(first)])
    inputs = {"token_ids": tokens, "segment_ids": segments, "padding_mask": padding}
    outputs = {"sequence_output": sequence, "pooled_output": pooled}
    return g.functional(str(config.get("name", "bert_backbone")), inputs, outputs)
