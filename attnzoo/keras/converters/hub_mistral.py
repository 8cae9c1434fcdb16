"""keras-hub's Mistral family: ``MistralBackbone`` and ``MistralCausalLM`` rebuilt from their arguments
(:func:`mistral_graph`), and their layers converted without keras-hub: ``MistralLayerNormalization`` and
``MistralTransformerDecoder``.

* ``MistralLayerNormalization``: Llama's RMSNorm (:class:`~attnzoo.keras.converters.hub_llama.HubRMSNorm`,
  written as ``nn.RMSNorm``).
* ``MistralTransformerDecoder``: Llama's decoder (:class:`HubMistralDecoder`: RMSNorm, grouped-query
  attention with keras-hub's rotary embedding, SwiGLU, no biases; ``head_dim`` where given) within a sliding
  window of ``sliding_window`` w tokens: query i reads key j when ``j <= i`` and ``i - j < w``, its own
  included. keras-hub builds that window into the decoder's mask, so Keras applies it on every path, the
  fused ``dot_product_attention`` that torch takes included (None: no window). A query with no key (a
  left-padded position) gets the mean of every value, as keras's fused attention gives it. A
  ``rope_scaling_factor`` other than 1 is refused by name. Decoding: the decoder's KV cache keeps the w
  latest keys and values (:mod:`attnzoo.keras.decoding`).

Hugging Face form (:data:`MISTRAL`): ``MistralModel`` and ``MistralForCausalLM``, the weights under Llama's
names, ``sliding_window`` w (transformers' window reads the same w keys); ``max_position_embeddings``
32768, what keras-hub's own exporter writes (keras-hub records none; transformers' default rotary embedding
does not depend on it); the head untied, as keras-hub's Mistral always is.
"""

from __future__ import annotations

from typing import Any

from attnzoo.keras.arguments import expect_variables
from attnzoo.keras.converters.hub_llama import LLAMA_ORDER, LLAMA_ROLES, HubLlamaDecoder, convert_rms_norm
from attnzoo.keras.converters.hub_qwen import DECODER_CALL, rotary_spec
from attnzoo.keras.converters.hub_rotary import (
    rotary_backbone_graph,
    rotary_config,
    rotary_decoder_parts,
    rotary_tensors,
)
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.keras.transformers_form import HubSource, TransformersForm

__all__ = ["HubMistralDecoder", "sliding_window", "WINDOW", "mistral_graph", "MISTRAL", "MISTRAL_MAX_POSITIONS"]

MISTRAL_MAX_POSITIONS = 32768  # Mistral 7B's; keras-hub's exporter writes it, its MistralBackbone records none
WINDOW = 512  # keras-hub's default sliding_window (MistralBackbone's and MixtralBackbone's)


class HubMistralDecoder(HubLlamaDecoder):
    """``keras_hub``'s ``MistralTransformerDecoder``: Llama's decoder within a sliding window of
    ``sliding_window`` tokens (None: none), its KV cache kept at that many entries while decoding."""

    op = "keras_hub_mistral_decoder"


keras_layer("MistralLayerNormalization", package="keras_hub")(convert_rms_norm)


def sliding_window(config: dict[str, Any]) -> int | None:
    """A Mistral or Mixtral decoder's ``sliding_window`` (keras-hub's default 512; None: no window), checked."""
    window = config.get("sliding_window", WINDOW)
    if window is not None and (not isinstance(window, int) or isinstance(window, bool) or window < 1):
        raise Refused(f"sliding_window={window!r} is neither a positive int nor None")
    return window


@keras_layer("MistralTransformerDecoder", child_order=LLAMA_ORDER, **DECODER_CALL)
def convert_mistral_decoder(record, arrays, ctx):
    expect_variables(arrays, 9, "MistralTransformerDecoder (2 norms, 4 attention kernels, 3 feed-forward kernels)")
    sizes, state = rotary_decoder_parts(dict(zip(LLAMA_ROLES, arrays, strict=True)), "a Mistral attention")
    window = sliding_window(record.config)
    spec = rotary_spec(record.config, sizes, op=HubMistralDecoder.op, sliding_window=window)
    note = f"keras-hub MistralTransformerDecoder: RMSNorm, grouped-query attention (window {window}), SwiGLU"
    return Converted(spec, state, [note])


# -- the family's Hugging Face form -------------------------------------------------------------------------
def _mistral_config(m: HubSource) -> dict[str, Any]:
    return {
        **rotary_config(m, MISTRAL_MAX_POSITIONS),
        "sliding_window": m.spec("transformer_layer_0")["sliding_window"],
    }


MISTRAL = TransformersForm(
    "mistral", {"backbone": "MistralModel", "causal_lm": "MistralForCausalLM"}, _mistral_config, rotary_tensors
)


@keras_hub_model("MistralBackbone", family="mistral", causal_lm="MistralCausalLM", transformers=MISTRAL)
def mistral_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``MistralBackbone``: Llama's graph (:func:`~attnzoo.keras.converters.hub_rotary.rotary_backbone_graph`)
    of ``MistralTransformerDecoder`` layers and a ``MistralLayerNormalization``, the embedding untied.
    ``MistralCausalLM``: that graph, then the embedding's reverse call."""
    keys = ("rope_max_wavelength", "rope_scaling_factor", "head_dim")
    return rotary_backbone_graph(
        config,
        where,
        decoder=("MistralTransformerDecoder", "keras_hub.src.models.mistral.mistral_transformer_decoder"),
        norm=("MistralLayerNormalization", "keras_hub.src.models.mistral.mistral_layer_norm"),
        settings={
            **{key: config[key] for key in keys if key in config},
            "sliding_window": config.get("sliding_window", WINDOW),
        },
        tied=False,
        name="mistral_backbone",
    )
