"""keras-hub's T5 family: ``T5Backbone`` and ``T5Seq2SeqLM``, rebuilt from their arguments, and their layers
converted without keras-hub: ``T5LayerNorm`` and ``T5TransformerLayer``.

* ``T5LayerNorm``: the RMS norm ``weight · x · rsqrt(mean(x², -1) + ε)`` (no centring, no bias), Llama's
  (:class:`~attnzoo.keras.converters.hub_llama.HubRMSNorm`).
* ``T5TransformerLayer`` (:class:`HubT5Layer`): pre-norm self-attention, then (a decoder's) cross-attention
  to the encoder's output, then the feed-forward ``W_out · (act(W_in · h) ⊙ W_gate · h)`` (the gate where
  ``use_gated_activation``), each with its residual; no biases anywhere. Attention scores are ``q · k``
  without the 1/sqrt(d) scaling, plus a position bias: the relative position buckets (bidirectional in the
  encoder, causal in the decoder; 32 buckets, distances up to 128) looked up in the first layer's table,
  with the mask folded in as ``(1 - mask) · -1e9``. The first layer of a stack computes that bias and the
  later layers take it (the layer's second output); the cross-attention's bias is the encoder's mask alone.
* ``T5Backbone``: the shared ``token_embedding`` -> dropout -> encoder layers (masked by
  ``encoder_padding_mask``) -> ``encoder_output_layer_norm`` -> ``encoder_sequence_output``; the decoder's
  tokens through the same embedding -> decoder layers (causal, masked by ``decoder_padding_mask``,
  attending to the encoder's output) -> ``decoder_output_layer_norm`` -> ``decoder_sequence_output``.
* ``T5Seq2SeqLM``: the decoder's output scaled by ``hidden_dim^-0.5`` where the embedding is tied, then the
  embedding's reverse call (its reverse table where untied) -> logits. It decodes with ``generate``
  (:mod:`attnzoo.keras.decoding`): each decoder layer keeps its self-attention's keys and values and the
  encoder's, and the first layer's bias starts at the step's position.

The graph passes the padding masks [B, S] to the layers, which read them as keras-hub's ``mask[:, None, :]``.

Hugging Face form (:data:`T5`): ``T5Model`` and ``T5ForConditionalGeneration``, transformers' T5 being
keras-hub's (the same buckets, the bias in each stack's first block, RMS norms, no scaling, the tied head's
``d_model^-0.5``). ``feed_forward_proj``: ``relu`` / ``gated-relu``, ``gelu`` (exact, ungated only:
transformers reads ``gated-gelu`` as the tanh gelu), ``gated-gelu`` / ``gelu_new`` for keras-hub's
``gelu_approximate``; any other activation is refused. transformers 5 always ties T5's head to its embedding,
so a ``T5Seq2SeqLM`` with ``tie_embedding_weights`` false (a reverse table of its own) is refused; its
backbone is written. The special token ids are the tokenizer's where known, else unset.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from attnzoo.errors import WeightsError
from attnzoo.keras.activations import activation
from attnzoo.keras.arguments import activation_of, as_tensor, expect_variables
from attnzoo.keras.converters.hub_llama import convert_rms_norm
from attnzoo.keras.converters.hub_rotary import rms
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import SEQ2SEQ_INPUTS, HubGraph, Ref, number, positive, tensor
from attnzoo.keras.nodes import Node
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm
from attnzoo.layers.attend import keras_attention
from attnzoo.layers.kv_cache import KVCache

__all__ = ["t5_graph", "HubT5Layer", "relative_buckets", "T5"]

BUCKETS, MAX_DISTANCE = 32, 128  # keras-hub's T5MultiHeadAttention's, fixed
_NEGATIVE = -1e9  # keras-hub's T5 masks by adding (1 - mask) times this


def relative_buckets(relative: Tensor, bidirectional: bool) -> Tensor:
    """keras-hub's ``_relative_position_bucket`` (Mesh TensorFlow's) of ``memory - query`` positions: exact
    buckets for small distances, logarithmic ones up to ``MAX_DISTANCE``; an encoder's split by sign."""
    buckets, result = BUCKETS, torch.zeros_like(relative)
    if bidirectional:
        buckets //= 2
        result = result + (relative > 0).to(relative.dtype) * buckets
        relative = relative.abs()
    else:
        relative = -relative.clamp(max=0)
    exact = buckets // 2
    ratio = relative.to(torch.float32).clamp(min=1) / torch.tensor(exact, dtype=torch.float32)
    scale = torch.tensor(math.log(MAX_DISTANCE / exact), dtype=torch.float32)
    large = exact + (torch.log(ratio) / scale * (buckets - exact)).to(relative.dtype)
    large = large.clamp(max=buckets - 1)
    return result + torch.where(relative < exact, relative, large)


