"""keras-hub's RoBERTa family: ``RobertaBackbone`` and ``RobertaTextClassifier``, rebuilt from their arguments.

* ``RobertaBackbone``: token ids, padding mask -> ``embeddings`` (a ``TokenAndPositionEmbedding``) -> layer
  norm (ε 1e-5) and dropout -> post-norm ``TransformerEncoder`` layers (exact gelu) -> [B, T, D].
* ``RobertaTextClassifier``: the backbone's state at the first token -> dropout -> ``pooled_dense`` (tanh)
  -> dropout -> ``logits``.

Hugging Face form (:data:`ROBERTA`): ``RobertaModel`` (no pooler: load it with ``add_pooling_layer=False``)
and ``RobertaForSequenceClassification`` (dropout -> ``dense`` (tanh) -> dropout -> ``out_proj``: keras-hub's
head, when its ``pooled_dense`` is as wide as the backbone). The encoder layers are BERT's
(:func:`~attnzoo.keras.converters.hub_bert.encoder_tensors`). Positions differ in how they are counted:
keras-hub's are 0, 1, ... for every token; transformers' RoBERTa counts the tokens that are not
``pad_token_id`` from ``pad_token_id + 1`` on and gives each pad token position ``pad_token_id``. So the
position table is written with ``pad_token_id + 1`` rows of zeros first (``max_position_embeddings`` is
keras-hub's ``max_sequence_length + pad_token_id + 1``; 1 is keras-hub's RoBERTa ``<pad>``), and the two
models agree at every real token when the batch is padded on the right with the pad id (keras-hub's
preprocessor pads so) and no real token is the pad id; padded positions differ (transformers adds the zero
row there), and no real token's output reads them.
"""

from __future__ import annotations

from typing import Any

import torch

from attnzoo.keras.converters.hub_bert import encoder_config, encoder_tensors, labels, pooled_head
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import first_token_classifier, token_and_position_encoder
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm

__all__ = ["roberta_graph", "ROBERTA", "roberta_config", "roberta_tensors"]

_PAD = 1  # keras-hub's RoBERTa vocabularies' <pad>


def roberta_config(m: HubSource) -> dict[str, Any]:
    pad = m.special.get("pad_token_id", _PAD)
    config = {
        **encoder_config(m),
        "max_position_embeddings": m.size("max_sequence_length", 512) + pad + 1,
        "type_vocab_size": 1,
        "pad_token_id": pad,
        **{key: m.special[key] for key in ("bos_token_id", "eos_token_id") if key in m.special},
    }
    if m.kind == "task":
        rate = pooled_head(m, "tanh", "RobertaForSequenceClassification", ("pooled_dropout", "output_dropout"))
        config |= {"classifier_dropout": rate, **labels(m)}
    return config


def roberta_tensors(m: HubSource) -> Tensors:
    base = "roberta." if m.kind == "task" else ""
    pad = m.special.get("pad_token_id", _PAD)
    table = m.tensor("embeddings.position")
    yield f"{base}embeddings.word_embeddings.weight", m.tensor("embeddings.token")
    # rows 0 .. pad: transformers' positions start at pad + 1 (row pad is the pad tokens'; zeros)
    yield f"{base}embeddings.position_embeddings.weight", torch.cat([table.new_zeros(pad + 1, table.shape[1]), table])
    yield f"{base}embeddings.token_type_embeddings.weight", table.new_zeros(1, table.shape[1])  # keras-hub has none
    yield f"{base}embeddings.LayerNorm.weight", m.tensor("embeddings_layer_norm.weight")
    yield f"{base}embeddings.LayerNorm.bias", m.tensor("embeddings_layer_norm.bias")
    for i in range(m.size("num_layers")):
        yield from encoder_tensors(m, i, f"{base}encoder.layer.{i}.")
    if m.kind == "task":
        for theirs, ours in (("dense", "pooled_dense"), ("out_proj", "logits")):
            yield f"classifier.{theirs}.weight", m.tensor(f"{ours}.weight", task=True)
            yield f"classifier.{theirs}.bias", m.tensor(f"{ours}.bias", task=True)


ROBERTA = TransformersForm(
    "roberta",
    {"backbone": "RobertaModel", "task": "RobertaForSequenceClassification"},
    roberta_config,
    roberta_tensors,
    load_with={"backbone": {"add_pooling_layer": False}},
)

roberta_graph = keras_hub_model(
    "RobertaBackbone",
    family="roberta",
    tasks={"RobertaTextClassifier": first_token_classifier(True, "tanh")},
    transformers=ROBERTA,
)(token_and_position_encoder("embeddings", 1e-5))
