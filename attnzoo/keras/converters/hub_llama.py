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
    "GroupedQueryDecoder",
    "HubLlamaDecoder",
    "rms",
    "rotate",
    "llama_graph",
    "LLAMA",
    "LLAMA_MAX_POSITIONS",
]


def rms(x: Tensor, weight: Tensor, epsilon: float, offset: float = 0.0) -> Tensor:
    """keras-hub's RMSNorm of x [..., D]: ``x · rsqrt(mean(x², -1) + ε) · (offset + weight)``, computed in
    float32 and returned in x's dtype (Gemma's norms scale by ``1 + weight``: ``offset`` 1)."""
    work = x.float()
    out = work * torch.rsqrt(work.square().mean(-1, keepdim=True) + epsilon)
    return (out * (weight.float() + offset if offset else weight.float())).to(x.dtype)


class HubRMSNorm(Node):
    """``keras_hub``'s ``LlamaLayerNorm`` (and, with ``offset`` 1, Gemma's ``RMSNormalization``): x [..., D] ->
    ``x · rsqrt(mean(x², -1) + ε) · (offset + weight)``, in float32."""

    op = "keras_hub_rms_norm"
    reads_mask = False
    supports_masking = True

    def __init__(self, *, features: int, epsilon: float, offset: float = 0.0) -> None:
        super().__init__()
        self.epsilon, self.offset = epsilon, offset
        self.weight = nn.Parameter(torch.ones(features))

    def compute(self, x, mask):
        return rms(x, self.weight, self.epsilon, self.offset)


@keras_layer("LlamaLayerNorm", package="keras_hub")
def convert_rms_norm(record, arrays, ctx):
    expect_variables(arrays, 1, "LlamaLayerNorm (its scale)")
    epsilon = record.config.get("epsilon", 1e-6)
    if not isinstance(epsilon, (int, float)) or isinstance(epsilon, bool) or epsilon < 0:
        raise Refused(f"epsilon {epsilon!r} is not a number >= 0")
    spec = {"op": HubRMSNorm.op, "features": int(arrays[0].shape[0]), "epsilon": float(epsilon)}
    return Converted(spec, {"weight": as_tensor(arrays[0])})


@writes(HubRMSNorm)
def write_rms_norm(w: Writer, spec: dict[str, Any]) -> bool:
    """``nn.RMSNorm(D, eps=ε)`` (``weight`` is keras-hub's ``scale``); the mask passes, as the node's. Gemma's
    ``1 + scale`` (an ``offset``) is no torch layer's: its node is called."""
    x = w.tensor()
    if spec.get("offset") or x is None or not plain(spec, int, "features") or not plain(spec, float, "epsilon"):
        return False
    layer = w.declare(f"nn.RMSNorm({literal(spec['features'])}, eps={literal(spec['epsilon'])})")
    w.assign(f"{layer}({x})")
    return True


def rotate(x: Tensor, start: int, wavelength: float, scaling: float = 1.0) -> Tensor:
    """keras-hub's ``RotaryEmbedding`` of x [B, heads, T, d] at positions ``start .. start + T - 1``; its
    ``scaling_factor`` (linear: every frequency divided by it) is ``scaling``."""
    d, t = x.shape[-1], x.shape[-2]
    inverse = wavelength ** -(torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d)
    if scaling != 1.0:
        inverse = inverse / scaling
    angles = torch.outer(torch.arange(t, dtype=torch.float32, device=x.device) + start, inverse)
    angles = torch.cat([angles, angles], dim=-1)
    first, second = x.chunk(2, dim=-1)
    turned = torch.cat([-second, first], dim=-1)
    return x * angles.cos().to(x.dtype) + turned * angles.sin().to(x.dtype)