class _Attention(nn.Module):
    """T5's attention projections (no biases) [inner = heads · d, hidden]."""

    def __init__(self, hidden: int, heads: int, head_dim: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        inner = heads * head_dim
        self.query, self.key = nn.Linear(hidden, inner, bias=False), nn.Linear(hidden, inner, bias=False)
        self.value, self.output = nn.Linear(hidden, inner, bias=False), nn.Linear(inner, hidden, bias=False)

    def split(self, x: Tensor, part: nn.Linear) -> Tensor:
        return part(x).view(x.shape[0], x.shape[1], self.heads, self.head_dim).transpose(1, 2)

    def attend(self, x: Tensor, keys: Tensor, values: Tensor, bias: Tensor) -> Tensor:
        """``softmax(q kᵀ + bias) v`` through the output projection: T5 scales no score, and its masks are in
        ``bias`` (the position bias with -1e9 at the keys a query may not read)."""
        query = self.split(x, self.query)
        out = keras_attention(query, keys, values, None, scale=1.0, bias=bias.to(x.dtype))
        return self.output(out.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1))


class HubT5Layer(Node):
    """keras-hub's ``T5TransformerLayer`` (see the module docstring): x [B, T, D] (and a decoder's encoder
    output [B, S, D]) -> (x [B, T, D], position bias [B or 1, heads, T, T])."""

    op = "keras_hub_t5_layer"
    decodes = True

    def __init__(
        self,
        *,
        hidden: int,
        intermediate_dim: int,
        num_heads: int,
        key_value_dim: int,
        is_decoder: bool,
        relative: bool,
        gated: bool,
        activation: str = "relu",
        epsilon: float = 1e-6,
    ) -> None:
        super().__init__()
        self.is_decoder, self.gated, self.epsilon, self.activation = is_decoder, gated, epsilon, activation
        self.self_attention = _Attention(hidden, num_heads, key_value_dim)
        self.relative_attention_bias = nn.Parameter(torch.zeros(BUCKETS, num_heads)) if relative else None
        names = ["self_attention_norm", "feedforward_norm"]
        if is_decoder:
            self.cross_attention = _Attention(hidden, num_heads, key_value_dim)
            names.append("cross_attention_norm")
        for name in names:
            setattr(self, name, nn.Parameter(torch.ones(hidden)))
        self.input_projector = nn.Linear(hidden, intermediate_dim, bias=False)
        self.gate_projector = nn.Linear(hidden, intermediate_dim, bias=False) if gated else None
        self.output_projector = nn.Linear(intermediate_dim, hidden, bias=False)

    def _bias(self, t: int, s: int, start: int, device: torch.device) -> Tensor:
        if self.relative_attention_bias is None:
            return torch.zeros(1, self.self_attention.heads, t, s, device=device)
        query = torch.arange(t, device=device)[:, None] + start
        relative = torch.arange(s, device=device)[None, :] - query
        values = self.relative_attention_bias[relative_buckets(relative, not self.is_decoder)]  # [T, S, heads]
        return values.permute(2, 0, 1)[None]

    def _self_bias(self, x: Tensor, held: int, padding: Any, causal: bool) -> Tensor:
        """The stack's position bias (the first layer's): relative positions and the mask, folded."""
        t = x.shape[1]
        bias = self._bias(t, held + t, held, x.device)
        mask = None if padding is None else _keys(padding)  # [B, 1, S]
        if causal:
            tri = torch.ones(t, held + t, dtype=torch.bool, device=x.device).tril(held)[None]
            mask = tri if mask is None else tri & mask
        if mask is None:
            return bias
        return bias + (1.0 - mask[:, None].to(bias.dtype)) * _NEGATIVE

    def forward(self, args, kwargs, masks):
        x = args[0]
        # decoding (attnzoo.keras.decoding): a decoder layer's keys and values in the model's DecodingCache;
        # an encoder layer computes its whole sequence once
        cache = kwargs.get("cache") if self.is_decoder else None
        kv = None if cache is None else cache.keys_values(self, x.shape[0])
        decoding, held = kv is not None, 0 if kv is None else len(kv)
        bias = kwargs.get("position_bias")
        if bias is None:
            padding = None if decoding else kwargs.get("attention_mask")
            bias = self._self_bias(x, held, padding, bool(kwargs.get("use_causal_mask")))
        h = rms(x, self.self_attention_norm, self.epsilon)
        keys, values = (
            self.self_attention.split(h, self.self_attention.key),
            self.self_attention.split(h, self.self_attention.value),
        )
        if kv is not None:
            keys, values, _ = kv.append(keys, values)
        x = x + self.self_attention.attend(h, keys, values, bias)
        if self.is_decoder:
            encoder, padding = kwargs.get("encoder_hidden_states"), kwargs.get("encoder_attention_mask")
            x = x + self._cross(x, encoder, padding, cache)
        h = rms(x, self.feedforward_norm, self.epsilon)
        inner = activation(self.activation)(self.input_projector(h))
        if self.gate_projector is not None:
            inner = inner * self.gate_projector(h)
        return [x + self.output_projector(inner), bias], [None, None]

    def _cross(self, x: Tensor, encoder: Any, padding: Any, cache: Any) -> Tensor:
        """The cross-attention over the encoder's output; while decoding (``cache``, the model's
        DecodingCache) its keys and values are computed on the first call and kept there, and a later call
        given another encoder output or padding is refused (a ``ConfigError``) instead of reading them."""
        if not isinstance(encoder, Tensor):
            raise ValueError("a T5 decoder layer takes the encoder's output as encoder_hidden_states")
        h = rms(x, self.cross_attention_norm, self.epsilon)
        attention = self.cross_attention

        def projected() -> tuple[Tensor, Tensor]:
            return attention.split(encoder, attention.key), attention.split(encoder, attention.value)

        if cache is None:
            context = projected()
        else:  # kept with what it was made from (KVCache's context), which later calls must give again
            held = cache.held(self, "context", lambda: KVCache(x.shape[0]))
            if held.context is None:
                held.context = (*projected(), None)
                held.keep_context("a T5 cross-attention", encoder, padding)
            else:
                held.check_context("a T5 cross-attention", encoder, padding)
            context = held.context[:2]
        bias = torch.zeros(1, attention.heads, x.shape[1], encoder.shape[1], device=x.device)
        if padding is not None:
            bias = bias + (1.0 - _keys(padding)[:, None].to(bias.dtype)) * _NEGATIVE
        return attention.attend(h, *context, bias)


