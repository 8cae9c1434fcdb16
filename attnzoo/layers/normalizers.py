"""Normalisers of attention scores: softmax, sparsemax and 1.5-entmax, all masked the same way.

For scores z over the keys of one query (True = attend in the mask):

    softmax    p_j = exp(z_j) / Σ_k exp(z_k)                          dense: every kept key gets weight
    sparsemax  p = argmin_{p ∈ Δ} ||p - z||²  = [z - τ]_+             (Martins & Astudillo 2016)
               τ from the k largest scores: τ = (Σ_{j≤k} z_(j) - 1) / k, k the largest with 1 + k z_(k) > Σ_{j≤k} z_(j)
    entmax15   p = [z/2 - τ]_+²,  Σ p = 1                             (Peters, Niculae & Martins 2019, α = 1.5)
               τ from the sorted x = z/2: for k = 1..K, τ_k = μ_k - sqrt((1 - k (m_k - μ_k²)) / k) with μ_k, m_k
               the means of x_(1..k) and of their squares; the support is the largest k with τ_k ≤ x_(k)

sparsemax and entmax15 give exact zeros: a key outside the support gets no weight at all. Rows sum to
one; masked keys get exactly zero; a row with no key left attends to nothing (all zeros). Gradients
are the closed forms: sparsemax ``g - mean_S(g)`` on the support S; entmax15 ``s ⊙ g - (sᵀg / Σ s) s``
with ``s = sqrt(p)``. Half-precision scores are normalised in float32.

No row is sorted in full: tau comes from the sorted entries above a lower bound (Newton steps toward the
threshold of the row's chunk maxima), which hold the support; the result is the full sort's
(tests/test_normalizers.py checks it against the entmax package). The mask is applied once, as the fill
of the one copy made.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["NORMALIZERS", "normalize", "sparsemax", "entmax15", "check_normalizer"]

NORMALIZERS = ("softmax", "sparsemax", "entmax15")


def check_normalizer(layer: str, normalizer: str) -> None:
    if normalizer not in NORMALIZERS:
        raise ValueError(f"{layer}: normalizer must be one of {', '.join(NORMALIZERS)}, got {normalizer!r}")


# A row's threshold depends on its support only: the full sort reads it from the sorted row's prefix, and
# entries below tau never matter (Peters et al.'s and the entmax package's top-k path rest on the same
# fact). Here no row is sorted in full. The maxima of its chunks of CHUNK entries are a sub-row, and the
# threshold of a sub-row is at most the row's (f(t) = Σ (x_j - t)_+^a only grows with more entries), so
# it bounds tau from below, and so does any Newton step toward it from below (_lower_bound): the entries
# above that bound (the support and a few more) are gathered, padded to one width and sorted, and the full
# sort's algorithm runs on them. It reads the same numbers in the same order as on the full sort, so tau
# is the full sort's. Profiled on [8, 4, 1024, 1024] scores, one thread: a search by torch.topk(k=64)
# spent 59 % of sparsemax's forward and backward in topk; the chunks and the candidates cost about three
# passes over the scores (benchmarks/normalizers.py). On [8, 8, 128, 640] causal rows of N(0, 0.1²), one
# thread, sorting the maxima for their exact threshold took 21 ms of sparsemax's 87 ms forward; two Newton
# steps take about 5 ms (the forward 1.25x faster, alternating rounds).
CHUNK = 8
# Rows with more candidates than this (near-uniform rows) are sorted in full, apart from the rest, so that
# a few of them do not widen every row's padding.
_WIDE = 128


def _sparsemax_threshold(top: Tensor) -> tuple[Tensor, Tensor]:
    """tau [..., 1] and the support size [..., 1] from ``top`` [..., k], a row's largest scores in
    descending order (shifted so that the first is 0): tau = (Σ_{j≤s} z_(j) - 1) / s for the largest s
    with 1 + s z_(s) > Σ_{j≤s} z_(j)."""
    ranks = torch.arange(1, top.shape[-1] + 1, device=top.device, dtype=top.dtype)
    prefix = top.cumsum(-1)
    size = (1 + ranks * top > prefix).sum(-1, keepdim=True)  # at least 1: the largest score is always in
    return (prefix.gather(-1, size - 1) - 1) / size.to(top.dtype), size


def _entmax15_threshold(top: Tensor) -> tuple[Tensor, Tensor]:
    """tau [..., 1] and the support size [..., 1] from ``top`` [..., k], the largest of x = z/2 in
    descending order (the first 0): tau_s = μ_s - sqrt((1 - s (m_s - μ_s²)) / s), the largest s with
    tau_s <= x_(s)."""
    ranks = torch.arange(1, top.shape[-1] + 1, device=top.device, dtype=top.dtype)
    mean = top.cumsum(-1) / ranks
    mean_sq = (top * top).cumsum(-1) / ranks
    tau = mean - torch.sqrt(torch.clamp((1 - ranks * (mean_sq - mean * mean)) / ranks, min=0))
    size = (tau <= top).sum(-1, keepdim=True)
    return tau.gather(-1, size - 1), size


# Entries below the floor (masked ones, -inf; the padding of the candidates) never reach the support, whose
# entries are above tau >= -1: raising them to it keeps tau, and the prefix sums free of inf - inf.
_FLOOR = -2.0


def _solve(kind: str, top: Tensor) -> tuple[Tensor, Tensor]:
    """The full sort's (tau, support size) of rows whose sorted prefix is ``top`` (descending)."""
    return (_sparsemax_threshold if kind == "sparsemax" else _entmax15_threshold)(top.clamp(min=_FLOOR))


