"""keras-hub's BERT family: ``BertBackbone``, ``BertTextClassifier`` and ``BertMaskedLM``, rebuilt from their
arguments.

* ``BertBackbone``: token ids, segment ids, padding mask (dict inputs) -> ``token_embedding`` (tied
  ``ReversibleEmbedding``) + ``position_embedding`` + ``segment_embedding`` -> layer norm (ε 1e-12) and
  dropout -> ``num_layers`` post-norm ``TransformerEncoder`` layers (gelu_approximate, masked by
  ``padding_mask``) -> ``sequence_output`` [B, T, D] and ``pooled_output = tanh(dense(sequence_output[:, 0,
  :]))`` [B, D].
* ``BertTextClassifier``: its ``BertBackbone`` (a nested model) -> ``pooled_output`` -> dropout ->
  ``Dense(num_classes)`` ``logits`` [B, num_classes]. Its preprocessor (the tokenizer) is no part of the graph.
* ``BertMaskedLM``: its ``BertBackbone`` and ``mask_positions`` [B, M] -> a ``MaskedLMHead`` (exact gelu,
  ε 1e-5) tied to ``token_embedding`` -> logits [B, M, V] (:mod:`attnzoo.keras.converters.hub_masked_lm`).

The layers are keras-hub's common ones (:mod:`attnzoo.keras.converters.hub_layers`) and Keras's own.

Hugging Face form (:data:`BERT`): ``BertModel`` (its pooler is ``pooled_dense``) and
``BertForSequenceClassification`` (pooler -> dropout -> ``classifier``, as the task's ``pooled_output`` ->
dropout -> ``logits``). keras-hub's encoder layers are transformers' BERT layers (post-norm, keys masked by
the padding, positions 0, 1, ...; the tanh gelu, ``gelu_new``; ε 1e-12); ``segment_ids`` are
``token_type_ids``. ``BertMaskedLM`` has none: transformers' ``BertForMaskedLM`` head applies the
encoder's activation and ε, keras-hub's the exact gelu and ε 1e-5. :func:`encoder_tensors` writes a keras-hub
``TransformerEncoder`` as a ``BertLayer``, which RoBERTa's family uses too.
"""

from __future__ import annotations

from typing import Any

from attnzoo.keras.converters.hub_masked_lm import masked_lm_graph
from attnzoo.keras.hub_families import keras_hub_model, keras_hub_task
from attnzoo.keras.hub_graph import (
    GELU_TANH,
    HubGraph,
    Tensor,
    classifier_head,
    first_token,
    norm_and_dropout,
    position_embedding,
    positive,
    task_backbone,
    tensor,
    transformer_blocks,
)
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm

Inputs = tuple[dict[str, str], str]

__all__ = [
    "bert_graph",
    "bert_classifier_graph",
    "bert_embeddings",
    "pooled_outputs",
    "summed_embeddings",
    "BERT",
    "encoder_config",
    "encoder_tensors",
    "embedding_tensors",
    "layer_tensors",
    "BERT_LAYER",
    "ACTIVATIONS",
    "labels",
    "pooled_head",
]

# transformers' name of each activation keras-hub's encoders use (the tanh gelu is keras-hub's gelu_approximate)
ACTIVATIONS = {"gelu_approximate": "gelu_new", "gelu": "gelu", "relu": "relu"}


def encoder_config(
    m: HubSource, layer_name: str = "transformer_layer_0", vocabulary: str = "vocabulary_size"
) -> dict[str, Any]:
    """config.json's sizes of a BERT-like encoder (BERT, RoBERTa, ELECTRA, ALBERT) from the converted model:
    its first encoder layer ``layer_name``'s settings, its vocabulary's size under the argument ``vocabulary``."""
    layer = m.spec(layer_name)
    if layer.get("normalize_first"):
        m.refuse("its encoder layers normalise first; transformers' BERT layers normalise after")
    activation = ACTIVATIONS.get(str(layer.get("activation")))
    if activation is None:
        m.refuse(f"its encoder layers' activation {layer.get('activation')!r} has no transformers name here")
    dropout = float(layer.get("dropout", 0.0))
    return {
        "vocab_size": m.size(vocabulary),
        "hidden_size": m.size("hidden_dim"),
        "num_hidden_layers": m.size("num_layers"),
        "num_attention_heads": m.size("num_heads"),
        "intermediate_size": m.size("intermediate_dim"),
        "hidden_act": activation,
        "hidden_dropout_prob": dropout,
        "attention_probs_dropout_prob": dropout,
        "layer_norm_eps": float(layer["layer_norm_epsilon"]),
        "position_embedding_type": "absolute",
    }


