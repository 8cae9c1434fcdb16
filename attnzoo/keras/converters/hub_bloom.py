"""keras-hub's BLOOM family: ``BloomBackbone`` and ``BloomCausalLM`` rebuilt from their arguments
(:func:`bloom_graph`), and its layer converted without keras-hub: ``BloomDecoder``.

* ``BloomBackbone``: token ids, padding mask -> ``token_embedding`` (tied ``ReversibleEmbedding``) ->
  ``embedding_layernorm`` -> ``num_layers`` ``BloomDecoder`` layers (masked by ``padding_mask`` as
  ``decoder_padding_mask``) -> ``final_layernorm`` -> [B, T, D]. ``BloomCausalLM``: then the embedding's
  reverse call for the logits.
* ``BloomDecoder``: x [B, T, D] -> ``h = x + Wo · attention(ln₁(x)) + bo``, then
  ``h + W₂ · gelu_tanh(W₁ · ln₂(h) + b₁) + b₂`` [B, T, D]. The attention has H heads of d = D / H, query, key
  and value each a biased projection, scores ``q kᵀ / √d + m_h · (j - (S - 1))`` (ALiBi: keras-hub's
  ``AlibiBias``, the slope ``m_h`` of head h times key j's distance before the last of the S keys), masked
  causally and by the padding, softmax in float32. A query row with no key (a left-padded position) weighs
  nothing: keras's ``Softmax`` layer zeroes it, so its attention is the output projection's bias alone.

:class:`HubClassicDecoder` is what keras-hub's Bloom, Falcon (:mod:`.hub_falcon`) and GPT-NeoX
(:mod:`.hub_gpt_neox`) decoders share: Keras's layer norm (computed in float32 at least), the heads'
layout, the causal mask with the padding and ``decoder_attention_mask``, and the cache. It takes part in
cached decoding (:mod:`attnzoo.keras.decoding`) through one method, :meth:`HubClassicDecoder._cached`: given
the model's :class:`~attnzoo.layers.kv_cache.DecodingCache`, a call's tokens are the positions after the
cached ones, whose keys and values it appends to its :class:`~attnzoo.layers.kv_cache.KVCache` there. ALiBi
needs no position of its own: the bias depends on the distance to the last key, and a softmax is the same
for a bias moved by a constant.

Hugging Face form (:data:`BLOOM`): ``BloomModel`` and ``BloomForCausalLM`` (its head tied to
``word_embeddings``). transformers' BLOOM is this layer: the same slopes, the scores ``q kᵀ / √d + alibi``
whose positions it counts over the tokens ``attention_mask`` keeps (for a right-padded batch, keras-hub's up
to a constant a row's softmax ignores), the tanh gelu. Its ``query_key_value`` [3D, D] holds each head's
query, key and value rows side by side (:func:`fused_heads`). Its MLP is 4 x ``hidden_dim`` wide, always:
a keras-hub BLOOM of another ``intermediate_dim`` is refused.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.errors import WeightsError
from attnzoo.keras.arguments import as_tensor, expect_variables
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import HubGraph, number, positive, tensor
from attnzoo.keras.nodes import Node
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm
from attnzoo.layers.attend import causal_allowed, keras_attention
from attnzoo.layers.kv_cache import KVCache
from attnzoo.layers.positions import alibi_slopes

__all__ = [
    "HubClassicDecoder",
    "HubBloomDecoder",
    "attention_state",
    "norm_and_feedforward",
    "fused_heads",
    "bloom_layer_tensors",
    "tied_embedding",
    "decoder_stack",
    "decoder_graph",
    "bloom_graph",
    "BLOOM",
]


class HubClassicDecoder(Node):
    """The pieces keras-hub's Bloom, Falcon and GPT-NeoX decoder layers share (the module docstring): a
    subclass builds its weights and computes its call with these."""

    supports_masking = True
    decodes = True

    def _cached(self, kv: KVCache | None, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """The call's keys and values [B, g, t, d] after the ones cached before them (appended to ``kv``, this
        layer's cache, while decoding) -> keys, values [B, g, S, d]."""
        if kv is None:
            return key, value
        key, value, _ = kv.append(key, value)
        return key, value

    # -- what every call computes ----------------------------------------------------------------------------
    @staticmethod
    def _norm(norm: nn.LayerNorm, x: Tensor) -> Tensor:
        """Keras's ``LayerNormalization``: in float32 at least, returned in x's dtype."""
        work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        weight, bias = norm.weight.to(work.dtype), norm.bias.to(work.dtype)
        return F.layer_norm(work, norm.normalized_shape, weight, bias, norm.eps).to(x.dtype)

    def _allowed(self, t: int, s: int, kwargs: dict[str, Any], device: Any, decoding: bool) -> Tensor:
        """Which of the S keys each of the call's t queries reads: causally, not the padded keys (no padding
        while ``decoding``: the calls carry none), and where ``decoder_attention_mask`` [B, t, S] allows."""
        padding = None if decoding else kwargs.get("decoder_padding_mask")
        allowed = causal_allowed(t, s, padding=padding, device=device)
        given = kwargs.get("decoder_attention_mask")
        if given is not None:
            if decoding:
                raise ValueError("decodes with a cache without decoder_attention_mask only")
            allowed = allowed & given.to(torch.bool)[:, None]
        return allowed

    def _heads(self, x: Tensor, heads: int) -> Tensor:
        b, t, _ = x.shape
        return x.reshape(b, t, heads, -1).transpose(1, 2)

    @staticmethod
    def _merge(out: Tensor) -> Tensor:
        b, h, t, d = out.shape
        return out.transpose(1, 2).reshape(b, t, h * d)