def _padded(rows: Tensor, values: Tensor, count: int) -> Tensor:
    """``values`` of the rows ``rows`` (ascending, each row's entries adjacent) as [count, width], each row
    left-aligned and padded with the floor."""
    counts = torch.bincount(rows, minlength=count)
    width = max(1, int(counts.max())) if rows.numel() else 1
    slots = torch.arange(rows.numel(), device=rows.device) - (counts.cumsum(0) - counts)[rows]
    out = values.new_full((count, width), _FLOOR)
    out[rows, slots] = values
    return out


def _sorted_solve(kind: str, rows: Tensor) -> tuple[Tensor, Tensor]:
    """(tau, support size) [..., 1] of ``rows`` [..., n] by the full sort's algorithm."""
    return _solve(kind, torch.sort(rows, dim=-1, descending=True).values)


def _chunk_maxima(z: Tensor) -> Tensor | None:
    """The maxima of the chunks of CHUNK entries of each row of ``z`` [..., L]: [R, ceil(L / CHUNK)] (rows
    flattened); None for rows too short to gain from them, and under tracing (a graph cannot gather a
    data-dependent number of candidates)."""
    from attnzoo.layers.core import tracing

    length = z.shape[-1]
    if tracing() or length < 4 * CHUNK:
        return None
    # max_pool1d with ceil_mode: the last, shorter chunk included, and about half the time of amax over a
    # [..., C, CHUNK] view (an inner reduction of 8 entries)
    return F.max_pool1d(z.reshape(-1, 1, length), CHUNK, ceil_mode=True).squeeze(1)


# Newton steps on the chunk maxima's threshold equation: the bound is a little below the exact one. On
# [8192, 640] rows of N(0, 0.1²), the scale of the benchmark Llama's, whose supports hold 25.6 entries on
# average (40 at most), 2 steps leave 33.9 candidates a row (51 at most), 3 steps 27.9 (44), 4 steps 27.4:
# the third step paid (the Llama's attention call 5.1-5.4x sdpa's against 5.8-6.2x), the fourth did not.
_NEWTON_STEPS = 3


def _lower_bound(kind: str, maxima: Tensor) -> Tensor:
    """A lower bound [R, 1] on the threshold of each row of ``maxima`` [R, C] (shifted: each row's largest 0,
    masked entries -inf), so on its row's: Newton steps from t = -1 on f(t) = Σ_j (m_j - t)_+^a - 1 (a = 1
    sparsemax, 2 entmax15 on x = z/2). f is convex and decreasing with f(-1) >= 0, so each step stays at or
    below its root, the sub-row's threshold (sparsemax's step is Michelot's: t = (Σ_{m > t} m - 1) / |{m > t}|)."""
    t = maxima.new_full((maxima.shape[0], 1), -1.0)
    for _ in range(_NEWTON_STEPS):
        gap = (maxima - t).clamp_(min=0)
        if kind == "sparsemax":
            excess, slope = gap.sum(-1, keepdim=True) - 1, (gap > 0).sum(-1, keepdim=True)
        else:
            excess, slope = torch.linalg.vecdot(gap, gap).unsqueeze(-1) - 1, 2 * gap.sum(-1, keepdim=True)
        t = t + excess / slope.clamp(min=1e-30)  # a row with nothing allowed: no slope, t far below any entry
    return t


