"""keras-hub's DistilBERT family: ``DistilBertBackbone`` and ``DistilBertTextClassifier``, rebuilt from their
arguments.

* ``DistilBertBackbone``: token ids, padding mask -> ``token_and_position_embedding`` -> layer norm (ε 1e-12)
  and dropout -> post-norm ``TransformerEncoder`` layers (exact gelu) -> [B, T, D].
* ``DistilBertTextClassifier``: the backbone's state at the first token -> ``pooled_dense`` (relu) -> dropout
  -> ``logits``.

Hugging Face form (:data:`DISTIL_BERT`): ``DistilBertModel`` and ``DistilBertForSequenceClassification``
(first token -> ``pre_classifier`` -> ReLU -> dropout -> ``classifier``: keras-hub's head when its
``pooled_dense`` is as wide as the backbone). The layers are BERT's under other names (``q_lin``,
``sa_layer_norm``, ``ffn.lin1`` ...), post-norm, exact gelu, positions 0, 1, ...; transformers fixes its
layer norms' ε at 1e-12, keras-hub's DistilBERT's.
"""

from __future__ import annotations

from typing import Any

from attnzoo.keras.converters.hub_bert import encoder_config, labels, pooled_head
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import first_token_classifier, token_and_position_encoder
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm

__all__ = ["distil_bert_graph", "DISTIL_BERT"]


def _distil_bert_config(m: HubSource) -> dict[str, Any]:
    bert = encoder_config(m)
    epsilons = {bert["layer_norm_eps"], float(m.spec("embeddings_layer_norm")["epsilon"])}
    if epsilons != {1e-12}:
        m.refuse(f"its layer norms' epsilon is {sorted(epsilons)}; transformers' DistilBERT fixes it at 1e-12")
    config = {
        "vocab_size": bert["vocab_size"],
        "max_position_embeddings": m.size("max_sequence_length", 512),
        "sinusoidal_pos_embds": False,
        "n_layers": bert["num_hidden_layers"],
        "n_heads": bert["num_attention_heads"],
        "dim": bert["hidden_size"],
        "hidden_dim": bert["intermediate_size"],
        "activation": bert["hidden_act"],
        "dropout": bert["hidden_dropout_prob"],
        "attention_dropout": bert["attention_probs_dropout_prob"],
        "pad_token_id": m.special.get("pad_token_id", 0),  # keras-hub's DistilBERT vocabularies' [PAD]
    }
    if m.kind == "task":
        rate = pooled_head(m, "relu", "DistilBertForSequenceClassification", ("output_dropout",))
        config |= {"seq_classif_dropout": rate, **labels(m)}
    return config


_DISTIL_LAYER = (
    ("attention.q_lin", "attention.query"),
    ("attention.k_lin", "attention.key"),
    ("attention.v_lin", "attention.value"),
    ("attention.out_lin", "attention.output"),
    ("sa_layer_norm", "attention_norm"),
    ("ffn.lin1", "intermediate"),
    ("ffn.lin2", "output_dense"),
    ("output_layer_norm", "feedforward_norm"),
)


def _distil_bert_tensors(m: HubSource) -> Tensors:
    base = "distilbert." if m.kind == "task" else ""
    yield f"{base}embeddings.word_embeddings.weight", m.tensor("token_and_position_embedding.token")
    yield f"{base}embeddings.position_embeddings.weight", m.tensor("token_and_position_embedding.position")
    yield f"{base}embeddings.LayerNorm.weight", m.tensor("embeddings_layer_norm.weight")
    yield f"{base}embeddings.LayerNorm.bias", m.tensor("embeddings_layer_norm.bias")
    for i in range(m.size("num_layers")):
        for theirs, ours in _DISTIL_LAYER:
            for name in ("weight", "bias"):
                yield f"{base}transformer.layer.{i}.{theirs}.{name}", m.tensor(f"transformer_layer_{i}.{ours}.{name}")
    if m.kind == "task":
        for theirs, ours in (("pre_classifier", "pooled_dense"), ("classifier", "logits")):
            yield f"{theirs}.weight", m.tensor(f"{ours}.weight", task=True)
            yield f"{theirs}.bias", m.tensor(f"{ours}.bias", task=True)


DISTIL_BERT = TransformersForm(
    "distilbert",
    {"backbone": "DistilBertModel", "task": "DistilBertForSequenceClassification"},
    _distil_bert_config,
    _distil_bert_tensors,
)

distil_bert_graph = keras_hub_model(
    "DistilBertBackbone",
    family="distil_bert",
    tasks={"DistilBertTextClassifier": first_token_classifier(False, "relu")},
    transformers=DISTIL_BERT,
)(token_and_position_encoder("token_and_position_embedding", 1e-12))
