"""keras-hub's DeBERTa-v3 family: ``DebertaV3Backbone`` and ``DebertaV3TextClassifier``, rebuilt from their
arguments, and their layers converted without keras-hub: ``RelativeEmbedding`` and
``DisentangledAttentionEncoder``.

* ``RelativeEmbedding`` (:class:`HubRelativeEmbedding`): a table of 2k rows (k = ``bucket_size``) [2k, D],
  layer-normalised (ε 1e-7), the same for every sequence of the batch: x [B, T, D] -> [B, 2k, D].
* ``DisentangledAttentionEncoder`` (:class:`HubDisentangledEncoder`): post-norm, as keras-hub's
  ``TransformerEncoder`` (attention + residual -> layer norm -> ``Dense(intermediate_dim, gelu)`` ->
  ``Dense(D)`` + residual -> layer norm), its attention disentangled. With q, k, v [B, h, T, d] the
  projections of x, and pq, pk [B, h, 2k, d] those of the relative embedding (the same query and key
  projections), the score of query i for key j is

      s(i, j) = (q_i · k_j + q_i · pk[δ(i, j)] + k_j · pq[δ(i, j)]) / sqrt(3 d),
      δ(i, j) = clip(bucket(i - j) + k, 0, 2k - 1)

  (content to content, content to position c2p, position to content p2c), softmax over the keys the
  padding mask keeps (Keras's ``Softmax`` with a mask: a row with no key gets zeros), times v, through the
  output projection. ``bucket(r)`` (:func:`~attnzoo.layers.positions.log_buckets`; δ is
  :func:`~attnzoo.layers.positions.relative_indices`) is r itself for |r| <= m = k // 2 and beyond that
  ``sign(r) · (m + ceil(log(|r| / m) · (m - 1) / log((P - 1) / m)))``, P the ``max_sequence_length``:
  distances past m share logarithmically wider buckets.
* ``DebertaV3Backbone``: token ids, padding mask -> ``token_embedding`` (a ``ReversibleEmbedding``) -> layer
  norm (ε 1e-7) and dropout -> ``rel_embedding`` -> ``num_layers`` encoder layers
  ``disentangled_attention_encoder_layer_<i>``, each given the relative embedding and the padding mask ->
  [B, T, D].
* ``DebertaV3TextClassifier``: the backbone's state at the first token -> ``pooled_dropout`` ->
  ``pooled_dense`` (``hidden_dim`` units, exact gelu) -> ``classifier_dropout`` -> ``logits``.

Hugging Face form (:data:`DEBERTA_V2`): ``DebertaV2Model`` and ``DebertaV2ForSequenceClassification``
(transformers' DeBERTa-v2 is v3's architecture): ``relative_attention`` with ``position_buckets`` k,
``max_relative_positions`` P, both disentangled terms (``pos_att_type`` ``p2c|c2p``) through the shared
query and key projections (``share_att_key``), the relative table layer-normalised (``norm_rel_ebd``), no
absolute positions, no segments, ε 1e-7; the classifier's pooler is ``pooled_dense`` and its gelu.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from attnzoo.errors import WeightsError
from attnzoo.keras.arguments import activation_of, as_tensor, expect_variables
from attnzoo.keras.converters.hub_bert import labels, pooled_head
from attnzoo.keras.converters.hub_layers import HubBlock, dense_state, merge_masks, norm_state
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import HubGraph, first_token_classifier, norm_and_dropout, number, positive, tensor
from attnzoo.keras.nodes import Node, build_node
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm
from attnzoo.layers.attend import keras_attention
from attnzoo.layers.disentangled import relative_terms

__all__ = [
    "HubRelativeEmbedding",
    "HubDisentangledEncoder",
    "deberta_v3_graph",
    "DEBERTA_V2",
]

EPSILON = 1e-7  # every layer norm of keras-hub's DeBERTa-v3 backbone, fixed
_MODULE = "keras_hub.src.models.deberta_v3."


def _check_buckets(buckets: int, why: str) -> None:
    if buckets < 2:
        raise Refused(f"bucket_size {buckets}: keras-hub's log buckets divide by bucket_size // 2 = 0 ({why})")


class HubRelativeEmbedding(Node):
    """keras-hub's DeBERTa-v3 ``RelativeEmbedding``: the layer-normalised table [2k, D], repeated over the
    batch of its input x [B, T, D] -> [B, 2k, D]."""

    op = "keras_hub_relative_embedding"

    def __init__(self, *, buckets: int, hidden: int, epsilon: float = EPSILON) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.zeros(2 * buckets, hidden))
        norm = {"op": "layer_norm", "axis": [-1], "shape": [hidden], "epsilon": epsilon}
        self.norm = build_node({**norm, "center": True, "scale": True})

    def forward(self, args, kwargs, masks):
        x = args[0]
        (table,), _ = self.norm([self.table[None]], {}, [None])
        return [table.to(x.dtype).expand(x.shape[0], -1, -1)], [None]


class HubDisentangledEncoder(HubBlock):
    """keras-hub's ``DisentangledAttentionEncoder`` (the module docstring has the formula): x [B, T, D],
    ``rel_embeddings`` [B, 2k, D], ``padding_mask`` [B, T] (and an ``attention_mask`` [B, T, T]) -> [B, T, D].
    The output keeps the input's mask."""

    op = "keras_hub_disentangled_attention_encoder"
    supports_masking = True

    def __init__(
        self,
        *,
        hidden: int,
        intermediate_dim: int,
        num_heads: int,
        buckets: int,
        max_positions: int,
        activation: str = "gelu",
        layer_norm_epsilon: float = EPSILON,
    ) -> None:
        super().__init__()
        self.normalize_first = False
        self.heads, self.head_dim, self.buckets, self.max_positions = (
            num_heads,
            hidden // num_heads,
            buckets,
            max_positions,
        )
        self.query, self.key, self.value = (
            nn.Linear(hidden, hidden),
            nn.Linear(hidden, hidden),
            nn.Linear(hidden, hidden),
        )
        self.attention_output = nn.Linear(hidden, hidden)
        self._build(hidden, intermediate_dim, activation, layer_norm_epsilon, ["attention_norm", "feedforward_norm"])

    def _split(self, x: Tensor) -> Tensor:
        """[B, L, h·d] -> [B, h, L, d]."""
        return x.view(x.shape[0], x.shape[1], self.heads, self.head_dim).transpose(1, 2)

    def attention(self, x: Tensor, relative: Tensor, allowed: Tensor | None) -> Tensor:
        """The disentangled self-attention of x [B, T, D] -> [B, T, D] (``relative`` [B, 2k, D], ``allowed``
        [B, 1, 1 or T, T])."""
        q, k, v = (self._split(part(x)) for part in (self.query, self.key, self.value))
        if relative.shape[0] > 1 and relative.stride(0) == 0:
            relative = relative[:1]  # one table expanded over the batch (RelativeEmbedding's): projected once
        pq, pk = self._split(self.query(relative)), self._split(self.key(relative))  # [B or 1, h, 2k, d]
        scale = 1.0 / math.sqrt(3 * self.head_dim)
        bias = relative_terms(q, k, pq, pk, self.buckets, self.max_positions) * scale  # the zoo's disentangled
        out = keras_attention(q, k, v, allowed, scale=scale, bias=bias, empty="zeros")
        return self.attention_output(out.transpose(1, 2).reshape(x.shape))

    def forward(self, args, kwargs, masks):
        x, mask = args[0], (masks[0] if masks else None)
        relative = kwargs.get("rel_embeddings")
        if not isinstance(relative, Tensor):
            raise ValueError("a DisentangledAttentionEncoder takes rel_embeddings, the relative table [B, 2k, D]")
        merged = merge_masks(mask, kwargs.get("padding_mask"), kwargs.get("attention_mask"))  # [B, 1 or T, T]
        x = self._norm("attention_norm", x + self.attention(x, relative, None if merged is None else merged[:, None]))
        return [self._feedforward(x)], [mask]