def _candidates(flat: Tensor, maxima: Tensor, floor: Tensor) -> tuple[Tensor, Tensor]:
    """The entries of ``flat`` [R, L] above ``floor`` [R, 1]: their rows (ascending, each row's entries in
    order) and values. Only the chunks whose maximum ``maxima`` [R, C] is above the floor are read, so the
    comparison and ``nonzero`` run over those chunks' entries, not over every score."""
    count, length = flat.shape
    if length % CHUNK:  # a shorter last chunk: the entries themselves
        rows, cols = (flat > floor).nonzero(as_tuple=True)
        return rows, flat[rows, cols]
    # flat indices and index_select: about half the time of indexing with two index tensors
    picked = (maxima > floor).view(-1).nonzero().squeeze(1)  # row * C + chunk, ascending
    rows = picked.div(maxima.shape[1], rounding_mode="floor")
    entries = flat.view(-1, CHUNK).index_select(0, picked)  # [P, CHUNK]
    kept = (entries > floor.view(-1).index_select(0, rows).unsqueeze(1)).view(-1).nonzero().squeeze(1)
    return rows.index_select(0, kept.div(CHUNK, rounding_mode="floor")), entries.view(-1).index_select(0, kept)


def _threshold(y: Tensor, maxima: Tensor | None, kind: str) -> tuple[Tensor, Tensor]:
    """tau and the support size [..., 1] of the rows of ``y`` [..., L] (each row's largest entry 0, masked
    entries -inf; for entmax15 y = x = z/2), as the full sort gives them, from sorted candidates only:
    those above the threshold of the chunk ``maxima`` [R, C] (in y's units; None: sort every row)."""
    if maxima is None:
        return _sorted_solve(kind, y)
    length = y.shape[-1]
    flat = y.reshape(-1, length)
    count = flat.shape[0]
    bound = _lower_bound(kind, maxima)
    # a margin far above float32's rounding of the entries (all in [-1, 0] near tau), so that no entry of
    # the support is lost to the bound's own rounding
    rows, values = _candidates(flat, maxima, bound - 1e-4)
    counts = torch.bincount(rows, minlength=count)
    wide = counts > _WIDE
    if bool(wide.any()):  # near-uniform rows: the full sort
        tau, size = bound, torch.empty(count, 1, dtype=torch.long, device=y.device)
        ids = wide.nonzero().squeeze(1)
        tau[ids], size[ids] = _sorted_solve(kind, flat[ids])
        narrow = (~wide[rows]).nonzero().squeeze(1)
        rows, values = rows[narrow], values[narrow]
        ids = (~wide).nonzero().squeeze(1)
        renumber = torch.cumsum(~wide, 0) - 1
        tau[ids], size[ids] = _sorted_solve(kind, _padded(renumber[rows], values, ids.numel()))
    else:
        tau, size = _sorted_solve(kind, _padded(rows, values, count))
    return tau.view(*y.shape[:-1], 1), size.view(*y.shape[:-1], 1)


def _fill_hidden(scores: Tensor, mask: Tensor) -> Tensor:
    """``scores`` [..., Lq, Lk] with -inf written in where ``mask`` (broadcastable) is False, from the first
    key some query may not see: a causal chunk's scores are rewritten only over its own last keys."""
    from attnzoo.layers.core import tracing

    hidden = ~mask
    if hidden.numel() == 0:  # no queries or no keys: nothing to fill
        return scores
    if tracing() or scores.device.type == "meta":  # a graph, or no data: no cut can be read from it
        return scores.masked_fill_(hidden, float("-inf"))
    seen_by_all = ~hidden.reshape(-1, hidden.shape[-1]).any(0)
    cut = int(seen_by_all.cumprod(0).sum())  # the leading keys every query sees
    if cut < hidden.shape[-1]:
        scores[..., cut:].masked_fill_(hidden[..., cut:], float("-inf"))
    return scores


