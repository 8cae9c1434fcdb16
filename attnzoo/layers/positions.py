"""Positions for the attention core: RoPE (half or interleaved layout), ALiBi's head slopes, T5's buckets.

rotate(x, p)[..., i]  = x_i cos(p θ_i) - x_{i'} sin(p θ_i),  θ_i = base^(-2i/d)   (i' the pair of i)
ALiBi:  scores_hij -= m_h |i - j|,  m_h = 2^(-8h/H)  (the geometric slopes of Press et al. 2022)
T5:     scores_hij += B[bucket(j - i), h]  (a learned scalar per head and bucket of the distance)
DeBERTa: δ(i, j) = clip(bucket(i - j) + k, 0, 2k - 1), the row of a [2k, D] relative table (log buckets)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "POSITIONS",
    "ROPE_LAYOUTS",
    "alibi_slopes",
    "t5_buckets",
    "log_buckets",
    "relative_indices",
    "check_buckets",
    "full_tables",
    "rotate",
    "rope_tables",
    "turn",
    "turn_full",
]


POSITIONS = ("none", "rope", "alibi", "relpos", "t5")
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


def check_buckets(layer: str, num_buckets: object, max_distance: object) -> None:
    """Constructor check of T5's buckets: at least 4 (two halves of two), and a ``max_distance`` beyond the
    exact buckets (the log's range is empty otherwise)."""
    if isinstance(num_buckets, bool) or not isinstance(num_buckets, int) or num_buckets < 4:
        raise ValueError(f"{layer}: num_buckets must be an int of at least 4 (T5's is 32), got {num_buckets!r}")
    if isinstance(max_distance, bool) or not isinstance(max_distance, int) or max_distance <= num_buckets // 2:
        raise ValueError(
            f"{layer}: max_distance must be an int above num_buckets / 2 = {num_buckets // 2} (T5's is 128 for 32 "
            f"buckets), got {max_distance!r}"
        )


def t5_buckets(relative: Tensor, *, bidirectional: bool, num_buckets: int, max_distance: int) -> Tensor:
    """T5's bucket of each relative position ``relative = j - i`` (any shape, integers): the same shape, in
    [0, num_buckets). Bidirectional (an encoder), half the buckets go to keys after the query (j > i) and
    half to the rest; causal (a decoder), every bucket goes to keys at or before it (j > i reads bucket 0).
    Within a half of n buckets, the n/2 nearest distances get one bucket each, and the distances from n/2
    up to ``max_distance`` share the other n/2 logarithmically (farther ones the last bucket):
    ``n/2 + floor(log(r / (n/2)) / log(max_distance / (n/2)) · n/2)``, Raffel et al. 2020."""
    bucket = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        bucket = (relative > 0).to(relative.dtype) * num_buckets
        distance = relative.abs()
    else:
        distance = (-relative).clamp(min=0)
    exact = num_buckets // 2
    # the float form of the log's argument: distances below `exact` take the exact branch (a log of 0 there
    # is never read, and is clamped so that no inf reaches the integer conversion)
    scaled = torch.log(distance.float().clamp(min=exact) / exact) / math.log(max_distance / exact)
    far = exact + (scaled * (num_buckets - exact)).to(relative.dtype)
    far = far.clamp(max=num_buckets - 1)
    return bucket + torch.where(distance < exact, distance, far)


def log_buckets(relative: Tensor, buckets: int, max_positions: int) -> Tensor:
    """DeBERTa-v2/v3's log bucket of int relative positions r -> int64 of the same shape: r itself for
    |r| <= m = buckets // 2, beyond that ``sign(r) · (m + ceil(log(|r| / m) · (m - 1) / log((P - 1) / m)))``
    with P = ``max_positions``: distances past m share logarithmically wider buckets (keras-hub's
    ``_make_log_bucket_position``, transformers' ``make_log_bucket_position``). The logarithms are taken in
    float32, in Keras's order of operations, so that ``ceil`` sees what Keras's sees."""
    mid = buckets // 2
    relative = relative.long()
    near = (relative < mid) & (relative > -mid)
    size = torch.where(near, torch.full_like(relative, mid - 1), relative.abs())
    numerator = torch.log(size.float() / torch.tensor(float(mid))) * float(mid - 1)
    denominator = torch.log(torch.tensor(float(max_positions - 1)) / torch.tensor(float(mid)))
    far = torch.ceil(numerator / denominator).long() + mid
    return torch.where(size <= mid, relative, far * relative.sign())


def relative_indices(length: int, buckets: int, max_positions: int, device=None) -> Tensor:
    """DeBERTa's δ(i, j) = clip(log_buckets(i - j) + k, 0, 2k - 1) (k = ``buckets``) for ``length`` queries and
    keys -> int64 [T, T]: the row of the [2k, D] relative table that query i reads for key j."""
    ids = torch.arange(length, device=device)
    relative = log_buckets(ids[:, None] - ids[None, :], buckets, max_positions)
    return (relative + buckets).clamp(0, 2 * buckets - 1)


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