@keras_layer("RelativeEmbedding", package="keras_hub", positional=("inputs",))
def convert_relative_embedding(record, arrays, ctx):
    expect_variables(arrays, 3, "RelativeEmbedding (its table, a layer norm)")
    rows, hidden = (int(n) for n in arrays[0].shape)
    buckets = record.config.get("bucket_size")
    if buckets != rows // 2 or rows % 2:
        raise Refused(f"its table has {rows} rows; a bucket_size of {buckets!r} makes 2 x bucket_size")
    spec = {"op": HubRelativeEmbedding.op, "buckets": buckets, "hidden": hidden}
    spec["epsilon"] = float(record.config.get("layer_norm_epsilon", 1e-5))
    state = {"table": as_tensor(arrays[0]), **norm_state(arrays[1:3], "norm")}
    return Converted(spec, state, ["keras-hub RelativeEmbedding: its layer-normalised table"])


_ATTENTION = ("_query_dense", "_key_dense", "_value_dense", "_output_dense")
_ENCODER_ORDER = (
    "_self_attention_layer",
    *(f"_self_attention_layer/{name}" for name in _ATTENTION),
    "_self_attention_layer_norm",
    "_feedforward_intermediate_dense",
    "_feedforward_output_dense",
    "_feedforward_layer_norm",
)


