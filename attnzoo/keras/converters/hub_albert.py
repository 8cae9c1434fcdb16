"""keras-hub's ALBERT family: ``AlbertBackbone``, rebuilt from its arguments.

``AlbertBackbone``: BERT's inputs and embeddings (:func:`~attnzoo.keras.converters.hub_bert.bert_embeddings`)
at ``embedding_dim`` (the factorised embedding) -> ``embedding_projection`` (a Dense to ``hidden_dim``) ->
``num_groups`` groups of ``num_inner_repetitions`` post-norm ``TransformerEncoder`` layers
(``group_<g>_inner_layer_<i>``, gelu_approximate, ε 1e-12), each group's layers called in turn
``num_layers / num_groups`` times: one layer called several times holds its weights once, as the file does
-> ``sequence_output`` and ``pooled_output = tanh(pooled_dense(sequence_output[:, 0, :]))``.

Hugging Face form (:data:`ALBERT`): ``AlbertModel``, the same graph: BERT's embeddings at ``embedding_size``,
``embedding_hidden_mapping_in`` (the projection), ``num_hidden_groups`` groups of ``inner_group_num`` layers
(group g's layer i is ``group_<g>_inner_layer_<i>``, post-norm as BERT's), each group's run in turn for
``num_hidden_layers / num_hidden_groups`` layers, and the tanh ``pooler``.
"""

from __future__ import annotations

from typing import Any

from attnzoo.errors import WeightsError
from attnzoo.keras.converters.hub_bert import (
    bert_embeddings,
    embedding_tensors,
    encoder_config,
    layer_tensors,
    pooled_outputs,
)
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import GELU_TANH, HubGraph, Tensor, encoder_settings, positive, tensor
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm

__all__ = ["albert_graph", "ALBERT"]

# transformers' AlbertLayer's modules and keras-hub's TransformerEncoder node's, in pairs
_LAYER = (
    *((f"attention.{n}", f"attention.{n}") for n in ("query", "key", "value")),
    ("attention.dense", "attention.output"),
    ("attention.LayerNorm", "attention_norm"),
    ("ffn", "intermediate"),
    ("ffn_output", "output_dense"),
    ("full_layer_layer_norm", "feedforward_norm"),
)


def _albert_config(m: HubSource) -> dict[str, Any]:
    return {
        **encoder_config(m, "group_0_inner_layer_0"),
        "embedding_size": m.size("embedding_dim"),
        "num_hidden_groups": m.size("num_groups", 1),
        "inner_group_num": m.size("num_inner_repetitions", 1),
        "max_position_embeddings": m.size("max_sequence_length", 512),
        "type_vocab_size": m.size("num_segments", 2),
        "pad_token_id": m.special.get("pad_token_id", 0),  # keras-hub's ALBERT vocabularies' <pad>
    }


def _albert_tensors(m: HubSource) -> Tensors:
    yield from embedding_tensors(m, "")
    yield "encoder.embedding_hidden_mapping_in.weight", m.tensor("embedding_projection.weight")
    yield "encoder.embedding_hidden_mapping_in.bias", m.tensor("embedding_projection.bias")
    for group in range(m.size("num_groups", 1)):
        for inner in range(m.size("num_inner_repetitions", 1)):
            to = f"encoder.albert_layer_groups.{group}.albert_layers.{inner}."
            yield from layer_tensors(m, f"group_{group}_inner_layer_{inner}", to, _LAYER)
    yield "pooler.weight", m.tensor("pooled_dense.weight")
    yield "pooler.bias", m.tensor("pooled_dense.bias")


ALBERT = TransformersForm("albert", {"backbone": "AlbertModel"}, _albert_config, _albert_tensors)

_MODULE = "keras_hub.src.layers.modeling.transformer_encoder"


@keras_hub_model("AlbertBackbone", family="albert", transformers=ALBERT)
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