class GroupedQueryDecoder(Node):
    """What keras-hub's grouped-query decoders share (Llama's, Gemma's): the heads, the rotary positions, the
    KV cache while decoding, and the attention through :func:`~attnzoo.layers.attend.keras_attention`.

    A subclass builds ``query``, ``key`` and ``value`` (``nn.Linear`` to ``heads · head_dim`` and ``groups ·
    head_dim``) and sets ``heads``, ``groups``, ``head_dim``, ``wavelength`` (and, where its family has them,
    ``scaling``, keras-hub's rotary ``scaling_factor``, and ``window``, the sliding window w: a query reads the
    w latest tokens, its own included), then calls :meth:`_attention`."""

    heads: int
    groups: int
    head_dim: int
    wavelength: float
    scaling: float = 1.0
    window: int | None = None

    def _start_cache(self) -> None:
        self._step: Any = None
        self._cache: KVCache | None = None

    # -- cached decoding (attnzoo.keras.decoding's protocol) ------------------------------------------------
    def start_decoding(self, step: Any) -> None:
        self._step, self._cache = step, KVCache(step.batch_size, limit=self.window)

    def stop_decoding(self) -> None:
        self._step = self._cache = None

    def _cached(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """The layer's one use of its cache: this call's keys and values [B, g, t, d] appended to the held ones
        -> (keys, values) [B, g, S, d] over all held, the call's last (as given when not decoding). A window
        keeps its w latest entries only; no later query reaches the others."""
        if self._cache is None:
            return key, value
        key, value, _ = self._cache.append(key, value)
        self._cache.trim()  # the views returned stay whole: trimming moves the held range only
        return key, value

    def _heads(self, x: Tensor, layer: nn.Linear, heads: int) -> Tensor:
        b, t, _ = x.shape
        return layer(x).reshape(b, t, heads, self.head_dim).transpose(1, 2)

    def _attention(
        self,
        x: Tensor,
        padding: Tensor | None,
        *,
        scale: float,
        soft_cap: float | None = None,
        empty: str = "mean",
        norms: tuple[Any, Any] | None = None,
        dropout: float = 0.0,
    ) -> Tensor:
        """x [B, T, D] -> the heads' attention [B, T, heads · head_dim], before the output projection:
        queries and keys (normalised by ``norms``, Gemma 3's q/k RMSNorms, where given) rotated at their
        positions, attended causally, within the window, over the keys ``padding`` [B, T] keeps (ignored
        while decoding: those calls carry none), by :func:`keras_attention` (``soft_cap``, ``empty``,
        ``dropout`` on the weights)."""
        b, t, _ = x.shape
        start = 0 if self._step is None else int(self._step.start)
        query, key = self._heads(x, self.query, self.heads), self._heads(x, self.key, self.groups)
        if norms is not None:
            query, key = norms[0](query), norms[1](key)
        query = rotate(query, start, self.wavelength, self.scaling)
        key = rotate(key, start, self.wavelength, self.scaling)
        key, value = self._cached(key, self._heads(x, self.value, self.groups))
        # the call's queries are the last t of the keys
        keys = None if self._cache is not None else padding
        allowed = causal_allowed(t, key.shape[-2], window=self.window, padding=keys, device=x.device)
        out = keras_attention(query, key, value, allowed, scale=scale, soft_cap=soft_cap, empty=empty, dropout=dropout)
        return out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim)


class HubLlamaDecoder(GroupedQueryDecoder):
    """``keras_hub``'s ``LlamaTransformerDecoder`` (the module docstring has the formula): x [B, T, D] ->
    [B, T, D]; the output keeps the input's mask."""

    op = "keras_hub_llama_decoder"
    supports_masking = True

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
    ) -> None:
        super().__init__()
        self.heads, self.groups, self.head_dim = num_query_heads, num_key_value_heads, hidden // num_query_heads
        self.wavelength, self.epsilon, self.dropout = rope_max_wavelength, layer_norm_epsilon, dropout
        self.attention_norm = nn.RMSNorm(hidden, eps=layer_norm_epsilon)
        self.query = nn.Linear(hidden, hidden, bias=False)
        self.key = nn.Linear(hidden, num_key_value_heads * self.head_dim, bias=False)
        self.value = nn.Linear(hidden, num_key_value_heads * self.head_dim, bias=False)
        self.output_dense = nn.Linear(hidden, hidden, bias=False)
        self.feedforward_norm = nn.RMSNorm(hidden, eps=layer_norm_epsilon)
        self.gate = nn.Linear(hidden, intermediate_dim, bias=False)
        self.up = nn.Linear(hidden, intermediate_dim, bias=False)
        self.down = nn.Linear(intermediate_dim, hidden, bias=False)
        self._start_cache()

    def _attend(self, x: Tensor, padding: Tensor | None) -> Tensor:
        out = self._attention(x, padding, scale=self.head_dim**-0.5, empty="mean")
        return self.output_dense(F.dropout(out, self.dropout, self.training))

    def forward(self, args, kwargs, masks):
        x, own = args[0], masks[0]
        padding = kwargs.get("decoder_padding_mask")
        if kwargs.get("decoder_attention_mask") is not None:
            raise ValueError("is called with decoder_attention_mask, which attnzoo's Llama decoder does not take")
        h = x + F.dropout(self._attend(self.attention_norm(x), padding), self.dropout, self.training)
        y = self.feedforward_norm(h)
        return [h + self.down(F.silu(self.gate(y)) * self.up(y))], [own]


