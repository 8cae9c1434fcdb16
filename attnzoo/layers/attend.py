"""The attention function of the core, over heads (transformers' contract: q [B, h, T, d], k and v
[B, g, S, d], g dividing h): which keys each query sees (pattern, window, causal, padding), the score bias
of the positions, and three ways to compute it: SDPA (its causal kernel where the pattern is exactly
causal), an explicit masked product in query chunks (sparse normalisers, returned weights), and key blocks
for a window (cost T·w). :class:`Attention` keeps the projections, the layouts and the dispatch.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attnzoo.layers.core import (
    SDPA_GQA,
    attend,
    expand_kv_heads,
    soft_capped,
    tracing,
)
from attnzoo.layers.normalizers import normalize
from attnzoo.layers.positions import alibi_slopes, t5_buckets

__all__ = [
    "AttendHeads",
    "CHUNK_ELEMENTS",
    "BLOCK_ELEMENTS",
    "windows",
    "positions_range",
    "keras_attention",
    "causal_allowed",
    "EMPTY_ROWS",
    "check_soft_cap",
]


# The explicit (materialised) path handles this many score elements at a time: queries are taken in
# chunks so that a long sequence never holds its whole [B, h, T, S] score tensor at once.
CHUNK_ELEMENTS = 2**23
# The window's blocks go in groups of at most this many key-window elements (their overlapping key
# windows are a few times the keys they cover): the window's peak memory then stays near full attention's.
BLOCK_ELEMENTS = 2**21


def windows(t: Tensor, span: int, step: int) -> Tensor:
    """The overlapping windows of ``span`` positions every ``step`` of t [B, g, L, d]: [B·n, g, span, d]."""
    unfolded = t.unfold(2, span, step)  # [B, g, n, d, span]
    batch, heads, count = unfolded.shape[:3]
    return unfolded.permute(0, 2, 1, 4, 3).reshape(batch * count, heads, span, t.shape[-1])


def positions_range(t: Tensor, lo: int, hi: int) -> Tensor:
    """Positions [lo, hi) of t's sequence axis (keys [B, g, L, d] or a mask [B, L]), zeros (False) for
    those outside [0, L): a group's keys are copied with their padding, never the whole sequence."""
    axis = 2 if t.dim() == 4 else 1
    length = t.shape[axis]
    part = t.narrow(axis, max(lo, 0), max(0, min(hi, length) - max(lo, 0)))
    before, after = max(0, -lo), max(0, hi - max(lo, length))
    if not (before or after):
        return part
    return F.pad(part, (0, 0, before, after) if axis == 2 else (before, after))


def check_soft_cap(layer: str, soft_cap: object) -> None:
    """Constructor check: the soft cap c is None (off) or a positive number (Gemma 2's is 50)."""
    if soft_cap is None:
        return
    if isinstance(soft_cap, bool) or not isinstance(soft_cap, (int, float)) or not 0 < soft_cap < float("inf"):
        raise ValueError(f"{layer}: soft_cap must be a positive number or None (no capping), got {soft_cap!r}")


