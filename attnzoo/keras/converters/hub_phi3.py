"""keras-hub's Phi-3 family: ``Phi3Backbone`` and ``Phi3CausalLM`` rebuilt from their arguments
(:func:`phi3_graph`), and their layers converted without keras-hub: ``Phi3LayerNorm`` and ``Phi3Decoder``.

* ``Phi3LayerNorm``: Llama's RMSNorm (:class:`~attnzoo.keras.converters.hub_llama.HubRMSNorm`).
* ``Phi3Decoder``: Llama's decoder (:class:`~attnzoo.keras.converters.hub_llama.HubLlamaDecoder`: RMSNorm,
  grouped-query attention without biases, SwiGLU), with a dropout after the feed-forward too; a query with no
  key (a left-padded position) gets the mean of every value, as keras's fused ``dot_product_attention``
  gives it. With ``rope_scaling_type`` ``"su"`` (LongRoPE) it is :class:`HubPhi3Decoder`, whose rotation is
  keras-hub's ``Phi3SuScaledRotaryEmbedding``: over a call of T tokens from position s, the inverse
  frequencies are divided by the long factors when ``s + T > pretraining_sequence_length`` and by the short
  ones otherwise, ``θ_j = wavelength^(-2j/d) / factor_j``, and cos and sin are multiplied by
  ``c = √(1 + ln(L / P) / ln P)`` (``L = max_sequence_length``, ``P = pretraining_sequence_length``; 1 where
  L <= P). The factors apply to the whole sequence, so cached decoding keeps the keys unrotated and turns
  all of them at each step with the factors of the length so far. Where the length crosses P the factors
  change for every earlier position, and so do the hidden states a later layer cached from them: a call
  given a cache that crosses P is refused (:meth:`HubPhi3Decoder.recomputed_past`), and ``generate`` runs the
  whole sequence again on a new cache there, as transformers recomputes its cache once where the length
  crosses P.

Hugging Face form (:data:`PHI3`): ``Phi3Model`` and ``Phi3ForCausalLM``: the query, key and value kernels
side by side in ``qkv_proj``, the gate's and the up projection's in ``gate_up_proj`` (transformers fuses
both); ``max_position_embeddings`` is ``max_sequence_length``, ``original_max_position_embeddings``
``pretraining_sequence_length``; with su rope, ``rope_scaling`` ``longrope`` with the two lists of factors
(transformers chooses them by the same rule and computes the same cos and sin factor).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from attnzoo.keras.arguments import expect_variables
from attnzoo.keras.converters.hub_llama import convert_rms_norm
from attnzoo.keras.converters.hub_qwen import DECODER_CALL, SWIGLU_ROLES, rotary_spec
from attnzoo.keras.converters.hub_rotary import (
    RotaryDecoder,
    held_tensors,
    rotary_backbone_graph,
    rotary_config,
    rotary_decoder_parts,
    rotary_tensors,
    rotate,
)
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm
from attnzoo.layers.kv_cache import KVCache

__all__ = ["HubPhi3Decoder", "phi3_graph", "PHI3", "su_attention_factor"]

keras_layer("Phi3LayerNorm", package="keras_hub")(convert_rms_norm)


def su_attention_factor(max_length: int, pretraining_length: int) -> float:
    """keras-hub's (and transformers' LongRoPE) factor of cos and sin: ``√(1 + ln(L / P) / ln P)``, 1 where
    ``L <= P``."""
    ratio = max_length / pretraining_length
    return 1.0 if ratio <= 1.0 else math.sqrt(1 + math.log(ratio) / math.log(pretraining_length))


class HubPhi3Decoder(RotaryDecoder):
    """``keras_hub``'s ``Phi3Decoder`` with su rope (:class:`RotaryDecoder`; the module docstring has the
    rotation): x [B, T, D] -> [B, T, D]; the output keeps the input's mask."""

    op = "keras_hub_phi3_su_decoder"

    def __init__(
        self,
        *,
        hidden: int,
        intermediate_dim: int,
        num_query_heads: int,
        num_key_value_heads: int,
        rope_scaling_short_factor: list[float],
        rope_scaling_long_factor: list[float],
        pretraining_sequence_length: int,
        max_sequence_length: int,
        rope_max_wavelength: float = 10000.0,
        layer_norm_epsilon: float = 1e-6,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        settings = {"wavelength": rope_max_wavelength, "epsilon": layer_norm_epsilon, "dropout": dropout}
        self._build(
            hidden, intermediate_dim, num_query_heads, num_key_value_heads, **settings, feedforward_dropout=dropout
        )
        self.short_factor, self.long_factor = list(rope_scaling_short_factor), list(rope_scaling_long_factor)
        self.pretraining_length = pretraining_sequence_length
        self.attention_factor = su_attention_factor(max_sequence_length, pretraining_sequence_length)

    def _positioned(
        self, kv: KVCache | None, query: Tensor, key: Tensor, value: Tensor, padding: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """The cache first (its keys unrotated), then every key turned at positions 0.. and the queries at
        the call's, by the factors of the length so far."""
        start = 0 if kv is None else kv.length
        if 0 < start <= self.pretraining_length < start + query.shape[-2]:
            raise ValueError(
                f"the cache holds {start} tokens, turned by su rope's short factors; past "
                f"pretraining_sequence_length {self.pretraining_length} the long factors turn every position, so "
                f"what each layer cached from them changes: run the whole sequence on a new DecodingCache "
                f"(generate does so where the length crosses it)"
            )
        key, value, padding = self._cached(kv, key, value, padding)
        long = start + query.shape[-2] > self.pretraining_length
        factors = self.long_factor if long else self.short_factor

        def turned(x: Tensor, at: int) -> Tensor:
            return rotate(x, at, self.wavelength, divisor=factors, scale=self.attention_factor)

        return turned(query, start), turned(key, 0), value, padding

    def recomputed_past(self) -> int:
        """The pretraining length P: past it the long factors turn every position (see the module docstring)."""
        return self.pretraining_length


_ATTENTION = "attention"
_PHI3_ORDER = (
    "pre_attention_layernorm",
    _ATTENTION,
    f"{_ATTENTION}/query_dense",
    f"{_ATTENTION}/key_dense",
    f"{_ATTENTION}/value_dense",
    f"{_ATTENTION}/output_dense",
    "post_attention_layernorm",
    "feedforward_gate_dense",
    "feedforward_intermediate_dense",
    "feedforward_output_dense",
)
_ROLES = ("attention_norm", "query", "key", "value", "output_dense", *SWIGLU_ROLES)


def _su_options(c: dict[str, Any], head_dim: int) -> dict[str, Any]:
    """HubPhi3Decoder's rope settings from a Phi3Decoder's config with ``rope_scaling_type`` "su"."""
    short, long = c.get("rope_scaling_short_factor"), c.get("rope_scaling_long_factor")
    for name, factors in (("rope_scaling_short_factor", short), ("rope_scaling_long_factor", long)):
        if not isinstance(factors, list) or len(factors) != head_dim // 2:
            raise Refused(f"{name}={factors!r} is not a list of head_dim / 2 = {head_dim // 2} numbers")
        if not all(isinstance(f, (int, float)) and not isinstance(f, bool) and f > 0 for f in factors):
            raise Refused(f"{name}={factors!r} holds a factor that is not a positive number")
    lengths = {key: c.get(key, 4096) for key in ("max_sequence_length", "pretraining_sequence_length")}
    if not all(isinstance(n, int) and not isinstance(n, bool) and n > 1 for n in lengths.values()):
        raise Refused(f"{lengths} are not sequence lengths over 1")
    floats = {
        "rope_scaling_short_factor": [float(f) for f in short],
        "rope_scaling_long_factor": [float(f) for f in long],
    }
    return {"op": HubPhi3Decoder.op, **floats, **lengths}


@keras_layer("Phi3Decoder", child_order=_PHI3_ORDER, **DECODER_CALL)
def convert_phi3_decoder(record, arrays, ctx):
    expect_variables(arrays, 9, "Phi3Decoder (2 norms, 4 attention kernels, 3 feed-forward kernels)")
    c = record.config
    sizes, state = rotary_decoder_parts(dict(zip(_ROLES, arrays, strict=True)), "a Phi-3 attention")
    kind = c.get("rope_scaling_type")
    if kind == "su":
        spec = rotary_spec(c, sizes, **_su_options(c, sizes["hidden"] // sizes["num_query_heads"]))
    elif kind is None:
        spec = rotary_spec(c, sizes, feedforward_dropout=float(c.get("dropout", 0.0) or 0.0))
    else:
        raise Refused(f"rope_scaling_type={kind!r} is not keras-hub's (None or 'su')")
    return Converted(spec, state, [f"keras-hub Phi3Decoder: RMSNorm, grouped-query attention, SwiGLU, rope {kind}"])


# -- the family's Hugging Face form -------------------------------------------------------------------------
def _phi3_config(m: HubSource) -> dict[str, Any]:
    config = rotary_config(m, m.size("max_sequence_length", 4096))
    dropout = config["attention_dropout"]
    config.update(
        original_max_position_embeddings=m.size("pretraining_sequence_length", 4096),
        resid_pdrop=dropout,
        embd_pdrop=0.0,
        sliding_window=None,
        rope_scaling=None,
    )
    if m.arguments.get("rope_scaling_type") == "su":
        factors = {
            "short_factor": [float(f) for f in m.arguments["rope_scaling_short_factor"]],
            "long_factor": [float(f) for f in m.arguments["rope_scaling_long_factor"]],
            "factor": config["max_position_embeddings"] / config["original_max_position_embeddings"],
        }
        # transformers 4 reads rope_scaling ("su" was renamed "longrope"), 5 rope_parameters (or rope_scaling)
        config["rope_scaling"] = {"type": "longrope", "rope_type": "longrope", **factors}
        config["rope_parameters"] = {"rope_type": "longrope", "rope_theta": config["rope_theta"], **factors}
    return config


def _phi3_layer(m: HubSource, ours: str, theirs: str) -> Tensors:
    """One decoder's weights: the norms and the output projections as they are, the query, key and value
    side by side in ``qkv_proj``, the gate and the up projection in ``gate_up_proj``."""
    yield from held_tensors(
        m, ours, theirs, (("input_layernorm", "attention_norm"), ("self_attn.o_proj", "output_dense"))
    )
    yield from held_tensors(m, ours, theirs, (("post_attention_layernorm", "feedforward_norm"),))
    qkv = [m.tensor(f"{ours}.{name}.weight") for name in ("query", "key", "value")]
    yield f"{theirs}.self_attn.qkv_proj.weight", torch.cat(qkv, dim=0)
    gate_up = [m.tensor(f"{ours}.{name}.weight") for name in ("gate", "up")]
    yield f"{theirs}.mlp.gate_up_proj.weight", torch.cat(gate_up, dim=0)
    yield f"{theirs}.mlp.down_proj.weight", m.tensor(f"{ours}.down.weight")


def _phi3_tensors(m: HubSource) -> Tensors:
    return rotary_tensors(m, _phi3_layer)


PHI3 = TransformersForm("phi3", {"backbone": "Phi3Model", "causal_lm": "Phi3ForCausalLM"}, _phi3_config, _phi3_tensors)


@keras_hub_model("Phi3Backbone", family="phi3", causal_lm="Phi3CausalLM", transformers=PHI3)
def phi3_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``Phi3Backbone``: Llama's graph (:func:`~attnzoo.keras.converters.hub_llama.rotary_backbone_graph`)
    of ``Phi3Decoder`` layers and a ``Phi3LayerNorm``, the embedding never tied (a reverse table of its own).
    ``Phi3CausalLM``: that graph, then the embedding's reverse call."""
    keys = (
        "max_sequence_length",
        "pretraining_sequence_length",
        "rope_max_wavelength",
        "rope_scaling_type",
        "rope_scaling_short_factor",
        "rope_scaling_long_factor",
    )
    settings = {key: config[key] for key in keys if key in config}
    settings["hidden_dim"] = config.get("hidden_dim")
    return rotary_backbone_graph(
        config,
        where,
        decoder=("Phi3Decoder", "keras_hub.src.models.phi3.phi3_decoder"),
        norm=("Phi3LayerNorm", "keras_hub.src.models.phi3.phi3_layernorm"),
        settings=settings,
        tied=False,
        name="phi3_backbone",
    )
