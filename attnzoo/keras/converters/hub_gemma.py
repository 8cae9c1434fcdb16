"""keras-hub's Gemma family (Gemma 1 and 2): ``GemmaBackbone`` and ``GemmaCausalLM`` rebuilt from their arguments
(:func:`gemma_graph`), and their layers converted without keras-hub: ``RMSNormalization`` and
``GemmaDecoderBlock`` (whose node Gemma 3's block shares, :mod:`attnzoo.keras.converters.hub_gemma3`).

* ``RMSNormalization`` (Gemma's, and Gemma 3's): x [..., D] -> ``x · rsqrt(mean(x², -1) + ε) · (1 + scale)``,
  in float32; the node of ``LlamaLayerNorm`` with ``offset`` 1
  (:class:`~attnzoo.keras.converters.hub_llama.HubRMSNorm`).
* The backbone: ids [B, T] -> ``token_embedding`` (tied ``ReversibleEmbedding``) · ``sqrt(D)`` (the factor
  rounded to the compute dtype, as ``ops.cast`` does) -> ``num_layers`` decoder blocks -> ``final_normalization``
  -> [B, T, D]. The causal LM's logits are the table's reverse call, ``tanh(l / c) · c`` with Gemma 2's
  ``final_logit_soft_cap`` c (:mod:`attnzoo.keras.converters.reversible_embedding`).
* ``GemmaDecoderBlock``: x [B, T, D] -> ``h = x + post_attn(Wo · attention(rms(x)))``, then
  ``h + post_ffw(W_down · (gelu_tanh(W_gate · rms(h)) ⊙ W_up · rms(h)))`` [B, T, D], with no biases; the two
  post norms only where ``use_post_attention_norm`` / ``use_post_ffw_norm`` (Gemma 2). The attention is
  grouped-query (``H`` query heads of ``head_dim`` d share ``g`` key/value heads), keras-hub's rotary
  embedding at wavelength 10 000 on both (keras-hub then interleaves the halves of q and of k alike, which
  leaves every q·k as it was, so the halves are kept), scores ``q·kᵀ / √d`` (keras-hub's block passes
  ``query_head_dim_normalize=True`` to its attention whatever its own argument says, so the scale is always
  ``1 / √head_dim``), soft-capped ``c · tanh(s / c)`` by Gemma 2's ``attention_logit_soft_cap``, masked
  causally, by the padding and, in the even layers of a model with ``use_sliding_window_attention``, to the
  ``sliding_window_size`` w latest tokens (query i reads key j when ``i - j < w``), softmax in float32. A
  query row with no key left is zeros (keras-hub wipes it; its Softmax layer gives zeros too).

While decoding (:mod:`attnzoo.keras.decoding`, the model given a :class:`~attnzoo.layers.kv_cache.DecodingCache`)
a block's keys and values go into its :class:`~attnzoo.layers.kv_cache.KVCache` there, which a windowed layer
keeps at its w latest entries.

Hugging Face form (:data:`GEMMA`): a model without post norms, soft caps or sliding window is transformers'
Gemma (``GemmaModel``, ``GemmaForCausalLM``: its ``post_attention_layernorm`` is keras-hub's ``pre_ffw_norm``);
one with both post norms is Gemma 2 (``Gemma2Model``, ``Gemma2ForCausalLM``: config.json's ``model_type`` and
``architectures`` say so, its ``layer_types`` name each layer's window, ``query_pre_attn_scalar`` is
``head_dim``); any other mix has no transformers class and is refused. Query and key kernels go as they are
(both turn halves), the table is tied (keras-hub's Gemma always is).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.errors import WeightsError
from attnzoo.keras.arguments import as_tensor, expect_shape
from attnzoo.keras.converters.hub_llama import HubRMSNorm
from attnzoo.keras.converters.hub_rotary import RotaryDecoder
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import HubGraph, number, positive, tensor
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm

__all__ = [
    "HubGemmaDecoder",
    "gemma_decoder",
    "gemma_embeddings",
    "gemma_graph",
    "gemma_tensors",
    "GEMMA",
    "GEMMA_ORDER",
    "GEMMA_MAX_POSITIONS",
]

_HALF_MAX = 65504.0  # float16's largest value, where Gemma 3's block clips float16 sums


class HubGemmaDecoder(RotaryDecoder):
    """``keras_hub``'s ``GemmaDecoderBlock`` and ``Gemma3DecoderBlock`` (the module docstring has the formula;
    Gemma 3's adds ``query_key_norm``, RMSNorms of each query and key head before the rotation, its layer's
    rotary wavelength and scaling, and float16 sums clipped to ±65504): x [B, T, D] -> [B, T, D]; the output
    keeps the input's mask."""

    op = "keras_hub_gemma_decoder"
    supports_masking = True

    def __init__(
        self,
        *,
        hidden: int,
        intermediate_dim: int,
        head_dim: int,
        num_query_heads: int,
        num_key_value_heads: int,
        layer_norm_epsilon: float = 1e-6,
        post_attention_norm: bool = False,
        post_ffw_norm: bool = False,
        query_key_norm: bool = False,
        logit_soft_cap: float | None = None,
        sliding_window: int | None = None,
        rope_max_wavelength: float = 10000.0,
        rope_scaling_factor: float = 1.0,
        clip_float16: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.heads, self.groups, self.head_dim = num_query_heads, num_key_value_heads, head_dim
        self.wavelength, self.scaling, self.window = rope_max_wavelength, rope_scaling_factor, sliding_window
        self.soft_cap, self.clip_float16, self.dropout = logit_soft_cap, clip_float16, dropout

        def norm(features: int, epsilon: float = layer_norm_epsilon) -> HubRMSNorm:
            return HubRMSNorm(features=features, epsilon=epsilon, offset=1.0)

        self.pre_attention_norm = norm(hidden)
        self.query = nn.Linear(hidden, num_query_heads * head_dim, bias=False)
        self.key = nn.Linear(hidden, num_key_value_heads * head_dim, bias=False)
        self.value = nn.Linear(hidden, num_key_value_heads * head_dim, bias=False)
        self.output_dense = nn.Linear(num_query_heads * head_dim, hidden, bias=False)
        # keras-hub's Gemma 3 attention builds its q/k norms with its own default ε, 1e-6
        self.query_norm = norm(head_dim, 1e-6) if query_key_norm else None
        self.key_norm = norm(head_dim, 1e-6) if query_key_norm else None
        self.post_attention_norm = norm(hidden) if post_attention_norm else None
        self.pre_ffw_norm = norm(hidden)
        self.gate = nn.Linear(hidden, intermediate_dim, bias=False)
        self.up = nn.Linear(hidden, intermediate_dim, bias=False)
        self.down = nn.Linear(intermediate_dim, hidden, bias=False)
        self.post_ffw_norm = norm(hidden) if post_ffw_norm else None

    def _add(self, x: Tensor, y: Tensor) -> Tensor:
        """A residual sum; in float16 with ``clip_float16``, summed in float32 and clipped (Gemma 3's block)."""
        if self.clip_float16 and x.dtype == torch.float16:
            return (x.float() + y.float()).clamp(-_HALF_MAX, _HALF_MAX).to(x.dtype)
        return x + y

    def forward(self, args, kwargs, masks):
        x, own = args[0], masks[0]
        if self.clip_float16 and x.dtype == torch.float16:
            x = x.clamp(-_HALF_MAX, _HALF_MAX)
        norms = None
        if self.query_norm is not None and self.key_norm is not None:
            query_norm, key_norm = self.query_norm, self.key_norm
            norms = (lambda q: query_norm.compute(q, None), lambda k: key_norm.compute(k, None))
        rate = self.dropout if self.training else 0.0  # Keras's dropout, on the weights and the attention output
        attention = self._attention(
            self.pre_attention_norm.compute(x, None),
            kwargs.get("padding_mask"),
            self.keys_values(kwargs, x.shape[0], self.window),
            scale=self.head_dim**-0.5,
            soft_cap=self.soft_cap,
            empty="zeros",
            norms=norms,
            dropout=rate,
        )
        attention = self.output_dense(attention)
        if self.post_attention_norm is not None:
            attention = self.post_attention_norm.compute(attention, None)
        h = self._add(x, F.dropout(attention, rate) if rate else attention)
        y = self.pre_ffw_norm.compute(h, None)
        y = self.down(F.gelu(self.gate(y), approximate="tanh") * self.up(y))
        if self.post_ffw_norm is not None:
            y = self.post_ffw_norm.compute(y, None)
        return [self._add(h, y)], [own]


# the sub-layers whose variables make up a block's weights, in this order (those a block has)
GEMMA_ORDER = (
    "pre_attention_norm",
    "attention",
    "attention/query_dense",
    "attention/key_dense",
    "attention/value_dense",
    "attention/output_dense",
    "attention/query_norm",
    "attention/key_norm",
    "post_attention_norm",
    "pre_ffw_norm",
    "gating_ffw",
    "gating_ffw_2",
    "ffw_linear",
    "post_ffw_norm",
)


def _window(c: dict[str, Any]) -> int | None:
    if not c.get("use_sliding_window_attention", False):
        return None
    size = c.get("sliding_window_size", 4096)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise Refused(f"sliding_window_size {size!r} is not a positive int")
    return size


def _cap(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise Refused(f"{name} {value!r} is not a positive number")
    return float(value)


def _gemma_variables(c: dict[str, Any], arrays: list[np.ndarray], query_key_norm: bool) -> dict[str, np.ndarray]:
    """A block's variables by the node's names, in :data:`GEMMA_ORDER` (those its config makes), each of the
    shape the query kernel [H, D, d], the key kernel's g and the gate's width F make it."""
    names = [
        "pre_attention_norm",
        "query",
        "key",
        "value",
        "output_dense",
        *(("query_norm", "key_norm") if query_key_norm else ()),
        *(("post_attention_norm",) if c.get("use_post_attention_norm") else ()),
        "pre_ffw_norm",
        "gate",
        "up",
        "down",
        *(("post_ffw_norm",) if c.get("use_post_ffw_norm") else ()),
    ]
    if len(arrays) != len(names):
        raise Refused(f"has {len(arrays)} variables {[list(a.shape) for a in arrays]}; its config makes {len(names)}")
    found = dict(zip(names, arrays, strict=True))
    expect_shape(found["query"], [None, None, None], "query kernel")
    expect_shape(found["key"], [None, None, None], "key kernel")
    expect_shape(found["gate"], [None, None], "ffw_gating kernel")
    (heads, hidden, head_dim), groups, width = found["query"].shape, found["key"].shape[0], found["gate"].shape[1]
    shapes = {
        "key": [groups, hidden, head_dim],
        "value": [groups, hidden, head_dim],
        "output_dense": [heads, head_dim, hidden],
        "query_norm": [head_dim],
        "key_norm": [head_dim],
        "gate": [hidden, width],
        "up": [hidden, width],
        "down": [width, hidden],
    }
    for name, array in found.items():
        if name != "query":
            expect_shape(array, shapes.get(name, [hidden]), name)  # the rest are norms of the hidden state
    return found


def gemma_decoder(
    record: Any, arrays: list[np.ndarray], *, query_key_norm: bool, gate_reduction: int, **rope: Any
) -> Converted:
    """A Gemma block's spec and tensors from its config and variables (in :data:`GEMMA_ORDER`): the sizes read
    from the kernels and checked against the config; ``rope``: Gemma 3's ``rope_max_wavelength``,
    ``rope_scaling_factor`` and ``clip_float16``."""
    c = record.config
    v = _gemma_variables(c, arrays, query_key_norm)
    (heads, hidden, head_dim), groups, width = v["query"].shape, v["key"].shape[0], v["gate"].shape[1]
    sizes = {"num_query_heads": heads, "num_key_value_heads": groups, "head_dim": head_dim, "hidden_dim": hidden}
    for name, actual in (*sizes.items(), ("intermediate_dim", width * gate_reduction)):
        if c.get(name, actual) != actual:
            raise Refused(f"its config says {name}={c.get(name)!r} but its kernels make it {actual}")
    if heads % groups:
        raise Refused(f"{heads} query heads do not share {groups} key/value heads evenly")
    spec = {
        "op": HubGemmaDecoder.op,
        "hidden": int(hidden),
        "intermediate_dim": int(width),
        "head_dim": int(head_dim),
        "num_query_heads": int(heads),
        "num_key_value_heads": int(groups),
        "layer_norm_epsilon": float(c.get("layer_norm_epsilon", 1e-6)),
        "post_attention_norm": "post_attention_norm" in v,
        "post_ffw_norm": "post_ffw_norm" in v,
        "query_key_norm": query_key_norm,
        "logit_soft_cap": _cap(c.get("logit_soft_cap"), "logit_soft_cap"),
        "sliding_window": _window(c),
        "dropout": float(c.get("dropout", 0.0) or 0.0),
        **rope,
    }
    # EinsumDense kernels as nn.Linear's [out, in]: the heads' [H, D, d] as [H·d, D], the output's [H, d, D] as
    # [D, H·d]; the norms' scales as they are
    heads_first = {name: np.transpose(v[name], (1, 0, 2)).reshape(hidden, -1).T for name in ("query", "key", "value")}
    kernels = {**heads_first, "output_dense": v["output_dense"].reshape(-1, hidden).T}
    kernels.update({name: v[name].T for name in ("gate", "up", "down")})
    state = {f"{name}.weight": as_tensor(kernels.get(name, array)) for name, array in v.items()}
    return Converted(
        spec, state, [f"keras-hub {record.class_name}: RMSNorm (1 + scale), grouped-query attention, GeGLU"]
    )


@keras_layer("GemmaDecoderBlock", package="keras_hub", call_arguments=("padding_mask",), child_order=GEMMA_ORDER)
def convert_gemma_decoder(record, arrays, ctx):
    return gemma_decoder(record, arrays, query_key_norm=False, gate_reduction=2)


# Gemma's and Gemma 3's RMSNormalization (1 + scale); keras-hub's other classes of that name compute otherwise
_GEMMA_NORMS = ("keras_hub.src.models.gemma.rms_normalization", "keras_hub.src.models.gemma3.gemma3_layers")


@keras_layer("RMSNormalization", package="keras_hub")
def convert_rms_normalization(record, arrays, ctx):
    if record.module not in _GEMMA_NORMS:
        raise Refused(
            f"keras-hub's RMSNormalization of {record.module or 'no module'} is not Gemma's (x · (1 + scale)); "
            f"attnzoo converts Gemma's and Gemma 3's"
        )
    if len(arrays) != 1 or arrays[0].ndim != 1:
        raise Refused(f"has variables {[list(a.shape) for a in arrays]}; Gemma's RMSNormalization has one scale [D]")
    epsilon = record.config.get("epsilon", 1e-6)
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or epsilon < 0:
        raise Refused(f"epsilon {epsilon!r} is not a number >= 0")
    spec = {"op": HubRMSNorm.op, "features": int(arrays[0].shape[0]), "epsilon": float(epsilon), "offset": 1.0}
    return Converted(spec, {"weight": as_tensor(arrays[0])})


# -- the family's models -----------------------------------------------------------------------------------
_GEMMA = "keras_hub.src.models.gemma"


def _compute_dtype(policy: Any) -> torch.dtype:
    """The compute dtype of a recorded Keras dtype policy (``"bfloat16"``, ``"mixed_bfloat16"``, its record)."""
    name = policy.get("config", {}).get("name") if isinstance(policy, dict) else policy
    name = str(name or "float32").removeprefix("mixed_")
    return {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(name, torch.float32)


def gemma_embeddings(g: HubGraph, config: dict[str, Any], where: str) -> tuple[str, int]:
    """The inputs, ``token_embedding`` (tied; ``final_logit_soft_cap`` on its reverse call) and its scaling by
    ``sqrt(hidden_dim)`` cast to the compute dtype (an ``ops.multiply`` by that constant, as keras records
    it) -> (the scaled embeddings, hidden_dim). Gemma's and Gemma 3's backbones start alike."""
    g.input("token_ids")
    g.input("padding_mask")
    hidden = positive(config, "hidden_dim", where)
    cap = config.get("final_logit_soft_cap")
    if cap is not None:
        cap = number(config, "final_logit_soft_cap", where, 0.0)
    embedding = {
        "input_dim": positive(config, "vocabulary_size", where),
        "output_dim": hidden,
        "tie_weights": True,
        "logit_soft_cap": cap,
    }
    x = g.layer("ReversibleEmbedding", "token_embedding", embedding, [tensor("token_ids")])
    factor = float(torch.tensor(math.sqrt(hidden), dtype=_compute_dtype(config.get("dtype"))))
    return g.operation("Multiply", "multiply", [tensor(x), factor]), hidden


def gemma_block_settings(config: dict[str, Any], where: str, hidden: int) -> dict[str, Any]:
    """A decoder block's arguments the Gemma backbones pass alike (sizes, norms, soft cap, window size)."""
    heads, groups = positive(config, "num_query_heads", where), positive(config, "num_key_value_heads", where)
    if heads % groups:
        raise WeightsError(f"{where}: {heads} query heads do not share {groups} key/value heads evenly")
    return {
        "hidden_dim": hidden,
        "intermediate_dim": positive(config, "intermediate_dim", where),
        "head_dim": positive(config, "head_dim", where),
        "num_query_heads": heads,
        "num_key_value_heads": groups,
        "layer_norm_epsilon": number(config, "layer_norm_epsilon", where, 1e-6),
        "dropout": number(config, "dropout", where, 0.0),
        "use_post_ffw_norm": bool(config.get("use_post_ffw_norm", False)),
        "use_post_attention_norm": bool(config.get("use_post_attention_norm", False)),
        "logit_soft_cap": config.get("attention_logit_soft_cap"),
        "sliding_window_size": positive(config, "sliding_window_size", where, 4096),
        "query_head_dim_normalize": bool(config.get("query_head_dim_normalize", True)),
    }


def gemma_output(g: HubGraph, x: str, config: dict[str, Any], where: str, module: str) -> dict[str, Any]:
    """``final_normalization`` (the family's RMSNormalization of ``module``) and the backbone's record."""
    epsilon = number(config, "layer_norm_epsilon", where, 1e-6)
    x = g.hub_layer("RMSNormalization", "final_normalization", {"epsilon": epsilon}, [tensor(x)], module)
    inputs = {"token_ids": "token_ids", "padding_mask": "padding_mask"}
    return g.functional(str(config.get("name", "gemma_backbone")), inputs, x)


# -- the family's Hugging Face form -------------------------------------------------------------------------
GEMMA_MAX_POSITIONS = 8192  # Gemma's context; keras-hub's GemmaBackbone records none


def gemma_common(m: HubSource) -> dict[str, Any]:
    """config.json's entries every Gemma form shares (Gemma, Gemma 2, Gemma 3's text model)."""
    return {
        "vocab_size": m.size("vocabulary_size"),
        "hidden_size": m.size("hidden_dim"),
        "intermediate_size": int(m.spec("decoder_block_0")["intermediate_dim"]),
        "num_hidden_layers": m.size("num_layers"),
        "num_attention_heads": m.size("num_query_heads"),
        "num_key_value_heads": m.size("num_key_value_heads"),
        "head_dim": m.size("head_dim"),
        "rms_norm_eps": float(m.spec("final_normalization")["epsilon"]),
        "attention_bias": False,
        "attention_dropout": float(m.arguments.get("dropout") or 0.0),
        "tie_word_embeddings": True,
        **{key: m.special.get(key) for key in ("bos_token_id", "eos_token_id", "pad_token_id")},
    }


def _gemma_config(m: HubSource) -> dict[str, Any]:
    post = (bool(m.arguments.get("use_post_attention_norm")), bool(m.arguments.get("use_post_ffw_norm")))
    caps = {key: m.arguments.get(key) for key in ("attention_logit_soft_cap", "final_logit_soft_cap")}
    sliding = bool(m.arguments.get("use_sliding_window_attention"))
    rope = {"rope_theta": 10000.0, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
    if post == (False, False) and not sliding and not any(v is not None for v in caps.values()):
        return {
            **gemma_common(m),
            **rope,
            "hidden_act": "gelu_pytorch_tanh",
            "max_position_embeddings": GEMMA_MAX_POSITIONS,
        }
    if post != (True, True):
        m.refuse(
            f"use_post_attention_norm={post[0]} with use_post_ffw_norm={post[1]} (and soft caps {caps}, sliding "
            f"window {sliding}) is neither transformers' Gemma (no post norms, caps or window) nor its Gemma 2 "
            f"(both post norms)"
        )
    kind = "Gemma2Model" if m.kind == "backbone" else "Gemma2ForCausalLM"
    layers = m.size("num_layers")
    return {
        "model_type": "gemma2",  # the door writes the form's own first; Gemma 2 is this form's other class
        "architectures": [kind],
        **gemma_common(m),
        **rope,
        "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": GEMMA_MAX_POSITIONS,
        "query_pre_attn_scalar": m.size("head_dim"),  # keras-hub scales by 1/√head_dim (see the docstring)
        "sliding_window": m.size("sliding_window_size", 4096),
        "layer_types": ["sliding_attention" if sliding and i % 2 == 0 else "full_attention" for i in range(layers)],
        "final_logit_softcapping": caps["final_logit_soft_cap"],
        "attn_logit_softcapping": caps["attention_logit_soft_cap"],
    }


def gemma_tensors(m: HubSource, *, post_norms: bool, query_key_norm: bool = False) -> Tensors:
    """transformers' Gemma weights (Gemma 2's and 3's with ``post_norms``, Gemma 3's q/k norms with
    ``query_key_norm``): the converted ``nn.Linear`` weights and the norms' ``scale`` as they are (transformers'
    Gemma RMSNorm also scales by ``1 + weight``)."""
    base = "model." if m.kind == "causal_lm" else ""
    yield f"{base}embed_tokens.weight", m.tensor("token_embedding.weight")
    names = [
        ("input_layernorm", "pre_attention_norm"),
        ("self_attn.q_proj", "query"),
        ("self_attn.k_proj", "key"),
        ("self_attn.v_proj", "value"),
        ("self_attn.o_proj", "output_dense"),
        ("mlp.gate_proj", "gate"),
        ("mlp.up_proj", "up"),
        ("mlp.down_proj", "down"),
    ]
    if post_norms:
        names += [
            ("post_attention_layernorm", "post_attention_norm"),
            ("pre_feedforward_layernorm", "pre_ffw_norm"),
            ("post_feedforward_layernorm", "post_ffw_norm"),
        ]
    else:  # transformers' Gemma calls the norm before its MLP post_attention_layernorm
        names.append(("post_attention_layernorm", "pre_ffw_norm"))
    if query_key_norm:
        names += [("self_attn.q_norm", "query_norm"), ("self_attn.k_norm", "key_norm")]
    for i in range(m.size("num_layers")):
        for theirs, ours in names:
            yield f"{base}layers.{i}.{theirs}.weight", m.tensor(f"decoder_block_{i}.{ours}.weight")
    yield f"{base}norm.weight", m.tensor("final_normalization.weight")


def _gemma_tensors(m: HubSource) -> Tensors:
    return gemma_tensors(m, post_norms=bool(m.arguments.get("use_post_attention_norm")))


GEMMA = TransformersForm(
    "gemma", {"backbone": "GemmaModel", "causal_lm": "GemmaForCausalLM"}, _gemma_config, _gemma_tensors
)


@keras_hub_model("GemmaBackbone", family="gemma", causal_lm="GemmaCausalLM", transformers=GEMMA)
def gemma_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``GemmaBackbone``: token ids, padding mask -> the scaled embeddings -> ``num_layers``
    ``GemmaDecoderBlock`` layers (masked by ``padding_mask``; the even ones windowed with
    ``use_sliding_window_attention``) -> ``final_normalization`` -> [B, T, D]. ``GemmaCausalLM``: that graph,
    then the embedding's reverse call (soft-capped by ``final_logit_soft_cap``) for the logits."""
    g = HubGraph(config.get("dtype"))
    x, hidden = gemma_embeddings(g, config, where)
    settings = gemma_block_settings(config, where, hidden)
    sliding = bool(config.get("use_sliding_window_attention", False))
    for i in range(positive(config, "num_layers", where)):
        layer = {**settings, "use_sliding_window_attention": sliding and i % 2 == 0}
        module = f"{_GEMMA}.gemma_decoder_block"
        x = g.hub_layer(
            "GemmaDecoderBlock", f"decoder_block_{i}", layer, [tensor(x)], module, padding_mask=tensor("padding_mask")
        )
    return gemma_output(g, x, config, where, f"{_GEMMA}.rms_normalization")
