"""keras-hub's Llama family: ``LlamaBackbone`` and ``LlamaCausalLM`` rebuilt from their arguments
(:func:`llama_graph`), and their layers converted without keras-hub: ``LlamaLayerNorm`` and
``LlamaTransformerDecoder``.

* ``LlamaLayerNorm`` (RMSNorm): x [..., D] -> ``x · rsqrt(mean(x², -1) + ε) · scale``, computed in float32;
  written as ``nn.RMSNorm(D, eps=ε)``. The same node, with an ``offset`` of 1, is Gemma's ``RMSNormalization``
  (``· (1 + scale)``), called as a node.
* ``LlamaTransformerDecoder``: the rotary decoder of :mod:`attnzoo.keras.converters.hub_rotary` (RMSNorm,
  grouped-query attention with keras-hub's rotary embedding, SwiGLU, no biases). A query row with no key to
  read (a left-padded position) gets the mean of every value, as keras's fused attention gives it
  (:func:`attnzoo.layers.attend.keras_attention`).

Llama 3.1's frequency adjustment (``rope_frequency_adjustment_factor`` f, ``rope_low_freq_factor`` l,
``rope_high_freq_factor`` h, ``rope_pretraining_sequence_length`` L), as keras-hub's ``LlamaRotaryEmbedding``
computes it: with θ_j and its wavelength ``λ_j = 2π / θ_j``, θ_j / f where ``λ_j > L / l``, θ_j where
``λ_j < L / h``, and between them ``(1 - s) θ_j / f + s θ_j`` with ``s = (L / λ_j - l) / (h - l)``
(:func:`llama3_divisors`). ``rope_position_scaling_factor`` is not applied: keras-hub 0.32's
``LlamaRotaryEmbedding`` passes it to its base class as the linear scaling factor, but computes its
frequencies in its own ``_get_inverse_freq``, which never reads it, so Keras's outputs do not depend on it
(the conversion notes it). :mod:`attnzoo.keras.converters.hub_llama3` registers Llama 3's classes.

Hugging Face form (:data:`LLAMA`): ``LlamaModel`` and ``LlamaForCausalLM``. keras-hub's rotary embedding
turns the two halves of each head (transformers' ``rotate_half``), so the query and key kernels go as they
are, with no permutation of their rows; ``rope_theta`` is ``rope_max_wavelength``, ``rms_norm_eps``
``layer_norm_epsilon``; an untied model's head is its ``reverse_weight`` [D, V] transposed as ``lm_head``
[V, D], a tied one (no reverse table: ``tie_word_embeddings``) writes no head. keras-hub's Llama has no
largest position (its rotary embedding has none): config.json says :data:`LLAMA_MAX_POSITIONS`, Llama 2's
context, which transformers' default rotary embedding does not depend on; set your own where a server reads
it as the longest sequence. Llama 3.1's adjustment is transformers' ``llama3`` rope (:func:`llama_config`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from attnzoo.errors import ConfigError
from attnzoo.keras.arguments import as_tensor, expect_variables
from attnzoo.keras.codegen import literal
from attnzoo.keras.converters.hub_rotary import (
    RotaryDecoder,
    rms,
    rotary_backbone_graph,
    rotary_config,
    rotary_decoder_parts,
    rotary_tensors,
)
from attnzoo.keras.emit import Writer
from attnzoo.keras.emit.checks import plain
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.nodes import Node, writes
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.keras.transformers_form import HubSource, TransformersForm

__all__ = [
    "HubRMSNorm",
    "HubLlamaDecoder",
    "llama3_divisors",
    "LLAMA_ORDER",
    "LLAMA_ROLES",
    "LLAMA_31",
    "llama_graph",
    "LLAMA",
    "LLAMA_MAX_POSITIONS",
    "llama_config",
]


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
    expect_variables(arrays, 1, f"{record.class_name} (its scale)")
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


def llama3_divisors(
    head_dim: int, wavelength: float, factor: float, low: float, high: float, original: int
) -> tuple[float, ...]:
    """Llama 3.1's frequency adjustment as keras-hub's ``LlamaRotaryEmbedding`` computes it (the module
    docstring), in float32: the d / 2 numbers each rotary frequency θ_j = wavelength^(-2j/d) is divided by
    (f for the low frequencies, 1 for the high ones, ``1 / ((1 - s) / f + s)`` between)."""
    steps = torch.arange(0, head_dim, 2, dtype=torch.float32, device="cpu")  # numbers, even while built on meta
    inverse = 1.0 / wavelength ** (steps / head_dim)
    length = 2 * math.pi / inverse
    smooth = (original / length - low) / (high - low)
    divisor = torch.where(length > original / low, factor, 1.0)
    medium = (length >= original / high) & (length <= original / low)
    divisor = torch.where(medium, 1.0 / ((1 - smooth) / factor + smooth), divisor)
    return tuple(float(x) for x in divisor)


class HubLlamaDecoder(RotaryDecoder):
    """``keras_hub``'s ``LlamaTransformerDecoder`` (:class:`RotaryDecoder`; Llama 3.1's frequency adjustment
    where its four ``rope_*`` arguments are given), and the decoders written alike: Qwen2's
    (``attention_bias``), Qwen3's (``head_dim``, ``query_key_norm``), Phi-3's (``feedforward_dropout``),
    Mistral's (``sliding_window``: the w latest tokens a query reads, None: all)."""

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
        rope_frequency_adjustment_factor: float | None = None,
        rope_low_freq_factor: float | None = None,
        rope_high_freq_factor: float | None = None,
        rope_pretraining_sequence_length: int | None = None,
        sliding_window: int | None = None,
    ) -> None:
        super().__init__()
        self.window = sliding_window
        adjustment = (
            rope_frequency_adjustment_factor,
            rope_low_freq_factor,
            rope_high_freq_factor,
            rope_pretraining_sequence_length,
        )
        if None not in adjustment:
            d = head_dim or hidden // num_query_heads
            self.scaling = llama3_divisors(d, rope_max_wavelength, *adjustment)  # type: ignore[arg-type]
        elif any(value is not None for value in adjustment):
            raise ConfigError(
                f"HubLlamaDecoder: Llama 3.1's {', '.join(LLAMA_31)} are given all or none, got {adjustment}"
            )
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
# the variables of a Llama decoder in LLAMA_ORDER, by rotary_decoder_parts' roles (Mistral's alike)
LLAMA_ROLES = ("attention_norm", "query", "key", "value", "output_dense", "feedforward_norm", "gate", "up", "down")
# Llama 3.1's frequency adjustment: all four given, or none (keras-hub's LlamaRotaryEmbedding says so)
LLAMA_31 = (
    "rope_frequency_adjustment_factor",
    "rope_low_freq_factor",
    "rope_high_freq_factor",
    "rope_pretraining_sequence_length",
)


