"""Self-attention over a sequence: the variants modern transformers use, each a preset of one core.

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
``local_self``  position i attends only to j with ``|i - j| <= window``, in blocks: O(T·w)          Beltagy et al. 2020
==============  ===================================================================================  =========================

Each class here only fixes options of :class:`~attnzoo.layers.attention.Attention` (``attention``), which
does the work; its state-dict keys, defaults and outputs are those the class always had. Combinations
(grouped heads with RoPE and a causal window, ALiBi with a causal mask, ...) need no class: they are
cards over ``attention``. (``linear_self``, attention linear in T, is in ``linear_attention.py``.)

ALiBi, RoPE and Shaw's positions depend only on ``j - i``, so a sequence moved right by left padding
that is masked gives the same outputs at its real positions. Positions that no query attends to
(padding under a [B, T] mask) are read as zeros before the projections, so whatever they hold (NaN,
inf) never reaches an output or a gradient; their own output rows, which the mask leaves free, are
those of a zero input.

A 2-D input is refused: seed 001's answer applied self-attention to [B, 256] LSTM features, where it
attends across the samples of the batch. Self-attention needs a time axis; a classifier pools after it.
"""

from __future__ import annotations

from attnzoo.layers.attention import Attention, alibi_slopes

__all__ = [
    "QKVSelfAttention",
    "MultiHeadSelfAttention",
    "GroupedQueryAttention",
    "ALiBiSelfAttention",
    "RotarySelfAttention",
    "RelativePositionSelfAttention",
    "LocalSelfAttention",
    "alibi_slopes",
]


