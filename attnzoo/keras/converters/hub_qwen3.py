"""keras-hub's Qwen3 family: ``Qwen3Backbone`` and ``Qwen3CausalLM`` rebuilt from their arguments
(:func:`qwen3_graph`), and their layers converted without keras-hub: ``Qwen3LayerNorm`` and
``Qwen3TransformerDecoder``.

* ``Qwen3LayerNorm``: Llama's RMSNorm (:class:`~attnzoo.keras.converters.hub_llama.HubRMSNorm`).
* ``Qwen3TransformerDecoder``: Llama's decoder (:class:`~attnzoo.keras.converters.hub_llama.HubLlamaDecoder`)
  with heads of ``head_dim`` (not necessarily ``D / H``) and an RMSNorm over each query and key head before
  the rotation: x [B, T, D] -> ``h = x + Wo · attention(RoPE(rms_q(Wq · rms(x))), RoPE(rms_k(Wk · rms(x))),
  Wv · rms(x))``, then the SwiGLU [B, T, D]; no biases. A query with no key (a left-padded position) gets the
  mean of every value, as keras's fused ``dot_product_attention`` gives it.

The head norms' epsilon is keras-hub's ``Qwen3Attention`` default, 1e-5: ``Qwen3TransformerDecoder`` does not
pass its ``layer_norm_epsilon`` on to its attention (keras-hub 0.32), so the head norms keep 1e-5 whatever the
backbone's epsilon is, and so does the conversion. keras-hub's sliding window acts only off its fused
attention, which torch always takes: as for Qwen2, the conversion computes no window (Keras on torch). A
``rope_scaling_factor`` other than 1 is refused by name.

Hugging Face form (:data:`QWEN3`): ``Qwen3Model`` and ``Qwen3ForCausalLM``. transformers' ``q_norm`` and
``k_norm`` use ``rms_norm_eps``, the other norms' epsilon. Where keras-hub's head-norm epsilon ε_h differs
from it (ε), the query and key projections are written multiplied by ``c = √(ε / ε_h)``: an RMSNorm does not
see its input's scale but for its epsilon, ``rms(c·u, ε) = rms(u, ε / c²) = rms(u, ε_h)``, so transformers
computes keras-hub's head norms exactly (the projections have no bias to scale).
"""

from __future__ import annotations

import math
from typing import Any

from attnzoo.keras.arguments import expect_variables
from attnzoo.keras.converters.hub_llama import (
    LLAMA_ORDER,
    ROTARY_ATTENTION_WEIGHTS,
    SWIGLU_WEIGHTS,
    convert_rms_norm,
    held_tensors,
    rotary_backbone_graph,
    rotary_config,
    rotary_decoder_parts,
    rotary_tensors,
)
from attnzoo.keras.converters.hub_qwen import DECODER_CALL, QWEN_MAX_POSITIONS, SWIGLU_ROLES, rotary_spec
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.registry import Converted, keras_layer
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm

__all__ = ["qwen3_graph", "QWEN3", "HEAD_NORM_EPSILON"]

HEAD_NORM_EPSILON = 1e-5  # keras-hub's Qwen3Attention default, which its decoder never overrides

keras_layer("Qwen3LayerNorm", package="keras_hub")(convert_rms_norm)

_ATTENTION = "_self_attention_layer"
# keras-hub's creation order: the query and its head norm, the key and its head norm, the value, the output
_QWEN3_ORDER = (
    *LLAMA_ORDER[:3],
    f"{_ATTENTION}/_query_dense_layer_norm",
    LLAMA_ORDER[3],
    f"{_ATTENTION}/_key_dense_layer_norm",
    *LLAMA_ORDER[4:],
)
_ROLES = ("attention_norm", "query", "query_norm", "key", "key_norm", "value", "output_dense", *SWIGLU_ROLES)


@keras_layer("Qwen3TransformerDecoder", child_order=_QWEN3_ORDER, **DECODER_CALL)
def convert_qwen3_decoder(record, arrays, ctx):
    expect_variables(arrays, 11, "Qwen3TransformerDecoder (2 norms, 4 attention kernels, 2 head norms, 3 feed-forward)")
    sizes, state = rotary_decoder_parts(dict(zip(_ROLES, arrays, strict=True)), "a Qwen3 attention")
    spec = rotary_spec(record.config, sizes, query_key_norm=HEAD_NORM_EPSILON)
    notes = ["keras-hub Qwen3TransformerDecoder: RMSNorm, grouped-query attention with head norms, SwiGLU"]
    return Converted(spec, state, notes)


# -- the family's Hugging Face form -------------------------------------------------------------------------
def _qwen3_config(m: HubSource) -> dict[str, Any]:
    layers = m.size("num_layers")
    return {
        **rotary_config(m, QWEN_MAX_POSITIONS),
        "attention_bias": False,
        "use_sliding_window": False,  # as keras-hub computes on torch (see the module docstring)
        "sliding_window": None,
        "max_window_layers": layers,
        "layer_types": ["full_attention"] * layers,
    }


def _qwen3_layer(m: HubSource, ours: str, theirs: str) -> Tensors:
    """One decoder's weights; the query and key projections scaled where the head norms' epsilon is not
    ``rms_norm_eps`` (the module docstring says why that is exact)."""
    scale = math.sqrt(float(m.spec("sequence_output_layernorm")["epsilon"]) / HEAD_NORM_EPSILON)
    for name, tensor in held_tensors(m, ours, theirs, ROTARY_ATTENTION_WEIGHTS + SWIGLU_WEIGHTS):
        scaled = name.endswith(("q_proj.weight", "k_proj.weight")) and scale != 1.0
        yield name, (tensor * scale if scaled else tensor)


def _qwen3_tensors(m: HubSource) -> Tensors:
    return rotary_tensors(m, _qwen3_layer)


QWEN3 = TransformersForm(
    "qwen3", {"backbone": "Qwen3Model", "causal_lm": "Qwen3ForCausalLM"}, _qwen3_config, _qwen3_tensors
)


@keras_hub_model("Qwen3Backbone", family="qwen3", causal_lm="Qwen3CausalLM", transformers=QWEN3)
def qwen3_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``Qwen3Backbone``: Llama's graph (:func:`~attnzoo.keras.converters.hub_llama.rotary_backbone_graph`)
    of ``Qwen3TransformerDecoder`` layers (heads of ``head_dim``) and a ``Qwen3LayerNorm``, the embedding
    tied unless ``tie_word_embeddings`` is false. ``Qwen3CausalLM``: that graph, then the embedding's
    reverse call."""
    keys = ("head_dim", "rope_max_wavelength", "rope_scaling_factor", "sliding_window_size")
    return rotary_backbone_graph(
        config,
        where,
        decoder=("Qwen3TransformerDecoder", "keras_hub.src.models.qwen3.qwen3_decoder"),
        norm=("Qwen3LayerNorm", "keras_hub.src.models.qwen3.qwen3_layernorm"),
        settings={key: config[key] for key in keys if key in config},
        tied=bool(config.get("tie_word_embeddings", True)),
        name="qwen3_backbone",
    )
