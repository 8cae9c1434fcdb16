"""One attention core whose options compose: heads, positions, pattern, normaliser, cross-attention, cache.

``Attention`` (registered as ``attention``) maps ``x [B, T, E]`` to ``[B, T, E]``. With ``h`` query
heads of size ``d = E / h`` and ``g`` key/value heads (``num_kv_heads``; g = h is multi-head, 1 < g < h
grouped-query, g = 1 multi-query attention)::

    Q = X Wq  [B, h, T, d]      K = C Wk, V = C Wv  [B, g, S, d]      (C = X, or ``context`` [B, S, C])
    e_ij = q_i · k_j / sqrt(d) + b_ij          allowed(i, j) = mask_ij ∧ pattern(j - i)
    A_i = normalizer(e_i over the allowed j)   out = concat_h(A V) Wo  [B, T, E]

Each option is a card key:

================  =====================================================================================
option            what it changes
================  =====================================================================================
``num_kv_heads``  g key/value heads; query head n reads key/value head ``n // (h / g)`` (grouped: the
                  heads sharing one key/value head are adjacent, as in ``F.scaled_dot_product_attention``
                  with ``enable_gqa`` and in LLaMA; x-transformers tiles them, see :func:`tiled_to_grouped`)
``positions``     ``none``; ``rope``: q and k turned by position before the product (``rope_layout``
                  ``half`` pairs dimension k with k + d/2, ``interleaved`` pairs 2k with 2k + 1; angle
                  ``t · rope_base^(-2k/d)``); ``alibi``: ``b_ij = -m_n |j - i|`` with the paper's slopes;
                  ``relpos``: Shaw et al.'s learned vectors for the clipped distance c = clip(j - i, ±k):
                  ``e_ij += q_i · a^K_c / sqrt(d)`` and ``out_i += Σ_j A_ij a^V_c``; ``t5``: T5's learned
                  ``b_ij = B[bucket(j - i), n]`` [num_buckets, h] (``num_buckets``, ``max_distance``;
                  bidirectional buckets unless causal, :func:`~attnzoo.layers.positions.t5_buckets`)
``causal``        pattern j <= i
``window``        pattern |j - i| <= w (with ``causal``: i - w <= j <= i); computed in blocks of queries
                  against their neighbouring blocks of keys, so time and memory are O(T·w)
``normalizer``    ``softmax``, ``sparsemax``, ``entmax15`` (see ``normalizers.py``)
``qk_norm``       RMS normalisation of each query and key head (learned scale per dimension), before RoPE
``soft_cap``      c: ``e_ij <- c · tanh(e_ij / c)`` before the mask (Gemma 2's logit soft-capping)
``bias``          biases on the projections
``dropout``       dropout on the attention weights while training
``layout``        parameter names: ``qkvo`` (``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``, LLaMA's),
                  ``packed`` (``in_proj_weight``, ``out_proj``: ``nn.MultiheadAttention``'s, whose state
                  dicts load as they are), ``query_key_value`` (``query``, ``key``, ``value`` Linear
                  layers, and ``out`` with ``output_projection``: seed 001's; ``seed``, its old name, is
                  read as it)
================  =====================================================================================

The self-attention variants are cards over this class (``registry/*.yaml``), each fixing what makes it
the variant: ``qkv_self`` (layout ``query_key_value``), ``mha`` (``packed``), ``gqa``, ``local_self``
(``qkvo``), ``alibi_self`` (positions ``alibi``), ``rope_self`` (``rope``),
``relpos_self`` (``relpos``), and combinations such as ``gqa_rope_window`` and ``alibi_causal``.

The call is ``layer(x, mask=None, *, context=None, context_mask=None, cache=None, return_attention=False)``.
Masks are bool, True = attend. Self-attention: ``mask`` [B, T] (which positions are real) or [B, T, T].
Cross-attention (``context`` given): ``context_mask`` [B, S] or [B, T, S] says which context positions
each query may read, and ``mask`` [B, T] which queries are real. A query with nothing allowed gets
zeros. Positions that no query attends to are read as zeros before the projections, so whatever they
hold (NaN, inf) never reaches an output or a gradient.

Incremental decoding: ``cache = layer.new_cache(batch_size)`` (a :class:`KVCache`) is updated in place
by ``layer(x_step, cache=cache)``; the steps' outputs equal those of the causal forward over all the
tokens. RoPE, ALiBi and relative positions read the absolute positions the cache keeps; a window keeps
only its last w entries. Returns ``out`` or ``(out, A [B, h, T, S])`` (``[B, T, S]`` with one head).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.layers.attend import AttendHeads, check_soft_cap
from attnzoo.layers.core import (
    attended_keys,
    check_input,
    check_mask,
    check_positive,
    check_probability,
    neutralise,
    positive_error,
    tracing,
)
from attnzoo.layers.kv_cache import KVCache, check_cache
from attnzoo.layers.lazy import LazyLayer
from attnzoo.layers.normalizers import check_normalizer
from attnzoo.layers.positions import POSITIONS, ROPE_LAYOUTS, check_buckets, full_tables, rope_tables, turn, turn_full

__all__ = ["Attention", "tiled_to_grouped", "LAYOUTS"]
LAYOUTS = ("qkvo", "packed", "query_key_value")
_NAMES = {"qkvo": ("q_proj", "k_proj", "v_proj", "o_proj"), "query_key_value": ("query", "key", "value", "out")}

_TWO_D_HINT = (
    "A 2-D [batch, features] input has no sequence axis: self-attention over it would attend across the "
    "samples of the batch (seed 001's bug). Keep the time axis ([batch, seq, features], e.g. the LSTM's full "
    "output) and pool afterwards with attn_pool"
)


def tiled_to_grouped(weight: Tensor, num_heads: int, num_kv_heads: int) -> Tensor:
    """A query projection [h·d, E] whose heads share key/value heads *tiled* (query head n reads key/value
    head ``n % g``, x-transformers' ``repeat`` layout) reordered for attnzoo's *grouped* sharing (head n
    reads ``n // (h / g)``). The output projection's columns move with it: convert ``o_proj.weight`` with
    ``tiled_to_grouped(w.T, h, g).T``."""
    groups = num_heads // num_kv_heads
    heads = weight.unflatten(0, (num_heads, -1))  # [h, d, E]
    # grouped head n = kv·groups + r is tiled head r·g + kv
    order = [r * num_kv_heads + kv for kv in range(num_kv_heads) for r in range(groups)]
    return heads[order].flatten(0, 1)


class Attention(AttendHeads, LazyLayer):
    """The composable attention core (see the module doc for the formula and every option).

    Args:
        embed_dim: E; None infers it from the first input.
        num_heads: h; E must be divisible by it.
        num_kv_heads: g key/value heads (None: h); h must be a multiple of g.
        positions: ``none``, ``rope``, ``alibi``, ``relpos`` or ``t5``.
        rope_base, rope_layout: RoPE's base (10000) and pairing (``half`` or ``interleaved``).
        max_relative_position: k, the clipping distance of ``relpos`` (2k + 1 learned vectors).
        num_buckets, max_distance: ``t5``'s buckets (at least 4) and the distance (above num_buckets / 2)
            from which every distance shares the last bucket.
        causal: attend only to j <= i.
        window: None, or w: attend only to |j - i| <= w.
        normalizer: ``softmax``, ``sparsemax`` or ``entmax15``.
        qk_norm: RMS-normalise query and key heads.
        soft_cap: None (no capping), or c > 0: scores become c · tanh(score / c).
        bias: biases on the projections.
        dropout: dropout on the attention weights while training.
        context_dim: C, the width of ``context`` for cross-attention; None: E when ``embed_dim`` is given,
            else inferred on the first call (from its context, or E without one).
        layout: parameter names, ``qkvo``, ``packed`` or ``query_key_value``.
        output_projection: the ``query_key_value`` layout's optional Wo (the others always have one).

    Shapes: ``forward(x [B, T, E], mask [B, T] or [B, T, T] = None, *, context [B, S, C] = None,
    context_mask [B, S] or [B, T, S] = None, cache = None, return_attention=False)`` -> ``[B, T, E]``,
    or ``(out, A [B, h, T, S])`` (``[B, T, S]`` with one head).
    """

    name = "attention"

    def __init__(
        self,
        embed_dim: int | None = None,
        *,
        num_heads: int = 1,
        num_kv_heads: int | None = None,
        positions: str = "none",
        rope_base: float = 10000.0,
        rope_layout: str = "half",
        max_relative_position: int = 16,
        num_buckets: int = 32,
        max_distance: int = 128,
        causal: bool = False,
        window: int | None = None,
        normalizer: str = "softmax",
        qk_norm: bool = False,
        soft_cap: float | None = None,
        bias: bool = False,
        dropout: float = 0.0,
        context_dim: int | None = None,
        layout: str = "qkvo",
        output_projection: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        name = self.name
        check_positive(name, "embed_dim", embed_dim)
        check_positive(name, "num_heads", num_heads, allow_none=False)
        kv = num_heads if num_kv_heads is None else num_kv_heads
        check_positive(name, "num_kv_heads", kv, allow_none=False)
        if num_heads % kv:
            raise ValueError(f"{name}: num_heads {num_heads} is not a multiple of num_kv_heads {kv}")
        for key, value, choices in (
            ("positions", positions, POSITIONS),
            ("rope_layout", rope_layout, ROPE_LAYOUTS),
            ("layout", layout, LAYOUTS),
        ):
            if value not in choices:
                raise ValueError(f"{name}: {key} must be one of {', '.join(choices)}, got {value!r}")
        if layout != "qkvo" and kv != num_heads:
            raise ValueError(
                f"{name}: the {layout!r} layout has one key/value head per query head; grouped-query heads "
                f"(num_kv_heads={kv}) need layout='qkvo'"
            )
        if not isinstance(causal, bool):
            raise ValueError(f"{name}: causal must be true or false, got {causal!r}")
        check_positive(name, "window", window)
        check_positive(name, "max_relative_position", max_relative_position, allow_none=False)
        check_buckets(name, num_buckets, max_distance)
        check_soft_cap(name, soft_cap)
        check_positive(name, "context_dim", context_dim)
        check_normalizer(name, normalizer)
        check_probability(name, "dropout", dropout)
        if not rope_base > 1:
            raise ValueError(f"{name}: rope_base must be above 1, got {rope_base!r}")
        self.num_heads, self.num_kv_heads = num_heads, kv
        self.positions, self.rope_base, self.rope_layout = positions, float(rope_base), rope_layout
        self.max_relative_position = max_relative_position
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.causal, self.window, self.normalizer = causal, window, normalizer
        self.qk_norm, self.soft_cap, self.bias, self.dropout = qk_norm, soft_cap, bias, dropout
        self.layout, self.output_projection = layout, output_projection or layout != "query_key_value"
        if embed_dim is not None:
            self._check_embed_dim(embed_dim)
        # nn.MultiheadAttention packs q, k and v into one weight only when the context is as wide as x
        self._packed_in = layout == "packed" and (context_dim is None or context_dim == embed_dim)
        if context_dim is None and embed_dim is not None:  # built eagerly: a context as wide as x
            context_dim = embed_dim
        self._create_parameters({"embed_dim": embed_dim, "context_dim": context_dim}, device, dtype)

    # -- sizes and parameters -------------------------------------------------------------------------
    @property
    def embed_dim(self) -> int | None:
        return self.size("embed_dim")

    @property
    def context_dim(self) -> int | None:
        return self.size("context_dim")

    @property
    def head_dim(self) -> int | None:
        return None if self.embed_dim is None else self.embed_dim // self.num_heads

    def _check_embed_dim(self, dim: int) -> None:
        if dim % self.num_heads:
            raise ValueError(f"{self.name}: input size {dim} is not divisible by num_heads {self.num_heads}")
        if self.positions == "rope" and (dim // self.num_heads) % 2:
            raise ValueError(f"{self.name}: the head size {dim // self.num_heads} must be even (RoPE turns pairs)")

    def _infer_sizes(self, x, *args, context=None, **kwargs):
        check_input(self.name, "x", x, ("batch", "seq", "embed_dim"), hint=_TWO_D_HINT if x.dim() == 2 else "")
        self._check_embed_dim(x.shape[-1])
        sizes = {"embed_dim": x.shape[-1]}
        if self._sizes.get("context_dim") is None:
            width = x.shape[-1]
            if context is not None:
                check_input(self.name, "context", context, ("batch", "context_seq", "context_dim"))
                width = context.shape[-1]
            if self._packed_in and width != x.shape[-1]:
                raise ValueError(
                    f"{self.name}: this layer was built for a context as wide as x ({x.shape[-1]}), got "
                    f"{width}; give context_dim={width} when building it"
                )
            sizes["context_dim"] = width
        return sizes

    def _parameter_shapes(self, sizes):
        e, c = sizes["embed_dim"], sizes["context_dim"]
        d = e // self.num_heads if self.num_heads else 0
        kv = self.num_kv_heads * d
        shapes: dict[str, tuple[int, ...]] = {}
        if self.layout == "packed":
            if self._packed_in:
                shapes["in_proj_weight"] = (3 * e, e)
            else:
                shapes.update({"q_proj_weight": (e, e), "k_proj_weight": (e, c), "v_proj_weight": (e, c)})
            shapes["out_proj.weight"] = (e, e)
            if self.bias:
                shapes.update({"in_proj_bias": (3 * e,), "out_proj.bias": (e,)})
        else:
            names = _NAMES[self.layout]
            widths = {names[0]: (e, e), names[1]: (kv, c), names[2]: (kv, c), names[3]: (e, e)}
            if not self.output_projection:
                del widths[names[3]]
            if self.layout == "query_key_value":  # the seed's Linear layers, each weight followed by its bias
                for part, shape in widths.items():
                    shapes[f"{part}.weight"] = shape
                    if self.bias:
                        shapes[f"{part}.bias"] = (shape[0],)
            else:  # all weights, then all biases
                shapes.update({f"{part}.weight": shape for part, shape in widths.items()})
                if self.bias:
                    shapes.update({f"{part}.bias": (shape[0],) for part, shape in widths.items()})
        if self.qk_norm:
            shapes.update({"q_norm.weight": (d,), "k_norm.weight": (d,)})
        if self.positions == "relpos":
            span = 2 * self.max_relative_position + 1
            shapes.update({"rel_key": (span, d), "rel_value": (span, d)})
        if self.positions == "t5":
            shapes["rel_bias"] = (self.num_buckets, self.num_heads)
        return shapes

    def _sizes_from_parameters(self):
        if self.layout == "packed":
            e = self.out_proj.weight.shape[0]
            return {"embed_dim": e, "context_dim": e if self._packed_in else self.k_proj_weight.shape[1]}
        q, k = ("q_proj", "k_proj") if self.layout == "qkvo" else ("query", "key")
        return {"embed_dim": getattr(self, q).weight.shape[1], "context_dim": getattr(self, k).weight.shape[1]}

    def reset_parameters(self) -> None:
        for name in self._lazy_names:
            param = self.tensor(name)
            if name.endswith("norm.weight"):
                nn.init.ones_(param)
            elif name.startswith("rel_"):
                nn.init.xavier_uniform_(param)
            elif self.layout == "query_key_value":  # nn.Linear's initialisation, which the seed used
                if name.endswith("weight"):
                    nn.init.kaiming_uniform_(param, a=5**0.5)
                else:
                    nn.init.uniform_(param, -(param.shape[0] ** -0.5), param.shape[0] ** -0.5)
            elif self.layout == "packed" and name == "out_proj.weight":  # as nn.MultiheadAttention
                nn.init.kaiming_uniform_(param, a=5**0.5)
            elif name.endswith("bias"):
                nn.init.zeros_(param)
            else:
                nn.init.xavier_uniform_(param)

    # -- projections ----------------------------------------------------------------------------------
    def _projection(self, part: int) -> tuple[Tensor, Tensor | None]:
        """(weight, bias) of projection ``part``: 0 = query, 1 = key, 2 = value, 3 = output."""
        if self.layout == "packed":
            if part == 3:
                return self.out_proj.weight, self.out_proj.bias if self.bias else None
            bias = self.in_proj_bias.chunk(3)[part] if self.bias else None
            if self._packed_in:
                # views of the packed weight: backward then needs no [B, T, 3E] gradient concatenation
                return self.in_proj_weight.chunk(3)[part], bias
            return getattr(self, ("q_proj_weight", "k_proj_weight", "v_proj_weight")[part]), bias
        group = getattr(self, _NAMES[self.layout][part])
        return group.weight, group.bias if self.bias else None

    def _heads(self, x: Tensor, part: int, heads: int) -> Tensor:
        """Projection ``part`` of x [B, L, ·] split into heads: [B, heads, L, d]."""
        weight, bias = self._projection(part)
        y = F.linear(x, weight, bias)
        return y.view(*x.shape[:2], heads, y.shape[-1] // heads).transpose(1, 2)

    def _normed(self, x: Tensor, which: str) -> Tensor:
        if not self.qk_norm:
            return x
        return F.rms_norm(x, (x.shape[-1],), self.tensor(f"{which}_norm.weight"), eps=1e-6)

    def _rotated(self, x: Tensor, positions: Tensor | None, tables: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """x turned by RoPE at ``positions`` (``tables``: :meth:`_rope_at`'s for them, when the caller has them)."""
        if self.positions != "rope":
            return x
        if tables is not None:
            return turn_full(x, tables, self.rope_layout)
        assert positions is not None
        return turn(x, rope_tables(positions, x.shape[-1], self.rope_base, like=x), self.rope_layout)

    def _rope_at(self, start: int, length: int, like: Tensor) -> tuple[Tensor, Tensor]:
        """RoPE's full-width tables (:func:`full_tables`) for positions start..start+length-1 of heads like
        ``like``: slices of tables the layer computes once per device, dtype, head size, base and layout
        (grown by doubling), rather than every call (a decoding step's arange, powers, cosines and sines).
        Each angle is computed alone, as rope_tables computes it."""
        d = like.shape[-1]
        if tracing():  # a graph holds no Python state: the tables of this call
            positions = torch.arange(start, start + length, device=like.device)
            return full_tables(rope_tables(positions, d, self.rope_base, like=like), self.rope_layout)
        store = self.__dict__.setdefault("_rope_store", {})  # not a buffer: no state dict entry, no .to()
        key = (like.device, like.dtype, d, self.rope_base, self.rope_layout)
        tables = store.get(key)
        if tables is None or tables[0].shape[0] < start + length:
            size = 1 << max(6, (start + length - 1).bit_length())
            half = rope_tables(torch.arange(size, device=like.device), d, self.rope_base, like=like)
            tables = store[key] = full_tables(half, self.rope_layout)
        return tables[0][start : start + length], tables[1][start : start + length]

    def new_cache(self, batch_size: int) -> KVCache:
        """An empty :class:`KVCache` for decoding ``batch_size`` sequences one step (or a few) at a time."""
        error = positive_error(self.name, "batch_size", batch_size, allow_none=False)
        if error is not None:
            raise error
        cache = KVCache(batch_size, limit=self.window)
        cache.claim(self, self.name)
        return cache

    # -- the call -------------------------------------------------------------------------------------
    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        *,
        return_attention: bool = False,
        context: Tensor | None = None,
        context_mask: Tensor | None = None,
        cache: KVCache | None = None,
    ):
        like = self.tensor(self._lazy_names[0])  # a weight: where x must be, and its dtype
        e = self.embed_dim
        hint = _TWO_D_HINT if isinstance(x, Tensor) and x.dim() == 2 else ""
        check_input(self.name, "x", x, ("batch", "seq", e or "embed_dim"), hint=hint, like=like)
        batch, seq, _ = x.shape
        if cache is not None:
            check_cache(cache, self, self.name, batch)
        if context is None:
            if context_mask is not None:
                raise ValueError(f"{self.name}: context_mask without context; pass context=[batch, S, C] with it")
            if cache is not None and not self.causal:
                raise ValueError(
                    f"{self.name}: a cache decodes step by step, which needs causal=True (a later token must "
                    f"not change an earlier output)"
                )
            out, weights = self._self_attention(x, mask, cache, return_attention)
        else:
            if self.causal or self.window is not None:
                raise ValueError(
                    f"{self.name}: causal and window are patterns of self-attention; this layer has "
                    f"causal={self.causal}, window={self.window}: build a separate layer for cross-attention"
                )
            out, weights = self._cross_attention(x, mask, context, context_mask, cache, return_attention, like)
        out = out.transpose(1, 2).reshape(batch, seq, out.shape[1] * out.shape[-1])
        if self.output_projection:
            out = F.linear(out, *self._projection(3))
        if not return_attention:
            return out
        return out, (weights.squeeze(1) if self.num_heads == 1 else weights)

    def _self_attention(self, x: Tensor, mask: Tensor | None, cache: KVCache | None, return_attention: bool):
        batch, seq, _ = x.shape
        start = 0 if cache is None else cache.length
        if cache is not None and isinstance(mask, Tensor) and mask.dim() == 3:
            raise ValueError(f"{self.name}: with a cache, mask is [batch, steps] (which new tokens are real)")
        mask3 = check_mask(self.name, mask, batch, seq, seq, like=x)
        x = neutralise(x, attended_keys(mask3))  # keys no query attends to: padding, whatever it holds
        # one cached step of a softmax layer reads no positions (RoPE reads its tables; see pattern_holds below)
        step = cache is not None and seq == 1 and self._plain_scores()
        positions = None if step else torch.arange(start, start + seq, device=x.device)
        q = self._normed(self._heads(x, 0, self.num_heads), "q")
        tables = self._rope_at(start, seq, q) if self.positions == "rope" else None
        q = self._rotated(q, positions, tables)  # queries and keys turn by the same angles
        k = self._rotated(self._normed(self._heads(x, 1, self.num_kv_heads), "k"), positions, tables)
        v = self._heads(x, 2, self.num_kv_heads)
        if cache is not None:
            keys, values, valid = cache.append(k, v, None if mask3 is None else mask3[:, 0])
            # one new token: every key held is at or before it and within the window (the cache keeps no
            # more), so the pattern holds; with no padding ever given, no mask either
            result = self._attend(
                q,
                keys,
                values,
                None if valid is None else valid[:, None, None, :],
                positions,
                None if step else cache.positions,
                return_attention,
                pattern_holds=seq == 1,
            )
            cache.trim()
            return result
        if self._use_blocks(seq, mask3, return_attention):
            return self._attend_blocks(q, k, v, None if mask3 is None else mask3[:, 0]), None
        allowed = None if mask3 is None else mask3.unsqueeze(1)  # [B, 1, T or 1, T]
        return self._attend(q, k, v, allowed, positions, positions, return_attention)

    def _cross_attention(self, x, mask, context, context_mask, cache, return_attention, like):
        batch, seq, _ = x.shape
        check_input(
            self.name, "context", context, ("batch", "context_seq", self.context_dim or "context_dim"), like=like
        )
        if context.shape[0] != batch:
            raise ValueError(f"{self.name}: context has batch {context.shape[0]}, x has {batch}")
        if isinstance(mask, Tensor) and mask.dim() == 3:
            raise ValueError(
                f"{self.name}: in cross-attention, mask [batch, T] says which queries are real; put which context "
                f"positions each query may read in context_mask [batch, T, S]"
            )
        queries = check_mask(self.name, mask, batch, seq, seq, like=x)
        x = neutralise(x, attended_keys(queries))
        start = 0 if cache is None else cache.length
        positions = torch.arange(start, start + seq, device=x.device)
        q = self._rotated(self._normed(self._heads(x, 0, self.num_heads), "q"), positions)
        if cache is not None and cache.context is not None:
            cache.check_context(self.name, context, context_mask)
            k, v, allowed = cache.context
        else:
            length = context.shape[1]
            allowed = check_mask(self.name, context_mask, batch, seq, length, arg="context_mask", like=context)
            context_in, context = context, neutralise(context, attended_keys(allowed))
            context_positions = torch.arange(length, device=x.device)
            k = self._rotated(self._normed(self._heads(context, 1, self.num_kv_heads), "k"), context_positions)
            v = self._heads(context, 2, self.num_kv_heads)
            allowed = None if allowed is None else allowed.unsqueeze(1)
            if cache is not None:
                if allowed is not None and allowed.shape[-2] != 1:
                    raise ValueError(f"{self.name}: with a cache, context_mask is [batch, S]")
                cache.context = (k, v, allowed)
                cache.keep_context(self.name, context_in, context_mask)
        if cache is not None:
            cache.length += seq
        key_positions = torch.arange(k.shape[-2], device=x.device)
        return self._attend(q, k, v, allowed, positions, key_positions, return_attention)

    def extra_repr(self) -> str:
        # each option where it differs from plain multi-head attention, then the layout
        options = {
            "num_kv_heads": (self.num_kv_heads, self.num_heads),
            "positions": (self.positions, "none"),
            "causal": (self.causal, False),
            "window": (self.window, None),
            "normalizer": (self.normalizer, "softmax"),
            "qk_norm": (self.qk_norm, False),
            "soft_cap": (self.soft_cap, None),
        }
        parts = [f"embed_dim={self.embed_dim}", f"num_heads={self.num_heads}"]
        parts += [f"{key}={value}" for key, (value, plain) in options.items() if value != plain]
        return ", ".join([*parts, f"layout={self.layout}"])
