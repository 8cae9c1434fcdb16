"""Positions for the attention core: RoPE (half or interleaved layout), ALiBi's head slopes.

rotate(x, p)[..., i]  = x_i cos(p θ_i) - x_{i'} sin(p θ_i),  θ_i = base^(-2i/d)   (i' the pair of i)
ALiBi:  scores_hij -= m_h |i - j|,  m_h = 2^(-8h/H)  (the geometric slopes of Press et al. 2022)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["POSITIONS", "ROPE_LAYOUTS", "alibi_slopes", "full_tables", "rotate", "rope_tables", "turn", "turn_full"]


POSITIONS = ("none", "rope", "alibi", "relpos")
ROPE_LAYOUTS = ("half", "interleaved")


def alibi_slopes(heads: int) -> Tensor:
    """ALiBi's head slopes: the geometric sequence 2^(-8/n), 2^(-16/n), ... for n = heads a power of two;
    otherwise those of the largest power of two below, then every other slope of twice that many."""

    def powers(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    base = 2 ** math.floor(math.log2(heads))
    slopes = powers(base)
    if base < heads:
        slopes += powers(2 * base)[0::2][: heads - base]
    return torch.tensor(slopes)


def rotate(x: Tensor, positions: Tensor, base: float = 10000.0, layout: str = "half") -> Tensor:
    """RoPE: ``x [..., L, d]`` with each pair of dimensions turned by ``positions[t] · base^(-2k/d)``.

    ``layout="half"`` pairs (x_k, x_{k+d/2}) (GPT-NeoX, LLaMA's Hugging Face port); ``"interleaved"``
    pairs (x_{2k}, x_{2k+1}) (RoFormer, rotary-embedding-torch, Meta's LLaMA). The angles are computed
    in float32 (float64 for float64 inputs): positions of long sequences need the digits.
    """
    return turn(x, rope_tables(positions, x.shape[-1], base, like=x), layout)


def rope_tables(positions: Tensor, d: int, base: float, *, like: Tensor) -> tuple[Tensor, Tensor]:
    """RoPE's ``(cos, sin)`` [L, d/2] for ``positions`` [L], in ``like``'s dtype and on its device: computed
    once per call of a layer and shared by its queries and keys."""
    work = torch.float64 if like.dtype == torch.float64 else torch.float32
    freqs = base ** (-torch.arange(0, d // 2, device=like.device, dtype=work) * 2 / d)
    angles = positions.to(device=like.device, dtype=work)[:, None] * freqs  # [L, d/2]
    return angles.cos().to(like.dtype), angles.sin().to(like.dtype)


def turn(x: Tensor, tables: tuple[Tensor, Tensor], layout: str) -> Tensor:
    """x [..., L, d] turned by the angles of ``tables`` (see :func:`rotate`)."""
    return turn_full(x, full_tables(tables, layout), layout)


def full_tables(tables: tuple[Tensor, Tensor], layout: str) -> tuple[Tensor, Tensor]:
    """RoPE's half-width ``(cos, sin)`` [L, d/2] spread over the d dimensions in ``layout``'s pairing:
    ``(c, s)`` [L, d] with c_i = cos θ_k and s_i = -sin θ_k on the first of each pair, +sin θ_k on its
    partner, so that ``turn_full`` is x·c + partner(x)·s (a layer keeps these, sliced per step)."""
    cos, sin = tables
    if layout == "half":
        return torch.cat([cos, cos], dim=-1), torch.cat([-sin, sin], dim=-1)
    return torch.stack([cos, cos], dim=-1).flatten(-2), torch.stack([-sin, sin], dim=-1).flatten(-2)


def turn_full(x: Tensor, tables: tuple[Tensor, Tensor], layout: str) -> Tensor:
    """x [..., L, d] turned by :func:`full_tables`' ``(c, s)`` [L, d]: ``x·c + partner(x)·s``, partner(x)
    the pairs swapped (``half``: x rolled by d/2; ``interleaved``: each (x_2k, x_2k+1) flipped). Four
    operations instead of the halves' nine, and bit for bit the halves' result: x_k c - x_k' s equals
    x_k c + x_k' (-s) exactly in floating point, and the partner's sum is the same two products."""
    cos, sin = tables
    if layout == "half":
        partner = x.roll(x.shape[-1] // 2, dims=-1)
    else:
        partner = x.unflatten(-1, (x.shape[-1] // 2, 2)).flip(-1).flatten(-2)
    return x * cos + partner * sin