def _check_adjustment(adjustment: dict[str, Any]) -> None:
    """Llama 3.1's four arguments: all numbers (the factors > 0, high > low, the length a positive int), or
    ``Refused`` naming what is wrong."""
    wrong = [
        f"{name}={value!r}"
        for name, value in adjustment.items()
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0
    ]
    length = adjustment["rope_pretraining_sequence_length"]
    if not wrong and not isinstance(length, int):
        wrong.append(f"rope_pretraining_sequence_length={length!r} (not an int)")
    if not wrong and adjustment["rope_high_freq_factor"] <= adjustment["rope_low_freq_factor"]:
        wrong.append("rope_high_freq_factor <= rope_low_freq_factor")
    if wrong:
        raise Refused(
            f"Llama 3.1's frequency adjustment takes all of {', '.join(LLAMA_31)} as positive numbers "
            f"(high above low) or none of them; got {', '.join(wrong)}"
        )


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
    adjustment = {name: c.get(name) for name in LLAMA_31}
    if any(v is not None for v in adjustment.values()):
        _check_adjustment(adjustment)
    notes = ["keras-hub LlamaTransformerDecoder: RMSNorm, grouped-query attention, SwiGLU"]
    scaling = c.get("rope_position_scaling_factor", c.get("rope_scaling_factor", 1.0))
    if scaling not in (None, 1, 1.0):  # keras-hub's LlamaRotaryEmbedding computes its frequencies without it
        notes.append(f"rope_position_scaling_factor={scaling!r} is not applied, as keras-hub 0.32 applies none")
    sizes, state = rotary_decoder_parts(dict(zip(LLAMA_ROLES, arrays, strict=True)), "a Llama attention")
    if "head_dim" in sizes:
        raise Refused(f"attention kernels {[list(a.shape) for a in arrays[1:5]]} are not a Llama attention's")
    spec = {
        "op": HubLlamaDecoder.op,
        **sizes,
        "rope_max_wavelength": float(c.get("rope_max_wavelength", 10000)),
        "layer_norm_epsilon": float(c.get("layer_norm_epsilon", 1e-6)),
        "dropout": float(c.get("dropout", 0.0) or 0.0),
    }
    if adjustment["rope_frequency_adjustment_factor"] is not None:
        spec.update(adjustment)
    return Converted(spec, state, notes)


# -- the family's Hugging Face form -------------------------------------------------------------------------
LLAMA_MAX_POSITIONS = 4096  # Llama 2's context; keras-hub's LlamaBackbone records none


def llama_config(m: HubSource, max_positions: int) -> dict[str, Any]:
    """config.json of a Llama (2 or 3) backbone: the rotary entries (:func:`rotary_config`), no biases, and
    with Llama 3.1's frequency adjustment transformers' ``llama3`` rope (``factor``, ``low_freq_factor``,
    ``high_freq_factor``, ``original_max_position_embeddings``: the four keras-hub arguments), as
    ``rope_parameters`` (transformers 5) and ``rope_scaling`` (4)."""
    config = {**rotary_config(m, max_positions), "attention_bias": False, "mlp_bias": False}
    factor = m.arguments.get("rope_frequency_adjustment_factor")
    if factor is not None:
        rope = {
            "rope_type": "llama3",
            "factor": float(factor),
            "low_freq_factor": float(m.arguments["rope_low_freq_factor"]),
            "high_freq_factor": float(m.arguments["rope_high_freq_factor"]),
            "original_max_position_embeddings": int(m.arguments["rope_pretraining_sequence_length"]),
        }
        config["rope_parameters"] = {**rope, "rope_theta": config["rope_theta"]}
        config["rope_scaling"] = rope
    return config


def _llama_config(m: HubSource) -> dict[str, Any]:
    return llama_config(m, LLAMA_MAX_POSITIONS)


LLAMA = TransformersForm(
    "llama", {"backbone": "LlamaModel", "causal_lm": "LlamaForCausalLM"}, _llama_config, rotary_tensors
)


# -- the family's models -----------------------------------------------------------------------------------
_LLAMA_MODULE = "keras_hub.src.models.llama"


@keras_hub_model("LlamaBackbone", family="llama", causal_lm="LlamaCausalLM", transformers=LLAMA)
def llama_graph(config: dict[str, Any], where: str, name: str = "llama_backbone") -> dict[str, Any]:
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
        name=name,
    )