_ATTENTION = "_self_attention_layer"
_LLAMA_ORDER = (
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
    child_order=_LLAMA_ORDER,
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
    norm, query, key, value, output, ff_norm, gate, up, down = arrays
    hidden, heads, head_dim = query.shape
    groups = key.shape[1]
    if (
        heads * head_dim != hidden
        or heads % groups
        or key.shape != value.shape
        or output.shape != (heads, head_dim, hidden)
    ):
        raise Refused(f"attention kernels {[list(a.shape) for a in arrays[1:5]]} are not a Llama attention's")
    spec = {
        "op": HubLlamaDecoder.op,
        "hidden": int(hidden),
        "intermediate_dim": int(gate.shape[1]),
        "num_query_heads": int(heads),
        "num_key_value_heads": int(groups),
        "rope_max_wavelength": float(c.get("rope_max_wavelength", 10000)),
        "layer_norm_epsilon": float(c.get("layer_norm_epsilon", 1e-6)),
        "dropout": float(c.get("dropout", 0.0) or 0.0),
    }
    state = {
        "attention_norm.weight": as_tensor(norm),
        "query.weight": as_tensor(query.reshape(hidden, -1).T),
        "key.weight": as_tensor(key.reshape(hidden, -1).T),
        "value.weight": as_tensor(value.reshape(hidden, -1).T),
        "output_dense.weight": as_tensor(output.reshape(-1, hidden).T),
        "feedforward_norm.weight": as_tensor(ff_norm),
        "gate.weight": as_tensor(gate.T),
        "up.weight": as_tensor(up.T),
        "down.weight": as_tensor(down.T),
    }
    return Converted(spec, state, ["keras-hub LlamaTransformerDecoder: RMSNorm, grouped-query attention, SwiGLU"])


# -- the family's Hugging Face form -------------------------------------------------------------------------
LLAMA_MAX_POSITIONS = 4096  # Llama 2's context; keras-hub's LlamaBackbone records none


def _llama_config(m: HubSource) -> dict[str, Any]:
    for name in (*_LLAMA_31, "rope_pretraining_sequence_length"):
        if m.arguments.get(name) is not None:
            m.refuse(f"{name}={m.arguments[name]!r}: Llama 3.1's frequency adjustment is not converted")
    heads = m.size("num_query_heads")
    wavelength = float(m.arguments.get("rope_max_wavelength") or 10000)
    return {
        "vocab_size": m.size("vocabulary_size"),
        "hidden_size": m.size("hidden_dim"),
        "intermediate_size": m.size("intermediate_dim"),
        "num_hidden_layers": m.size("num_layers"),
        "num_attention_heads": heads,
        "num_key_value_heads": m.size("num_key_value_heads"),
        "head_dim": m.size("hidden_dim") // heads,
        "hidden_act": "silu",
        "max_position_embeddings": LLAMA_MAX_POSITIONS,
        "rms_norm_eps": float(m.spec("sequence_output_layernorm")["epsilon"]),
        "rope_theta": wavelength,  # transformers 4's key; 5 reads rope_parameters (and takes this one too)
        "rope_parameters": {"rope_type": "default", "rope_theta": wavelength},
        "attention_bias": False,
        "mlp_bias": False,
        "attention_dropout": float(m.arguments.get("dropout") or 0.0),
        "tie_word_embeddings": not m.holds("token_embedding.reverse_weight"),
        **{key: m.special.get(key) for key in ("bos_token_id", "eos_token_id", "pad_token_id")},
    }


_LLAMA_WEIGHTS = (
    ("input_layernorm", "attention_norm"),
    ("self_attn.q_proj", "query"),
    ("self_attn.k_proj", "key"),
    ("self_attn.v_proj", "value"),
    ("self_attn.o_proj", "output_dense"),
    ("post_attention_layernorm", "feedforward_norm"),
    ("mlp.gate_proj", "gate"),
    ("mlp.up_proj", "up"),
    ("mlp.down_proj", "down"),
)


def _llama_tensors(m: HubSource) -> Tensors:
    """transformers' Llama weights: the converted ``nn.Linear`` / ``nn.RMSNorm`` weights as they are."""
    base = "model." if m.kind == "causal_lm" else ""
    yield f"{base}embed_tokens.weight", m.tensor("token_embedding.weight")
    for i in range(m.size("num_layers")):
        for theirs, ours in _LLAMA_WEIGHTS:
            yield f"{base}layers.{i}.{theirs}.weight", m.tensor(f"transformer_layer_{i}.{ours}.weight")
    yield f"{base}norm.weight", m.tensor("sequence_output_layernorm.weight")
    if m.kind == "causal_lm" and m.holds("token_embedding.reverse_weight"):  # untied: a head of its own
        yield "lm_head.weight", m.tensor("token_embedding.reverse_weight").T


LLAMA = TransformersForm(
    "llama", {"backbone": "LlamaModel", "causal_lm": "LlamaForCausalLM"}, _llama_config, _llama_tensors
)


# -- the family's models -----------------------------------------------------------------------------------
_LLAMA_MODULE = "keras_hub.src.models.llama"


@keras_hub_model("LlamaBackbone", family="llama", causal_lm="LlamaCausalLM", transformers=LLAMA)
def llama_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``LlamaBackbone``: token ids, padding mask -> ``token_embedding`` (``ReversibleEmbedding``, untied
    unless ``tie_word_embeddings``) -> ``num_layers`` ``LlamaTransformerDecoder`` layers (masked by
    ``padding_mask`` as ``decoder_padding_mask``) -> ``sequence_output_layernorm`` (RMSNorm) -> [B, T, D].
    ``LlamaCausalLM``: that graph, then the embedding's reverse call for the logits."""
    g = HubGraph(config.get("dtype"))
    hidden, heads = positive(config, "hidden_dim", where), positive(config, "num_query_heads", where)
    groups = positive(config, "num_key_value_heads", where)
    if hidden % heads or heads % groups:
        raise WeightsError(
            f"{where}: hidden_dim {hidden}, {heads} query heads and {groups} key/value heads do not divide"
        )
    tokens, padding = g.input("token_ids"), g.input("padding_mask")
    tied = bool(config.get("tie_word_embeddings", False))
    embedding = {"input_dim": positive(config, "vocabulary_size", where), "output_dim": hidden, "tie_weights": tied}
    x = g.layer("ReversibleEmbedding", "token_embedding", embedding, [tensor(tokens)])
    epsilon = number(config, "layer_norm_epsilon", where, 1e-6)
    settings = {key: config.get(key) for key in config if key.startswith("rope_")}
    settings.update(
        intermediate_dim=positive(config, "intermediate_dim", where),
        num_query_heads=heads,
        num_key_value_heads=groups,
        layer_norm_epsilon=epsilon,
        dropout=number(config, "dropout", where, 0.0),
    )
    for i in range(positive(config, "num_layers", where)):
        x = g.hub_layer(
            "LlamaTransformerDecoder",
            f"transformer_layer_{i}",
            settings,
            [tensor(x)],
            f"{_LLAMA_MODULE}.llama_decoder",
            decoder_padding_mask=tensor("padding_mask"),
        )
    norm = f"{_LLAMA_MODULE}.llama_layernorm"
    x = g.hub_layer("LlamaLayerNorm", "sequence_output_layernorm", {"epsilon": epsilon}, [tensor(x)], norm)
    return g.functional(str(config.get("name", "llama_backbone")), {"token_ids": tokens, "padding_mask": padding}, x)
