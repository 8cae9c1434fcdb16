"""keras-hub's Mixtral family: ``MixtralBackbone`` and ``MixtralCausalLM`` rebuilt from their arguments
(:func:`mixtral_graph`), and their layers converted without keras-hub: ``MixtralLayerNormalization`` (Llama's
RMSNorm) and ``MixtralTransformerDecoder`` (:class:`HubMixtralDecoder`): Mistral's attention (grouped-query,
keras-hub's rotary embedding, the ``sliding_window``, no biases), then a sparse mixture of experts.

The mixture, for the tokens y [N, D] after the feed-forward norm, as keras-hub's ``MixtralSparseMoeBlock``
(Qwen-MoE's router and experts, :class:`~attnzoo.keras.converters.hub_qwen_moe.SparseExperts`):

* the router: ``p = softmax(y W_r)`` [N, E]; each token's ``top_k`` experts are ``torch.topk(p, k)`` (what
  ``ops.top_k`` is on torch: the same choice, ties included), weighed by ``p_i`` divided by their sum;
* expert e: ``W_down,e · (silu(y W_gate,e) ⊙ y W_up,e)`` (keras-hub's gate and up [E, D, I], kept side by
  side as one [E, D, 2I] tensor, and down [E, I, D]); each token sums its experts' outputs by weight
  (keras-hub computes every expert on every token and weighs the others by 0; attnzoo computes a token's
  chosen experts only, and every expert while a graph is traced). No shared expert.

What keras-hub 0.32 computes, and the conversion follows: its attention takes keras's fused
``dot_product_attention`` on a GPU or TPU only; on the CPU, where its outputs were recorded, it is keras's
masked ``Softmax``, which gives a query with no key (a left-padded position) zeros: so does the conversion
(on a GPU, Keras gives the mean of the values there). Its window is in the decoder's mask, so it holds on
both paths. ``router_jitter_noise`` (noise on the router's input while training) and
``output_router_logits`` (its backbone cannot be built with it) are refused by name where set;
``router_aux_loss_coef`` weighs a training loss only, and goes to config.json.

Hugging Face form (:data:`MIXTRAL`): ``MixtralModel`` and ``MixtralForCausalLM``, the experts written one by
one as the Hub's Mixtral checkpoints hold them (``block_sparse_moe.gate``, ``block_sparse_moe.experts.<e>.w1``
(gate), ``w3`` (up), ``w2`` (down)), which transformers 5 renames and merges into its [E, 2I, D] and [E, D, I]
tensors as it loads; ``sliding_window`` as Mistral's, ``max_position_embeddings`` 32768 (Mixtral 8x7B's;
keras-hub records none).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attnzoo.keras.arguments import as_tensor, expect_variables
from attnzoo.keras.converters.hub_llama import convert_rms_norm
from attnzoo.keras.converters.hub_mistral import MISTRAL_MAX_POSITIONS, WINDOW, sliding_window
from attnzoo.keras.converters.hub_qwen import DECODER_CALL, rotary_spec
from attnzoo.keras.converters.hub_qwen_moe import SparseExperts, checked_top_k
from attnzoo.keras.converters.hub_rotary import (
    ROTARY_ATTENTION_WEIGHTS,
    RotaryDecoder,
    held_tensors,
    rotary_backbone_graph,
    rotary_config,
    rotary_decoder_parts,
    rotary_tensors,
)
from attnzoo.keras.hub_families import keras_hub_model
from attnzoo.keras.registry import Converted, Refused, keras_layer
from attnzoo.keras.transformers_form import HubSource, Tensors, TransformersForm

__all__ = ["HubMixtralDecoder", "mixtral_graph", "MIXTRAL"]


class HubMixtralDecoder(SparseExperts, RotaryDecoder):
    """``keras_hub``'s ``MixtralTransformerDecoder``: Mistral's attention (a query with no key gets zeros),
    then the mixture of experts of the module docstring. x [B, T, D] -> [B, T, D]; the output keeps the
    input's mask."""

    op = "keras_hub_mixtral_decoder"

    def __init__(
        self,
        *,
        hidden: int,
        intermediate_dim: int,
        num_query_heads: int,
        num_key_value_heads: int,
        num_experts: int,
        top_k: int,
        rope_max_wavelength: float = 10000.0,
        layer_norm_epsilon: float = 1e-6,
        dropout: float = 0.0,
        sliding_window: int | None = None,
    ) -> None:
        super().__init__()
        settings = {"wavelength": rope_max_wavelength, "epsilon": layer_norm_epsilon, "dropout": dropout}
        self._build(hidden, 0, num_query_heads, num_key_value_heads, **settings, empty="zeros")
        self._build_experts(hidden, num_experts, intermediate_dim, top_k, True)
        self.window = sliding_window

    def _feed_forward(self, y: Tensor) -> Tensor:
        flat = y.reshape(-1, y.shape[-1])
        return self._experts(flat, *self.route(flat)).reshape(y.shape)


keras_layer("MixtralLayerNormalization", package="keras_hub")(convert_rms_norm)

_ATTENTION = "_self_attention_layer"
_MOE = "_sparse_moe_block"
_MIXTRAL_ORDER = (
    "_self_attention_layernorm",
    _ATTENTION,
    f"{_ATTENTION}/query_dense",
    f"{_ATTENTION}/key_dense",
    f"{_ATTENTION}/value_dense",
    f"{_ATTENTION}/output_dense",
    "_feedforward_layernorm",
    _MOE,
    f"{_MOE}/_sparse_feedforward_gate_dense",
    f"{_MOE}/expert_bank",
)
_ATTENTION_ROLES = ("attention_norm", "query", "key", "value", "output_dense", "feedforward_norm")


