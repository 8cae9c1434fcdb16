"""keras-hub's Llama family: ``LlamaBackbone`` and ``LlamaCausalLM`` rebuilt from their arguments
(:func:`llama_graph`), and their layers converted without keras-hub: ``LlamaLayerNorm`` and
``LlamaTransformerDecoder``.

* ``LlamaLayerNorm`` (RMSNorm): x [..., D] -> ``x · rsqrt(mean(x², -1) + ε) · scale``, computed in float32;
  written as ``nn.RMSNorm(D, eps=ε)``.
* ``LlamaTransformerDecoder``: x [B, T, D] ->
  ``h = x + Wo · attention(RoPE(Wq · rms(x)), RoPE(Wk · rms(x)), Wv · rms(x))``, then
  ``h + W_down · (silu(W_gate · rms(h)) ⊙ W_up · rms(h))`` [B, T, D], with no biases. The attention is
  grouped-query: ``H`` query heads of ``d = D / H`` share ``g`` key/value heads (query head ``i`` reads
  key/value head ``i // (H / g)``, keras-hub's ``ops.repeat`` on the head axis), scaled by ``1 / √d``,
  masked causally and by ``decoder_padding_mask`` (the keys), softmax over the keys. A query row with no
  key to read (a left-padded position) gets the mean of every value, as keras's fused attention gives it
  (:func:`attnzoo.layers.attend.keras_attention`).
  RoPE is keras-hub's ``RotaryEmbedding`` on the halves of each head: with ``θ_j = wavelength^(-2j/d)``
  and position ``p``, ``x · cos(p θ) + concat(-x₂, x₁) · sin(p θ)`` (θ repeated over the two halves).

Llama 3.1's frequency adjustment (``rope_low_freq_factor`` and the rest) and a position scaling factor
other than 1 are refused by name. The decoder takes part in cached decoding (:mod:`attnzoo.keras.decoding`):
while started, a call's tokens are positions ``step.start ..`` and its keys and values (``g`` heads, rotated,
not repeated) go into an :class:`~attnzoo.layers.kv_cache.KVCache`.

Hugging Face form (:data:`LLAMA`): ``LlamaModel`` and ``LlamaForCausalLM``. keras-hub's rotary embedding
turns the two halves of each head (transformers' ``rotate_half``), so the query and key kernels go as they
are, with no permutation of their rows; ``rope_theta`` is ``rope_max_wavelength``, ``rms_norm_eps``
``layer_norm_epsilon``; an untied model's head is its ``reverse_weight`` [D, V] transposed as ``lm_head``
[V, D], a tied one (no reverse table: ``tie_word_embeddings``) writes no head. keras-hub's Llama has no
largest position (its rotary embedding has none): config.json says :data:`LLAMA_MAX_POSITIONS`, Llama 2's
context, which transformers' default rotary embedding does not depend on; set your own where a server reads
it as the longest sequence.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.errors import WeightsError
from attnzoo.keras.arguments import as_tensor, expect_variables
from attnzoo.keras.codegen import literal
from attnzoo.keras.emit import Writer
from attnzoo.keras.emit.checks import plain
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import HubGraph, number, positive, tensor
from attnzoo.keras.nodes import Node, writes
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm
from attnzoo.layers.attend import causal_allowed, keras_attention
from attnzoo.layers.kv_cache import KVCache

__all__ = [
    "HubRMSNorm",
    "RotaryDecoder",
    "HubLlamaDecoder",
    "rotate",
    "rotary_decoder_parts",
    "rotary_backbone_graph",
    "rotary_config",
    "rotary_tensors",
    "held_tensors",
    "llama_graph",
    "LLAMA",
    "LLAMA_MAX_POSITIONS",
]


def _rms(x: Tensor, weight: Tensor, epsilon: float) -> Tensor:
    work = x.float()
    out = work * torch.rsqrt(work.square().mean(-1, keepdim=True) + epsilon)
    return (out * weight.float()).to(x.dtype)


class HubRMSNorm(Node):
    """``keras_hub``'s ``LlamaLayerNorm``: x [..., D] -> ``x · rsqrt(mean(x², -1) + ε) · weight``, in float32."""

    op = "keras_hub_rms_norm"
    reads_mask = False
    supports_masking = True

    def __init__(self, *, features: int, epsilon: float) -> None:
        super().__init__()
        self.epsilon = epsilon
        self.weight = nn.Parameter(torch.ones(features))

    def compute(self, x, mask):
        return _rms(x, self.weight, self.epsilon)


