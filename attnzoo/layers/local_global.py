"""Alternating local and global attention layers (Gemma 2 and 3): one card, the layer's index picks which.

A decoder's layer ``ℓ`` (counted from 0) is *global* when ``(ℓ + 1) mod p = 0`` for the period
``p = global_every``, and *local* otherwise: with p = 2, layers 0, 2, 4, ... are local and 1, 3, 5, ...
global (Gemma 2); with p = 6, five local layers come before each global one (Gemma 3). Each layer is the
attention core (:class:`~attnzoo.layers.attention.Attention`), causal, with RoPE::

    a_ij = softmax_{j ∈ P_ℓ(i)}((R_i q_i)ᵀ R_j k_j / sqrt(d))     y_i = Wo [Σ_j a_ij v_j]_heads
    P_ℓ(i) = {j : i - w <= j <= i} on a local layer,  {j : j <= i} on a global one

with RoPE's base ``rope_base`` on local layers and ``global_rope_base`` on global ones (Gemma 3 turns its
global layers with base 1,000,000 and its local ones with 10,000). A local layer keeps the core's O(T·w)
blocks and a cache of its last w entries; a global one attends to every earlier token. Gemma's
``sliding_window`` W counts the query's own token (i - j < W): it is ``window = W - 1`` here.

Shapes: ``x [B, T, E]`` -> ``[B, T, E]`` (``(out, A [B, h, T, T])`` with ``return_attention``), as the core.
"""

from __future__ import annotations

from attnzoo.layers.attention import Attention
from attnzoo.layers.core import check_positive

__all__ = ["LocalGlobalAttention", "is_global_layer"]


def is_global_layer(layer_index: int, global_every: int) -> bool:
    """Whether layer ``layer_index`` (from 0) of a stack is global: every ``global_every``-th, the last of
    each period (``(layer_index + 1) % global_every == 0``)."""
    return (layer_index + 1) % global_every == 0


class LocalGlobalAttention(Attention):
    """One layer of a stack that alternates sliding-window and global causal attention (see the module doc).

    Args:
        embed_dim: E; None infers it from the first input.
        num_heads: h; E must be divisible by it.
        num_kv_heads: g key/value heads (None: h); h must be a multiple of g.
        window: w, a local layer's reach: it attends to i - w <= j <= i.
        layer_index: ℓ, this layer's place in its stack (from 0).
        global_every: p, the period: layer ℓ is global when (ℓ + 1) is a multiple of p.
        rope_base: RoPE's base on local layers (and on global ones, without ``global_rope_base``).
        global_rope_base: RoPE's base on global layers; None: rope_base.
        rope_layout: RoPE's pairing (``half`` or ``interleaved``).
        qk_norm: RMS-normalise query and key heads (Gemma 3's layers do).
        soft_cap: None (no capping), or c: scores become c · tanh(score / c) (Gemma 2's layers, c = 50).
        bias, dropout: biases on the projections; dropout on the attention weights while training.

    Shapes: ``forward(x [B, T, E], mask [B, T] or [B, T, T] = None, *, cache = None, return_attention=False)``
    -> ``[B, T, E]``, or ``(out, A [B, h, T, T])`` (``[B, T, T]`` with one head).
    """

    name = "local_global"

    def __init__(
        self,
        embed_dim: int | None = None,
        *,
        num_heads: int = 1,
        num_kv_heads: int | None = None,
        window: int = 4096,
        layer_index: int = 0,
        global_every: int = 2,
        rope_base: float = 10000.0,
        global_rope_base: float | None = None,
        rope_layout: str = "half",
        qk_norm: bool = False,
        soft_cap: float | None = None,
        bias: bool = False,
        dropout: float = 0.0,
        device=None,
        dtype=None,
    ) -> None:
        check_positive(self.name, "window", window, allow_none=False)
        check_positive(self.name, "global_every", global_every, allow_none=False)
        if isinstance(layer_index, bool) or not isinstance(layer_index, int) or layer_index < 0:
            raise ValueError(
                f"{self.name}: layer_index must be an int >= 0 (the layer's place in its stack), got {layer_index!r}"
            )
        is_global = is_global_layer(layer_index, global_every)
        super().__init__(
            embed_dim,
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            positions="rope",
            rope_base=global_rope_base if is_global and global_rope_base is not None else rope_base,
            rope_layout=rope_layout,
            causal=True,
            window=None if is_global else window,
            qk_norm=qk_norm,
            soft_cap=soft_cap,
            bias=bias,
            dropout=dropout,
            device=device,
            dtype=dtype,
        )
        self.layer_index, self.global_every, self.is_global = layer_index, global_every, is_global

    def extra_repr(self) -> str:
        kind = "global" if self.is_global else "local"
        return f"{kind} (layer {self.layer_index}, every {self.global_every}-th global), {super().extra_repr()}"