@keras_layer(
    "DisentangledAttentionEncoder",
    package="keras_hub",
    call_arguments=("rel_embeddings", "padding_mask", "attention_mask"),
    child_order=_ENCODER_ORDER,
    positional=("inputs",),
)
def convert_disentangled_encoder(record, arrays, ctx):
    expect_variables(arrays, 16, "DisentangledAttentionEncoder (4 attention projections, 2 denses, 2 norms)")
    c = record.config
    hidden, heads, head_dim = (int(n) for n in arrays[0].shape)
    if c.get("num_heads") != heads or heads * head_dim != hidden:
        raise Refused(
            f"its query kernel {list(arrays[0].shape)} is not num_heads {c.get('num_heads')!r} heads of {hidden}"
        )
    for key in ("bucket_size", "max_position_embeddings"):
        if not isinstance(c.get(key), int) or isinstance(c.get(key), bool) or c[key] < 1:
            raise Refused(f"its {key} {c.get(key)!r} is not a positive int")
    _check_buckets(c["bucket_size"], "this DisentangledAttentionEncoder's")
    state: dict[str, Tensor] = {}
    for i, name in enumerate(("query", "key", "value")):
        kernel, bias = arrays[2 * i], arrays[2 * i + 1]
        state |= dense_state(kernel.reshape(hidden, hidden), bias.reshape(hidden), name)
    state |= dense_state(arrays[6], arrays[7], "attention_output") | norm_state(arrays[8:10], "attention_norm")
    state |= dense_state(arrays[10], arrays[11], "intermediate") | dense_state(arrays[12], arrays[13], "output_dense")
    state |= norm_state(arrays[14:16], "feedforward_norm")
    spec = {
        "op": HubDisentangledEncoder.op,
        "hidden": hidden,
        "intermediate_dim": int(arrays[10].shape[1]),
        "num_heads": heads,
        "buckets": c["bucket_size"],
        "max_positions": c["max_position_embeddings"],
        "activation": activation_of(c, "activation", ctx, "relu"),
        "layer_norm_epsilon": float(c.get("layer_norm_epsilon", 1e-5)),
    }
    return Converted(spec, state, ["keras-hub DisentangledAttentionEncoder: c2p and p2c relative attention"])


# transformers' name of each activation keras-hub's encoder layers may hold
_ACTIVATIONS = {"gelu": "gelu", "gelu_approximate": "gelu_new", "relu": "relu"}


def _deberta_config(m: HubSource) -> dict[str, Any]:
    layer, table = m.spec("disentangled_attention_encoder_layer_0"), m.spec("rel_embedding")
    activation = _ACTIVATIONS.get(str(layer.get("activation")))
    if activation is None:
        m.refuse(f"its encoder layers' activation {layer.get('activation')!r} has no transformers name here")
    epsilon = float(layer["layer_norm_epsilon"])
    if float(table["epsilon"]) != epsilon:
        m.refuse(f"its relative table's layer norm ε {table['epsilon']} differs from its layers' {epsilon}")
    dropout = float(m.arguments.get("dropout", 0.1) or 0.0)
    config = {
        "vocab_size": m.size("vocabulary_size"),
        "hidden_size": m.size("hidden_dim"),
        "num_hidden_layers": m.size("num_layers"),
        "num_attention_heads": m.size("num_heads"),
        "intermediate_size": m.size("intermediate_dim"),
        "hidden_act": activation,
        "hidden_dropout_prob": dropout,
        "attention_probs_dropout_prob": dropout,
        "layer_norm_eps": epsilon,
        "max_position_embeddings": int(layer["max_positions"]),
        "type_vocab_size": 0,
        "position_biased_input": False,
        "relative_attention": True,
        "position_buckets": int(layer["buckets"]),
        "max_relative_positions": int(layer["max_positions"]),
        "pos_att_type": ["p2c", "c2p"],
        "share_att_key": True,
        "norm_rel_ebd": "layer_norm",
        "pad_token_id": m.special.get("pad_token_id", 0),  # keras-hub's DeBERTa-v3 vocabularies' [PAD]
    }
    if m.kind == "task":
        pooler = pooled_head(m, "gelu", "DebertaV2ForSequenceClassification", ("pooled_dropout",))
        config |= {"pooler_hidden_size": m.size("hidden_dim"), "pooler_hidden_act": "gelu"}
        config |= {"pooler_dropout": pooler, "cls_dropout": m.rate("output_dropout", task=True), **labels(m)}
    return config