class AttendHeads:
    """The attention function the core and its transformers backends call (a mixin of :class:`Attention`,
    whose settings it reads: heads, positions, causal, window, normalizer, soft cap, dropout)."""

    # set by Attention.__init__ (declared here for the type checker)
    name: str
    num_heads: int
    num_kv_heads: int
    positions: str
    causal: bool
    window: int | None
    normalizer: str
    soft_cap: float | None = None  # off unless the layer sets it (a host's own subclass need not)
    num_buckets: int
    max_distance: int

    # -- attention over a pattern ---------------------------------------------------------------------
    def _pattern(self, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """The allowed (i, j) pairs [Lq, Lk] of positions ``q_pos`` [Lq] and ``k_pos`` [Lk]: causal
        (j <= i) and window (|j - i| <= w), as comparisons (no [Lq, Lk] integer table)."""
        i, j = q_pos[:, None], k_pos[None, :]
        allowed = None
        if self.causal:
            allowed = j <= i
        if self.window is not None:
            band = (j >= i - self.window) & (j <= i + self.window)
            allowed = band if allowed is None else allowed & band
        return allowed

    def _plain_scores(self) -> bool:
        """Whether the weights are softmax(q·k / sqrt(d)) over the pattern alone: no bias read from the
        positions and no soft cap (SDPA's causal kernel and a cached step's position-free call need it)."""
        return self.normalizer == "softmax" and self.soft_cap is None and self.positions in ("none", "rope")

    def _score_bias(self, q_pos: Tensor, k_pos: Tensor, like: Tensor) -> Tensor | None:
        """The [h, Lq, Lk] bias of the positions: ALiBi's ``-m_n |j - i|``, or T5's learned
        ``B[bucket(j - i), n]`` (bidirectional unless causal); None for the other positions."""
        if self.positions == "t5":
            relative = k_pos[None, :] - q_pos[:, None]
            buckets = t5_buckets(
                relative, bidirectional=not self.causal, num_buckets=self.num_buckets, max_distance=self.max_distance
            )
            table = self.tensor("rel_bias")  # type: ignore[attr-defined]  # [num_buckets, h], the layer's own
            return table[buckets].permute(2, 0, 1).to(like.dtype)
        if self.positions != "alibi":
            return None
        slopes = alibi_slopes(self.num_heads).to(device=like.device, dtype=torch.float32)
        distance = (k_pos[None, :] - q_pos[:, None]).abs().to(torch.float32)
        return (-slopes[:, None, None] * distance).to(like.dtype)

    def attend_heads(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        allowed: Tensor | None = None,
        *,
        q_positions: Tensor | None = None,
        k_positions: Tensor | None = None,
        scale: float | None = None,
        dropout: float | None = None,
        return_attention: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """The attention step alone, on heads already projected (and rotated, and cached) by someone else:
        ``A = normalizer(scale · q kᵀ + b, where allowed ∧ pattern)``, ``out = A v``.

        Shapes: q [B, h, Lq, d] with h = ``num_heads``; k [B, g, Lk, d] and v [B, g, Lk, dv] with g = ``num_kv_heads``
        (query head n reads key/value head n // (h / g), never materialised on the softmax path);
        ``allowed`` bool broadcasting to [B, h, Lq, Lk] (True = attend), None for all. ``q_positions``
        [Lq] and ``k_positions`` [Lk] are the tokens' absolute positions, which the layer's ``causal``,
        ``window`` and ALiBi bias read (default: keys 0..Lk-1, queries the last Lq of them, as after a
        cache). ``scale`` defaults to 1/sqrt(d); ``dropout`` (on the weights) to the layer's own while
        training. q, k and v share one dtype and device (a ``ValueError`` otherwise). Returns
        ``(out [B, h, Lq, dv], A [B, h, Lq, Lk] or None)``; a query with nothing allowed gets zeros. The
        layer's projections, RoPE and cache are not used: this is what a host library with its own
        projections (``attnzoo.integrations``) calls.
        """
        for arg, t in (("q", q), ("k", k), ("v", v)):
            if not isinstance(t, Tensor) or t.dim() != 4:
                got = list(t.shape) if isinstance(t, Tensor) else type(t).__name__
                raise ValueError(
                    f"{self.name}.attend_heads expects {arg} as [batch, heads, length, head_dim], got {got}"
                )
        if q.shape[1] != self.num_heads or k.shape[1] != self.num_kv_heads or v.shape[1] != k.shape[1]:
            raise ValueError(
                f"{self.name}.attend_heads: this layer has {self.num_heads} query and {self.num_kv_heads} key/value "
                f"heads, got q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)}; build it with num_heads and "
                f"num_kv_heads of the host model"
            )
        if q.shape[0] != k.shape[0] or k.shape[:3] != v.shape[:3] or q.shape[-1] != k.shape[-1]:
            raise ValueError(
                f"{self.name}.attend_heads: q {list(q.shape)}, k {list(k.shape)} and v {list(v.shape)} disagree "
                f"(batch and key length shared, q and k of one head size)"
            )
        if len({q.dtype, k.dtype, v.dtype}) > 1 or len({q.device, k.device, v.device}) > 1:
            # a host that mixes them (a float16 query over a float32 cache) would get a kernel's dtype error
            raise ValueError(
                f"{self.name}.attend_heads expects q, k and v of one dtype on one device, got q "
                f"{str(q.dtype)[6:]} on {q.device}, k {str(k.dtype)[6:]} on {k.device}, v {str(v.dtype)[6:]} on "
                f"{v.device}; convert them: k.to(q), v.to(q)"
            )
        length, keys = q.shape[-2], k.shape[-2]
        if allowed is not None and (
            allowed.dtype != torch.bool
            or allowed.dim() != 4
            or any(a not in (1, b) for a, b in zip(allowed.shape, (q.shape[0], q.shape[1], length, keys), strict=True))
        ):
            raise ValueError(
                f"{self.name}.attend_heads expects allowed as a bool tensor broadcasting to "
                f"[{q.shape[0]}, {q.shape[1]}, {length}, {keys}] (True = attend), got {allowed.dtype} "
                f"{list(allowed.shape)}"
            )
        if k_positions is None:
            k_positions = torch.arange(keys, device=q.device)
        if q_positions is None:
            q_positions = torch.arange(keys - length, keys, device=q.device)
        if q_positions.shape != (length,) or k_positions.shape != (keys,):
            raise ValueError(
                f"{self.name}.attend_heads expects q_positions [{length}] and k_positions [{keys}], got "
                f"{list(q_positions.shape)} and {list(k_positions.shape)}"
            )
        keys_only = allowed is None or (allowed.shape[1] == 1 and allowed.shape[2] == 1)
        if keys_only and self._use_blocks(length, None, return_attention) and self._aligned(q_positions, k_positions):
            # queries that are the keys, masked by key alone: the window's blocks, O(T·w)
            real = None if allowed is None else allowed[:, 0, 0].expand(q.shape[0], keys)
            return self._attend_blocks(q, k, v, real, scale=scale, dropout=dropout), None
        return self._attend(q, k, v, allowed, q_positions, k_positions, return_attention, scale=scale, dropout=dropout)

    def _aligned(self, q_pos: Tensor, k_pos: Tensor) -> bool:
        """Whether the queries are the keys (the same consecutive positions): checked on the host."""
        if q_pos is k_pos:
            return True
        return (
            q_pos.shape == k_pos.shape and bool(torch.equal(q_pos, k_pos)) and bool((k_pos[1:] - k_pos[:-1] == 1).all())
        )

    def _attend(
        self, q, k, v, allowed, q_pos, k_pos, return_attention, *, scale=None, dropout=None, pattern_holds=False
    ):
        """Attention of q [N, h, Lq, d] over k, v [N, g, Lk, d] where ``allowed`` (bool, broadcasting to
        [N, 1, Lq, Lk]) and the pattern of the positions ``q_pos`` [Lq], ``k_pos`` [Lk] both allow it.
        ``pattern_holds``: the caller knows that every pair passes the pattern (one decoding step over a
        cache: its keys are at or before the query, and within the window), so none is built."""
        if dropout is None:
            dropout = self.dropout if self.training else 0.0
        if allowed is None and not return_attention and not pattern_holds and self._sdpa_causal(q, k, q_pos, k_pos):
            # the causal pattern alone is SDPA's own is_causal: no [Lq, Lk] mask, and its causal kernels
            if q.shape[1] != k.shape[1] and not SDPA_GQA:
                k, v = (t.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for t in (k, v))
            extra = {"enable_gqa": True} if q.shape[1] != k.shape[1] else {}
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True, scale=scale, **extra)
            return out, None
        pattern = None if pattern_holds else self._pattern(q_pos, k_pos)
        if pattern is not None:
            allowed = pattern if allowed is None else allowed & pattern
        if self.normalizer == "softmax" and self.positions != "relpos" and self.soft_cap is None:
            bias = self._score_bias(q_pos, k_pos, q)
            return attend(q, k, v, allowed, scale=scale, return_attention=return_attention, dropout=dropout, bias=bias)
        if scale is not None:  # the materialised form scales by 1/sqrt(d): the rest goes on q
            q = q * (scale * q.shape[-1] ** 0.5)
        return self._explicit(q, k, v, allowed, q_pos, k_pos, return_attention, dropout)

    def _sdpa_causal(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> bool:
        """Whether this layer's pattern over these positions is exactly SDPA's ``is_causal`` (query i
        reads keys 0..i): a causal softmax layer without window, bias or cap, 1 < Lq <= Lk, and the queries at
        the first Lq of the keys' increasing positions (the same tensor, or checked on the host)."""
        length = q.shape[-2]
        if not (self.causal and self.window is None and self._plain_scores()):
            return False
        if type(self)._pattern is not AttendHeads._pattern:  # a subclass's own pattern is applied as written
            return False
        if not 1 < length <= k.shape[-2]:
            return False
        if q_pos is k_pos:  # the layer's own forward: one arange for both
            return True
        if tracing():
            return False
        return bool(torch.equal(q_pos, k_pos[:length]) and (k_pos[1:] > k_pos[:-1]).all())

    def _explicit(self, q, k, v, allowed, q_pos, k_pos, return_attention, dropout):
        """The materialised form, for relative positions and the sparse normalisers, a chunk of queries at
        a time. Relative positions come from the 2k + 1 distance vectors: the key term is ``q · a^K``
        [.., Lq, 2k + 1] gathered by distance; the value term sums each row's weights by distance (a
        scatter into [.., Lq, 2k + 1]) before the product with ``a^V``. No [Lq, Lk, d] table is formed."""
        heads, d = q.shape[1], q.shape[-1]
        # grouped key/value heads are never copied: the r = h / g query heads that share one are stacked
        # along the query axis ([N, g, r·c, d], a copy of the queries only), multiplied with it, and the
        # products read back as [N, h, c, Lk] (a view)
        groups, kv_heads = heads // k.shape[1], k.shape[1]
        scale = d**-0.5
        relpos = self.positions == "relpos"
        rows = max(1, CHUNK_ELEMENTS // max(1, q.shape[0] * heads * k.shape[-2]))
        if tracing():  # a graph takes one chunk: a loop over a traced length would fix it
            rows = q.shape[-2]
        outs, all_weights = [], []
        starts = [0] if tracing() else range(0, max(q.shape[-2], 1), rows)  # one (empty) chunk for no queries
        # one chunk (a decode step, a short sequence) reads every key anyway: no reach, no host sync
        reach = self._key_reach(q_pos, k_pos) if len(starts) > 1 else None
        keys = k.shape[-2]
        for start in starts:
            stop = q.shape[-2] if tracing() else min(start + rows, q.shape[-2])
            q_c, q_pos_c = q[..., start:stop, :], q_pos[start:stop]
            # the chunk's keys: only those its pattern can allow (a causal chunk's first `stop`), the rest
            # would get exact zeros (half the scores of a causal sequence)
            lo, hi = (
                (0, keys) if reach is None or stop == start else (min(reach[0][start:stop]), max(reach[1][start:stop]))
            )
            hi = max(lo, hi)
            k_c, v_c, k_pos_c = k[..., lo:hi, :], v[..., lo:hi, :], k_pos[lo:hi]
            allowed_c = None
            if allowed is not None:
                allowed_c = allowed if allowed.shape[-2] == 1 else allowed[..., start:stop, :]
                allowed_c = allowed_c if allowed_c.shape[-1] == 1 else allowed_c[..., lo:hi]
            count = q_c.shape[-2]
            stacked = (q_c * scale).reshape(q_c.shape[0], kv_heads, groups * count, d)
            scores = torch.matmul(stacked, k_c.transpose(-2, -1)).view(q_c.shape[0], heads, count, hi - lo)
            if relpos:
                clip = self.max_relative_position
                distance = (k_pos_c[None, :] - q_pos_c[:, None]).clamp(-clip, clip) + clip  # [c, keys]
                index = distance.expand(*scores.shape)
                scores = scores + torch.matmul(q_c * scale, self.rel_key.t()).gather(-1, index)
            bias = self._score_bias(q_pos_c, k_pos_c, q)
            if bias is not None:
                scores = scores + bias
            if self.soft_cap is not None:  # Gemma 2's logit soft-capping, before the mask
                scores = soft_capped(scores, self.soft_cap)
            # the chunk's scores are this function's own: a sparse normaliser fills the mask in and works in them
            weights = normalize(scores, allowed_c, kind=self.normalizer, overwrite=True)
            dropped = F.dropout(weights, dropout) if dropout else weights
            out = torch.matmul(dropped.reshape(q_c.shape[0], kv_heads, groups * count, hi - lo), v_c)
            out = out.view(q_c.shape[0], heads, count, v.shape[-1])
            if relpos:
                by_distance = dropped.new_zeros(*dropped.shape[:-1], self.rel_value.shape[0])
                out = out + torch.matmul(by_distance.scatter_add(-1, index, dropped), self.rel_value)
            outs.append(out)
            if return_attention:
                all_weights.append(weights if (lo, hi) == (0, keys) else F.pad(weights, (lo, keys - hi)))
        out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=-2)
        weights = None
        if return_attention:
            weights = all_weights[0] if len(all_weights) == 1 else torch.cat(all_weights, dim=-2)
        return out, weights

    def _key_reach(self, q_pos: Tensor, k_pos: Tensor) -> tuple[list[int], list[int]] | None:
        """For each query, the first and one past the last key index that the layer's pattern can allow
        (causal: keys at or before it; window: within w), as lists [Lq]; None where the pattern limits
        nothing, is a subclass's own, the keys' positions do not increase, or under tracing. Keys outside
        a query's reach would get exact zeros, so the materialised form leaves them out."""
        if tracing() or not (self.causal or self.window is not None):
            return None
        if type(self)._pattern is not AttendHeads._pattern:
            return None
        if k_pos.numel() > 1 and not bool((k_pos[1:] > k_pos[:-1]).all()):
            return None
        ahead = 0 if self.causal or self.window is None else self.window  # not causal: a window, checked above
        hi = torch.searchsorted(k_pos, q_pos + ahead, right=True)
        lo = torch.zeros_like(hi) if self.window is None else torch.searchsorted(k_pos, q_pos - self.window)
        return lo.tolist(), hi.tolist()

    # -- the sliding window in blocks -----------------------------------------------------------------
    def _block_size(self) -> int:
        """b = ceil(w / 2), at least 16: a causal block then reads its b queries' keys and the 2b before
        (1.5 w keys a query, against 2 w with b = w: at T = 1024, w = 128, B = 8, 8 / 4 heads the call took
        0.67-0.72x sdpa's causal kernel against 0.84-0.90x, one thread, two runs of alternating rounds)."""
        assert self.window is not None
        return max(-(-self.window // 2), 16)

    def _use_blocks(self, seq: int, mask: Tensor | None, return_attention: bool) -> bool:
        """Blocks pay when the sequence spans several of them; a [B, T, T] mask or asked-for weights
        need the full matrix anyway."""
        if self.window is None or return_attention:
            return False
        if mask is not None and mask.shape[1] != 1:
            return False
        # A traced graph takes one branch for every length, and the blocks' ceil(T / b) reshapes put
        # guards on the length that torch.export refuses: exported programs keep the masked full form.
        return not tracing() and seq > 3 * max(self.window, 16)  # a sequence of a few windows: the full form

    def _attend_blocks(
        self, q: Tensor, k: Tensor, v: Tensor, keys: Tensor | None, *, scale: float | None = None, dropout=None
    ) -> Tensor:
        """Windowed attention with queries in blocks of b (:meth:`_block_size`): with r = ceil(w / b)·b, the
        whole blocks covering the window's reach w, block n's queries [n·b, (n+1)·b) can only reach keys
        in [n·b - r, (n+1)·b + r) (causal: [n·b - r, (n+1)·b)), so each block attends to b + 2r (b + r)
        keys and time and memory are O(T·w). The pattern, the key mask and the keys outside the sequence
        are one boolean mask per block; the result equals the masked full computation. The blocks go in
        groups, so that only one group's overlapping key windows exist at a time."""
        batch, heads, seq, d = q.shape
        size = self._block_size()
        blocks = -(-seq // size)
        total = blocks * size
        assert self.window is not None
        reach = -(-self.window // size) * size  # whole blocks covering the window's reach
        left, right = reach, (0 if self.causal else reach)
        span = left + size + right
        q = F.pad(q, (0, 0, 0, total - seq)) if total > seq else q
        real = torch.ones(batch, seq, dtype=torch.bool, device=q.device) if keys is None else keys
        # positions within a block: queries 0..b-1, keys -r..span-r-1 (the same for every block)
        q_pos = torch.arange(size, device=q.device)
        k_pos = torch.arange(span, device=q.device) - left
        per_group = max(1, BLOCK_ELEMENTS // max(1, batch * k.shape[1] * span * d))
        out = q.new_empty(batch, heads, total, d)
        for first in range(0, blocks, per_group):
            count = min(per_group, blocks - first)
            # the group's keys are [first·b - left, (first + count)·b + right); zeros beyond the sequence
            lo, hi = first * size - left, (first + count) * size + right

            q_group = q[:, :, first * size : (first + count) * size].reshape(batch, heads, count, size, d)
            q_group = q_group.transpose(1, 2).reshape(batch * count, heads, size, d)
            allowed = positions_range(real, lo, hi).unfold(1, span, size).reshape(batch * count, 1, 1, span)
            k_group, v_group = (windows(positions_range(t, lo, hi), span, size) for t in (k, v))
            result, _ = self._attend(
                q_group, k_group, v_group, allowed, q_pos, k_pos, False, scale=scale, dropout=dropout
            )
            result = result.view(batch, count, heads, size, d).transpose(1, 2)
            out[:, :, first * size : (first + count) * size] = result.reshape(batch, heads, count * size, d)
        return out[:, :, :seq]


# -- keras-hub's attention ---------------------------------------------------------------------------------
# what Keras gives a query row with no key allowed, by how the family's attention computes:
# "mean": keras's fused ``ops.dot_product_attention`` (torch backend) adds -0.7 x float32's largest to the
#   masked scores, which swamps every score of such a row alike: uniform weights, the mean of all values;
# "zeros": ``keras.layers.Softmax`` with a mask puts -1e9 at the masked scores and zeroes the masked weights.
EMPTY_ROWS = ("mean", "zeros")


def keras_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    allowed: Tensor | None,
    *,
    scale: float,
    soft_cap: float | None = None,
    bias: Tensor | None = None,
    empty: str = "mean",
    dropout: float = 0.0,
) -> Tensor:
    """keras-hub's attention over heads (transformers' contract), every family's:
    ``A = softmax(c · tanh((scale · q kᵀ + bias) / c), where allowed)``, ``out = A v``; without ``soft_cap``
    c (Gemma 2's logit soft-capping) the tanh is left out.

    Shapes: q [B, h, T, d]; k [B, g, S, d] and v [B, g, S, dv] with g dividing h (query head n reads
    key/value head n // (h / g)); ``allowed`` bool broadcasting to [B, h, T, S] (True = attend; the causal
    pattern, a window and the padding, as the caller builds them), None for all; ``bias`` float broadcasting
    to [B, h, T, S] (ALiBi). Returns [B, h, T, dv]. A query row with no key allowed gets what Keras gives it,
    ``empty`` (see :data:`EMPTY_ROWS`): the mean of all S values, or zeros. ``dropout`` (the caller decides
    whether training) drops weights. The softmax runs in float32 where the inputs are half precision, as
    keras-hub's float32 softmax does."""
    if empty not in EMPTY_ROWS:
        raise ValueError(f"keras_attention: empty must be one of {', '.join(EMPTY_ROWS)}, got {empty!r}")
    if soft_cap is None:
        out, _ = attend(q, k, v, allowed, scale=scale, dropout=dropout, bias=bias)
    else:
        keys, values = expand_kv_heads(k, q.shape[1]), expand_kv_heads(v, q.shape[1])
        scores = torch.matmul(q.float() * scale, keys.float().transpose(-2, -1))
        if bias is not None:
            scores = scores + bias.float()
        scores = soft_capped(scores, soft_cap)
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0).to(v.dtype)  # a row of -inf: zeros
        out = torch.matmul(F.dropout(weights, dropout) if dropout else weights, values)
    if allowed is None or empty == "zeros":
        return out
    none = ~allowed.any(dim=-1, keepdim=True)  # [B, h or 1, T, 1]
    if out.device.type == "cpu" and not tracing() and not bool(none.any()):
        return out  # the usual case, with nothing to sync for on the CPU
    mean = expand_kv_heads(v.mean(dim=-2, keepdim=True), q.shape[1])  # [B, h, 1, dv]
    return torch.where(none, mean.to(out.dtype), out)


def causal_allowed(
    queries: int, keys: int, *, window: int | None = None, padding: Tensor | None = None, device: Any = None
) -> Tensor:
    """Which keys each query may read in a causal decoder whose T = ``queries`` queries are the last T of its
    S = ``keys`` keys (a cache's earlier keys first): query i reads key j when j <= i and, with ``window``
    w, when i - j < w (the w latest tokens, its own included); ``padding`` [B, S] (True or 1 = a real token)
    masks the keys. -> bool [B or 1, 1, T, S]."""
    j = torch.arange(keys, device=device)
    i = torch.arange(keys - queries, keys, device=device)[:, None]
    allowed = j[None, :] <= i
    if window is not None:
        allowed = allowed & (i - j[None, :] < window)
    allowed = allowed[None, None]
    if padding is not None:
        allowed = allowed & padding.to(torch.bool)[:, None, None, :]
    return allowed