def _keys(mask: Tensor) -> Tensor:
    """A padding mask [B, S] (or keras-hub's [B, 1, S]) as [B, 1, S] booleans."""
    mask = mask.bool()
    return mask[:, None, :] if mask.dim() == 2 else mask


keras_layer("T5LayerNorm", package="keras_hub")(convert_rms_norm)

_ATTENTION = ("query_projector", "key_projector", "value_projector", "output_projector")
_ORDER = (
    "self_attention",
    *(f"self_attention/{name}" for name in _ATTENTION),
    "self_attention_layer_norm",
    "cross_attention",
    *(f"cross_attention/{name}" for name in _ATTENTION),
    "cross_attention_layer_norm",
    "input_projector",
    "gate_projector",
    "output_projector",
    "layer_norm",
)
_CALL = ("attention_mask", "position_bias", "encoder_hidden_states", "encoder_attention_mask", "use_causal_mask")


@keras_layer("T5TransformerLayer", package="keras_hub", call_arguments=_CALL, child_order=_ORDER)
def convert_t5_layer(record, arrays, ctx):
    c = record.config
    decoder, relative, gated = (
        bool(c.get(k)) for k in ("is_decoder", "use_relative_attention_bias", "use_gated_activation")
    )
    count = 8 + relative + gated + 5 * decoder
    expect_variables(arrays, count, "this T5TransformerLayer (its config's is_decoder, relative bias and gate)")
    arrays = list(arrays)
    table = arrays.pop(0) if relative else None
    inner, hidden = int(arrays[0].shape[1]), int(arrays[0].shape[0])
    heads = c.get("num_heads")
    if not isinstance(heads, int) or heads < 1 or inner % heads:
        raise Refused(f"num_heads {heads!r} does not divide the attention's width {inner}")
    state = {} if table is None else {"relative_attention_bias": as_tensor(table)}
    for side in ("self_attention", "cross_attention")[: 1 + decoder]:
        for part in ("query", "key", "value", "output"):
            state[f"{side}.{part}.weight"] = as_tensor(arrays.pop(0).T)
        state[f"{side}_norm"] = as_tensor(arrays.pop(0))
    for part in ("input_projector", "gate_projector", "output_projector")[:: 1 if gated else 2]:
        state[f"{part}.weight"] = as_tensor(arrays.pop(0).T)
    state["feedforward_norm"] = as_tensor(arrays.pop(0))
    spec = {
        "op": HubT5Layer.op,
        "hidden": hidden,
        "intermediate_dim": int(state["input_projector.weight"].shape[0]),
        "num_heads": heads,
        "key_value_dim": inner // heads,
        "is_decoder": decoder,
        "relative": relative,
        "gated": gated,
        "activation": activation_of(c, "activation", ctx, "relu"),
        "epsilon": float(c.get("layer_norm_epsilon", 1e-6)),
    }
    return Converted(spec, state, ["keras-hub T5TransformerLayer: relative position bias, RMS norms, no biases"])


