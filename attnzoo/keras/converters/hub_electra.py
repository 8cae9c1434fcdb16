"""keras-hub's ELECTRA family: ``ElectraBackbone``, rebuilt from its arguments.

``ElectraBackbone``: BERT's inputs and embeddings (:func:`~attnzoo.keras.converters.hub_bert.bert_embeddings`)
at ``embedding_dim``, from a token table of ``vocab_size`` rows (ELECTRA's argument's name) -> where
``hidden_dim`` differs from ``embedding_dim``, ``embeddings_projection`` (a Dense to ``hidden_dim``) ->
``num_layers`` post-norm ``TransformerEncoder`` layers (gelu_approximate, ε 1e-12, masked by
``padding_mask``) -> ``sequence_output`` and ``pooled_output = tanh(pooled_dense(sequence_output[:, 0, :]))``.

Hugging Face form (:data:`ELECTRA`): ``ElectraModel``, ELECTRA's discriminator body: BERT's embeddings at
``embedding_size``, ``embeddings_project`` where it differs from ``hidden_size``, BERT's layers
(:func:`~attnzoo.keras.converters.hub_bert.encoder_tensors`). transformers' ELECTRA has no pooler: the folder
gives ``sequence_output`` (``last_hidden_state``), and ``pooled_dense`` is not written.
"""

from __future__ import annotations

from typing import Any

from attnzoo.keras.converters.hub_bert import (
    bert_embeddings,
    embedding_tensors,
    encoder_config,
    encoder_tensors,
    pooled_outputs,
)
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import GELU_TANH, HubGraph, positive, tensor, transformer_blocks
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm

__all__ = ["electra_graph", "ELECTRA"]


def _electra_config(m: HubSource) -> dict[str, Any]:
    return {
        **encoder_config(m, vocabulary="vocab_size"),
        "embedding_size": m.size("embedding_dim"),
        "max_position_embeddings": m.size("max_sequence_length", 512),
        "type_vocab_size": m.size("num_segments", 2),
        "pad_token_id": m.special.get("pad_token_id", 0),  # keras-hub's ELECTRA vocabularies' [PAD]
    }


def _electra_tensors(m: HubSource) -> Tensors:
    yield from embedding_tensors(m, "")
    if m.has("embeddings_projection"):  # transformers too projects only where the widths differ
        yield "embeddings_project.weight", m.tensor("embeddings_projection.weight")
        yield "embeddings_project.bias", m.tensor("embeddings_projection.bias")
    for i in range(m.size("num_layers")):
        yield from encoder_tensors(m, i, f"encoder.layer.{i}.")


ELECTRA = TransformersForm("electra", {"backbone": "ElectraModel"}, _electra_config, _electra_tensors)


@keras_hub_model("ElectraBackbone", family="electra", transformers=ELECTRA)
def electra_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    g = HubGraph(config.get("dtype"))
    vocabulary, width = positive(config, "vocab_size", where), positive(config, "embedding_dim", where)
    hidden = positive(config, "hidden_dim", where)
    inputs, x = bert_embeddings(g, config, where, vocabulary, width)
    if hidden != width:
        x = g.layer("Dense", "embeddings_projection", {"units": hidden}, [tensor(x)])
    sequence = transformer_blocks(g, x, config, where, GELU_TANH, 1e-12)
    return pooled_outputs(g, config, inputs, sequence, "electra_backbone")
