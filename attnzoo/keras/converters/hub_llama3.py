"""keras-hub's Llama 3 family: ``Llama3Backbone`` and ``Llama3CausalLM``, subclasses of Llama's with the same
graph (:func:`~attnzoo.keras.converters.hub_llama.llama_graph`: ``LlamaTransformerDecoder`` layers and a
``LlamaLayerNorm``), registered here under their own names. Llama 3.1's rotary frequency adjustment
(``rope_frequency_adjustment_factor``, ``rope_low_freq_factor``, ``rope_high_freq_factor``,
``rope_pretraining_sequence_length``) is computed by Llama's decoder
(:func:`~attnzoo.keras.converters.hub_llama.llama3_divisors`).

Hugging Face form (:data:`LLAMA3`): ``LlamaModel`` and ``LlamaForCausalLM`` as Llama's
(:func:`~attnzoo.keras.converters.hub_llama.llama_config`), the adjustment as transformers' ``llama3`` rope;
``max_position_embeddings`` is what keras-hub's own exporter writes (keras_hub/src/utils/transformers/export/
llama3.py): 131072 with the adjustment (Llama 3.1's context), else 8192 (Llama 3's). transformers' rotary
embedding depends on neither.
"""

from __future__ import annotations

from typing import Any

from attnzoo.keras.converters.hub_llama import llama_config, llama_graph
from attnzoo.keras.converters.hub_rotary import rotary_tensors
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.transformers_form import HubSource, TransformersForm

__all__ = ["llama3_graph", "LLAMA3"]


def _llama3_config(m: HubSource) -> dict[str, Any]:
    adjusted = m.arguments.get("rope_frequency_adjustment_factor") is not None
    return llama_config(m, 131072 if adjusted else 8192)


LLAMA3 = TransformersForm(
    "llama", {"backbone": "LlamaModel", "causal_lm": "LlamaForCausalLM"}, _llama3_config, rotary_tensors
)


@keras_hub_model("Llama3Backbone", family="llama3", causal_lm="Llama3CausalLM", transformers=LLAMA3)
def llama3_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``Llama3Backbone``: Llama's graph; ``Llama3CausalLM``: that graph, then the embedding's reverse call."""
    return llama_graph(config, where, name="llama3_backbone")