def _scaled(g: HubGraph, state: str | Ref, config: dict[str, Any]) -> str | Ref:
    """``T5Seq2SeqLM._logits``' first step: a tied embedding's state times ``hidden_dim^-0.5``."""
    if config.get("tie_embedding_weights", True) is False:
        return state
    factor = float(torch.tensor(positive(config, "hidden_dim", "T5Backbone") ** -0.5, dtype=torch.float32))
    return g.operation("Multiply", "multiply", [tensor(state), factor])


def _stack(g: HubGraph, x: str | Ref, config: dict[str, Any], where: str, side: str, **kwargs: Any) -> str | Ref:
    """``num_layers`` ``T5TransformerLayer`` s named ``transformer_<side>_layer_<i>``: the first computes the
    position bias (relative attention table of its own), the later ones take it (its second output)."""
    hidden, heads = positive(config, "hidden_dim", where), positive(config, "num_heads", where)
    if hidden % heads and config.get("key_value_dim") is None:
        raise WeightsError(f"{where}: hidden_dim {hidden} is not a multiple of num_heads {heads}")
    settings = {
        "is_decoder": side == "decoder",
        "hidden_dim": hidden,
        "intermediate_dim": positive(config, "intermediate_dim", where),
        "key_value_dim": config.get("key_value_dim") or hidden // heads,
        "dropout": number(config, "dropout", where, 0.1),
        "activation": config.get("activation", "relu"),
        "layer_norm_epsilon": number(config, "layer_norm_epsilon", where, 1e-6),
        "num_heads": heads,
        "use_gated_activation": bool(config.get("use_gated_activation", True)),
    }
    module = "keras_hub.src.models.t5.t5_transformer_layer"
    bias: Ref | None = None
    for i in range(positive(config, "num_layers", where)):
        name = f"transformer_{side}_layer_{i}"
        own = {**settings, "use_relative_attention_bias": i == 0}
        given = {**kwargs, "position_bias": None if bias is None else tensor(bias)}
        g.hub_layer("T5TransformerLayer", name, own, [tensor(x)], module, **given)
        x, bias = Ref(name, 0, 0), Ref(name, 0, 1)
    return x


def _norm(g: HubGraph, x: str | Ref, config: dict[str, Any], where: str, side: str) -> str:
    epsilon = {"epsilon": number(config, "layer_norm_epsilon", where, 1e-6)}
    x = g.hub_layer(
        "T5LayerNorm", f"{side}_output_layer_norm", epsilon, [tensor(x)], "keras_hub.src.models.t5.t5_layer_norm"
    )
    return g.layer("Dropout", f"{side}_output_dropout", {"rate": number(config, "dropout", where, 0.1)}, [tensor(x)])


def _feed_forward(m: HubSource) -> str:
    name = str(m.spec("transformer_encoder_layer_0").get("activation"))
    gated = bool(m.spec("transformer_encoder_layer_0").get("gated"))
    ungated = {"relu": "relu", "gelu": "gelu", "gelu_approximate": "gelu_new"}
    if name not in ungated or (gated and name == "gelu"):
        m.refuse(f"its feed-forward's activation {name!r}{' (gated)' if gated else ''} has no feed_forward_proj")
    return f"gated-{'gelu' if name == 'gelu_approximate' else name}" if gated else ungated[name]


