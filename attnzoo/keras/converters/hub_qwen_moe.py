"""keras-hub's Qwen-MoE family: ``QwenMoeBackbone`` and ``QwenMoeCausalLM`` rebuilt from their arguments
(:func:`qwen_moe_graph`), and their decoder converted without keras-hub: ``QwenMoeTransformerDecoder``, whose
attention is Qwen2's (:class:`~attnzoo.keras.converters.hub_llama.RotaryDecoder` with q/k/v biases) and
whose feed-forward is a sparse mixture of experts (:class:`HubQwenMoeDecoder`). The final norm is
``QwenLayerNorm`` (:mod:`attnzoo.keras.converters.hub_qwen`).

The mixture, for the tokens y [N, D] after the feed-forward norm, as keras-hub's ``QwenSparseMoeBlock``:

* the router: ``p = softmax(y W_r)`` [N, E]; each token's ``top_k`` experts are ``torch.topk(p, k)`` (what
  ``ops.top_k`` is on torch: the same choice, ties included), with weights ``p_i`` (divided by their sum
  where ``norm_top_k_prob``);
* expert e: ``W_down,e · (up ⊙ silu(gate))`` with ``[gate, up] = y W_gate_up,e`` (keras-hub's
  [E, D, 2I] and [E, I, D] tensors, kept as they are); each token sums its experts' outputs by weight
  (keras-hub computes every expert on every token and weighs the others by 0; attnzoo computes a token's
  chosen experts only, and every expert while a graph is traced);
* plus the shared expert, a SwiGLU of its own gated by ``sigmoid(y w_s)``.

keras-hub 0.32 computes what the conversion follows, and some of it differs from transformers':

* its attention takes keras's fused ``dot_product_attention`` on a GPU or TPU only; on the CPU, where its
  outputs were recorded, it is keras's masked ``Softmax``, which gives a query with no key (a left-padded
  position) zeros: so does the conversion (on a GPU, Keras gives the mean of the values there);
* its sliding window acts on that masked path only: ``use_sliding_window_attention`` is refused by name,
  since Keras computes it on one device and not on another;
* its backbone gives every decoder ``layer_index`` 0, so ``decoder_sparse_step`` and ``mlp_only_layers``
  decide for all layers at once (every layer dense unless step 1 and 0 not listed): a model whose layers
  are dense is refused by name, as is ``output_router_logits`` (its backbone cannot be built with it).

Hugging Face form (:data:`QWEN2_MOE`): ``Qwen2MoeModel`` and ``Qwen2MoeForCausalLM``, every layer sparse
(``decoder_sparse_step`` 1, no ``mlp_only_layers``); the experts written one by one as the Hub's Qwen-MoE
checkpoints hold them (``mlp.experts.<e>.gate_proj`` ...), which transformers 5 merges as it loads.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.keras.arguments import as_tensor, expect_variables
from attnzoo.keras.converters.hub_qwen import DECODER_CALL, QWEN_ATTENTION_ROLES, QWEN_MAX_POSITIONS, rotary_spec
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
from attnzoo.layers.core import tracing

__all__ = ["SparseExperts", "checked_top_k", "HubQwenMoeDecoder", "qwen_moe_graph", "QWEN2_MOE"]


class SparseExperts:
    """keras-hub's sparse mixture of experts (the module docstring), shared by the decoders that hold one
    (Qwen-MoE's, Mixtral's): ``router`` (``nn.Linear`` D -> E), the experts' ``expert_gate_up`` [E, D, 2I]
    and ``expert_down`` [E, I, D], each token's ``top_k`` experts (their weights renormalised where
    ``norm_top_k_prob``). A decoder class lists it before :class:`RotaryDecoder` and calls
    :meth:`_build_experts`."""

    router: nn.Linear
    expert_gate_up: nn.Parameter
    expert_down: nn.Parameter
    top_k: int
    norm_top_k_prob: bool

    def _build_experts(self, hidden: int, experts: int, inner: int, top_k: int, norm_top_k_prob: bool) -> None:
        self.top_k, self.norm_top_k_prob = top_k, norm_top_k_prob
        self.router = nn.Linear(hidden, experts, bias=False)
        self.expert_gate_up = nn.Parameter(torch.zeros(experts, hidden, 2 * inner))
        self.expert_down = nn.Parameter(torch.zeros(experts, inner, hidden))

    def route(self, y: Tensor) -> tuple[Tensor, Tensor]:
        """The router: tokens y [N, D] -> (their experts [N, k], int64, likeliest first; their weights [N, k])."""
        weights, experts = torch.topk(torch.softmax(self.router(y), dim=-1), self.top_k, dim=-1)
        if self.norm_top_k_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return experts, weights

    def _expert(self, e: int | Tensor, y: Tensor) -> Tensor:
        gate, up = torch.matmul(y, self.expert_gate_up[e]).chunk(2, dim=-1)
        return torch.matmul(up * F.silu(gate), self.expert_down[e])

    def _experts(self, y: Tensor, experts: Tensor, weights: Tensor) -> Tensor:
        """Each token's chosen experts summed by weight: y [N, D] -> [N, D]."""
        weights = weights.to(y.dtype)
        if tracing():  # every expert on every token, weighed (0 for those not chosen): no host sync
            full = torch.zeros(y.shape[0], self.expert_down.shape[0], dtype=y.dtype, device=y.device)
            full = full.scatter(1, experts, weights)  # [N, E]
            outs = torch.stack([self._expert(e, y) for e in range(self.expert_down.shape[0])], dim=1)
            return (outs * full[..., None]).sum(dim=1)
        out = torch.zeros_like(y)
        for e in experts.unique().tolist():
            rows, slot = (experts == e).nonzero(as_tuple=True)
            out.index_add_(0, rows, self._expert(e, y[rows]) * weights[rows, slot, None])
        return out


