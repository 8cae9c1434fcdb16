"""Linear attention (Katharopoulos et al. 2020): self-attention whose time and memory grow linearly in T.

With the feature map φ(x) = elu(x) + 1 (positive), per head::

    out_i = φ(q_i)ᵀ S / (φ(q_i)ᵀ z),   S = Σ_j φ(k_j) v_jᵀ  [d, d],   z = Σ_j φ(k_j)  [d]

(``causal=True``: the sums run over j <= i). The causal form goes in chunks of c positions: within a
chunk, the [c, c] products with a causal mask; across chunks, a carried [d, d] state per head, so that
memory beyond the activations does not grow with T (no [T, d, d] running sum). The [T, T] matrix is never formed; it
exists only with ``return_attention``, where ``A_ij = φ(q_i)·φ(k_j) / Σ_j' φ(q_i)·φ(k_j')`` (rows sum to
one, like softmax's). Masked keys get φ = 0, so they carry no weight; a sample with no key left gets
zeros. The sums run in float32 for half-precision inputs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from attnzoo.layers.attention import Attention

__all__ = ["LinearSelfAttention"]

# Positions per chunk of the causal form: at least the head size, so that the chunks' [d, dv] states
# take no more memory than the activations (T / c states of d·dv against T rows of d).
_CHUNK = 64


def _safe_divide(numerator: Tensor, denominator: Tensor) -> Tensor:
    """numerator / denominator, and 0 where the denominator is 0 (with finite gradients there too)."""
    empty = denominator == 0
    return torch.where(empty, 0.0, numerator / torch.where(empty, 1.0, denominator))


def causal_linear(phi_q: Tensor, phi_k: Tensor, v: Tensor, chunk: int) -> tuple[Tensor, Tensor]:
    """Σ_{j<=i} (φq_i·φk_j) v_j and Σ_{j<=i} φq_i·φk_j for [B, h, T, d] features, ``chunk`` positions at a
    time: the [c, c] causal products inside each chunk, plus the state of the chunks before it
    (an exclusive prefix sum of per-chunk [d, dv] sums)."""
    batch, heads, seq, d = phi_q.shape
    blocks = -(-seq // chunk)
    pad = blocks * chunk - seq

    def chunked(t: Tensor) -> Tensor:
        return F.pad(t, (0, 0, 0, pad)).view(batch, heads, blocks, chunk, t.shape[-1])

    q, k, vv = chunked(phi_q), chunked(phi_k), chunked(v)
    local = torch.matmul(q, k.transpose(-2, -1)).tril()  # [B, h, n, c, c]
    kv = torch.matmul(k.transpose(-2, -1), vv)  # [B, h, n, d, dv], each chunk's own sum
    state = torch.cumsum(kv, dim=2) - kv  # the chunks before each one
    k_sum = k.sum(dim=-2, keepdim=True)  # [B, h, n, 1, d]
    k_state = torch.cumsum(k_sum, dim=2) - k_sum
    numerator = torch.matmul(local, vv) + torch.matmul(q, state)
    denominator = local.sum(-1, keepdim=True) + (q * k_state).sum(-1, keepdim=True)
    numerator = numerator.reshape(batch, heads, blocks * chunk, -1)[:, :, :seq]
    denominator = denominator.reshape(batch, heads, blocks * chunk, 1)[:, :, :seq]
    return numerator, denominator


class LinearSelfAttention(Attention):
    """Linear attention with the elu + 1 feature map (see module doc), on the core's projections.

    Args: ``embed_dim`` (None: inferred), ``num_heads``, ``causal`` (False), ``bias``.
    Shapes: ``forward(x [B, T, E], mask [B, T] = None, *, return_attention=False)`` -> ``[B, T, E]`` or
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
        super().__init__(embed_dim, num_heads=num_heads, causal=causal, bias=bias, device=device, dtype=dtype)

    def new_cache(self, batch_size: int):
        raise NotImplementedError(f"{self.name} keeps no key/value cache")

    def forward(self, x: Tensor, mask: Tensor | None = None, *, return_attention: bool = False, **kwargs):
        if isinstance(mask, Tensor) and mask.dim() == 3:
            raise ValueError(
                f"{self.name} takes a key-padding mask [batch, seq], got {list(mask.shape)}: linear "
                f"attention forms no [T, T] matrix to mask (causal=True gives the causal pattern)"
            )
        given = sorted(k for k, v in kwargs.items() if v is not None)
        if given:
            raise ValueError(f"{self.name} is self-attention without a cache; it takes no {', '.join(given)}")
        return super().forward(x, mask, return_attention=return_attention)

    def _attend(self, q, k, v, allowed, q_pos, k_pos, return_attention):
        dtype = q.dtype
        work = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
        q, k, v = q.to(work), k.to(work), v.to(work)
        phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
        if allowed is not None:  # [B, 1, 1, T]: masked keys get no feature at all
            phi_k = phi_k * allowed.transpose(-1, -2).to(work)
        if self.causal:
            numerator, denominator = causal_linear(phi_q, phi_k, v, max(_CHUNK, q.shape[-1]))
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
