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
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["NORMALIZERS", "normalize", "sparsemax", "entmax15", "check_normalizer"]

NORMALIZERS = ("softmax", "sparsemax", "entmax15")


def check_normalizer(layer: str, normalizer: str) -> None:
    if normalizer not in NORMALIZERS:
        raise ValueError(f"{layer}: normalizer must be one of {', '.join(NORMALIZERS)}, got {normalizer!r}")


def _sorted_prefix(x: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """x sorted in descending order along ``dim``, and 1..K shaped to broadcast along it."""
    ordered, _ = torch.sort(x, dim=dim, descending=True)
    shape = [1] * x.dim()
    shape[dim] = x.shape[dim]
    ranks = torch.arange(1, x.shape[dim] + 1, device=x.device, dtype=x.dtype).view(shape)
    return ordered, ranks


class _Sparsemax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z: Tensor, dim: int) -> Tensor:
        z = z - z.amax(dim=dim, keepdim=True)  # the threshold moves with z; this keeps the sums small
        ordered, ranks = _sorted_prefix(z, dim)
        prefix = ordered.cumsum(dim)
        in_support = 1 + ranks * ordered > prefix
        k = in_support.sum(dim=dim, keepdim=True)  # at least 1: the largest score is always in
        tau = (prefix.gather(dim, k - 1) - 1) / k.to(z.dtype)
        p = torch.clamp(z - tau, min=0)
        ctx.dim = dim
        ctx.save_for_backward(p)
        return p

    @staticmethod
    def backward(ctx, grad: Tensor):
        (p,) = ctx.saved_tensors
        support = p > 0
        count = support.sum(dim=ctx.dim, keepdim=True).clamp(min=1).to(grad.dtype)
        mean = (grad * support).sum(dim=ctx.dim, keepdim=True) / count
        return torch.where(support, grad - mean, torch.zeros_like(grad)), None


class _Entmax15(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z: Tensor, dim: int) -> Tensor:
        x = (z - z.amax(dim=dim, keepdim=True)) / 2
        ordered, ranks = _sorted_prefix(x, dim)
        mean = ordered.cumsum(dim) / ranks
        mean_sq = (ordered * ordered).cumsum(dim) / ranks
        spread = (1 - ranks * (mean_sq - mean * mean)) / ranks
        tau = mean - torch.sqrt(torch.clamp(spread, min=0))
        k = (tau <= ordered).sum(dim=dim, keepdim=True)
        tau_star = tau.gather(dim, k - 1)
        p = torch.clamp(x - tau_star, min=0) ** 2
        ctx.dim = dim
        ctx.save_for_backward(p)
        return p

    @staticmethod
    def backward(ctx, grad: Tensor):
        (p,) = ctx.saved_tensors
        s = p.sqrt()
        weighted = grad * s
        shift = weighted.sum(dim=ctx.dim, keepdim=True) / s.sum(dim=ctx.dim, keepdim=True).clamp(min=1e-30)
        return weighted - shift * s, None


def sparsemax(z: Tensor, dim: int = -1) -> Tensor:
    """Sparsemax of ``z`` along ``dim`` (no mask; see :func:`normalize`)."""
    return _Sparsemax.apply(z, dim % z.dim())


def entmax15(z: Tensor, dim: int = -1) -> Tensor:
    """1.5-entmax of ``z`` along ``dim`` (no mask; see :func:`normalize`)."""
    return _Entmax15.apply(z, dim % z.dim())


def normalize(scores: Tensor, mask: Tensor | None, dim: int = -1, kind: str = "softmax") -> Tensor:
    """Attention weights from ``scores`` by ``kind``, where ``mask`` (bool, broadcastable, True = attend) is
    False the weight is exactly zero, and a row with nothing to attend to is all zeros."""
    from attnzoo.layers.core import masked_softmax

    if kind == "softmax":
        return masked_softmax(scores, mask, dim)
    if scores.shape[dim] == 0:  # nothing to attend to
        return scores.new_zeros(scores.shape)
    upcast = scores.dtype in (torch.float16, torch.bfloat16)
    z = scores.float() if upcast else scores
    if mask is not None:
        mask = mask.expand_as(z)
        # The row is shifted so that its largest kept score is 0 (both normalisers are shift-invariant),
        # and masked keys then sit at -4: below any threshold either can reach (sparsemax's is at least
        # -1, entmax15's at least -2), so they get exact zeros; that is -inf's effect without its NaNs in
        # the sorted prefix sums. Shifting first keeps it true at any magnitude: written as max - 4
        # unshifted, the fill rounds to max itself above about 6.7e7 in float32 and takes probability.
        top = z.masked_fill(~mask, float("-inf")).amax(dim=dim, keepdim=True)
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top)).detach()
        z = torch.where(mask, z - top, torch.full_like(z, -4.0))
    weights = (sparsemax if kind == "sparsemax" else entmax15)(z, dim)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return weights.to(scores.dtype)