@keras_layer("LlamaLayerNorm", package="keras_hub")
def convert_rms_norm(record, arrays, ctx):
    expect_variables(arrays, 1, f"{record.class_name} (its scale)")
    epsilon = record.config.get("epsilon", 1e-6)
    if not isinstance(epsilon, (int, float)) or isinstance(epsilon, bool) or epsilon < 0:
        raise Refused(f"epsilon {epsilon!r} is not a number >= 0")
    spec = {"op": HubRMSNorm.op, "features": int(arrays[0].shape[0]), "epsilon": float(epsilon)}
    return Converted(spec, {"weight": as_tensor(arrays[0])})


@writes(HubRMSNorm)
def write_rms_norm(w: Writer, spec: dict[str, Any]) -> bool:
    """``nn.RMSNorm(D, eps=ε)`` (``weight`` is keras-hub's ``scale``); the mask passes, as the node's."""
    x = w.tensor()
    if x is None or not plain(spec, int, "features") or not plain(spec, float, "epsilon"):
        return False
    layer = w.declare(f"nn.RMSNorm({literal(spec['features'])}, eps={literal(spec['epsilon'])})")
    w.assign(f"{layer}({x})")
    return True


def rotate(x: Tensor, start: int, wavelength: float, *, divisor: Any = None, scale: float = 1.0) -> Tensor:
    """keras-hub's ``RotaryEmbedding`` of x [B, heads, T, d] at positions ``start .. start + T - 1``: with
    ``θ_j = wavelength^(-2j/d) / divisor_j`` (``divisor``: None, a number, or d / 2 factors, Phi-3's short or
    long ones) and ``c = scale`` (Phi-3's su attention factor), ``x · c cos(p θ) + concat(-x₂, x₁) · c sin(p θ)``."""
    d, t = x.shape[-1], x.shape[-2]
    inverse = wavelength ** -(torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d)
    if divisor is not None:
        inverse = inverse / torch.as_tensor(divisor, dtype=torch.float32, device=x.device)
    angles = torch.outer(torch.arange(t, dtype=torch.float32, device=x.device) + start, inverse)
    angles = torch.cat([angles, angles], dim=-1)
    first, second = x.chunk(2, dim=-1)
    turned = torch.cat([-second, first], dim=-1)
    cos, sin = (angles.cos(), angles.sin()) if scale == 1.0 else (angles.cos() * scale, angles.sin() * scale)
    return x * cos.to(x.dtype) + turned * sin.to(x.dtype)


