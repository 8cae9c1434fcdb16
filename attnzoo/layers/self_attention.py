"""Self-attention over a sequence: one base, the variants modern transformers use.

Every variant maps ``x [B, T, E]`` with ``mask [B, T]`` (or ``[B, T, T]``; True = attend) to ``[B, T, E]``,
or ``(out, A)`` with ``return_attention`` (``A [B, heads, T, T]``, ``[B, T, T]`` with one head). With
``h`` heads of size ``d = E / h``::

    Q = X Wq, K = X Wk, V = X Wv                  split into heads     [B, h, T, d]  (K, V: g heads for gqa)
    A = softmax(Q Kᵀ / sqrt(d) + bias, masked)                          [B, h, T, T]
    out = concat_h(A V) Wo                                              [B, T, E]

==============  ===================================================================================  =========================
registry        what changes                                                                          reference
==============  ===================================================================================  =========================
``qkv_self``    the seed's layout (``query``, ``key``, ``value`` Linear layers), no Wo unless asked   Vaswani et al. 2017; seed 001
``mha``         ``nn.MultiheadAttention``'s layout (``in_proj_weight``, ``out_proj``): its state dicts load as they are
``gqa``         ``num_kv_heads`` g key/value heads, each shared by h/g query heads (g = 1: multi-query) Ainslie et al. 2023
``alibi_self``  bias ``-m_h |i - j|`` (``causal``: ``-m_h (i - j)``, j <= i), slopes ``m_h = 2^(-8h/h_total)`` Press et al. 2022
``rope_self``   Q and K rotated by position: pairs (x_k, x_{k+d/2}) turn by ``t · base^(-2k/d)``        Su et al. 2021
``relpos_self`` learned ``a^K``, ``a^V`` [2c + 1, d] by clipped distance c = ``max_relative_position``:
                e_ij = q_i · (k_j + a^K_{j-i}) / sqrt(d),  z_i = Σ_j A_ij (v_j + a^V_{j-i})                Shaw et al. 2018
``local_self``  position i attends only to j with ``|i - j| <= window``                             Beltagy et al. 2020
==============  ===================================================================================  =========================

(``linear_self``, attention linear in T, is in ``linear_attention.py`` on the same base.)

ALiBi, RoPE and Shaw's positions depend only on ``j - i``, so a sequence moved right by left padding
that is masked gives the same outputs at its real positions. Positions that no query attends to
(padding under a [B, T] mask) are read as zeros before the projections, so whatever they hold (NaN,
inf) never reaches an output or a gradient; their own output rows, which the mask leaves free, are
those of a zero input.

A 2-D input is refused: seed 001's answer applied self-attention to [B, 256] LSTM features, where it
attends across the samples of the batch. Self-attention needs a time axis; a classifier pools after it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .core import (
    attend,
    attended_keys,
    check_input,
    check_mask,
    check_positive,
    check_probability,
    masked_softmax,
    neutralise,
)
from .lazy import LazyLayer

__all__ = [
    "SelfAttentionBase",
    "QKVSelfAttention",
    "MultiHeadSelfAttention",
    "GroupedQueryAttention",
    "ALiBiSelfAttention",
    "RotarySelfAttention",
    "RelativePositionSelfAttention",
    "LocalSelfAttention",
    "alibi_slopes",
]

_TWO_D_HINT = (
    "A 2-D [batch, features] input has no sequence axis: self-attention over it would attend across the "
    "samples of the batch (seed 001's bug). Keep the time axis ([batch, seq, features], e.g. the LSTM's full "
    "output) and pool afterwards with attn_pool"
)


class SelfAttentionBase(LazyLayer):
    """The shared frame of self-attention: sizes, checks, padding, heads, masks, the fused core.

    A variant declares its parameters (``_parameter_shapes``) and implements ``_project`` (x -> q, k, v
    split into heads) and ``_output`` (concatenated heads -> [B, T, E]); it may override
    ``_positions`` (rotate q and k), ``_bias`` (an additive [h, T, T] score bias), ``_band`` (a
    [T, T] pattern of allowed pairs) or ``_attend`` (the attention itself).

    Args:
        embed_dim: E; None infers it from the first input.
        num_heads: h; E must be divisible by it.
        dropout: dropout on the attention weights while training.
    """

    name = "self_attention"

    def __init__(self, embed_dim: int | None = None, *, num_heads: int = 1, dropout: float = 0.0) -> None:
        super().__init__()
        check_positive(self.name, "embed_dim", embed_dim)
        check_positive(self.name, "num_heads", num_heads, allow_none=False)
        check_probability(self.name, "dropout", dropout)
        if embed_dim is not None and embed_dim % num_heads:
            raise ValueError(f"{self.name}: embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.dropout = dropout

    # -- sizes -----------------------------------------------------------------------------------------
    @property
    def embed_dim(self) -> int | None:
        return self.size("embed_dim")

    def _check_embed_dim(self, dim: int) -> None:
        if dim % self.num_heads:
            raise ValueError(f"{self.name}: input size {dim} is not divisible by num_heads {self.num_heads}")

    def _infer_sizes(self, x, *args, **kwargs):
        check_input(self.name, "x", x, ("batch", "seq", "embed_dim"), hint=_TWO_D_HINT if x.dim() == 2 else "")
        self._check_embed_dim(x.shape[-1])
        return {"embed_dim": x.shape[-1]}

    def _linear_init(self) -> None:
        """xavier-uniform weights, zero biases (the transformer default)."""
        for name in self._lazy_names:
            param = self.tensor(name)
            nn.init.zeros_(param) if name.endswith("bias") else nn.init.xavier_uniform_(param)

    reset_parameters = _linear_init

    # -- hooks -----------------------------------------------------------------------------------------
    def _project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        raise NotImplementedError

    def _output(self, out: Tensor) -> Tensor:
        raise NotImplementedError

    def _positions(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        return q, k

    def _bias(self, seq: int, like: Tensor) -> Tensor | None:
        return None

    def _band(self, seq: int, device) -> Tensor | None:
        return None

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, return_attention: bool):
        dropout = self.dropout if self.training else 0.0
        return attend(
            q, k, v, mask, return_attention=return_attention, dropout=dropout, bias=self._bias(q.shape[-2], q)
        )

    # -- the call --------------------------------------------------------------------------------------
    def forward(self, x: Tensor, mask: Tensor | None = None, return_attention: bool = False):
        like = next(iter(self.parameters()))
        d = self.embed_dim
        check_input(
            self.name, "x", x, ("batch", "seq", d or "embed_dim"), hint=_TWO_D_HINT if x.dim() == 2 else "", like=like
        )
        batch, seq, _ = x.shape
        mask = check_mask(self.name, mask, batch, seq, seq, like=x)
        x = neutralise(x, attended_keys(mask))  # keys no query attends to: padding, whatever it holds
        q, k, v = self._project(x)
        q, k = self._positions(q, k)
        mask4 = None if mask is None else mask.unsqueeze(1)  # [B, 1, T or 1, T]
        band = self._band(seq, x.device)
        if band is not None:
            mask4 = band if mask4 is None else mask4 & band
        out, weights = self._attend(q, k, v, mask4, return_attention)
        out = self._output(out.transpose(1, 2).reshape(batch, seq, out.shape[1] * out.shape[-1]))
        if not return_attention:
            return out
        return out, (weights.squeeze(1) if self.num_heads == 1 else weights)

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"


def _split_heads(x: Tensor, heads: int) -> Tensor:
    """[B, T, heads·d] -> [B, heads, T, d]."""
    batch, seq, width = x.shape
    return x.view(batch, seq, heads, width // heads).transpose(1, 2)


class QKVSelfAttention(SelfAttentionBase):
    """Scaled dot-product self-attention with Q, K, V projections in seed 001's layout (see module doc).

    Args:
        embed_dim: D; None infers it from the first input.
        num_heads: number of heads; D must be divisible by it.
        bias: projections with biases (the seed's Linear layers have them).
        output_projection: add an output Linear Wo [D, D] (the seed has none).
        dropout: dropout on the attention weights while training.

    Shapes: ``forward(x [B, T, D], mask [B, T] or [B, T, T] = None, return_attention=False)`` ->
    ``[B, T, D]``, or ``(out [B, T, D], A [B, heads, T, T])`` (``[B, T, T]`` with one head). The three
    projections are three GEMMs, as in the seed: fused into one [3D, D] GEMM they were no faster forward,
    and backward paid a [B, T, 3D] concatenation of their gradients (5 % of a training step at B16 T512
    D256, measured with torch.profiler).
    """

    name = "qkv_self"

    def __init__(
        self,
        embed_dim: int | None = None,
        *,
        num_heads: int = 1,
        bias: bool = True,
        output_projection: bool = False,
        dropout: float = 0.0,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(embed_dim, num_heads=num_heads, dropout=dropout)
        self.bias, self.output_projection = bias, output_projection
        self._create_parameters({"embed_dim": embed_dim}, device, dtype)

    def _parameter_shapes(self, sizes):
        d = sizes["embed_dim"]
        shapes = {}
        for part in ("query", "key", "value") + (("out",) if self.output_projection else ()):
            shapes[f"{part}.weight"] = (d, d)
            if self.bias:
                shapes[f"{part}.bias"] = (d,)
        return shapes

    def _sizes_from_parameters(self):
        return {"embed_dim": self.query.weight.shape[1]}

    def reset_parameters(self) -> None:
        # nn.Linear's initialisation, which the seed used
        for name in self._lazy_names:
            param = self.tensor(name)
            if name.endswith("weight"):
                nn.init.kaiming_uniform_(param, a=5**0.5)
            else:
                bound = param.shape[0] ** -0.5
                nn.init.uniform_(param, -bound, bound)

    def _project(self, x):
        return tuple(
            _split_heads(F.linear(x, layer.weight, layer.bias if self.bias else None), self.num_heads)
            for layer in (self.query, self.key, self.value)
        )

    def _output(self, out):
        if not self.output_projection:
            return out
        return F.linear(out, self.out.weight, self.out.bias if self.bias else None)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, bias={self.bias}, output_projection={self.output_projection}"


class MultiHeadSelfAttention(SelfAttentionBase):
    """Multi-head self-attention in ``nn.MultiheadAttention``'s layout: its ``batch_first`` state dicts load
    as they are (``in_proj_weight`` [3E, E], ``in_proj_bias``, ``out_proj.weight``, ``out_proj.bias``) and
    the outputs match it (its ``key_padding_mask`` is ``~mask``); its initialisation too.

    Args: ``embed_dim`` (None: inferred), ``num_heads``, ``bias``, ``dropout``.
    Shapes: ``forward(x [B, T, E], mask [B, T] or [B, T, T] = None, return_attention=False)`` ->
    ``[B, T, E]`` or ``(out, A [B, heads, T, T])`` (per head, ``average_attn_weights=False`` in torch).
    """

    name = "mha"

    def __init__(
        self,
        embed_dim: int | None = None,
        *,
        num_heads: int = 1,
        bias: bool = True,
        dropout: float = 0.0,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(embed_dim, num_heads=num_heads, dropout=dropout)
        self.bias = bias
        self._create_parameters({"embed_dim": embed_dim}, device, dtype)

    def _parameter_shapes(self, sizes):
        e = sizes["embed_dim"]
        shapes = {"in_proj_weight": (3 * e, e), "out_proj.weight": (e, e)}
        if self.bias:
            shapes.update({"in_proj_bias": (3 * e,), "out_proj.bias": (e,)})
        return shapes

    def _sizes_from_parameters(self):
        return {"embed_dim": self.in_proj_weight.shape[1]}

    def reset_parameters(self) -> None:  # as nn.MultiheadAttention._reset_parameters
        nn.init.xavier_uniform_(self.in_proj_weight)
        nn.init.kaiming_uniform_(self.out_proj.weight, a=5**0.5)
        if self.bias:
            nn.init.zeros_(self.in_proj_bias)
            nn.init.zeros_(self.out_proj.bias)

    def _project(self, x):
        # three GEMMs from views of the packed weight: backward then needs no [B, T, 3E] gradient
        # concatenation (see QKVSelfAttention)
        biases = self.in_proj_bias.chunk(3) if self.bias else (None, None, None)
        return tuple(
            _split_heads(F.linear(x, weight, bias), self.num_heads)
            for weight, bias in zip(self.in_proj_weight.chunk(3), biases, strict=True)
        )

    def _output(self, out):
        return F.linear(out, self.out_proj.weight, self.out_proj.bias if self.bias else None)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, bias={self.bias}"


class _QKVOProjections(SelfAttentionBase):
    """Separate q/k/v/o projections (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``, as in LLaMA and most
    checkpoints of the modern variants), with ``num_kv_heads`` key/value heads."""

    def __init__(
        self,
        embed_dim: int | None = None,
        *,
        num_heads: int = 1,
        num_kv_heads: int | None = None,
        bias: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__(embed_dim, num_heads=num_heads, dropout=dropout)
        kv = num_heads if num_kv_heads is None else num_kv_heads
        check_positive(self.name, "num_kv_heads", kv, allow_none=False)
        if num_heads % kv:
            raise ValueError(f"{self.name}: num_heads {num_heads} is not a multiple of num_kv_heads {kv}")
        self.num_kv_heads, self.bias = kv, bias

    def _parameter_shapes(self, sizes):
        e = sizes["embed_dim"]
        kv = self.num_kv_heads * (e // self.num_heads)
        shapes = {"q_proj.weight": (e, e), "k_proj.weight": (kv, e), "v_proj.weight": (kv, e), "o_proj.weight": (e, e)}
        if self.bias:
            shapes.update({"q_proj.bias": (e,), "k_proj.bias": (kv,), "v_proj.bias": (kv,), "o_proj.bias": (e,)})
        return shapes

    def _sizes_from_parameters(self):
        return {"embed_dim": self.q_proj.weight.shape[1]}

    def _linear(self, x: Tensor, part: str) -> Tensor:
        group = getattr(self, part)
        return F.linear(x, group.weight, group.bias if self.bias else None)

    def _project(self, x):
        return (
            _split_heads(self._linear(x, "q_proj"), self.num_heads),
            _split_heads(self._linear(x, "k_proj"), self.num_kv_heads),
            _split_heads(self._linear(x, "v_proj"), self.num_kv_heads),
        )

    def _output(self, out):
        return self._linear(out, "o_proj")

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, num_kv_heads={self.num_kv_heads}, bias={self.bias}"


class GroupedQueryAttention(_QKVOProjections):
    """Grouped-query attention: ``num_kv_heads`` g key/value heads, each shared by h/g query heads
    (g = 1 is multi-query attention, g = h plain multi-head). K and V are g·d wide instead of E.

    Args: ``embed_dim`` (None: inferred), ``num_heads`` h, ``num_kv_heads`` g (h must be a multiple),
    ``bias``, ``dropout``. Shapes as :class:`MultiHeadSelfAttention`.
    """

    name = "gqa"

    def __init__(
        self,
        embed_dim: int | None = None,
        *,
        num_heads: int = 1,
        num_kv_heads: int = 1,
        bias: bool = False,
        dropout: float = 0.0,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(embed_dim, num_heads=num_heads, num_kv_heads=num_kv_heads, bias=bias, dropout=dropout)
        self._create_parameters({"embed_dim": embed_dim}, device, dtype)


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


class ALiBiSelfAttention(_QKVOProjections):
    """Self-attention with linear biases (ALiBi, Press et al. 2022): no position embeddings; each head
    penalises distance, ``bias_h(i, j) = -m_h |i - j|`` (``causal=True``: ``-m_h (i - j)`` and j <= i only).

    Args: ``embed_dim`` (None: inferred), ``num_heads``, ``causal``, ``bias``, ``dropout``.
    Shapes as :class:`MultiHeadSelfAttention`.
    """

    name = "alibi_self"

    def __init__(
        self,
        embed_dim: int | None = None,
        *,
        num_heads: int = 1,
        causal: bool = False,
        bias: bool = False,
        dropout: float = 0.0,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(embed_dim, num_heads=num_heads, bias=bias, dropout=dropout)
        self.causal = causal
        self._create_parameters({"embed_dim": embed_dim}, device, dtype)

    def _bias(self, seq, like):
        pos = torch.arange(seq, device=like.device, dtype=torch.float32)
        distance = (pos[None, :] - pos[:, None]).abs()  # |j - i|
        slopes = alibi_slopes(self.num_heads).to(like.device)
        return (-slopes[:, None, None] * distance).to(like.dtype)  # [h, T, T]

    def _band(self, seq, device):
        return torch.ones(seq, seq, dtype=torch.bool, device=device).tril() if self.causal else None

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, causal={self.causal}"


class RotarySelfAttention(_QKVOProjections):
    """Self-attention with rotary position embeddings (RoPE, Su et al. 2021): in every head, the pairs
    (x_k, x_{k+d/2}) of Q and K turn by the angle ``t · base^(-2k/d)`` at position t, so that
    ``q_i · k_j`` depends on the positions only through ``j - i``.

    Args: ``embed_dim`` (None: inferred), ``num_heads`` (the head size must be even), ``num_kv_heads``,
    ``base`` (10000), ``bias``, ``dropout``. Shapes as :class:`MultiHeadSelfAttention`.
    """

    name = "rope_self"

    def __init__(
        self,
        embed_dim: int | None = None,
        *,
        num_heads: int = 1,
        num_kv_heads: int | None = None,
        base: float = 10000.0,
        bias: bool = False,
        dropout: float = 0.0,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(embed_dim, num_heads=num_heads, num_kv_heads=num_kv_heads, bias=bias, dropout=dropout)
        if not base > 1:
            raise ValueError(f"{self.name}: base must be above 1, got {base!r}")
        if embed_dim is not None:
            self._check_embed_dim(embed_dim)
        self.base = float(base)
        self._create_parameters({"embed_dim": embed_dim}, device, dtype)

    def _check_embed_dim(self, dim: int) -> None:
        super()._check_embed_dim(dim)
        if (dim // self.num_heads) % 2:
            raise ValueError(f"{self.name}: the head size {dim // self.num_heads} must be even (RoPE turns pairs)")

    def _positions(self, q, k):
        seq, d = q.shape[-2], q.shape[-1]
        work = torch.float64 if q.dtype == torch.float64 else torch.float32  # angles of long sequences need digits
        freqs = self.base ** (-torch.arange(0, d // 2, device=q.device, dtype=work) * 2 / d)
        angles = torch.arange(seq, device=q.device, dtype=work)[:, None] * freqs  # [T, d/2]
        cos, sin = angles.cos().to(q.dtype), angles.sin().to(q.dtype)

        def turn(x: Tensor) -> Tensor:
            first, second = x[..., : d // 2], x[..., d // 2 :]
            return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)

        return turn(q), turn(k)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, base={self.base:g}"


class RelativePositionSelfAttention(_QKVOProjections):
    """Self-attention with relative position representations (Shaw et al. 2018): learned vectors for the
    clipped distance ``c(j - i) = clip(j - i, -k, k)``, shared by the heads::

        e_ij = q_i · (k_j + a^K_c(j-i)) / sqrt(d)      z_i = Σ_j A_ij (v_j + a^V_c(j-i))

    Args: ``embed_dim`` (None: inferred), ``num_heads``, ``max_relative_position`` k (16), ``bias``,
    ``dropout``. Parameters ``rel_key``, ``rel_value`` [2k + 1, d] besides the projections.
    Shapes as :class:`MultiHeadSelfAttention`. The scores are materialised ([B, h, T, T] and a
    [T, T, d] table of position vectors), as the formula needs them.
    """

    name = "relpos_self"

    def __init__(
        self,
        embed_dim: int | None = None,
        *,
        num_heads: int = 1,
        max_relative_position: int = 16,
        bias: bool = False,
        dropout: float = 0.0,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(embed_dim, num_heads=num_heads, bias=bias, dropout=dropout)
        check_positive(self.name, "max_relative_position", max_relative_position, allow_none=False)
        self.max_relative_position = max_relative_position
        self._create_parameters({"embed_dim": embed_dim}, device, dtype)

    def _parameter_shapes(self, sizes):
        d = sizes["embed_dim"] // self.num_heads
        span = 2 * self.max_relative_position + 1
        return {**super()._parameter_shapes(sizes), "rel_key": (span, d), "rel_value": (span, d)}

    def reset_parameters(self) -> None:
        for name in self._lazy_names:
            param = self.tensor(name)
            if name.startswith("rel_"):
                nn.init.xavier_uniform_(param)
            elif name.endswith("bias"):
                nn.init.zeros_(param)
            else:
                nn.init.xavier_uniform_(param)

    def _attend(self, q, k, v, mask, return_attention):
        seq, d = q.shape[-2], q.shape[-1]
        pos = torch.arange(seq, device=q.device)
        index = (pos[None, :] - pos[:, None]).clamp(-self.max_relative_position, self.max_relative_position)
        index = index + self.max_relative_position  # [T, T]
        rel_k, rel_v = self.rel_key[index], self.rel_value[index]  # [T, T, d]
        scores = (q @ k.transpose(-2, -1) + torch.einsum("bhid,ijd->bhij", q, rel_k)) * d**-0.5
        weights = masked_softmax(scores, mask)
        dropped = F.dropout(weights, self.dropout) if self.training and self.dropout else weights
        out = dropped @ v + torch.einsum("bhij,ijd->bhid", dropped, rel_v)
        return out, (weights if return_attention else None)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, max_relative_position={self.max_relative_position}"


class LocalSelfAttention(_QKVOProjections):
    """Sliding-window self-attention: position i attends only to j with ``|i - j| <= window``
    (``causal=True``: ``i - window <= j <= i``), as in Longformer's local attention (Beltagy et al. 2020).

    Args: ``embed_dim`` (None: inferred), ``num_heads``, ``window`` w, ``causal``, ``bias``, ``dropout``.
    Shapes as :class:`MultiHeadSelfAttention`. The window is a mask on one fused SDPA call: the cost is
    that of full attention (O(T²)); what it guarantees is the pattern.
    """

    name = "local_self"

    def __init__(
        self,
        embed_dim: int | None = None,
        *,
        num_heads: int = 1,
        window: int = 16,
        causal: bool = False,
        bias: bool = False,
        dropout: float = 0.0,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(embed_dim, num_heads=num_heads, bias=bias, dropout=dropout)
        check_positive(self.name, "window", window, allow_none=False)
        self.window, self.causal = window, causal
        self._create_parameters({"embed_dim": embed_dim}, device, dtype)

    def _band(self, seq, device):
        pos = torch.arange(seq, device=device)
        offset = pos[None, :] - pos[:, None]  # j - i
        band = offset.abs() <= self.window
        return band & (offset <= 0) if self.causal else band

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, window={self.window}, causal={self.causal}"
