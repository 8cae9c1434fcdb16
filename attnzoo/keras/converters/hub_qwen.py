"""keras-hub's Qwen2 family: ``QwenBackbone`` and ``QwenCausalLM`` rebuilt from their arguments
(:func:`qwen_graph`), and their layers converted without keras-hub: ``QwenLayerNorm`` and
``QwenTransformerDecoder``.

* ``QwenLayerNorm``: Llama's RMSNorm (:class:`~attnzoo.keras.converters.hub_llama.HubRMSNorm`, written as
  ``nn.RMSNorm``).
* ``QwenTransformerDecoder``: Llama's decoder (:class:`~attnzoo.keras.converters.hub_llama.HubLlamaDecoder`)
  with biases on the query, key and value projections: x [B, T, D] ->
  ``h = x + Wo · attention(RoPE(Wq · rms(x) + bq), RoPE(Wk · rms(x) + bk), Wv · rms(x) + bv)``, then
  ``h + W_down · (silu(W_gate · rms(h)) ⊙ W_up · rms(h))``; grouped-query heads, causal, the padded keys
  masked; a query with no key (a left-padded position) gets the mean of every value, as keras's fused
  ``dot_product_attention`` gives it.

keras-hub's Qwen attention applies its sliding window only where it does not call the fused
``ops.dot_product_attention``, which it always calls on the torch (and JAX) backend: there Keras computes
every layer over the whole sequence, whatever ``use_sliding_window_attention`` says, and so does the
conversion (it follows Keras on torch, and notes it). A ``rope_scaling_factor`` other than 1 is refused by
name. Decoding: the decoder's KV cache (:mod:`attnzoo.keras.decoding`).

Hugging Face form (:data:`QWEN2`): ``Qwen2Model`` and ``Qwen2ForCausalLM``, the weights under Llama's names
with the three biases; no sliding window (``use_sliding_window`` false, as Keras computes on torch);
``max_position_embeddings`` :data:`QWEN_MAX_POSITIONS` (keras-hub records none; transformers' default
rotary embedding does not depend on it); the head tied unless the embedding has a reverse table.
"""

from __future__ import annotations

from typing import Any

from attnzoo.keras.arguments import expect_variables
from attnzoo.keras.converters.hub_llama import (
    LLAMA_ORDER,
    HubLlamaDecoder,
    convert_rms_norm,
    rotary_backbone_graph,
    rotary_config,
    rotary_decoder_parts,
    rotary_tensors,
)
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.keras.transformers_form import HubSource, TransformersForm

__all__ = [
    "qwen_graph",
    "rotary_spec",
    "QWEN2",
    "QWEN_MAX_POSITIONS",
    "DECODER_CALL",
    "QWEN_ATTENTION_ROLES",
    "SWIGLU_ROLES",
]

QWEN_MAX_POSITIONS = 32768  # Qwen2's context; keras-hub's QwenBackbone records none

# how keras-hub's rotary decoders are called: the sequence, masked by the padding
DECODER_CALL: dict[str, Any] = {
    "package": "keras_hub",
    "call_arguments": ("decoder_padding_mask", "decoder_attention_mask"),
    "positional": ("decoder_sequence",),
}

keras_layer("QwenLayerNorm", package="keras_hub")(convert_rms_norm)


def rotary_spec(config: dict[str, Any], sizes: dict[str, Any], **options: Any) -> dict[str, Any]:
    """A :class:`HubLlamaDecoder`'s data from a keras-hub rotary decoder's config and its ``sizes``
    (:func:`rotary_decoder_parts`), with the family's ``options``; a ``rope_scaling_factor`` other than 1
    (linear position scaling, which no fixture of attnzoo's checks) is ``Refused``."""
    scaling = config.get("rope_scaling_factor", 1.0)
    if scaling not in (None, 1, 1.0):
        raise Refused(f"rope_scaling_factor={scaling!r} is not supported (only 1.0)")
    return {
        "op": HubLlamaDecoder.op,
        **sizes,
        "rope_max_wavelength": float(config.get("rope_max_wavelength", 10000)),
        "layer_norm_epsilon": float(config.get("layer_norm_epsilon", 1e-6)),
        "dropout": float(config.get("dropout", 0.0) or 0.0),
        **options,
    }


# the variables of keras-hub's rotary decoders by role, in their child orders (rotary_decoder_parts' roles)
QWEN_ATTENTION_ROLES = (
    "attention_norm",
    "query",
    "query_bias",
    "key",
    "key_bias",
    "value",
    "value_bias",
    "output_dense",
)
SWIGLU_ROLES = ("feedforward_norm", "gate", "up", "down")


@keras_layer("QwenTransformerDecoder", child_order=LLAMA_ORDER, **DECODER_CALL)
def convert_qwen_decoder(record, arrays, ctx):
    expect_variables(arrays, 12, "QwenTransformerDecoder (2 norms, 4 attention kernels, 3 biases, 3 feed-forward)")
    sizes, state = rotary_decoder_parts(
        dict(zip(QWEN_ATTENTION_ROLES + SWIGLU_ROLES, arrays, strict=True)), "a Qwen attention"
    )
    notes = ["keras-hub QwenTransformerDecoder: RMSNorm, grouped-query attention with q/k/v biases, SwiGLU"]
    if record.config.get("use_sliding_window_attention"):
        notes.append("its sliding window is not applied: keras-hub's fused attention on torch has none")
    return Converted(rotary_spec(record.config, sizes), state, notes)


# -- the family's Hugging Face form -------------------------------------------------------------------------
def _qwen2_config(m: HubSource) -> dict[str, Any]:
    layers = m.size("num_layers")
    return {
        **rotary_config(m, QWEN_MAX_POSITIONS),
        "use_sliding_window": False,  # as keras-hub computes on torch (see the module docstring)
        "sliding_window": None,
        "max_window_layers": layers,
        "layer_types": ["full_attention"] * layers,
    }


QWEN2 = TransformersForm(
    "qwen2", {"backbone": "Qwen2Model", "causal_lm": "Qwen2ForCausalLM"}, _qwen2_config, rotary_tensors
)


@keras_hub_model("QwenBackbone", family="qwen", causal_lm="QwenCausalLM", transformers=QWEN2)
def qwen_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``QwenBackbone``: Llama's graph (:func:`~attnzoo.keras.converters.hub_llama.rotary_backbone_graph`)
    of ``QwenTransformerDecoder`` layers and a ``QwenLayerNorm``, the embedding tied unless
    ``tie_word_embeddings`` is false. ``QwenCausalLM``: that graph, then the embedding's reverse call."""
    keys = ("rope_max_wavelength", "rope_scaling_factor", "use_sliding_window_attention", "sliding_window_size")
    return rotary_backbone_graph(
        config,
        where,
        decoder=("QwenTransformerDecoder", "keras_hub.src.models.qwen.qwen_decoder"),
        norm=("QwenLayerNorm", "keras_hub.src.models.qwen.qwen_layernorm"),
        settings={key: config[key] for key in keys if key in config},
        tied=bool(config.get("tie_word_embeddings", True)),
        name="qwen_backbone",
    )
