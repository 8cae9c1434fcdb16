"""keras-hub's Gemma 3 family, text only: ``Gemma3Backbone`` and ``Gemma3CausalLM`` rebuilt from their arguments
(:func:`gemma3_graph`), and ``Gemma3DecoderBlock`` converted without keras-hub, as the node of Gemma's block
(:class:`~attnzoo.keras.converters.hub_gemma.HubGemmaDecoder`) with Gemma 3's settings.

* The backbone is Gemma's (:mod:`attnzoo.keras.converters.hub_gemma`: ids -> embeddings · ``sqrt(D)`` -> blocks
  -> ``final_normalization``), its RMSNormalization Gemma's ``x · (1 + scale)``.
* ``Gemma3DecoderBlock``: Gemma's block, always with the post-attention and post-feed-forward norms where its
  arguments ask for them, a gate as wide as ``intermediate_dim`` (``gate_dim_reduction`` 1), and, with
  ``use_query_key_norm``, an RMSNorm (``1 + scale``, ε 1e-6: keras-hub's attention builds them with its own
  default, whatever ``layer_norm_epsilon`` says) of each query and key head before the rotation. Layers
  alternate five local to one global: with ``use_sliding_window_attention``, layer i is local when
  ``i % 6 < 5`` (a ``sliding_window_size`` window, rotary wavelength 10 000 scaled by
  ``local_rope_scaling_factor``), else global (no window, wavelength 1 000 000 scaled by
  ``global_rope_scaling_factor``); without it every layer is global. keras-hub's rotary ``scaling_factor`` f
  divides every frequency (its "linear" rope). In float16 the residual sums are taken in float32 and clipped
  to ±65504, as keras-hub's block does. A query row with no key left is zeros.

Refused, by name: a backbone with a ``vision_encoder`` (images: attnzoo converts the text model), an
embedding model (``is_embedding_model``), ``use_bidirectional_attention``.

Hugging Face form (:data:`GEMMA3`): ``Gemma3TextModel`` and ``Gemma3ForCausalLM`` (``model_type``
``gemma3_text``): ``layer_types`` name each layer's kind, ``rope_parameters`` hold the two wavelengths (a
scaling factor other than 1 as transformers' ``linear`` rope), ``query_pre_attn_scalar`` is ``head_dim``.
transformers' Gemma 3 always has the q/k norms and both post norms, and normalises q and k with
``rms_norm_eps``: a model without them, or whose ``layer_norm_epsilon`` is not 1e-6, is refused.
"""

from __future__ import annotations

from typing import Any

from attnzoo.errors import WeightsError
from attnzoo.keras.converters.hub_gemma import (
    GEMMA_ORDER,
    gemma_block_settings,
    gemma_common,
    gemma_decoder,
    gemma_embeddings,
    gemma_output,
    gemma_tensors,
)
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.hub_graph import HubGraph, positive, tensor
from attnzoo.keras.registry import Refused, keras_layer
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm

__all__ = ["gemma3_graph", "GEMMA3", "GEMMA3_MAX_POSITIONS", "LOCAL_WAVELENGTH", "GLOBAL_WAVELENGTH"]

LOCAL_WAVELENGTH, GLOBAL_WAVELENGTH = 10_000.0, 1_000_000.0
_PATTERN = 6  # five local layers, then one global


