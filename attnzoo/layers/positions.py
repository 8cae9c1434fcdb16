"""Positions for the attention core: RoPE (half or interleaved layout), ALiBi's head slopes.

rotate(x, p)[..., i]  = x_i cos(p θ_i) - x_{i'} sin(p θ_i),  θ_i = base^(-2i/d)   (i' the pair of i)
ALiBi:  scores_hij -= m_h |i - j|,  m_h = 2^(-8h/H)  (the geometric slopes of Press et al. 2022)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["POSITIONS", "ROPE_LAYOUTS", "alibi_slopes", "rotate", "rope_tables", "turn"]


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
    cos, sin = tables
    d = x.shape[-1]
    if layout == "half":
        first, second = x[..., : d // 2], x[..., d // 2 :]
        return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)
    pairs = x.unflatten(-1, (d // 2, 2))
    first, second = pairs[..., 0], pairs[..., 1]
    return torch.stack([first * cos - second * sin, first * sin + second * cos], dim=-1).flatten(-2)