class HubQwenMoeDecoder(SparseExperts, RotaryDecoder):
    """``keras_hub``'s ``QwenMoeTransformerDecoder``: Qwen2's attention (:class:`RotaryDecoder` with q/k/v
    biases; a query with no key gets zeros), then the mixture of experts of the module docstring. x [B, T, D]
    -> [B, T, D]; the output keeps the input's mask."""

    op = "keras_hub_qwen_moe_decoder"

    def __init__(
        self,
        *,
        hidden: int,
        num_query_heads: int,
        num_key_value_heads: int,
        num_experts: int,
        top_k: int,
        moe_intermediate_dim: int,
        shared_expert_intermediate_dim: int,
        norm_top_k_prob: bool = False,
        rope_max_wavelength: float = 10000.0,
        layer_norm_epsilon: float = 1e-6,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        heads, groups, shared = num_query_heads, num_key_value_heads, shared_expert_intermediate_dim
        settings = {"wavelength": rope_max_wavelength, "epsilon": layer_norm_epsilon, "dropout": dropout}
        self._build(hidden, 0, heads, groups, **settings, attention_bias=True, empty="zeros")
        self._build_experts(hidden, num_experts, moe_intermediate_dim, top_k, norm_top_k_prob)
        self.shared_gate = nn.Linear(hidden, shared, bias=False)
        self.shared_up = nn.Linear(hidden, shared, bias=False)
        self.shared_down = nn.Linear(shared, hidden, bias=False)
        self.shared_expert_gate = nn.Linear(hidden, 1, bias=False)

    def _feed_forward(self, y: Tensor) -> Tensor:
        flat = y.reshape(-1, y.shape[-1])
        experts, weights = self.route(flat)
        shared = self.shared_down(F.silu(self.shared_gate(flat)) * self.shared_up(flat))
        shared = shared * torch.sigmoid(self.shared_expert_gate(flat))
        return (self._experts(flat, experts, weights) + shared).reshape(y.shape)


_ATTENTION = "_self_attention_layer"
_SHARED = "mlp/shared_expert_dense"
_MOE_ORDER = (
    "_self_attention_layernorm",
    _ATTENTION,
    f"{_ATTENTION}/query_dense",
    f"{_ATTENTION}/key_dense",
    f"{_ATTENTION}/value_dense",
    f"{_ATTENTION}/_output_dense",
    "_feedforward_layernorm",
    "mlp",
    "mlp/_sparse_feedforward_gate_dense",
    "mlp/expert_bank",
    _SHARED,
    f"{_SHARED}/_feedforward_gate_dense",
    f"{_SHARED}/_feedforward_intermediate_dense",
    f"{_SHARED}/_feedforward_output_dense",
    "mlp/shared_expert_gate_dense",
)
_MOE_ROLES = (
    "router",
    "expert_gate_up",
    "expert_down",
    "shared_gate",
    "shared_up",
    "shared_down",
    "shared_expert_gate",
)


def _refuse_what_keras_hub_computes_apart(c: dict[str, Any]) -> None:
    """The options where keras-hub 0.32 computes what the conversion does not follow (the module docstring)."""
    step, dense = c.get("decoder_sparse_step", 1), c.get("mlp_only_layers") or []
    if step != 1 or 0 in dense:
        raise Refused(
            f"decoder_sparse_step={step!r}, mlp_only_layers={dense!r}: keras-hub 0.32 then builds every decoder "
            f"dense (each has layer_index 0), which attnzoo does not convert"
        )
    if c.get("output_router_logits"):
        raise Refused("output_router_logits=True: keras-hub's backbone cannot pass a decoder's router logits on")
    if c.get("use_sliding_window_attention"):
        raise Refused(
            "use_sliding_window_attention=True: keras-hub applies the window on the CPU (its masked softmax) "
            "and not on a GPU (its fused attention), so Keras itself computes two models"
        )


def checked_top_k(top_k: Any, experts: int) -> int:
    """A router's ``top_k``: an int from 1 to the number of ``experts``, or ``Refused`` saying so."""
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= experts:
        raise Refused(f"top_k={top_k!r} is not a number of experts from 1 to {experts}")
    return top_k


def _moe_state(named: dict[str, Any], hidden: int) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """The mixture's sizes and tensors from its Keras variables by role (shapes checked)."""
    experts, inner = int(named["expert_down"].shape[0]), int(named["expert_down"].shape[1])
    shared = int(named["shared_gate"].shape[1])
    expected = {
        "router": (hidden, experts),
        "expert_gate_up": (experts, hidden, 2 * inner),
        "expert_down": (experts, inner, hidden),
        "shared_gate": (hidden, shared),
        "shared_up": (hidden, shared),
        "shared_down": (shared, hidden),
        "shared_expert_gate": (hidden, 1),
    }
    wrong = [role for role, shape in expected.items() if tuple(named[role].shape) != shape]
    if wrong:
        raise Refused(f"the mixture's {', '.join(wrong)} {[list(named[r].shape) for r in wrong]} do not fit")
    sizes = {"num_experts": experts, "moe_intermediate_dim": inner, "shared_expert_intermediate_dim": shared}
    state = {f"{role}.weight": as_tensor(named[role].T) for role in ("router", *_MOE_ROLES[3:])}
    state |= {role: as_tensor(named[role]) for role in ("expert_gate_up", "expert_down")}
    return sizes, state


@keras_layer("QwenMoeTransformerDecoder", child_order=_MOE_ORDER, **DECODER_CALL)
def convert_qwen_moe_decoder(record, arrays, ctx):
    expect_variables(arrays, 16, "QwenMoeTransformerDecoder (Qwen2's attention, a router, experts, a shared expert)")
    c = record.config
    _refuse_what_keras_hub_computes_apart(c)
    attention = dict(zip((*QWEN_ATTENTION_ROLES, "feedforward_norm"), arrays[:9], strict=True))
    sizes, state = rotary_decoder_parts(attention, "a Qwen-MoE attention")
    moe_sizes, moe_state = _moe_state(dict(zip(_MOE_ROLES, arrays[9:], strict=True)), sizes["hidden"])
    top_k = checked_top_k(c.get("top_k", 4), moe_sizes["num_experts"])
    del sizes["intermediate_dim"], sizes["attention_bias"]  # the node's own: no SwiGLU, and biases
    options = {"op": HubQwenMoeDecoder.op, **moe_sizes, "top_k": top_k}
    spec = rotary_spec(c, sizes, **options, norm_top_k_prob=bool(c.get("norm_top_k_prob", False)))
    notes = [f"keras-hub QwenMoeTransformerDecoder: {moe_sizes['num_experts']} experts, top {top_k}, a shared one"]
    return Converted(spec, {**state, **moe_state}, notes)


# -- the family's Hugging Face form -------------------------------------------------------------------------
def _qwen2_moe_config(m: HubSource) -> dict[str, Any]:
    layers, first = m.size("num_layers"), m.spec("transformer_layer_0")
    return {
        **rotary_config(m, QWEN_MAX_POSITIONS),
        "moe_intermediate_size": first["moe_intermediate_dim"],
        "shared_expert_intermediate_size": first["shared_expert_intermediate_dim"],
        "num_experts": first["num_experts"],
        "num_experts_per_tok": first["top_k"],
        "norm_topk_prob": bool(first.get("norm_top_k_prob", False)),
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "qkv_bias": True,
        "output_router_logits": False,
        "router_aux_loss_coef": float(m.arguments.get("router_aux_loss_coefficient", 0.001)),
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": layers,
        "layer_types": ["full_attention"] * layers,
    }


def _qwen2_moe_layer(m: HubSource, ours: str, theirs: str) -> Tensors:
    """One decoder's weights: the attention's as Qwen2's, the router as ``mlp.gate``, each expert's three
    projections as ``nn.Linear`` weights [out, in], the shared expert and its gate."""
    yield from held_tensors(m, ours, theirs, ROTARY_ATTENTION_WEIGHTS)
    yield f"{theirs}.mlp.gate.weight", m.tensor(f"{ours}.router.weight")
    gate_up, down = m.tensor(f"{ours}.expert_gate_up"), m.tensor(f"{ours}.expert_down")
    inner = down.shape[1]
    for e in range(down.shape[0]):
        yield f"{theirs}.mlp.experts.{e}.gate_proj.weight", gate_up[e, :, :inner].T
        yield f"{theirs}.mlp.experts.{e}.up_proj.weight", gate_up[e, :, inner:].T
        yield f"{theirs}.mlp.experts.{e}.down_proj.weight", down[e].T
    shared = (("gate_proj", "shared_gate"), ("up_proj", "shared_up"), ("down_proj", "shared_down"))
    yield from held_tensors(m, ours, theirs, ((f"mlp.shared_expert.{t}", o) for t, o in shared))
    yield f"{theirs}.mlp.shared_expert_gate.weight", m.tensor(f"{ours}.shared_expert_gate.weight")


def _qwen2_moe_tensors(m: HubSource) -> Tensors:
    return rotary_tensors(m, _qwen2_moe_layer)


QWEN2_MOE = TransformersForm(
    "qwen2_moe",
    {"backbone": "Qwen2MoeModel", "causal_lm": "Qwen2MoeForCausalLM"},
    _qwen2_moe_config,
    _qwen2_moe_tensors,
)


@keras_hub_model("QwenMoeBackbone", family="qwen_moe", causal_lm="QwenMoeCausalLM", transformers=QWEN2_MOE)
def qwen_moe_graph(config: dict[str, Any], where: str) -> dict[str, Any]:
    """``QwenMoeBackbone``: Llama's graph (:func:`~attnzoo.keras.converters.hub_llama.rotary_backbone_graph`)
    of ``QwenMoeTransformerDecoder`` layers and a ``QwenLayerNorm``, the embedding untied unless
    ``tie_word_embeddings``. ``QwenMoeCausalLM``: that graph, then the embedding's reverse call."""
    keys = (
        "moe_intermediate_dim",
        "shared_expert_intermediate_dim",
        "num_experts",
        "top_k",
        "norm_top_k_prob",
        "decoder_sparse_step",
        "mlp_only_layers",
        "output_router_logits",
        "router_aux_loss_coefficient",
        "rope_max_wavelength",
        "rope_scaling_factor",
        "use_sliding_window_attention",
        "sliding_window_size",
    )
    return rotary_backbone_graph(
        config,
        where,
        decoder=("QwenMoeTransformerDecoder", "keras_hub.src.models.qwen_moe.qwen_moe_decoder"),
        norm=("QwenLayerNorm", "keras_hub.src.models.qwen.qwen_layernorm"),
        settings={key: config[key] for key in keys if key in config},
        tied=bool(config.get("tie_word_embeddings", False)),
        name="qwen_moe_backbone",
    )