class RotaryDecoder(Node):
    """What keras-hub's rotary decoders compute (the module docstring has the formula): x [B, T, D] -> [B, T, D];
    the output keeps the input's mask. A family's node calls plain ``super().__init__()``, then :meth:`_build`
    with its sizes and the keywords where it differs from Llama: ``head_dim`` (not ``D / H``: Qwen3's),
    ``attention_bias`` (on the query, key and value: Qwen2's), ``query_key_norm`` (the epsilon of an RMSNorm
    over each query and key head before the rotation: Qwen3's), ``empty`` (what a query with no key gets:
    ``"mean"`` or ``"zeros"``, :func:`~attnzoo.layers.attend.keras_attention`), ``feedforward_dropout``
    (Phi-3's); ``intermediate_dim`` 0 builds no SwiGLU (the node computes its own :meth:`_feed_forward`)."""

    supports_masking = True

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
        self._step: Any = None
        self._cache: KVCache | None = None

    # -- cached decoding (attnzoo.keras.decoding's protocol) ------------------------------------------------
    def start_decoding(self, step: Any) -> None:
        self._step, self._cache = step, KVCache(step.batch_size)

    def stop_decoding(self) -> None:
        self._step = self._cache = None

    def _start(self) -> int:
        """The position of the call's first token: 0, or while decoding the tokens the cache holds."""
        return 0 if self._step is None else int(self._step.start)

    def _cached(self, key: Tensor, value: Tensor, padding: Tensor | None) -> tuple[Tensor, Tensor, Tensor | None]:
        """The cache's whole part in a call: while decoding, the call's keys and values [B, g, t, d] join the
        ones held and all of them are attended (the calls carry no padding then); otherwise the call's own,
        masked by its ``padding``. -> (keys, values, padding of the keys)."""
        if self._cache is None:
            return key, value, padding
        key, value, _ = self._cache.append(key, value)
        return key, value, None

    def _positioned(
        self, query: Tensor, key: Tensor, value: Tensor, padding: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """RoPE at the call's positions, then the cache: -> the queries, and the keys, values and their
        padding over every position the queries attend to (a subclass with another rotation overrides it)."""
        start = self._start()
        query, key = rotate(query, start, self.wavelength), rotate(key, start, self.wavelength)
        return (query, *self._cached(key, value, padding))

    def _heads(self, x: Tensor, layer: nn.Linear, heads: int, norm: nn.Module | None = None) -> Tensor:
        b, t, _ = x.shape
        projected = layer(x).reshape(b, t, heads, self.head_dim)
        return (projected if norm is None else norm(projected)).transpose(1, 2)

    def _attend(self, x: Tensor, padding: Tensor | None) -> Tensor:
        b, t, _ = x.shape
        query = self._heads(x, self.query, self.heads, self.query_norm)
        key = self._heads(x, self.key, self.groups, self.key_norm)
        query, key, value, padding = self._positioned(query, key, self._heads(x, self.value, self.groups), padding)
        # the call's queries are the last t of the keys
        allowed = causal_allowed(t, key.shape[-2], padding=padding, device=x.device)
        out = keras_attention(query, key, value, allowed, scale=self.head_dim**-0.5, empty=self.empty)
        if self._cache is not None:
            self._cache.trim()
        out = F.dropout(out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim), self.dropout, self.training)
        return self.output_dense(out)

    def _feed_forward(self, y: Tensor) -> Tensor:
        """SwiGLU: ``W_down · (silu(W_gate · y) ⊙ W_up · y)``."""
        return self.down(F.silu(self.gate(y)) * self.up(y))

    def forward(self, args, kwargs, masks):
        x, own = args[0], masks[0]
        padding = kwargs.get("decoder_padding_mask")
        if kwargs.get("decoder_attention_mask") is not None:
            raise ValueError("is called with decoder_attention_mask, which attnzoo's rotary decoders do not take")
        h = x + F.dropout(self._attend(self.attention_norm(x), padding), self.dropout, self.training)
        y = self._feed_forward(self.feedforward_norm(h))
        return [h + F.dropout(y, self.feedforward_dropout, self.training)], [own]