class QKVSelfAttention(Attention):
    """Scaled dot-product self-attention with Q, K, V projections in seed 001's layout (see module doc).

    Args:
        embed_dim: D; None infers it from the first input.
        num_heads: number of heads; D must be divisible by it.
        bias: projections with biases (the seed's Linear layers have them).
        output_projection: add an output Linear Wo [D, D] (the seed has none).
        causal: attend only to earlier positions and itself.
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
        causal: bool = False,
        dropout: float = 0.0,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(
            embed_dim,
            num_heads=num_heads,
            bias=bias,
            causal=causal,
            dropout=dropout,
            layout="seed",
            output_projection=output_projection,
            device=device,
            dtype=dtype,
        )


class MultiHeadSelfAttention(Attention):
    """Multi-head self-attention in ``nn.MultiheadAttention``'s layout: its ``batch_first`` state dicts load
    as they are (``in_proj_weight`` [3E, E], ``in_proj_bias``, ``out_proj.weight``, ``out_proj.bias``) and
    the outputs match it (its ``key_padding_mask`` is ``~mask``); its initialisation too.

    Args: ``embed_dim`` (None: inferred), ``num_heads``, ``bias``, ``causal`` (its ``is_causal``),
    ``dropout``, ``context_dim`` (None: as wide as x; else its ``kdim`` = ``vdim`` for cross-attention,
    and then, as in torch, the projections are ``q_proj_weight``, ``k_proj_weight`` and ``v_proj_weight``).
    Shapes: ``forward(x [B, T, E], mask [B, T] or [B, T, T] = None, return_attention=False, *, context,
    context_mask)`` -> ``[B, T, E]`` or ``(out, A [B, heads, T, S])`` (per head,
    ``average_attn_weights=False`` in torch).
    """

    name = "mha"

    def __init__(
        self,
        embed_dim: int | None = None,
        *,
        num_heads: int = 1,
        bias: bool = True,
        causal: bool = False,
        dropout: float = 0.0,
        context_dim: int | None = None,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(
            embed_dim,
            num_heads=num_heads,
            bias=bias,
            causal=causal,
            dropout=dropout,
            context_dim=context_dim,
            layout="packed",
            device=device,
            dtype=dtype,
        )


class GroupedQueryAttention(Attention):
    """Grouped-query attention: ``num_kv_heads`` g key/value heads, each shared by h/g adjacent query heads
    (g = 1 is multi-query attention, g = h plain multi-head). K and V are g·d wide instead of E.

    Args: ``embed_dim`` (None: inferred), ``num_heads`` h, ``num_kv_heads`` g (h must be a multiple),
    ``bias``, ``causal``, ``dropout``. Shapes as :class:`MultiHeadSelfAttention`.
    """

    name = "gqa"

    def __init__(
        self,
        embed_dim: int | None = None,
        *,
        num_heads: int = 1,
        num_kv_heads: int = 1,
        bias: bool = False,
        causal: bool = False,
        dropout: float = 0.0,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(
            embed_dim,
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            bias=bias,
            causal=causal,
            dropout=dropout,
            device=device,
            dtype=dtype,
        )


class ALiBiSelfAttention(Attention):
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
        super().__init__(
            embed_dim,
            num_heads=num_heads,
            positions="alibi",
            causal=causal,
            bias=bias,
            dropout=dropout,
            device=device,
            dtype=dtype,
        )


class RotarySelfAttention(Attention):
    """Self-attention with rotary position embeddings (RoPE, Su et al. 2021): in every head, the pairs of
    dimensions of Q and K turn by the angle ``t · base^(-2k/d)`` at position t, so that ``q_i · k_j``
    depends on the positions only through ``j - i``. ``rope_layout="half"`` (the default) pairs
    (x_k, x_{k+d/2}); ``"interleaved"`` pairs (x_{2k}, x_{2k+1}), as RoFormer's checkpoints do.

    Args: ``embed_dim`` (None: inferred), ``num_heads`` (the head size must be even), ``num_kv_heads``,
    ``base`` (10000), ``rope_layout``, ``causal``, ``bias``, ``dropout``. Shapes as
    :class:`MultiHeadSelfAttention`.
    """

    name = "rope_self"

    def __init__(
        self,
        embed_dim: int | None = None,
        *,
        num_heads: int = 1,
        num_kv_heads: int | None = None,
        base: float = 10000.0,
        rope_layout: str = "half",
        causal: bool = False,
        bias: bool = False,
        dropout: float = 0.0,
        device=None,
        dtype=None,
    ) -> None:
        if not base > 1:
            raise ValueError(f"{self.name}: base must be above 1, got {base!r}")
        super().__init__(
            embed_dim,
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            positions="rope",
            rope_base=base,
            rope_layout=rope_layout,
            causal=causal,
            bias=bias,
            dropout=dropout,
            device=device,
            dtype=dtype,
        )

    @property
    def base(self) -> float:
        return self.rope_base


class RelativePositionSelfAttention(Attention):
    """Self-attention with relative position representations (Shaw et al. 2018): learned vectors for the
    clipped distance ``c(j - i) = clip(j - i, -k, k)``, shared by the heads::

        e_ij = q_i · (k_j + a^K_c(j-i)) / sqrt(d)      z_i = Σ_j A_ij (v_j + a^V_c(j-i))

    Args: ``embed_dim`` (None: inferred), ``num_heads``, ``max_relative_position`` k (16), ``causal``,
    ``bias``, ``dropout``. Parameters ``rel_key``, ``rel_value`` [2k + 1, d] besides the projections.
    Shapes as :class:`MultiHeadSelfAttention`. The scores are materialised, a chunk of queries at a time;
    the position terms come from the 2k + 1 vectors directly (no [T, T, d] table).
    """

    name = "relpos_self"

    def __init__(
        self,
        embed_dim: int | None = None,
        *,
        num_heads: int = 1,
        max_relative_position: int = 16,
        causal: bool = False,
        bias: bool = False,
        dropout: float = 0.0,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(
            embed_dim,
            num_heads=num_heads,
            positions="relpos",
            max_relative_position=max_relative_position,
            causal=causal,
            bias=bias,
            dropout=dropout,
            device=device,
            dtype=dtype,
        )


class LocalSelfAttention(Attention):
    """Sliding-window self-attention: position i attends only to j with ``|i - j| <= window``
    (``causal=True``: ``i - window <= j <= i``), as in Longformer's local attention (Beltagy et al. 2020).

    Args: ``embed_dim`` (None: inferred), ``num_heads``, ``window`` w, ``causal``, ``bias``, ``dropout``.
    Shapes as :class:`MultiHeadSelfAttention`. Queries go in blocks of max(w, 16) that each attend to
    their neighbouring blocks of keys only, so time and memory grow as O(T·w); the result is that of
    the masked full computation. ``return_attention`` and a [B, T, T] mask use the full matrix.
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
        if window is None:
            raise ValueError(f"{self.name}: window must be a positive integer, got None")
        super().__init__(
            embed_dim,
            num_heads=num_heads,
            window=window,
            causal=causal,
            bias=bias,
            dropout=dropout,
            device=device,
            dtype=dtype,
        )