def _t5_config(m: HubSource) -> dict[str, Any]:
    tied = m.arguments.get("tie_embedding_weights", True) is not False
    if m.kind == "seq2seq_lm" and not tied:
        m.refuse("its head has a reverse table of its own, and transformers 5 ties T5's head to the embedding")
    layer = m.spec("transformer_encoder_layer_0")
    special = {key: m.special.get(key) for key in ("eos_token_id", "pad_token_id")}
    return {
        "vocab_size": m.size("vocabulary_size"),
        "d_model": m.size("hidden_dim"),
        "d_kv": int(layer["key_value_dim"]),
        "d_ff": m.size("intermediate_dim"),
        "num_layers": m.size("num_layers"),
        "num_decoder_layers": m.size("num_layers"),
        "num_heads": m.size("num_heads"),
        "relative_attention_num_buckets": BUCKETS,
        "relative_attention_max_distance": MAX_DISTANCE,
        "dropout_rate": float(m.arguments.get("dropout", 0.1) or 0.0),
        "layer_norm_epsilon": float(layer["epsilon"]),
        "feed_forward_proj": _feed_forward(m),
        "tie_word_embeddings": tied,
        **special,
        "decoder_start_token_id": special["pad_token_id"],
    }


def _t5_block(m: HubSource, at: str, to: str, decoder: bool) -> Tensors:
    parts = [("SelfAttention", "self_attention")] + ([("EncDecAttention", "cross_attention")] if decoder else [])
    for index, (theirs, ours) in enumerate(parts):
        for their, our in (("q", "query"), ("k", "key"), ("v", "value"), ("o", "output")):
            yield f"{to}layer.{index}.{theirs}.{their}.weight", m.tensor(f"{at}{ours}.{our}.weight")
        yield f"{to}layer.{index}.layer_norm.weight", m.tensor(f"{at}{ours}_norm")
        if index == 0 and m.holds(f"{at}relative_attention_bias"):
            yield f"{to}layer.0.SelfAttention.relative_attention_bias.weight", m.tensor(f"{at}relative_attention_bias")
    ff = f"{to}layer.{len(parts)}."
    if m.holds(f"{at}gate_projector.weight"):
        yield f"{ff}DenseReluDense.wi_0.weight", m.tensor(f"{at}input_projector.weight")
        yield f"{ff}DenseReluDense.wi_1.weight", m.tensor(f"{at}gate_projector.weight")
    else:
        yield f"{ff}DenseReluDense.wi.weight", m.tensor(f"{at}input_projector.weight")
    yield f"{ff}DenseReluDense.wo.weight", m.tensor(f"{at}output_projector.weight")
    yield f"{ff}layer_norm.weight", m.tensor(f"{at}feedforward_norm")


def _t5_tensors(m: HubSource) -> Tensors:
    yield "shared.weight", m.tensor("token_embedding.weight")
    for side in ("encoder", "decoder"):
        for i in range(m.size("num_layers")):
            yield from _t5_block(m, f"transformer_{side}_layer_{i}.", f"{side}.block.{i}.", side == "decoder")
        yield f"{side}.final_layer_norm.weight", m.tensor(f"{side}_output_layer_norm.weight")


T5 = TransformersForm(
    "t5", {"backbone": "T5Model", "seq2seq_lm": "T5ForConditionalGeneration"}, _t5_config, _t5_tensors
)


@keras_hub_model("T5Backbone", family="t5", seq2seq_lm="T5Seq2SeqLM", before=_scaled, transformers=T5)
def t5_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    g = HubGraph(config.get("dtype"))
    inputs = {name: g.input(name) for name in SEQ2SEQ_INPUTS}
    embedding = {
        "input_dim": positive(config, "vocabulary_size", where),
        "output_dim": positive(config, "hidden_dim", where),
        "tie_weights": bool(config.get("tie_embedding_weights", True)),
    }
    rate = {"rate": number(config, "dropout", where, 0.1)}
    x: str | Ref = g.layer("ReversibleEmbedding", "token_embedding", embedding, [tensor("encoder_token_ids")])
    x = g.layer("Dropout", "encoder_embedding_dropout", rate, [tensor(x)])
    mask = tensor("encoder_padding_mask")
    x = _stack(g, x, config, where, "encoder", attention_mask=mask, use_causal_mask=False)
    encoder = _norm(g, x, config, where, "encoder")
    x = g.call_again("token_embedding", [tensor("decoder_token_ids")])
    x = g.layer("Dropout", "decoder_embedding_dropout", rate, [tensor(x)])
    kwargs = {"encoder_hidden_states": tensor(encoder), "encoder_attention_mask": mask, "use_causal_mask": True}
    x = _stack(g, x, config, where, "decoder", attention_mask=tensor("decoder_padding_mask"), **kwargs)
    decoder = _norm(g, x, config, where, "decoder")
    outputs = {"encoder_sequence_output": encoder, "decoder_sequence_output": decoder}
    return g.functional(str(config.get("name", "t5_backbone")), inputs, outputs)