class HubBloomDecoder(HubClassicDecoder):
    """``keras_hub``'s ``BloomDecoder`` (the module docstring has the formula): x [B, T, D] -> [B, T, D]; the
    output keeps the input's mask."""

    op = "keras_hub_bloom_decoder"

    def __init__(
        self,
        *,
        hidden: int,
        intermediate_dim: int,
        num_heads: int,
        layer_norm_epsilon: float,
        dropout: float = 0.0,
        feedforward_dropout: float | None = None,
    ) -> None:
        super().__init__()
        self.heads, self.dropout = num_heads, dropout
        # the MLP's output's rate: BLOOM's is its dropout, Falcon's its own
        self.feedforward_dropout = dropout if feedforward_dropout is None else feedforward_dropout
        self.attention_norm = nn.LayerNorm(hidden, eps=layer_norm_epsilon)
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.output_dense = nn.Linear(hidden, hidden)
        self.feedforward_norm = nn.LayerNorm(hidden, eps=layer_norm_epsilon)
        self.intermediate = nn.Linear(hidden, intermediate_dim)
        self.output = nn.Linear(intermediate_dim, hidden)

    def _activation(self, x: Tensor) -> Tensor:
        return F.gelu(x, approximate="tanh")

    def _scores(self, q: Tensor, kwargs: dict[str, Any], s: int, decoding: bool) -> tuple[float, Tensor]:
        """(the scale of ``q kᵀ``, the ALiBi bias [1, H, 1, S]): ``m_h · (j - (S - 1))``, keras-hub's AlibiBias."""
        distance = torch.arange(1 - s, 1, device=q.device, dtype=torch.float32)
        bias = alibi_slopes(self.heads).to(q.device)[:, None] * distance
        return q.shape[-1] ** -0.5, bias[None, :, None, :].to(q.dtype)

    def _attend(self, x: Tensor, kwargs: dict[str, Any]) -> Tensor:
        t, kv = x.shape[1], self.keys_values(kwargs, x.shape[0])
        q = self._heads(self.query(x), self.heads)
        k, v = self._cached(kv, self._heads(self.key(x), self.heads), self._heads(self.value(x), self.heads))
        allowed = self._allowed(t, k.shape[-2], kwargs, x.device, kv is not None)
        scale, bias = self._scores(q, kwargs, k.shape[-2], kv is not None)
        training = self.dropout if self.training else 0.0
        out = keras_attention(q, k, v, allowed, scale=scale, bias=bias, empty="zeros", dropout=training)
        return F.dropout(self.output_dense(self._merge(out)), self.dropout, self.training)

    def forward(self, args, kwargs, masks):
        x = args[0]
        h = self._attend(self._norm(self.attention_norm, x), kwargs) + x
        y = self.output(self._activation(self.intermediate(self._norm(self.feedforward_norm, h))))
        return [F.dropout(y, self.feedforward_dropout, self.training) + h], [masks[0]]