def labels(m: HubSource, layer: str = "logits") -> dict[str, Any]:
    """``id2label`` / ``label2id`` of a classifier of as many classes as its ``layer`` has units: the labels
    ``attnzoo train`` fine-tuned it on where the model carries them (one per output, distinct), else
    transformers' ``LABEL_i``."""
    count = int(m.spec(layer, task=True)["units"])
    learnt = m.class_names if len(m.class_names) == count == len(set(m.class_names)) else ()
    names = {str(i): learnt[i] if learnt else f"LABEL_{i}" for i in range(count)}
    return {"id2label": names, "label2id": {name: int(i) for i, name in names.items()}}


def pooled_head(m: HubSource, activation: str, transformers_class: str, dropouts: tuple[str, ...]) -> float:
    """Check a first-token classifier's ``pooled_dense`` (``activation``, as wide as the backbone: transformers'
    head is [D, D]) and its linear ``logits``; returns the rate its ``dropouts`` share (transformers' head has
    one)."""
    dense, hidden = m.spec("pooled_dense", task=True), m.size("hidden_dim")
    if int(dense["units"]) != hidden:
        m.refuse(
            f"its pooled_dense has {dense['units']} units (the classifier's hidden_dim), and transformers' "
            f"{transformers_class} pools to the backbone's width, {hidden}"
        )
    if dense.get("activation") != activation:
        m.refuse(f"its pooled_dense applies {dense.get('activation')!r}; transformers' applies {activation}")
    m.dense_is_linear("logits", transformers_class)
    rates = {m.rate(name, task=True) for name in dropouts}
    if len(rates) > 1:
        m.refuse(f"its dropouts {', '.join(dropouts)} differ ({sorted(rates)}); transformers' head has one rate")
    return rates.pop()


# transformers' BertLayer's modules and keras-hub's TransformerEncoder node's, in pairs
BERT_LAYER = (
    *((f"attention.self.{n}", f"attention.{n}") for n in ("query", "key", "value")),
    ("attention.output.dense", "attention.output"),
    ("attention.output.LayerNorm", "attention_norm"),
    ("intermediate.dense", "intermediate"),
    ("output.dense", "output_dense"),
    ("output.LayerNorm", "feedforward_norm"),
)


def layer_tensors(m: HubSource, layer: str, to: str, pairs: tuple[tuple[str, str], ...]) -> Tensors:
    """The weights and biases of the converted layer ``layer``'s modules (``pairs``: (transformers' module,
    the node's)) under ``to`` (``nn.Linear`` weights [out, in] in both)."""
    for theirs, ours in pairs:
        for name in ("weight", "bias"):
            yield f"{to}{theirs}.{name}", m.tensor(f"{layer}.{ours}.{name}")


def encoder_tensors(m: HubSource, i: int, to: str) -> Tensors:
    """keras-hub's ``TransformerEncoder`` ``transformer_layer_<i>`` as transformers' ``BertLayer`` at ``to``."""
    yield from layer_tensors(m, f"transformer_layer_{i}", to, BERT_LAYER)


def embedding_tensors(m: HubSource, base: str) -> Tensors:
    """BERT's summed embeddings and their layer norm (ELECTRA's, ALBERT's and FNet's too) as transformers'
    ``embeddings`` under ``base``."""
    yield f"{base}embeddings.word_embeddings.weight", m.tensor("token_embedding.weight")
    yield f"{base}embeddings.position_embeddings.weight", m.tensor("position_embedding.position")
    yield f"{base}embeddings.token_type_embeddings.weight", m.tensor("segment_embedding.weight")
    yield f"{base}embeddings.LayerNorm.weight", m.tensor("embeddings_layer_norm.weight")
    yield f"{base}embeddings.LayerNorm.bias", m.tensor("embeddings_layer_norm.bias")


def _bert_config(m: HubSource) -> dict[str, Any]:
    config = {
        **encoder_config(m),
        "max_position_embeddings": m.size("max_sequence_length", 512),
        "type_vocab_size": m.size("num_segments", 2),
        "pad_token_id": m.special.get("pad_token_id", 0),  # keras-hub's BERT vocabularies' [PAD]
    }
    if m.kind == "task":
        m.dense_is_linear("logits", "BertForSequenceClassification")
        config |= {"classifier_dropout": m.rate("classifier_dropout", task=True), **labels(m)}
    return config