def _refuse_what_is_not_computed(c: dict[str, Any]) -> None:
    if c.get("output_router_logits"):
        raise Refused("output_router_logits=True: keras-hub's backbone cannot pass a decoder's router logits on")
    jitter = c.get("router_jitter_noise", 0.0)
    if jitter not in (None, 0, 0.0):
        raise Refused(f"router_jitter_noise={jitter!r}: the router's training noise is not computed (only 0)")


def _experts_state(arrays: list[Any], hidden: int, top_k: Any) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """The mixture's sizes and tensors from the router's kernel [D, E] and the experts' gate, up [E, D, I]
    and down [E, I, D] (shapes and ``top_k`` checked)."""
    router, gate, up, down = arrays
    experts, inner = int(down.shape[0]), int(down.shape[1])
    shapes = [tuple(a.shape) for a in arrays]
    if shapes != [(hidden, experts), (experts, hidden, inner), (experts, hidden, inner), (experts, inner, hidden)]:
        raise Refused(f"the mixture's router and experts {[list(s) for s in shapes]} do not fit a hidden size {hidden}")
    sizes = {"intermediate_dim": inner, "num_experts": experts, "top_k": checked_top_k(top_k, experts)}
    state = {"router.weight": as_tensor(router.T), "expert_down": as_tensor(down)}
    state["expert_gate_up"] = torch.cat([as_tensor(gate), as_tensor(up)], dim=-1)
    return sizes, state


@keras_layer("MixtralTransformerDecoder", child_order=_MIXTRAL_ORDER, **DECODER_CALL)
def convert_mixtral_decoder(record, arrays, ctx):
    expect_variables(arrays, 10, "MixtralTransformerDecoder (2 norms, 4 attention kernels, a router, 3 expert banks)")
    c = record.config
    _refuse_what_is_not_computed(c)
    sizes, state = rotary_decoder_parts(dict(zip(_ATTENTION_ROLES, arrays[:6], strict=True)), "a Mixtral attention")
    if "head_dim" in sizes:
        raise Refused(f"attention kernels {[list(a.shape) for a in arrays[1:5]]} are not a Mixtral attention's")
    moe_sizes, moe_state = _experts_state(arrays[6:], sizes["hidden"], c.get("top_k", 2))
    options = {**moe_sizes, "op": HubMixtralDecoder.op, "sliding_window": sliding_window(c)}
    notes = [f"keras-hub MixtralTransformerDecoder: {moe_sizes['num_experts']} experts, top {moe_sizes['top_k']}"]
    return Converted(rotary_spec(c, sizes, **options), {**state, **moe_state}, notes)


# -- the family's Hugging Face form -------------------------------------------------------------------------
def _mixtral_config(m: HubSource) -> dict[str, Any]:
    first = m.spec("transformer_layer_0")
    return {
        **rotary_config(m, MISTRAL_MAX_POSITIONS),
        "intermediate_size": first["intermediate_dim"],
        "num_local_experts": first["num_experts"],
        "num_experts_per_tok": first["top_k"],
        "sliding_window": first["sliding_window"],
        "output_router_logits": False,
        "router_jitter_noise": 0.0,
        "router_aux_loss_coef": float(m.arguments.get("router_aux_loss_coef", 0.02)),
    }


def _mixtral_layer(m: HubSource, ours: str, theirs: str) -> Tensors:
    """One decoder's weights: the attention's as Llama's, the router as ``block_sparse_moe.gate``, each
    expert's gate, down and up projections as ``w1``, ``w2``, ``w3`` (``nn.Linear`` weights [out, in])."""
    yield from held_tensors(m, ours, theirs, ROTARY_ATTENTION_WEIGHTS)
    moe = f"{theirs}.block_sparse_moe"
    yield f"{moe}.gate.weight", m.tensor(f"{ours}.router.weight")
    gate_up, down = m.tensor(f"{ours}.expert_gate_up"), m.tensor(f"{ours}.expert_down")
    inner = down.shape[1]
    for e in range(down.shape[0]):
        yield f"{moe}.experts.{e}.w1.weight", gate_up[e, :, :inner].T
        yield f"{moe}.experts.{e}.w2.weight", down[e].T
        yield f"{moe}.experts.{e}.w3.weight", gate_up[e, :, inner:].T


def _mixtral_tensors(m: HubSource) -> Tensors:
    return rotary_tensors(m, _mixtral_layer)


MIXTRAL = TransformersForm(
    "mixtral", {"backbone": "MixtralModel", "causal_lm": "MixtralForCausalLM"}, _mixtral_config, _mixtral_tensors
)


@keras_hub_model("MixtralBackbone", family="mixtral", causal_lm="MixtralCausalLM", transformers=MIXTRAL)
def mixtral_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``MixtralBackbone``: Llama's graph (:func:`~attnzoo.keras.converters.hub_rotary.rotary_backbone_graph`)
    of ``MixtralTransformerDecoder`` layers and a ``MixtralLayerNormalization``, the embedding untied.
    ``MixtralCausalLM``: that graph, then the embedding's reverse call."""
    keys = (
        "num_experts",
        "top_k",
        "router_jitter_noise",
        "output_router_logits",
        "router_aux_loss_coef",
        "rope_max_wavelength",
        "rope_scaling_factor",
    )
    return rotary_backbone_graph(
        config,
        where,
        decoder=("MixtralTransformerDecoder", "keras_hub.src.models.mixtral.mixtral_decoder"),
        norm=("MixtralLayerNormalization", "keras_hub.src.models.mixtral.mixtral_layer_norm"),
        settings={
            **{key: config[key] for key in keys if key in config},
            "sliding_window": config.get("sliding_window", WINDOW),
        },
        tied=False,
        name="mixtral_backbone",
    )