class HubLlamaDecoder(RotaryDecoder):
    """``keras_hub``'s ``LlamaTransformerDecoder`` (:class:`RotaryDecoder`), and the decoders written alike:
    Qwen2's (``attention_bias``), Qwen3's (``head_dim``, ``query_key_norm``), Phi-3's (``feedforward_dropout``)."""

    op = "keras_hub_llama_decoder"

    def __init__(
        self,
        *,
        hidden: int,
        intermediate_dim: int,
        num_query_heads: int,
        num_key_value_heads: int,
        rope_max_wavelength: float = 10000.0,
        layer_norm_epsilon: float = 1e-6,
        dropout: float = 0.0,
        head_dim: int | None = None,
        attention_bias: bool = False,
        query_key_norm: float | None = None,
        feedforward_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self._build(
            hidden,
            intermediate_dim,
            num_query_heads,
            num_key_value_heads,
            wavelength=rope_max_wavelength,
            epsilon=layer_norm_epsilon,
            dropout=dropout,
            head_dim=head_dim,
            attention_bias=attention_bias,
            query_key_norm=query_key_norm,
            feedforward_dropout=feedforward_dropout,
        )


_ATTENTION = "_self_attention_layer"
LLAMA_ORDER = (
    "_self_attention_layernorm",
    _ATTENTION,
    f"{_ATTENTION}/_query_dense",
    f"{_ATTENTION}/_key_dense",
    f"{_ATTENTION}/_value_dense",
    f"{_ATTENTION}/_output_dense",
    "_feedforward_layernorm",
    "_feedforward_gate_dense",
    "_feedforward_intermediate_dense",
    "_feedforward_output_dense",
)
_LLAMA_31 = ("rope_low_freq_factor", "rope_high_freq_factor", "rope_frequency_adjustment_factor")


@keras_layer(
    "LlamaTransformerDecoder",
    package="keras_hub",
    call_arguments=("decoder_padding_mask", "decoder_attention_mask"),
    child_order=LLAMA_ORDER,
    positional=("decoder_sequence",),
)
def convert_llama_decoder(record, arrays, ctx):
    expect_variables(arrays, 9, "LlamaTransformerDecoder (2 norms, 4 attention kernels, 3 feed-forward kernels)")
    c = record.config
    for name in (*_LLAMA_31, "rope_pretraining_sequence_length"):
        if c.get(name) is not None:
            raise Refused(f"{name}={c[name]!r} (Llama 3.1's frequency adjustment) is not supported")
    scaling = c.get("rope_position_scaling_factor", c.get("rope_scaling_factor", 1.0))
    if scaling not in (None, 1, 1.0):
        raise Refused(f"rope_position_scaling_factor={scaling!r} is not supported (only 1.0)")
    roles = ("attention_norm", "query", "key", "value", "output_dense", "feedforward_norm", "gate", "up", "down")
    sizes, state = rotary_decoder_parts(dict(zip(roles, arrays, strict=True)), "a Llama attention")
    if "head_dim" in sizes:
        raise Refused(f"attention kernels {[list(a.shape) for a in arrays[1:5]]} are not a Llama attention's")
    spec = {
        "op": HubLlamaDecoder.op,
        **sizes,
        "rope_max_wavelength": float(c.get("rope_max_wavelength", 10000)),
        "layer_norm_epsilon": float(c.get("layer_norm_epsilon", 1e-6)),
        "dropout": float(c.get("dropout", 0.0) or 0.0),
    }
    return Converted(spec, state, ["keras-hub LlamaTransformerDecoder: RMSNorm, grouped-query attention, SwiGLU"])


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


# -- the family's Hugging Face form -------------------------------------------------------------------------
LLAMA_MAX_POSITIONS = 4096  # Llama 2's context; keras-hub's LlamaBackbone records none


def _llama_config(m: HubSource) -> dict[str, Any]:
    for name in (*_LLAMA_31, "rope_pretraining_sequence_length"):
        if m.arguments.get(name) is not None:
            m.refuse(f"{name}={m.arguments[name]!r}: Llama 3.1's frequency adjustment is not converted")
    return {**rotary_config(m, LLAMA_MAX_POSITIONS), "attention_bias": False, "mlp_bias": False}


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


LLAMA = TransformersForm(
    "llama", {"backbone": "LlamaModel", "causal_lm": "LlamaForCausalLM"}, _llama_config, rotary_tensors
)


# -- the family's models -----------------------------------------------------------------------------------
_LLAMA_MODULE = "keras_hub.src.models.llama"


@keras_hub_model("LlamaBackbone", family="llama", causal_lm="LlamaCausalLM", transformers=LLAMA)
def llama_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``LlamaBackbone``: token ids, padding mask -> ``token_embedding`` (``ReversibleEmbedding``, untied
    unless ``tie_word_embeddings``) -> ``num_layers`` ``LlamaTransformerDecoder`` layers (masked by
    ``padding_mask`` as ``decoder_padding_mask``) -> ``sequence_output_layernorm`` (RMSNorm) -> [B, T, D].
    ``LlamaCausalLM``: that graph, then the embedding's reverse call for the logits."""
    return rotary_backbone_graph(
        config,
        where,
        decoder=("LlamaTransformerDecoder", f"{_LLAMA_MODULE}.llama_decoder"),
        norm=("LlamaLayerNorm", f"{_LLAMA_MODULE}.llama_layernorm"),
        settings={key: config.get(key) for key in config if key.startswith("rope_")},
        tied=bool(config.get("tie_word_embeddings", False)),
        name="llama_backbone",
    )


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