def _bert_tensors(m: HubSource) -> Tensors:
    base = "bert." if m.kind == "task" else ""
    yield from embedding_tensors(m, base)
    for i in range(m.size("num_layers")):
        yield from encoder_tensors(m, i, f"{base}encoder.layer.{i}.")
    yield f"{base}pooler.dense.weight", m.tensor("pooled_dense.weight")
    yield f"{base}pooler.dense.bias", m.tensor("pooled_dense.bias")
    if m.kind == "task":
        yield "classifier.weight", m.tensor("logits.weight", task=True)
        yield "classifier.bias", m.tensor("logits.bias", task=True)


BERT = TransformersForm(
    "bert", {"backbone": "BertModel", "task": "BertForSequenceClassification"}, _bert_config, _bert_tensors
)


def bert_classifier_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``BertTextClassifier``: the backbone's inputs -> its ``pooled_output`` (the first of its outputs by
    sorted key) -> dropout -> ``Dense(num_classes, activation)`` named ``logits``."""
    g = HubGraph(config.get("dtype"))
    backbone = task_backbone(g, config, where, ("token_ids", "segment_ids", "padding_mask"))
    return classifier_head(g, backbone, config, where, "classifier_dropout")


def bert_embeddings(g: HubGraph, config: dict[str, Any], where: str, vocabulary: int, width: int) -> Inputs:
    """BERT's inputs and embeddings (ELECTRA's and ALBERT's too, ``width`` their ``embedding_dim``): token
    ids, segment ids, padding mask -> :func:`summed_embeddings` -> layer norm (ε 1e-12) and dropout. Returns
    the inputs by name and the embeddings [B, T, width]."""
    tokens, segments, padding = g.input("token_ids"), g.input("segment_ids"), g.input("padding_mask")
    x = summed_embeddings(g, config, where, (vocabulary, width, 2))
    inputs = {"token_ids": tokens, "segment_ids": segments, "padding_mask": padding}
    return inputs, norm_and_dropout(g, x, 1e-12, config, where)


def summed_embeddings(g: HubGraph, config: dict[str, Any], where: str, sizes: tuple[int, int, int]) -> str:
    """``token_embedding`` (tied ``ReversibleEmbedding``, ``vocabulary`` x ``width``) of the ``token_ids``
    input + ``position_embedding`` + ``segment_embedding`` of ``segment_ids`` (``num_segments`` rows, else
    the default), added: ``sizes`` is (vocabulary, width, default number of segments)."""
    vocabulary, width, segments = sizes
    embedding = {"input_dim": vocabulary, "output_dim": width, "tie_weights": True, "mask_zero": False}
    t = g.layer("ReversibleEmbedding", "token_embedding", embedding, [tensor("token_ids")])
    p = position_embedding(g, t, positive(config, "max_sequence_length", where, 512))
    rows = positive(config, "num_segments", where, segments)
    s = g.layer(
        "Embedding",
        "segment_embedding",
        {"input_dim": rows, "output_dim": width, "mask_zero": False},
        [tensor("segment_ids")],
    )
    return g.layer("Add", "embeddings_add", {}, [[tensor(t), tensor(p), tensor(s)]])


def pooled_outputs(g: HubGraph, config: dict[str, Any], inputs: dict[str, str], sequence: Tensor, name: str) -> Any:
    """The backbone's record with outputs ``sequence_output`` and ``pooled_output = tanh(pooled_dense(
    sequence[:, 0, :]))`` (BERT, ELECTRA, ALBERT)."""
    hidden = int(config["hidden_dim"])
    pooled = g.layer(
        "Dense", "pooled_dense", {"units": hidden, "activation": "tanh"}, [tensor(first_token(g, sequence))]
    )
    outputs = {"sequence_output": sequence, "pooled_output": pooled}
    return g.functional(str(config.get("name", name)), inputs, outputs)


@keras_hub_model("BertBackbone", family="bert", tasks={"BertTextClassifier": bert_classifier_graph}, transformers=BERT)
def bert_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    g = HubGraph(config.get("dtype"))
    vocabulary, hidden = positive(config, "vocabulary_size", where), positive(config, "hidden_dim", where)
    inputs, x = bert_embeddings(g, config, where, vocabulary, hidden)
    sequence = transformer_blocks(g, x, config, where, GELU_TANH, 1e-12)
    return pooled_outputs(g, config, inputs, sequence, "bert_backbone")


keras_hub_task(
    "BertMaskedLM",
    masked_lm_graph(("BertBackbone",), bert_graph, "gelu"),
    family="bert",
    backbone="BertBackbone",
    refusal="transformers' BertForMaskedLM head applies the encoder's activation and epsilon, keras-hub's "
    "MaskedLMHead the exact gelu and 1e-5",
)