def attention_state(arrays: list[Any], hidden: int, what: str) -> dict[str, Tensor]:
    """The query, key, value and output projections of a keras-hub attention (kernels [D, H, d] with biases
    [H, d], an output Dense [D, D] with its bias, in that order) as ``nn.Linear`` weights; refused where the
    shapes are not one attention's of width ``hidden``."""
    shapes = [tuple(a.shape) for a in arrays]
    heads = shapes[0][1] if len(shapes[0]) == 3 else 0
    projection = [(hidden, heads, hidden // max(heads, 1)), (heads, hidden // max(heads, 1))]
    if heads < 1 or shapes != [*projection * 3, (hidden, hidden), (hidden,)]:
        raise Refused(f"{what}'s attention variables {[list(s) for s in shapes]} are not one of width {hidden}")
    state = {}
    for i, name in enumerate(("query", "key", "value")):
        state[f"{name}.weight"] = as_tensor(arrays[2 * i].reshape(hidden, hidden).T)
        state[f"{name}.bias"] = as_tensor(arrays[2 * i + 1].reshape(hidden))
    state["output_dense.weight"], state["output_dense.bias"] = as_tensor(arrays[6].T), as_tensor(arrays[7])
    return state


def norm_and_feedforward(arrays: list[Any], first: str, second: str) -> dict[str, Tensor]:
    """Two LayerNormalizations' (γ, β) and two Dense (kernel, bias) in the order ``first`` norm, ``second``
    norm, ``intermediate``, ``output`` -> their torch weights (``first`` and ``second`` name the norms)."""
    return {
        f"{first}.weight": as_tensor(arrays[0]),
        f"{first}.bias": as_tensor(arrays[1]),
        f"{second}.weight": as_tensor(arrays[2]),
        f"{second}.bias": as_tensor(arrays[3]),
        "intermediate.weight": as_tensor(arrays[4].T),
        "intermediate.bias": as_tensor(arrays[5]),
        "output.weight": as_tensor(arrays[6].T),
        "output.bias": as_tensor(arrays[7]),
    }


_ATTENTION = "_self_attention_layer"
_BLOOM_ORDER = (
    "_pre_attention_layernorm",
    _ATTENTION,
    f"{_ATTENTION}/_query_dense",
    f"{_ATTENTION}/_key_dense",
    f"{_ATTENTION}/_value_dense",
    f"{_ATTENTION}/_output_dense",
    "_post_attention_layernorm",
    "_mlp_intermediate_dense",
    "_mlp_output_dense",
)


@keras_layer(
    "BloomDecoder",
    package="keras_hub",
    call_arguments=("decoder_padding_mask", "decoder_attention_mask"),
    child_order=_BLOOM_ORDER,
    positional=("decoder_sequence",),
)
def convert_bloom_decoder(record, arrays, ctx):
    expect_variables(arrays, 16, "BloomDecoder (2 layer norms, 4 attention projections, 2 feed-forward denses)")
    c = record.config
    heads = c.get("num_heads")
    hidden = int(arrays[0].shape[0])
    if not isinstance(heads, int) or heads < 1 or hidden % heads:
        raise Refused(f"num_heads {heads!r} does not divide the width {hidden}")
    state = {f"attention_norm.{k}": as_tensor(a) for k, a in zip(("weight", "bias"), arrays[:2], strict=True)}
    state |= attention_state(arrays[2:10], hidden, "BloomDecoder")
    state |= norm_and_feedforward([*arrays[:2], *arrays[10:]], "attention_norm", "feedforward_norm")
    spec = {
        "op": HubBloomDecoder.op,
        "hidden": hidden,
        "intermediate_dim": int(arrays[12].shape[1]),
        "num_heads": heads,
        "layer_norm_epsilon": float(c.get("layer_norm_epsilon", 1e-5)),
        "dropout": float(c.get("dropout", 0.0) or 0.0),
    }
    return Converted(spec, state, ["keras-hub BloomDecoder: layer norms, ALiBi attention, tanh-gelu MLP"])


# -- the family's Hugging Face form -------------------------------------------------------------------------
def fused_heads(m: HubSource, at: str, heads: int, kind: str) -> Tensor:
    """transformers' ``query_key_value`` ``kind`` (``"weight"`` [3D, D] or ``"bias"`` [3D]) of the layer ``at``
    (converted ``query``, ``key``, ``value`` of ``heads`` heads): head by head, its query, key and value rows."""
    parts = [m.tensor(f"{at}.{name}.{kind}") for name in ("query", "key", "value")]
    stacked = torch.stack([p.reshape(heads, -1, *p.shape[1:]) for p in parts], dim=1)  # [H, 3, d, (D)]
    return stacked.reshape(-1, *parts[0].shape[1:])


def _bloom_config(m: HubSource) -> dict[str, Any]:
    hidden, intermediate = m.size("hidden_dim"), m.size("intermediate_dim")
    if intermediate != 4 * hidden:
        m.refuse(
            f"its MLP is {intermediate} wide; transformers' BLOOM has an MLP of 4 x hidden_dim = {4 * hidden} only"
        )
    dropout = float(m.arguments.get("dropout") or 0.0)
    return {
        "vocab_size": m.size("vocabulary_size"),
        "hidden_size": hidden,
        "n_layer": m.size("num_layers"),
        "n_head": m.size("num_heads"),
        "layer_norm_epsilon": float(m.spec("final_layernorm")["epsilon"]),
        "apply_residual_connection_post_layernorm": False,
        "hidden_dropout": dropout,
        "attention_dropout": dropout,
        "tie_word_embeddings": True,
        **{key: m.special.get(key) for key in ("bos_token_id", "eos_token_id", "pad_token_id")},
    }


def bloom_layer_tensors(m: HubSource, base: str, heads: int) -> Tensors:
    """transformers' BLOOM-named layers (BLOOM's and Falcon-RW's): each decoder's layer norms, its query, key
    and value fused head by head, its output projection and MLP, then ``ln_f`` (the backbone's
    ``final_layernorm``), from the converted ``nn.Linear`` / ``nn.LayerNorm`` weights; ``base`` their prefix."""
    for i in range(m.size("num_layers")):
        at, to = f"transformer_layer_{i}", f"{base}h.{i}."
        for kind in ("weight", "bias"):
            yield f"{to}input_layernorm.{kind}", m.tensor(f"{at}.attention_norm.{kind}")
            yield f"{to}self_attention.query_key_value.{kind}", fused_heads(m, at, heads, kind)
            yield f"{to}self_attention.dense.{kind}", m.tensor(f"{at}.output_dense.{kind}")
            yield f"{to}post_attention_layernorm.{kind}", m.tensor(f"{at}.feedforward_norm.{kind}")
            yield f"{to}mlp.dense_h_to_4h.{kind}", m.tensor(f"{at}.intermediate.{kind}")
            yield f"{to}mlp.dense_4h_to_h.{kind}", m.tensor(f"{at}.output.{kind}")
    for kind in ("weight", "bias"):
        yield f"{base}ln_f.{kind}", m.tensor(f"final_layernorm.{kind}")


def _bloom_tensors(m: HubSource) -> Tensors:
    """transformers' BLOOM weights: the embeddings, their layer norm, then :func:`bloom_layer_tensors`."""
    base = "transformer." if m.kind == "causal_lm" else ""
    yield f"{base}word_embeddings.weight", m.tensor("token_embedding.weight")
    for kind in ("weight", "bias"):
        yield f"{base}word_embeddings_layernorm.{kind}", m.tensor(f"embedding_layernorm.{kind}")
    yield from bloom_layer_tensors(m, base, m.size("num_heads"))


BLOOM = TransformersForm(
    "bloom", {"backbone": "BloomModel", "causal_lm": "BloomForCausalLM"}, _bloom_config, _bloom_tensors
)


# -- the family's models -----------------------------------------------------------------------------------
def tied_embedding(g: HubGraph, config: dict[str, Any], where: str, heads: str) -> tuple[str, int]:
    """A decoder-only backbone's inputs ``token_ids`` and ``padding_mask`` and its tied ``token_embedding``
    (a ``ReversibleEmbedding`` of ``vocabulary_size`` x ``hidden_dim``) -> (the embeddings, the config's
    ``heads``, checked to divide ``hidden_dim``)."""
    hidden, count = positive(config, "hidden_dim", where), positive(config, heads, where)
    if hidden % count:
        raise WeightsError(f"{where}: hidden_dim {hidden} is not a multiple of {heads} {count}")
    tokens = g.input("token_ids")
    g.input("padding_mask")
    embedding = {"input_dim": positive(config, "vocabulary_size", where), "output_dim": hidden, "tie_weights": True}
    return g.layer("ReversibleEmbedding", "token_embedding", embedding, [tensor(tokens)]), count


def decoder_stack(g: HubGraph, x: str, config: dict[str, Any], where: str, kind: str, settings: dict[str, Any]) -> str:
    """``num_layers`` keras-hub decoders ``kind`` (``"bloom.bloom_decoder.BloomDecoder"``: the module under
    ``keras_hub.src.models`` and the class) of config ``settings``, named ``transformer_layer_<i>``, each
    called on the last's output with ``decoder_padding_mask=padding_mask``."""
    module, _, class_name = kind.rpartition(".")
    for i in range(positive(config, "num_layers", where)):
        x = g.hub_layer(
            class_name,
            f"transformer_layer_{i}",
            settings,
            [tensor(x)],
            f"keras_hub.src.models.{module}",
            decoder_padding_mask=tensor("padding_mask"),
        )
    return x


def decoder_graph(g: HubGraph, x: str, config: dict[str, Any], name: str) -> dict[str, Any]:
    """The functional record of a decoder-only backbone ending in ``x``, of inputs ``token_ids`` and
    ``padding_mask``."""
    return g.functional(str(config.get("name", name)), {"token_ids": "token_ids", "padding_mask": "padding_mask"}, x)


@keras_hub_model("BloomBackbone", family="bloom", causal_lm="BloomCausalLM", transformers=BLOOM)
def bloom_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``BloomBackbone`` (the module docstring has the graph); ``BloomCausalLM``: then the reverse call."""
    g = HubGraph(config.get("dtype"))
    x, heads = tied_embedding(g, config, where, "num_heads")
    epsilon = number(config, "layer_norm_epsilon", where, 1e-5)
    x = g.layer("LayerNormalization", "embedding_layernorm", {"axis": [-1], "epsilon": epsilon}, [tensor(x)])
    settings = {
        "num_heads": heads,
        "intermediate_dim": positive(config, "intermediate_dim", where),
        "dropout": number(config, "dropout", where, 0.0),
        "layer_norm_epsilon": epsilon,
    }
    x = decoder_stack(g, x, config, where, "bloom.bloom_decoder.BloomDecoder", settings)
    x = g.layer("LayerNormalization", "final_layernorm", {"axis": [-1], "epsilon": epsilon}, [tensor(x)])
    return decoder_graph(g, x, config, "bloom_backbone")
