"""Attention pooling: a sequence in, pooled vectors out.

``KerasAttention`` (registry ``keras_attn``, seed 000) pools one vector per class::

    A   = softmax_T(tanh(Ws Hᵀ))        [B, C, T]    Ws [C, E], glorot (xavier) uniform
    out = A H                          [B, C, E]

``AttentionPooling`` (registry ``attn_pool``, what seed 001's question was after) pools one vector::

    e_t = vᵀ tanh(W h_t + b)           [B, T]       W [d_a, H], b [d_a], v [d_a]
    c   = Σ_t softmax_T(e)_t h_t       [B, H]

Both take ``mask`` [B, T] (True = attend); a fully masked sequence pools to zeros.

Note on ``keras_attn``: tanh bounds every score to [-1, 1], so one token can get at most
``1 / (1 + (T-1) e^-2)`` of the weight: 0.131 at T = 50, 0.003 at T = 2,500. On long inputs this layer
cannot focus; ``attn_pool`` or label attention can.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .core import check_input, check_mask, check_positive, label_attention, masked_softmax, neutralise
from .lazy import LazyLayer

__all__ = ["KerasAttention", "AttentionPooling"]


def _prepare(layer: str, x: Tensor, mask: Tensor | None, size: int | None, like: Tensor):
    """Check x [B, T, size] and mask [B, T]; x with padded positions zeroed, and the mask as [B, 1, T]."""
    check_input(layer, "x", x, ("batch", "seq", size or "hidden"), like=like)
    mask = check_mask(layer, mask, x.shape[0], 1, x.shape[1], like=x)
    return neutralise(x, None if mask is None else mask[:, 0]), mask


class KerasAttention(LazyLayer):
    """Seed 000's Keras attention: per-class attention pooling with tanh-bounded scores.

    Args:
        num_classes: C, the number of pooled vectors (the seed's ``class_num``).
        embed_dim: E; None infers it from the first input (Keras ``build``).

    Shapes: ``forward(x [B, T, E], mask [B, T] = None, return_attention=False)`` -> ``[B, C, E]``, or
    ``(out [B, C, E], A [B, C, T])``.
    """

    name = "keras_attn"

    def __init__(self, num_classes: int, *, embed_dim: int | None = None, device=None, dtype=None) -> None:
        super().__init__()
        check_positive(self.name, "num_classes", num_classes, allow_none=False)
        check_positive(self.name, "embed_dim", embed_dim)
        self.num_classes = num_classes
        self._create_parameters({"embed_dim": embed_dim}, device, dtype)

    def _parameter_shapes(self, sizes):
        return {"Ws": (self.num_classes, sizes["embed_dim"])}

    def _infer_sizes(self, x, *args, **kwargs):
        check_input(self.name, "x", x, ("batch", "seq", "embed_dim"))
        return {"embed_dim": x.shape[-1]}

    def _sizes_from_parameters(self):
        return {"embed_dim": self.Ws.shape[1]}

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.Ws)  # Keras glorot_uniform on a 2-D weight

    def keras_layout(self):
        from .keras_layers import KerasVar

        return [KerasVar("Ws", "vars/0", "Ws")]

    def keras_shapes(self) -> dict[str, tuple[int | None, ...]]:
        return {"Ws": (self.num_classes, self.size("embed_dim"))}

    def forward(self, x: Tensor, mask: Tensor | None = None, return_attention: bool = False):
        x, mask = _prepare(self.name, x, mask, self.size("embed_dim"), self.Ws)
        scores = torch.tanh(torch.matmul(self.Ws, x.transpose(1, 2)))  # [B, C, T]
        weights = masked_softmax(scores, mask)
        out = torch.bmm(weights, x)
        return (out, weights) if return_attention else out

    def extra_repr(self) -> str:
        return f"num_classes={self.num_classes}, embed_dim={self.size('embed_dim')}"


class AttentionPooling(LazyLayer):
    """Additive attention pooling over time (Bahdanau-style scores against one learned query ``v``).

    Args:
        hidden_size: H; None infers it from the first input.
        attention_size: d_a; None uses H.

    Shapes: ``forward(x [B, T, H], mask [B, T] = None, return_attention=False)`` -> ``c [B, H]``, or
    ``(c [B, H], a [B, T])``. The pooling is label attention with one label: ``v`` is the query and
    ``tanh(W h + b)`` the keys (``core.label_attention``).
    """

    name = "attn_pool"

    def __init__(self, hidden_size: int | None = None, *, attention_size: int | None = None, device=None, dtype=None):
        super().__init__()
        check_positive(self.name, "hidden_size", hidden_size)
        check_positive(self.name, "attention_size", attention_size)
        self.attention_size_arg = attention_size
        self._create_parameters({"hidden_size": hidden_size}, device, dtype)

    def _attention_size(self, hidden: int) -> int:
        return self.attention_size_arg or hidden

    def _parameter_shapes(self, sizes):
        h = sizes["hidden_size"]
        d_a = self._attention_size(h)
        return {"W": (d_a, h), "b": (d_a,), "v": (d_a,)}

    def _infer_sizes(self, x, *args, **kwargs):
        check_input(self.name, "x", x, ("batch", "seq", "hidden"))
        return {"hidden_size": x.shape[-1]}

    def _sizes_from_parameters(self):
        return {"hidden_size": self.W.shape[1]}

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.W)
        nn.init.zeros_(self.b)
        nn.init.normal_(self.v, std=self.v.shape[0] ** -0.5)

    def forward(self, x: Tensor, mask: Tensor | None = None, return_attention: bool = False):
        x, mask = _prepare(self.name, x, mask, self.size("hidden_size"), self.W)
        keys = torch.tanh(torch.nn.functional.linear(x, self.W, self.b))  # [B, T, d_a]
        # one learned query v against the keys tanh(W h + b): label attention with one label
        pooled, weights = label_attention(self.v.unsqueeze(0), keys, x, None if mask is None else mask[:, 0],
                                          scale=1.0, return_attention=return_attention)
        pooled = pooled.squeeze(1)
        return (pooled, weights.squeeze(1)) if return_attention else pooled

    def extra_repr(self) -> str:
        h = self.size("hidden_size")
        return f"hidden_size={h}, attention_size={self._attention_size(h) if h else self.attention_size_arg}"