def _factor(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise Refused(f"{name} {value!r} is not a positive number")
    return float(value)


@keras_layer("Gemma3DecoderBlock", package="keras_hub", call_arguments=("padding_mask",), child_order=GEMMA_ORDER)
def convert_gemma3_decoder(record, arrays, ctx):
    c = record.config
    if c.get("use_bidirectional_attention"):
        raise Refused("use_bidirectional_attention=True (EmbeddingGemma's attention) is not converted")
    reduction = c.get("gate_dim_reduction", 2)
    if isinstance(reduction, bool) or not isinstance(reduction, int) or reduction < 1:
        raise Refused(f"gate_dim_reduction {reduction!r} is not a positive int")
    return gemma_decoder(
        record,
        arrays,
        query_key_norm=bool(c.get("use_query_key_norm", False)),
        gate_reduction=reduction,
        rope_max_wavelength=_factor(c.get("rope_wavelength", LOCAL_WAVELENGTH), "rope_wavelength"),
        rope_scaling_factor=_factor(c.get("rope_scaling_factor", 1.0), "rope_scaling_factor"),
        clip_float16=True,
    )


# -- the family's Hugging Face form -------------------------------------------------------------------------
GEMMA3_MAX_POSITIONS = 131_072  # Gemma 3's context; keras-hub's Gemma3Backbone records none


def _rope(theta: float, factor: float) -> dict[str, Any]:
    if factor == 1.0:
        return {"rope_type": "default", "rope_theta": theta}
    return {"rope_type": "linear", "factor": factor, "rope_theta": theta}


def _gemma3_config(m: HubSource) -> dict[str, Any]:
    a = m.arguments
    missing = [key for key in ("use_query_key_norm", "use_post_attention_norm", "use_post_ffw_norm") if not a.get(key)]
    if missing:
        m.refuse(f"{', '.join(missing)} False: transformers' Gemma 3 always has the q/k norms and both post norms")
    epsilon = float(m.spec("final_normalization")["epsilon"])
    if epsilon != 1e-6:
        m.refuse(
            f"layer_norm_epsilon {epsilon}: keras-hub normalises queries and keys with ε 1e-6, transformers' Gemma 3 "
            f"with rms_norm_eps, the ε of every other norm"
        )
    sliding = bool(a.get("use_sliding_window_attention"))
    local, glob = (float(a.get(f"{kind}_rope_scaling_factor") or 1.0) for kind in ("local", "global"))
    layers = m.size("num_layers")
    return {
        **gemma_common(m),
        "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": GEMMA3_MAX_POSITIONS,
        "query_pre_attn_scalar": m.size("head_dim"),  # keras-hub scales by 1/√head_dim
        "sliding_window": m.size("sliding_window_size", 1024),
        "layer_types": [
            "sliding_attention" if sliding and i % _PATTERN < _PATTERN - 1 else "full_attention" for i in range(layers)
        ],
        "rope_parameters": {
            "full_attention": _rope(GLOBAL_WAVELENGTH, glob),
            "sliding_attention": _rope(LOCAL_WAVELENGTH, local),
        },
        "rope_theta": GLOBAL_WAVELENGTH,  # transformers 4's keys; 5 reads rope_parameters
        "rope_local_base_freq": LOCAL_WAVELENGTH,
        "final_logit_softcapping": a.get("final_logit_soft_cap"),
        "attn_logit_softcapping": a.get("attention_logit_soft_cap"),
        "use_bidirectional_attention": False,
    }


def _gemma3_tensors(m: HubSource) -> Tensors:
    return gemma_tensors(m, post_norms=True, query_key_norm=True)


GEMMA3 = TransformersForm(
    "gemma3_text", {"backbone": "Gemma3TextModel", "causal_lm": "Gemma3ForCausalLM"}, _gemma3_config, _gemma3_tensors
)


# -- the family's models -----------------------------------------------------------------------------------
_GEMMA3 = "keras_hub.src.models.gemma3"


@keras_hub_model("Gemma3Backbone", family="gemma3", causal_lm="Gemma3CausalLM", transformers=GEMMA3)
def gemma3_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``Gemma3Backbone`` (text only): token ids, padding mask -> the scaled embeddings -> ``num_layers``
    ``Gemma3DecoderBlock`` layers (five local to one global) -> ``final_normalization`` -> [B, T, D].
    ``Gemma3CausalLM``: that graph, then the embedding's reverse call for the logits."""
    for key, why in (
        ("vision_encoder", "a vision encoder (images); attnzoo converts Gemma 3's text model"),
        ("is_embedding_model", "an embedding model (mean pooling and projections)"),
    ):
        if config.get(key):
            raise WeightsError(f"{where}: its config has {key}: {why} is not converted")
    g = HubGraph(config.get("dtype"))
    x, hidden = gemma_embeddings(g, config, where)
    settings = gemma_block_settings(config, where, hidden)
    settings["sliding_window_size"] = positive(config, "sliding_window_size", where, 1024)
    settings.update(
        use_query_key_norm=bool(config.get("use_query_key_norm", True)),
        gate_dim_reduction=1,
        use_bidirectional_attention=bool(config.get("use_bidirectional_attention", False)),
    )
    sliding = bool(config.get("use_sliding_window_attention", False))
    for i in range(positive(config, "num_layers", where)):
        local = sliding and i % _PATTERN < _PATTERN - 1
        layer = {
            **settings,
            "use_sliding_window_attention": local,
            "rope_wavelength": LOCAL_WAVELENGTH if local else GLOBAL_WAVELENGTH,
            "rope_scaling_factor": config.get(f"{'local' if local else 'global'}_rope_scaling_factor", 1.0),
        }
        module = f"{_GEMMA3}.gemma3_decoder_block"
        x = g.hub_layer(
            "Gemma3DecoderBlock", f"decoder_block_{i}", layer, [tensor(x)], module, padding_mask=tensor("padding_mask")
        )
    return gemma_output(g, x, config, where, f"{_GEMMA3}.gemma3_layers")
