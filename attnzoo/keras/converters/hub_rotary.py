"""What keras-hub's rotary decoder-only families share (Llama, Llama 3, Mistral, Qwen2, Qwen3, Qwen-MoE, Phi-3,
Gemma 1/2/3): the RMSNorm (:func:`rms`), keras-hub's rotary embedding (:func:`rotate`), the grouped-query
decoder (:class:`RotaryDecoder`: heads, rotation, the KV cache while decoding, the attention through
:func:`~attnzoo.layers.attend.keras_attention`), a decoder's variables by role (:func:`rotary_decoder_parts`),
the backbone's graph (:func:`rotary_backbone_graph`) and the Hugging Face form's shared entries
(:func:`rotary_config`, :func:`rotary_tensors`). Each family's file registers its own classes with these.

* RMSNorm: x [..., D] -> ``x · rsqrt(mean(x², -1) + ε) · (offset + scale)``, in float32.
* A rotary decoder: x [B, T, D] -> ``h = x + Wo · attention(RoPE(Wq · rms(x)), RoPE(Wk · rms(x)), Wv · rms(x))``,
  then ``h + W_down · (silu(W_gate · rms(h)) ⊙ W_up · rms(h))`` [B, T, D]. The attention is grouped-query:
  ``H`` query heads of ``d`` share ``g`` key/value heads (query head ``i`` reads key/value head ``i // (H /
  g)``, keras-hub's ``ops.repeat`` on the head axis), scaled by ``1 / √d``, masked causally (within a sliding
  window where the family has one) and by ``decoder_padding_mask`` (the keys). RoPE is keras-hub's
  ``RotaryEmbedding`` on the halves of each head: with ``θ_j = wavelength^(-2j/d)`` and position ``p``,
  ``x · cos(p θ) + concat(-x₂, x₁) · sin(p θ)`` (θ repeated over the two halves).

The decoder takes part in cached decoding (:mod:`attnzoo.keras.decoding`): called with the model's
:class:`~attnzoo.layers.kv_cache.DecodingCache` (``cache=``), a call's tokens are the positions after the ones
its :class:`~attnzoo.layers.kv_cache.KVCache` there holds (a window's keeps its w latest), to which it appends
their keys and values (``g`` heads, rotated, not repeated).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.errors import WeightsError
from attnzoo.keras.arguments import as_tensor
from attnzoo.keras.hub_graph import HubGraph, number, positive, tensor
from attnzoo.keras.nodes import Node
from attnzoo.keras.registry import Refused
from attnzoo.keras.transformers_form import HubSource, Tensors
from attnzoo.layers.attend import causal_allowed, keras_attention
from attnzoo.layers.kv_cache import KVCache

__all__ = [
    "rms",
    "rotate",
    "RotaryDecoder",
    "rotary_decoder_parts",
    "rotary_backbone_graph",
    "rotary_config",
    "rotary_tensors",
    "held_tensors",
    "ROTARY_ATTENTION_WEIGHTS",
    "SWIGLU_WEIGHTS",
]


def rms(x: Tensor, weight: Tensor, epsilon: float, offset: float = 0.0) -> Tensor:
    """keras-hub's RMSNorm of x [..., D]: ``x · rsqrt(mean(x², -1) + ε) · (offset + weight)``, computed in
    float32 and returned in x's dtype (Gemma's norms scale by ``1 + weight``: ``offset`` 1)."""
    work = x.float()
    out = work * torch.rsqrt(work.square().mean(-1, keepdim=True) + epsilon)
    return (out * (weight.float() + offset if offset else weight.float())).to(x.dtype)


def rotate(x: Tensor, start: int, wavelength: float, *, divisor: Any = None, scale: float = 1.0) -> Tensor:
    """keras-hub's ``RotaryEmbedding`` of x [B, heads, T, d] at positions ``start .. start + T - 1``: with
    ``θ_j = wavelength^(-2j/d) / divisor_j`` (``divisor``: None, a number, or d / 2 factors, Phi-3's short or
    long ones) and ``c = scale`` (Phi-3's su attention factor), ``x · c cos(p θ) + concat(-x₂, x₁) · c sin(p θ)``."""
    d, t = x.shape[-1], x.shape[-2]
    plain = divisor is None or (isinstance(divisor, (int, float)) and not isinstance(divisor, bool))
    if plain and t <= _REUSED_LENGTH:  # a decoding step: every layer's queries and keys turn alike
        inference = torch.is_inference_mode_enabled()  # an inference tensor is never read outside that mode
        cos, sin = _step_turns(d, t, start, float(wavelength), divisor, float(scale), x.device, inference)
    else:
        cos, sin = _turns(d, t, start, wavelength, divisor, scale, x.device)
    # concat(-x₂, x₁) · s as concat(x₂, x₁) · concat(-s₁, s₂), the halves swapped by a roll: the same products
    # (a sign never rounds) in two ops fewer a call than a chunk, a negation and a cat
    return x * cos.to(x.dtype) + x.roll(d // 2, -1) * sin.to(x.dtype)


def _turns(d: int, t: int, start: int, wavelength: float, divisor: Any, scale: float, device: Any) -> tuple[Any, Any]:
    """``c cos(p θ)`` and ``c sin(p θ)`` [t, d] in float32, the sine's first half negated (:func:`rotate`'s)."""
    inverse = wavelength ** -(torch.arange(0, d, 2, dtype=torch.float32, device=device) / d)
    if divisor is not None:
        inverse = inverse / torch.as_tensor(divisor, dtype=torch.float32, device=device)
    angles = torch.outer(torch.arange(t, dtype=torch.float32, device=device) + start, inverse)
    angles = torch.cat([angles, angles], dim=-1)
    cos, sin = angles.cos(), angles.sin()
    sin = torch.cat([-sin[:, : d // 2], sin[:, d // 2 :]], dim=-1)
    return (cos, sin) if scale == 1.0 else (cos * scale, sin * scale)


# a decoding step's turns (t <= 8 positions) are computed once and read by every layer's queries and keys
_REUSED_LENGTH = 8


@functools.lru_cache(maxsize=64)
def _step_turns(
    d: int, t: int, start: int, wavelength: float, divisor: Any, scale: float, device: Any, inference: bool
) -> tuple[Any, Any]:
    return _turns(d, t, start, wavelength, divisor, scale, device)


class RotaryDecoder(Node):
    """What keras-hub's rotary decoders compute (the module docstring has the formula): x [B, T, D] -> [B, T, D];
    the output keeps the input's mask. A family's node calls plain ``super().__init__()``, then :meth:`_build`
    with its sizes and the keywords where it differs from Llama: ``head_dim`` (not ``D / H``: Qwen3's),
    ``attention_bias`` (on the query, key and value: Qwen2's), ``query_key_norm`` (the epsilon of an RMSNorm
    over each query and key head before the rotation: Qwen3's), ``empty`` (what a query with no key gets:
    ``"mean"`` or ``"zeros"``, :func:`~attnzoo.layers.attend.keras_attention`), ``feedforward_dropout``
    (Phi-3's); ``intermediate_dim`` 0 builds no SwiGLU (the node computes its own :meth:`_feed_forward`). A
    node that builds its own layers (Gemma's) sets ``heads``, ``groups``, ``head_dim``, ``wavelength``, ``query``,
    ``key`` and ``value`` itself and attends through :meth:`_attention`."""

    supports_masking = True
    decodes = True
    window: int | None = None  # a sliding window w: a query reads the w latest tokens, its own included
    # keras-hub's rotary scaling: every frequency divided by it (scaling_factor), or d / 2 divisors, one per
    # frequency (Llama 3.1's adjustment, :func:`llama3_divisors`)
    scaling: float | tuple[float, ...] = 1.0

    def _build(
        self,
        hidden: int,
        intermediate_dim: int,
        heads: int,
        groups: int,
        *,
        wavelength: float,
        epsilon: float,
        dropout: float,
        head_dim: int | None = None,
        attention_bias: bool = False,
        query_key_norm: float | None = None,
        empty: str = "mean",
        feedforward_dropout: float = 0.0,
    ) -> None:
        self.heads, self.groups, self.head_dim = heads, groups, head_dim or hidden // heads
        self.wavelength, self.epsilon, self.dropout, self.empty = wavelength, epsilon, dropout, empty
        self.feedforward_dropout = feedforward_dropout
        inner, kv = heads * self.head_dim, groups * self.head_dim
        self.attention_norm = nn.RMSNorm(hidden, eps=epsilon)
        self.query = nn.Linear(hidden, inner, bias=attention_bias)
        self.key = nn.Linear(hidden, kv, bias=attention_bias)
        self.value = nn.Linear(hidden, kv, bias=attention_bias)
        norms = query_key_norm is not None
        self.query_norm = nn.RMSNorm(self.head_dim, eps=query_key_norm) if norms else None
        self.key_norm = nn.RMSNorm(self.head_dim, eps=query_key_norm) if norms else None
        self.output_dense = nn.Linear(inner, hidden, bias=False)
        self.feedforward_norm = nn.RMSNorm(hidden, eps=epsilon)
        if intermediate_dim:
            self.gate = nn.Linear(hidden, intermediate_dim, bias=False)
            self.up = nn.Linear(hidden, intermediate_dim, bias=False)
            self.down = nn.Linear(intermediate_dim, hidden, bias=False)

    def _cached(
        self, kv: KVCache | None, key: Tensor, value: Tensor, padding: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """The cache's whole part in a call: while decoding (``kv``: this layer's cache), the call's keys and
        values [B, g, t, d] join the ones held and all of them are attended (the calls carry no padding then);
        otherwise the call's own, masked by its ``padding``. -> (keys, values, padding of the keys)."""
        if kv is None:
            return key, value, padding
        key, value, _ = kv.append(key, value)
        kv.trim()  # a window keeps its w latest entries; the views returned stay whole
        return key, value, None

    def _positioned(
        self, kv: KVCache | None, query: Tensor, key: Tensor, value: Tensor, padding: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """RoPE at the call's positions (after the ``kv.length`` tokens cached), then the cache: -> the queries,
        and the keys, values and their padding over every position the queries attend to (a subclass with
        another rotation overrides it)."""
        start = 0 if kv is None else kv.length
        divisor = None if self.scaling == 1.0 else self.scaling  # a tuple is never 1.0
        query, key = (rotate(t, start, self.wavelength, divisor=divisor) for t in (query, key))
        return (query, *self._cached(kv, key, value, padding))

    def _heads(self, x: Tensor, layer: nn.Linear, heads: int, norm: nn.Module | None = None) -> Tensor:
        b, t, _ = x.shape
        projected = layer(x).reshape(b, t, heads, self.head_dim)
        return (projected if norm is None else norm(projected)).transpose(1, 2)

    def _attention(
        self,
        x: Tensor,
        padding: Tensor | None,
        kv: KVCache | None,
        *,
        scale: float,
        soft_cap: float | None = None,
        empty: str = "mean",
        norms: tuple[Any, Any] | None = None,
        dropout: float = 0.0,
    ) -> Tensor:
        """x [B, T, D] -> the heads' attention [B, T, heads · head_dim], before the output projection: queries
        and keys (each head normalised by ``norms``, q/k norms, where given) rotated at their positions, then
        attended causally, within the window, over the keys ``padding`` [B, T] keeps (while decoding, over the
        cache ``kv``), by :func:`~attnzoo.layers.attend.keras_attention` (``soft_cap``, ``empty``, ``dropout`` on the
        weights)."""
        b, t, _ = x.shape
        first, second = norms or (None, None)
        query, key = self._heads(x, self.query, self.heads, first), self._heads(x, self.key, self.groups, second)
        value = self._heads(x, self.value, self.groups)
        query, key, value, padding = self._positioned(kv, query, key, value, padding)
        # the call's queries are the last t of the keys; one query reads them all (a decoding step, its window
        # holding every key): no mask to build
        keys = key.shape[-2]
        every = t == 1 and padding is None and (self.window is None or keys <= self.window)
        allowed = None if every else causal_allowed(t, keys, window=self.window, padding=padding, device=x.device)
        out = keras_attention(query, key, value, allowed, scale=scale, soft_cap=soft_cap, empty=empty, dropout=dropout)
        return out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim)

    def _attend(self, x: Tensor, padding: Tensor | None, kv: KVCache | None) -> Tensor:
        norms = (self.query_norm, self.key_norm)
        out = self._attention(x, padding, kv, scale=self.head_dim**-0.5, empty=self.empty, norms=norms)
        return self.output_dense(self._dropped(out, self.dropout))

    def _dropped(self, x: Tensor, rate: float) -> Tensor:
        """Keras's dropout at ``rate`` in training; x itself otherwise, without a call (a decoding step makes
        three a layer)."""
        return F.dropout(x, rate, True) if self.training and rate else x

    def _feed_forward(self, y: Tensor) -> Tensor:
        """SwiGLU: ``W_down · (silu(W_gate · y) ⊙ W_up · y)``."""
        return self.down(F.silu(self.gate(y)) * self.up(y))

    def forward(self, args, kwargs, masks):
        x, own = args[0], masks[0]
        padding = kwargs.get("decoder_padding_mask")
        if kwargs.get("decoder_attention_mask") is not None:
            raise ValueError("is called with decoder_attention_mask, which attnzoo's rotary decoders do not take")
        kv = self.keys_values(kwargs, x.shape[0], self.window)  # decoding: this layer's keys and values
        h = x + self._dropped(self._attend(self.attention_norm(x), padding, kv), self.dropout)
        y = self._feed_forward(self.feedforward_norm(h))
        return [h + self._dropped(y, self.feedforward_dropout)], [own]


def rotary_decoder_parts(named: dict[str, Any], what: str) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """A rotary decoder's sizes and state dict from its Keras variables by role: the norms ``attention_norm``,
    ``feedforward_norm`` [D]; the kernels ``query`` [D, h, d], ``key``, ``value`` [D, g, d], ``output_dense``
    [h, d, D]; where held, ``query_bias`` [h, d], ``key_bias``, ``value_bias`` [g, d], the head norms
    ``query_norm``, ``key_norm`` [d], the SwiGLU's ``gate``, ``up`` [D, I] and ``down`` [I, D] (none: I = 0).
    ``head_dim`` is in the sizes where d is not D / h; other shapes are ``Refused``, naming ``what``."""
    query, key, output = named["query"], named["key"], named["output_dense"]
    if query.ndim != 3 or key.ndim != 3:
        raise Refused(f"attention kernels {list(query.shape)}, {list(key.shape)} are not {what}'s")
    hidden, heads, head_dim = (int(n) for n in query.shape)
    groups, inner = int(key.shape[1]), int(named["gate"].shape[1]) if "gate" in named else 0
    norm, bias, kernel = (hidden,), (groups, head_dim), (hidden, groups, head_dim)
    expected = dict(attention_norm=norm, feedforward_norm=norm, key=kernel, value=kernel, key_bias=bias)
    expected.update(output_dense=(heads, head_dim, hidden), query_bias=(heads, head_dim), value_bias=bias)
    expected.update(query_norm=(head_dim,), key_norm=(head_dim,), gate=(hidden, inner), up=(hidden, inner))
    expected["down"] = (inner, hidden)
    wrong = [role for role, shape in expected.items() if role in named and tuple(named[role].shape) != shape]
    if heads % groups or wrong:
        shapes = {role: list(named[role].shape) for role in named}
        raise Refused(f"variables {shapes} are not {what}'s (wrong: {', '.join(wrong) or 'the head counts'})")
    sizes: dict[str, Any] = dict(
        hidden=hidden, intermediate_dim=inner, num_query_heads=heads, num_key_value_heads=groups
    )
    if heads * head_dim != hidden:
        sizes["head_dim"] = head_dim
    if "query_bias" in named:
        sizes["attention_bias"] = True
    qkv, own = ("query", "key", "value"), ("attention_norm", "feedforward_norm", "query_norm", "key_norm")
    state = {f"{role}.weight": as_tensor(named[role]) for role in own if role in named}
    state |= {f"{role}.weight": as_tensor(named[role].reshape(hidden, -1).T) for role in qkv}
    state["output_dense.weight"] = as_tensor(output.reshape(-1, hidden).T)
    state |= {f"{role}.bias": as_tensor(named[f"{role}_bias"].reshape(-1)) for role in qkv if f"{role}_bias" in named}
    state |= {f"{role}.weight": as_tensor(named[role].T) for role in ("gate", "up", "down") if role in named}
    return sizes, state


def rotary_config(m: HubSource, max_positions: int) -> dict[str, Any]:
    """config.json's entries every rotary decoder family writes alike (Llama's, Qwen's, Phi-3's): the sizes,
    ``rms_norm_eps``, ``rope_theta`` (and transformers 5's ``rope_parameters``, default rope), the dropout,
    whether the head is tied, the special token ids; ``max_positions`` is ``max_position_embeddings``."""
    heads = m.size("num_query_heads")
    wavelength = float(m.arguments.get("rope_max_wavelength") or 10000)
    return {
        "vocab_size": m.size("vocabulary_size"),
        "hidden_size": m.size("hidden_dim"),
        "intermediate_size": m.size("intermediate_dim"),
        "num_hidden_layers": m.size("num_layers"),
        "num_attention_heads": heads,
        "num_key_value_heads": m.size("num_key_value_heads"),
        "head_dim": m.arguments.get("head_dim") or m.size("hidden_dim") // heads,
        "hidden_act": "silu",
        "max_position_embeddings": max_positions,
        "rms_norm_eps": float(m.spec("sequence_output_layernorm")["epsilon"]),
        "rope_theta": wavelength,  # transformers 4's key; 5 reads rope_parameters (and takes this one too)
        "rope_parameters": {"rope_type": "default", "rope_theta": wavelength},
        "attention_dropout": float(m.arguments.get("dropout") or 0.0),
        "tie_word_embeddings": not m.holds("token_embedding.reverse_weight"),
        **{key: m.special.get(key) for key in ("bos_token_id", "eos_token_id", "pad_token_id")},
    }


# transformers' names of a rotary decoder's weights and the converted node's; a bias, a head norm where held
ROTARY_ATTENTION_WEIGHTS = (
    ("input_layernorm", "attention_norm"),
    ("self_attn.q_proj", "query"),
    ("self_attn.k_proj", "key"),
    ("self_attn.v_proj", "value"),
    ("self_attn.q_norm", "query_norm"),
    ("self_attn.k_norm", "key_norm"),
    ("self_attn.o_proj", "output_dense"),
    ("post_attention_layernorm", "feedforward_norm"),
)
SWIGLU_WEIGHTS = (("mlp.gate_proj", "gate"), ("mlp.up_proj", "up"), ("mlp.down_proj", "down"))


def held_tensors(m: HubSource, ours: str, theirs: str, names: Any) -> Tensors:
    """The weights (and biases) the decoder ``ours`` holds of ``names`` (pairs of transformers' name and
    the node's), under ``theirs`` + transformers' name."""
    for their, our in names:
        for part in ("weight", "bias"):
            if m.holds(f"{ours}.{our}.{part}"):
                yield f"{theirs}.{their}.{part}", m.tensor(f"{ours}.{our}.{part}")


def rotary_tensors(m: HubSource, layer: Any = None) -> Tensors:
    """transformers' weights of a rotary decoder-only model: the converted ``nn.Linear`` / ``nn.RMSNorm``
    weights as they are; ``layer(m, ours, theirs)`` yields one decoder's (by default the attention's and
    the SwiGLU's, :data:`ROTARY_ATTENTION_WEIGHTS`, :data:`SWIGLU_WEIGHTS`)."""
    base = "model." if m.kind == "causal_lm" else ""
    yield f"{base}embed_tokens.weight", m.tensor("token_embedding.weight")
    for i in range(m.size("num_layers")):
        ours, theirs = f"transformer_layer_{i}", f"{base}layers.{i}"
        if layer is None:
            yield from held_tensors(m, ours, theirs, ROTARY_ATTENTION_WEIGHTS + SWIGLU_WEIGHTS)
        else:
            yield from layer(m, ours, theirs)
    yield f"{base}norm.weight", m.tensor("sequence_output_layernorm.weight")
    if m.kind == "causal_lm" and m.holds("token_embedding.reverse_weight"):  # untied: a head of its own
        yield "lm_head.weight", m.tensor("token_embedding.reverse_weight").T


def rotary_backbone_graph(
    config: dict[str, Any],
    where: str,
    *,
    decoder: tuple[str, str],
    norm: tuple[str, str],
    settings: dict[str, Any],
    tied: bool,
    name: str,
) -> dict[str, Any]:
    """The functional record of a rotary decoder-only backbone (Llama's, Qwen's, Phi-3's): token ids, padding
    mask -> ``token_embedding`` (``ReversibleEmbedding``, ``tied`` or not) -> ``num_layers`` ``decoder`` (class,
    module) layers ``transformer_layer_<i>`` (config: the sizes, epsilon, dropout and ``settings``; masked by
    ``padding_mask``) -> ``sequence_output_layernorm``, a ``norm`` (class, module) -> [B, T, D]."""
    g = HubGraph(config.get("dtype"))
    hidden, heads = positive(config, "hidden_dim", where), positive(config, "num_query_heads", where)
    groups = positive(config, "num_key_value_heads", where)
    if (hidden % heads and not config.get("head_dim")) or heads % groups:
        raise WeightsError(
            f"{where}: hidden_dim {hidden}, {heads} query heads and {groups} key/value heads do not divide"
        )
    tokens, padding = g.input("token_ids"), g.input("padding_mask")
    embedding = {"input_dim": positive(config, "vocabulary_size", where), "output_dim": hidden, "tie_weights": tied}
    x = g.layer("ReversibleEmbedding", "token_embedding", embedding, [tensor(tokens)])
    epsilon = number(config, "layer_norm_epsilon", where, 1e-6)
    layer = {
        **settings,
        "intermediate_dim": positive(config, "intermediate_dim", where),
        "num_query_heads": heads,
        "num_key_value_heads": groups,
        "layer_norm_epsilon": epsilon,
        "dropout": number(config, "dropout", where, 0.0),
    }
    for i in range(positive(config, "num_layers", where)):
        x = g.hub_layer(
            decoder[0], f"transformer_layer_{i}", layer, [tensor(x)], decoder[1], decoder_padding_mask=tensor(padding)
        )
    x = g.hub_layer(norm[0], "sequence_output_layernorm", {"epsilon": epsilon}, [tensor(x)], norm[1])
    return g.functional(str(config.get("name", name)), {"token_ids": tokens, "padding_mask": padding}, x)