def _deberta_tensors(m: HubSource) -> Tensors:
    base = "deberta." if m.kind == "task" else ""
    yield f"{base}embeddings.word_embeddings.weight", m.tensor("token_embedding.weight")
    for name in ("weight", "bias"):
        yield f"{base}embeddings.LayerNorm.{name}", m.tensor(f"embeddings_layer_norm.{name}")
        yield f"{base}encoder.LayerNorm.{name}", m.tensor(f"rel_embedding.norm.{name}")
    yield f"{base}encoder.rel_embeddings.weight", m.tensor("rel_embedding.table")
    pairs = [(f"attention.self.{n}_proj", n) for n in ("query", "key", "value")]
    pairs += [("attention.output.dense", "attention_output"), ("attention.output.LayerNorm", "attention_norm")]
    pairs += [("intermediate.dense", "intermediate"), ("output.dense", "output_dense")]
    pairs += [("output.LayerNorm", "feedforward_norm")]
    for i in range(m.size("num_layers")):
        for theirs, ours in pairs:
            for name in ("weight", "bias"):
                at = f"disentangled_attention_encoder_layer_{i}.{ours}.{name}"
                yield f"{base}encoder.layer.{i}.{theirs}.{name}", m.tensor(at)
    if m.kind == "task":
        for name in ("weight", "bias"):
            yield f"pooler.dense.{name}", m.tensor(f"pooled_dense.{name}", task=True)
            yield f"classifier.{name}", m.tensor(f"logits.{name}", task=True)


DEBERTA_V2 = TransformersForm(
    "deberta-v2",
    {"backbone": "DebertaV2Model", "task": "DebertaV2ForSequenceClassification"},
    _deberta_config,
    _deberta_tensors,
)


@keras_hub_model(
    "DebertaV3Backbone",
    family="deberta_v3",
    tasks={"DebertaV3TextClassifier": first_token_classifier(True, "gelu")},
    transformers=DEBERTA_V2,
)
def deberta_v3_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    g = HubGraph(config.get("dtype"))
    tokens, padding = g.input("token_ids"), g.input("padding_mask")
    hidden, heads = positive(config, "hidden_dim", where), positive(config, "num_heads", where)
    if hidden % heads:
        raise WeightsError(f"{where}: hidden_dim {hidden} is not a multiple of num_heads {heads}")
    buckets = positive(config, "bucket_size", where, 256)
    if buckets < 2:
        raise WeightsError(f"{where}: bucket_size {buckets}; keras-hub's log buckets divide by bucket_size // 2 = 0")
    table = {"input_dim": positive(config, "vocabulary_size", where), "output_dim": hidden, "tie_weights": True}
    x = g.layer("ReversibleEmbedding", "token_embedding", {**table, "mask_zero": False}, [tensor(tokens)])
    x = norm_and_dropout(g, x, EPSILON, config, where)
    relative = {"hidden_dim": hidden, "bucket_size": buckets, "layer_norm_epsilon": EPSILON}
    relative_embedding = _MODULE + "relative_embedding"
    rel = g.hub_layer("RelativeEmbedding", "rel_embedding", relative, [tensor(x)], relative_embedding)
    settings = {
        "num_heads": heads,
        "intermediate_dim": positive(config, "intermediate_dim", where),
        "max_position_embeddings": positive(config, "max_sequence_length", where, 512),
        "bucket_size": buckets,
        "dropout": number(config, "dropout", where, 0.1),
        "activation": "gelu",
        "layer_norm_epsilon": EPSILON,
    }
    module, given = _MODULE + "disentangled_attention_encoder", {"rel_embeddings": tensor(rel)}
    for i in range(positive(config, "num_layers", where)):
        name = f"disentangled_attention_encoder_layer_{i}"
        x = g.hub_layer(
            "DisentangledAttentionEncoder", name, settings, [tensor(x)], module, **given, padding_mask=tensor(padding)
        )
    return g.functional(
        str(config.get("name", "deberta_v3_backbone")), {"token_ids": tokens, "padding_mask": padding}, x
    )