class _Sparse(torch.autograd.Function):
    """Sparsemax or entmax15 of ``scores`` where ``mask`` allows (None: everywhere), along the last axis.

    The mask is applied once, as the fill of the copy the forward makes (-inf: exact zeros). The
    backward reads only the support (sparsemax: ``g - mean_S(g)`` on S; entmax15: ``s ⊙ g - (sᵀg / Σ s)
    s``, with s = sqrt(p) kept by the forward)."""

    @staticmethod
    def forward(ctx, scores: Tensor, mask: Tensor | None, kind: str, overwrite: bool) -> Tensor:
        if mask is None:
            z = scores
        else:  # -inf where masked: written into scores the caller gave up (``overwrite``), else into a copy
            z = _fill_hidden(scores, mask) if overwrite else torch.where(mask, scores, float("-inf"))
        maxima = _chunk_maxima(z)  # [R, C], and each row's largest among them
        largest = (z if maxima is None else maxima).amax(-1, keepdim=True)
        largest = torch.where(largest == float("-inf"), 0.0, largest)  # nothing allowed: y all -inf, p all 0
        if maxima is not None:
            maxima, largest = maxima - largest, largest.view(*z.shape[:-1], 1)
        # shifted first (both normalisers are shift-invariant): tau is then O(1), where at 1e30 an
        # unshifted largest + tau would round to the largest itself
        # the masked copy is this function's own, and so are scores the caller gave up (``overwrite``)
        y = z - largest if z is scores and not overwrite else z.sub_(largest)
        if kind == "sparsemax":
            tau, size = _threshold(y, maxima, kind)
            p = y.sub_(tau).clamp_(min=0)
            ctx.save_for_backward(p, size)
        else:
            y = y.mul_(0.5)  # x = z/2, exactly
            tau, _ = _threshold(y, None if maxima is None else maxima.mul_(0.5), kind)
            s = y.sub_(tau).clamp_(min=0)  # sqrt(p)
            p = s * s
            ctx.save_for_backward(s)
        ctx.kind = kind
        return p

    @staticmethod
    def backward(ctx, grad: Tensor):
        if ctx.kind == "sparsemax":
            p, size = ctx.saved_tensors
            support = p.sign()  # 1 on the support, 0 elsewhere (p >= 0)
            mean = torch.linalg.vecdot(grad, support).unsqueeze(-1) / size.to(grad.dtype)
            return (grad - mean).mul_(support), None, None, None
        (s,) = ctx.saved_tensors
        g = grad * s
        shift = g.sum(-1, keepdim=True) / s.sum(-1, keepdim=True).clamp(min=1e-30)
        return g.addcmul_(s, shift, value=-1), None, None, None


def sparsemax(z: Tensor, dim: int = -1) -> Tensor:
    """Sparsemax of ``z`` along ``dim`` (no mask; see :func:`normalize`)."""
    return normalize(z, None, dim, "sparsemax")


def entmax15(z: Tensor, dim: int = -1) -> Tensor:
    """1.5-entmax of ``z`` along ``dim`` (no mask; see :func:`normalize`)."""
    return normalize(z, None, dim, "entmax15")


def normalize(
    scores: Tensor, mask: Tensor | None, dim: int = -1, kind: str = "softmax", *, overwrite: bool = False
) -> Tensor:
    """Attention weights from ``scores`` by ``kind``, where ``mask`` (bool, broadcastable, True = attend) is
    False the weight is exactly zero, and a row with nothing to attend to is all zeros.

    sparsemax and entmax15 read each row's threshold from its entries above a lower bound (found from the
    maxima of chunks of CHUNK entries), sorted; near-uniform rows, with many such entries, are sorted in
    full. This gives the full sort's result; no copy of the scores is made beyond the masked one.
    ``overwrite=True`` says the scores are the caller's scratch (a product it made and reads no more): a
    sparse normaliser then writes the mask and its result in them, without a copy, unless autograd records
    them (softmax ignores it)."""
    from attnzoo.layers.core import masked_softmax

    if kind == "softmax":
        return masked_softmax(scores, mask, dim)
    if scores.shape[dim] == 0:  # nothing to attend to
        return scores.new_zeros(scores.shape)
    last = dim % scores.dim() == scores.dim() - 1
    z = scores if last else scores.movedim(dim, -1)
    if mask is not None:
        mask = mask if mask.dim() == scores.dim() else mask.expand_as(scores)
        mask = mask if last else mask.movedim(dim, -1)
    upcast = z.dtype in (torch.float16, torch.bfloat16)
    # an upcast copy is this function's own too; nothing autograd records is ever written in
    overwrite = (overwrite or upcast) and not (z.requires_grad and torch.is_grad_enabled())
    weights = _Sparse.apply(z.float() if upcast else z, mask, kind, overwrite)
    weights = weights if last else weights.movedim(-1, dim)
    return weights.to(scores.dtype)
