"""DeBERTa-v2/v3's disentangled self-attention: content and relative position scored apart, then summed.

With q, k, v [B, h, T, d] the projections of x [B, T, E], and the layer's relative table R [2k, E]
(k = ``position_buckets``) projected by the *same* query and key projections (DeBERTa-v3's shared keys,
``share_att_key``) into pq, pk [h, 2k, d], the score of query i for key j is::

    s_ij = (q_i · k_j  +  q_i · pk[δ(i, j)]  +  k_j · pq[δ(i, j)]) / sqrt(3 d)
            content       content to position   position to content
    δ(i, j) = clip(bucket(i - j) + k, 0, 2k - 1)
    a_i = softmax_j(s_ij over the allowed j)        y_i = Wo [Σ_j a_ij v_j]_heads

The scale counts the three terms (He et al. 2021). ``bucket`` is
:func:`~attnzoo.layers.positions.log_buckets`: r itself for |r| <= k / 2, logarithmically wider buckets up to
P = ``max_relative_positions``. The table is the layer's parameter ``rel_embeddings``, used as given (a DeBERTa
encoder layer-normalises it once for all its layers before handing it over). It is self-attention over the
sequence, bidirectional: no context, no cache.

Shapes: ``x [B, T, E]``, ``mask`` [B, T] or [B, T, T] (True = attend) -> ``[B, T, E]``, or with
``return_attention`` ``(out, A [B, h, T, T])`` (``[B, T, T]`` with one head).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attnzoo.errors import ConfigError
from attnzoo.layers.attention import Attention
from attnzoo.layers.core import attend, attended_keys, check_mask, neutralise
from attnzoo.layers.kv_cache import KVCache
from attnzoo.layers.positions import relative_indices

__all__ = ["DisentangledAttention", "check_disentangled", "relative_terms"]


def check_disentangled(layer: str, position_buckets: object, max_relative_positions: object) -> None:
    """Constructor check: k >= 2 buckets (the log divides by k // 2) and P above k / 2 + 1 (the log's range
    log((P - 1) / (k / 2)) must be positive)."""
    if isinstance(position_buckets, bool) or not isinstance(position_buckets, int) or position_buckets < 2:
        raise ValueError(
            f"{layer}: position_buckets must be an int of at least 2 (DeBERTa-v3's is 256), got {position_buckets!r}"
        )
    least = position_buckets // 2 + 2
    if (
        isinstance(max_relative_positions, bool)
        or not isinstance(max_relative_positions, int)
        or max_relative_positions < least
    ):
        raise ValueError(
            f"{layer}: max_relative_positions must be an int of at least position_buckets / 2 + 2 = {least} "
            f"(DeBERTa-v3's is 512), got {max_relative_positions!r}"
        )


def relative_terms(q: Tensor, k: Tensor, pq: Tensor, pk: Tensor, buckets: int, max_positions: int) -> Tensor:
    """c2p + p2c, unscaled: ``q_i · pk[δ(i, j)] + k_j · pq[δ(i, j)]`` [B, h, T, T] for q, k [B, h, T, d] and the
    projected table pq, pk [B or 1, h, 2k, d] (k = ``buckets``, δ :func:`relative_indices` up to
    ``max_positions``). Each term is one product with the 2k table rows, gathered by δ: no [T, T, d] table."""
    batch, heads, length, _ = q.shape
    index = relative_indices(length, buckets, max_positions, q.device).expand(batch, heads, length, length)
    c2p = torch.matmul(q, pk.transpose(-1, -2)).gather(-1, index)  # q_i · pk[δ(i, j)]
    # k_j · pq[δ(i, j)]: gathered with j as the row, then turned so that i is
    p2c = torch.matmul(k, pq.transpose(-1, -2)).gather(-1, index.transpose(-1, -2)).transpose(-1, -2)
    return c2p + p2c


class DisentangledAttention(Attention):
    """DeBERTa-v2/v3's disentangled self-attention (see the module doc for the formula).

    Args:
        embed_dim: E; None infers it from the first input.
        num_heads: h; E must be divisible by it.
        position_buckets: k, the relative table's half size: it has 2k rows.
        max_relative_positions: P, the distance the log buckets reach.
        bias: biases on the projections (DeBERTa's have them).
        dropout: dropout on the attention weights while training.

    Shapes: ``forward(x [B, T, E], mask [B, T] or [B, T, T] = None, *, return_attention=False)`` ->
    ``[B, T, E]``, or ``(out, A [B, h, T, T])`` (``[B, T, T]`` with one head).
    """

    name = "disentangled"

    def __init__(
        self,
        embed_dim: int | None = None,
        *,
        num_heads: int = 1,
        position_buckets: int = 256,
        max_relative_positions: int = 512,
        bias: bool = True,
        dropout: float = 0.0,
        device=None,
        dtype=None,
    ) -> None:
        check_disentangled(self.name, position_buckets, max_relative_positions)
        self.position_buckets, self.max_relative_positions = position_buckets, max_relative_positions
        super().__init__(embed_dim, num_heads=num_heads, bias=bias, dropout=dropout, device=device, dtype=dtype)

    def _parameter_shapes(self, sizes):
        shapes = super()._parameter_shapes(sizes)
        shapes["rel_embeddings"] = (2 * self.position_buckets, sizes["embed_dim"])
        return shapes

    def new_cache(self, batch_size: int) -> KVCache:
        raise ConfigError(
            f"{self.name}: bidirectional self-attention keeps no cache (DeBERTa is an encoder); call it on the whole "
            f"sequence"
        )

    def _cross_attention(self, *args, **kwargs):
        raise ConfigError(
            f"{self.name}: self-attention only (its positions relate x to itself); pass no context, or attend over "
            f"the concatenated sequences"
        )

    def _self_attention(self, x: Tensor, mask: Tensor | None, cache: KVCache | None, return_attention: bool):
        batch, seq, _ = x.shape
        mask3 = check_mask(self.name, mask, batch, seq, seq, like=x)
        x = neutralise(x, attended_keys(mask3))  # keys no query attends to: padding, whatever it holds
        q, k, v = (self._heads(x, part, self.num_heads) for part in range(3))
        table = self.rel_embeddings[None]  # [1, 2k, E], projected once for the batch
        pq, pk = self._heads(table, 0, self.num_heads), self._heads(table, 1, self.num_heads)  # [1, h, 2k, d]
        scale = 1.0 / math.sqrt(3 * q.shape[-1])  # the three terms' scale
        allowed = None if mask3 is None else mask3.unsqueeze(1)  # [B, 1, T or 1, T]
        dropout = self.dropout if self.training else 0.0
        bias = relative_terms(q, k, pq, pk, self.position_buckets, self.max_relative_positions) * scale
        return attend(q, k, v, allowed, scale=scale, return_attention=return_attention, dropout=dropout, bias=bias)

    def extra_repr(self) -> str:
        buckets = f"position_buckets={self.position_buckets}, max_relative_positions={self.max_relative_positions}"
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, {buckets}"
