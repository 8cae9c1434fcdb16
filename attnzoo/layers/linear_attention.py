"""Linear attention (Katharopoulos et al. 2020): self-attention whose time and memory grow linearly in T.

With the feature map φ(x) = elu(x) + 1 (positive), per head::

    out_i = φ(q_i)ᵀ S / (φ(q_i)ᵀ z),   S = Σ_j φ(k_j) v_jᵀ  [d, d],   z = Σ_j φ(k_j)  [d]

(``causal=True``: the sums run over j <= i, as running sums). The [T, T] matrix is never formed; it
exists only with ``return_attention``, where ``A_ij = φ(q_i)·φ(k_j) / Σ_j' φ(q_i)·φ(k_j')`` (rows sum to
one, like softmax's). Masked keys get φ = 0, so they carry no weight; a sample with no key left gets
zeros. The sums run in float32 for half-precision inputs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .self_attention import _QKVOProjections

__all__ = ["LinearSelfAttention"]


def _safe_divide(numerator: Tensor, denominator: Tensor) -> Tensor:
    """numerator / denominator, and 0 where the denominator is 0 (with finite gradients there too)."""
    empty = denominator == 0
    return torch.where(empty, 0.0, numerator / torch.where(empty, 1.0, denominator))


class LinearSelfAttention(_QKVOProjections):
    """Linear attention with the elu + 1 feature map (see module doc).

    Args: ``embed_dim`` (None: inferred), ``num_heads``, ``causal`` (False), ``bias``.
    Shapes: ``forward(x [B, T, E], mask [B, T] = None, return_attention=False)`` -> ``[B, T, E]`` or
    ``(out, A [B, heads, T, T])`` (``[B, T, T]`` with one head). The mask is a key-padding mask only:
    there is no [T, T] matrix to put a general mask on (``causal=True`` gives the causal pattern).
    """

    name = "linear_self"

    def __init__(
        self,
        embed_dim: int | None = None,
        *,
        num_heads: int = 1,
        causal: bool = False,
        bias: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(embed_dim, num_heads=num_heads, bias=bias, dropout=0.0)
        self.causal = causal
        self._create_parameters({"embed_dim": embed_dim}, device, dtype)

    def forward(self, x: Tensor, mask: Tensor | None = None, return_attention: bool = False):
        if isinstance(mask, Tensor) and mask.dim() == 3:
            raise ValueError(
                f"{self.name} takes a key-padding mask [batch, seq], got {list(mask.shape)}: linear "
                f"attention forms no [T, T] matrix to mask (causal=True gives the causal pattern)"
            )
        return super().forward(x, mask, return_attention)

    def _attend(self, q, k, v, mask, return_attention):
        dtype = q.dtype
        work = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
        q, k, v = q.to(work), k.to(work), v.to(work)
        phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
        if mask is not None:  # [B, 1, 1, T]: masked keys get no feature at all
            phi_k = phi_k * mask.transpose(-1, -2).to(work)
        if self.causal:
            summed_kv = torch.cumsum(phi_k.unsqueeze(-1) * v.unsqueeze(-2), dim=-3)  # [B, h, T, d, dv]
            numerator = (phi_q.unsqueeze(-2) @ summed_kv).squeeze(-2)  # [B, h, T, dv]
            denominator = (phi_q * torch.cumsum(phi_k, dim=-2)).sum(-1, keepdim=True)
        else:
            numerator = phi_q @ (phi_k.transpose(-2, -1) @ v)  # [B, h, T, dv]: the [d, dv] sum first
            denominator = phi_q @ phi_k.sum(dim=-2).unsqueeze(-1)  # [B, h, T, 1]
        out = _safe_divide(numerator, denominator)  # a query with no key left: 0, never 0 / 0
        weights = None
        if return_attention:
            scores = phi_q @ phi_k.transpose(-2, -1)  # [B, h, T, T], zero on masked keys
            if self.causal:
                scores = scores.tril()
            weights = _safe_divide(scores, scores.sum(-1, keepdim=True)).to(dtype)
        return out.to(dtype), weights

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, causal={self.causal}"
