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
                  ``e_ij += q_i · a^K_c / sqrt(d)`` and ``out_i += Σ_j A_ij a^V_c``
``causal``        pattern j <= i
``window``        pattern |j - i| <= w (with ``causal``: i - w <= j <= i); computed in blocks of queries
                  against their neighbouring blocks of keys, so time and memory are O(T·w)
``normalizer``    ``softmax``, ``sparsemax``, ``entmax15`` (see ``normalizers.py``)
``qk_norm``       RMS normalisation of each query and key head (learned scale per dimension), before RoPE
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
(``qkvo``), ``alibi_self`` (positions ``alibi``), ``rope_self`` (``rope``; its ``base`` is ``rope_base``),
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

import math
import weakref

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.errors import ConfigError
from attnzoo.layers.core import (
    SDPA_GQA,
    attend,
    attended_keys,
    check_input,
    check_mask,
    check_positive,
    check_probability,
    neutralise,
    positive_error,
    tracing,
)
from attnzoo.layers.lazy import LazyLayer
from attnzoo.layers.normalizers import check_normalizer, normalize

__all__ = ["Attention", "KVCache", "alibi_slopes", "rotate", "rope_tables", "tiled_to_grouped", "POSITIONS", "LAYOUTS"]

POSITIONS = ("none", "rope", "alibi", "relpos")
ROPE_LAYOUTS = ("half", "interleaved")
LAYOUTS = ("qkvo", "packed", "query_key_value")
_NAMES = {"qkvo": ("q_proj", "k_proj", "v_proj", "o_proj"), "query_key_value": ("query", "key", "value", "out")}
_OLD_LAYOUT_NAMES = {"seed": "query_key_value"}  # saved folders of 0.1.0 name the layout so

# The explicit (materialised) path handles this many score elements at a time: queries are taken in
# chunks so that a long sequence never holds its whole [B, h, T, S] score tensor at once.
_CHUNK_ELEMENTS = 2**23
# The window's blocks go in groups of at most this many key-window elements (their overlapping key
# windows are 3x the keys they cover): the window's peak memory then stays near full attention's.
_BLOCK_ELEMENTS = 2**21

_TWO_D_HINT = (
    "A 2-D [batch, features] input has no sequence axis: self-attention over it would attend across the "
    "samples of the batch (seed 001's bug). Keep the time axis ([batch, seq, features], e.g. the LSTM's full "
    "output) and pool afterwards with attn_pool"
)


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
    return _turn(x, rope_tables(positions, x.shape[-1], base, like=x), layout)


def rope_tables(positions: Tensor, d: int, base: float, *, like: Tensor) -> tuple[Tensor, Tensor]:
    """RoPE's ``(cos, sin)`` [L, d/2] for ``positions`` [L], in ``like``'s dtype and on its device: computed
    once per call of a layer and shared by its queries and keys."""
    work = torch.float64 if like.dtype == torch.float64 else torch.float32
    freqs = base ** (-torch.arange(0, d // 2, device=like.device, dtype=work) * 2 / d)
    angles = positions.to(device=like.device, dtype=work)[:, None] * freqs  # [L, d/2]
    return angles.cos().to(like.dtype), angles.sin().to(like.dtype)


def _turn(x: Tensor, tables: tuple[Tensor, Tensor], layout: str) -> Tensor:
    """x [..., L, d] turned by the angles of ``tables`` (see :func:`rotate`)."""
    cos, sin = tables
    d = x.shape[-1]
    if layout == "half":
        first, second = x[..., : d // 2], x[..., d // 2 :]
        return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)
    pairs = x.unflatten(-1, (d // 2, 2))
    first, second = pairs[..., 0], pairs[..., 1]
    return torch.stack([first * cos - second * sin, first * sin + second * cos], dim=-1).flatten(-2)


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


def _windows(t: Tensor, span: int, step: int) -> Tensor:
    """The overlapping windows of ``span`` positions every ``step`` of t [B, g, L, d]: [B·n, g, span, d]."""
    unfolded = t.unfold(2, span, step)  # [B, g, n, d, span]
    batch, heads, count = unfolded.shape[:3]
    return unfolded.permute(0, 2, 1, 4, 3).reshape(batch * count, heads, span, t.shape[-1])


def _positions_range(t: Tensor, lo: int, hi: int) -> Tensor:
    """Positions [lo, hi) of t's sequence axis (keys [B, g, L, d] or a mask [B, L]), zeros (False) for
    those outside [0, L): a group's keys are copied with their padding, never the whole sequence."""
    axis = 2 if t.dim() == 4 else 1
    length = t.shape[axis]
    part = t.narrow(axis, max(lo, 0), max(0, min(hi, length) - max(lo, 0)))
    before, after = max(0, -lo), max(0, hi - max(lo, length))
    if not (before or after):
        return part
    return F.pad(part, (0, 0, before, after) if axis == 2 else (before, after))


class KVCache:
    """Keys, values and positions of the tokens a layer has seen, for decoding one step at a time.

    ``keys``/``values`` [B, g, S, d] (keys already rotated by RoPE), ``valid`` [B, S] (which of them
    may be attended to), ``positions`` [S] (each entry's absolute position) and ``length`` (tokens
    seen). A layer with a window keeps only the last ``limit`` = w entries: no later query can reach
    older ones. A cross-attention layer keeps its context's keys and values (``context``), computed once.

    The entries live in buffers that grow by doubling, so a step writes its own keys in place instead
    of copying everything held (a window's buffer moves its last w entries to the front when full).
    Under autograd (keys that require grad) the entries are concatenated instead: nothing a backward
    pass needs is overwritten.

    A cache belongs to the layer that first fills it (``layer.new_cache`` names it at once): another layer
    refuses it with a ``ConfigError``, since its keys were made by other weights. A cross-attention cache
    keeps the context it was filled from, and a later step given another context (another tensor with
    other values, or the same one changed in place) raises a ``ConfigError`` instead of reading the old keys.
    """

    def __init__(self, batch_size: int, limit: int | None = None) -> None:
        self.batch_size, self.limit = batch_size, limit
        self._owner: weakref.ref | None = None
        self.padded = False  # whether any step was given a mask: until then no mask is built
        # the context and context mask the cross-attention keys were made from, each with its version
        # counter (which an in-place change bumps)
        self._sources: tuple[tuple[Tensor, int] | None, ...] = ()
        # keys [B, g, cap, d], values [B, g, cap, d], valid [B, cap, 1], positions [cap, 1]: every buffer
        # has its entries on the second-last axis; the held ones are [start, end)
        self._buffers: list[Tensor] | None = None
        self._start = self._end = 0
        self.length = 0
        self.context: tuple[Tensor, Tensor, Tensor | None] | None = None

    def _held(self, index: int) -> Tensor | None:
        if self._buffers is None:
            return None
        held = self._buffers[index][..., self._start : self._end, :]
        return held if index < 2 else held.squeeze(-1)

    @property
    def keys(self) -> Tensor | None:
        return self._held(0)

    @property
    def values(self) -> Tensor | None:
        return self._held(1)

    @property
    def valid(self) -> Tensor | None:
        return self._held(2)

    @property
    def positions(self) -> Tensor | None:
        return self._held(3)

    def __len__(self) -> int:
        return self._end - self._start

    def _views(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        keys, values, valid, positions = (self._held(i) for i in range(4))
        assert keys is not None and values is not None and valid is not None and positions is not None
        return keys, values, valid, positions

    def append(self, keys: Tensor, values: Tensor, valid: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Add t new tokens' ``keys``/``values`` [B, g, t, d] and ``valid`` [B, t]; returns (keys, values,
        valid, positions) over everything held, the new tokens last. Call :meth:`trim` after attending."""
        steps = keys.shape[-2]
        positions = torch.arange(self.length, self.length + steps, device=keys.device)
        new = [keys, values, valid[..., None], positions[:, None]]
        self.length += steps
        held = len(self)
        if keys.requires_grad or values.requires_grad or (self._buffers is not None and self._buffers[0].requires_grad):
            old = self._buffers
            self._buffers = (
                new
                if old is None
                else [torch.cat([b[..., self._start : self._end, :], n], dim=-2) for b, n in zip(old, new, strict=True)]
            )
            self._start, self._end = 0, held + steps
            return self._views()
        if self._buffers is None or self._end + steps > self._buffers[0].shape[-2]:
            capacity = max(16, 2 * (held + steps))
            grown = [n.new_empty((*n.shape[:-2], capacity, n.shape[-1])) for n in new]
            if self._buffers is not None:
                for target, source in zip(grown, self._buffers, strict=True):
                    target[..., :held, :].copy_(source[..., self._start : self._end, :])
            self._buffers, self._start, self._end = grown, 0, held
        for target, source in zip(self._buffers, new, strict=True):
            target[..., self._end : self._end + steps, :].copy_(source)
        self._end += steps
        return self._views()

    def trim(self) -> None:
        """Forget all but the last ``limit`` entries (a window's)."""
        if self.limit is not None and len(self) > self.limit:
            self._start = self._end - self.limit

    def claim(self, layer: nn.Module, name: str) -> None:
        """Tie the cache to ``layer``, or raise if another layer filled it."""
        owner = None if self._owner is None else self._owner()
        if owner is None:
            self._owner = weakref.ref(layer)
        elif owner is not layer:
            raise ConfigError(
                f"{name}: this cache was filled by another layer ({type(owner).__name__} at {id(owner):#x}); its keys "
                f"and values come from that layer's weights. Give each layer its own: cache = layer.new_cache(batch)"
            )

    def keep_context(self, name: str, context: Tensor, context_mask: Tensor | None) -> None:
        """Remember what the cross-attention keys were made from."""
        self._sources = tuple(None if t is None else (t, t._version) for t in (context, context_mask))

    def check_context(self, name: str, context: Tensor, context_mask: Tensor | None) -> None:
        """Raise unless ``context`` and ``context_mask`` are what the kept keys were made from (the same
        tensors unchanged, or equal ones)."""
        from attnzoo.layers.core import tracing

        if tracing():  # a graph cannot compare values on the host
            return
        for what, given, kept in zip(("context", "context_mask"), (context, context_mask), self._sources, strict=True):
            if kept is None:
                same = given is None
            else:
                tensor, version = kept
                unchanged = tensor._version == version
                same = (
                    given is not None
                    and unchanged
                    and (
                        given is tensor
                        or (
                            given.shape == tensor.shape and given.device == tensor.device and torch.equal(given, tensor)
                        )
                    )
                )
            if not same:
                raise ConfigError(
                    f"{name}: this cache holds the keys and values of the {what} of its first step; this step got "
                    f"a different {what}. Pass the same {what} at every step, or start a new cache with "
                    f"layer.new_cache(batch) for a new one"
                )

    def __repr__(self) -> str:
        return f"KVCache(batch_size={self.batch_size}, held={len(self)}, seen={self.length}, limit={self.limit})"


class Attention(LazyLayer):
    """The composable attention core (see the module doc for the formula and every option).

    Args:
        embed_dim: E; None infers it from the first input.
        num_heads: h; E must be divisible by it.
        num_kv_heads: g key/value heads (None: h); h must be a multiple of g.
        positions: ``none``, ``rope``, ``alibi`` or ``relpos``.
        rope_base, rope_layout: RoPE's base (10000) and pairing (``half`` or ``interleaved``).
        max_relative_position: k, the clipping distance of ``relpos`` (2k + 1 learned vectors).
        causal: attend only to j <= i.
        window: None, or w: attend only to |j - i| <= w.
        normalizer: ``softmax``, ``sparsemax`` or ``entmax15``.
        qk_norm: RMS-normalise query and key heads.
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
        causal: bool = False,
        window: int | None = None,
        normalizer: str = "softmax",
        qk_norm: bool = False,
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
        layout = _OLD_LAYOUT_NAMES.get(layout, layout)
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
        check_positive(name, "context_dim", context_dim)
        check_normalizer(name, normalizer)
        check_probability(name, "dropout", dropout)
        if not rope_base > 1:
            raise ValueError(f"{name}: rope_base must be above 1, got {rope_base!r}")
        self.num_heads, self.num_kv_heads = num_heads, kv
        self.positions, self.rope_base, self.rope_layout = positions, float(rope_base), rope_layout
        self.max_relative_position = max_relative_position
        self.causal, self.window, self.normalizer = causal, window, normalizer
        self.qk_norm, self.bias, self.dropout = qk_norm, bias, dropout
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

    def _rotated(self, x: Tensor, positions: Tensor, tables: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """x turned by RoPE at ``positions`` (``tables``: their angles, when the caller has them already)."""
        if self.positions != "rope":
            return x
        return _turn(x, tables or rope_tables(positions, x.shape[-1], self.rope_base, like=x), self.rope_layout)

    def _rope_at(self, start: int, length: int, like: Tensor) -> tuple[Tensor, Tensor]:
        """RoPE's tables for positions start..start+length-1 of heads like ``like``: slices of tables the
        layer computes once per device, dtype and head size (grown by doubling), rather than every call (a
        decoding step's arange, powers, cosines and sines). Each angle is computed alone, as rope_tables
        computes it."""
        d = like.shape[-1]
        if tracing():  # a graph holds no Python state: the tables of this call
            return rope_tables(torch.arange(start, start + length, device=like.device), d, self.rope_base, like=like)
        store = self.__dict__.setdefault("_rope_store", {})  # not a buffer: no state dict entry, no .to()
        key = (like.device, like.dtype, d)
        tables = store.get(key)
        if tables is None or tables[0].shape[0] < start + length:
            size = 1 << max(6, (start + length - 1).bit_length())
            tables = store[key] = rope_tables(torch.arange(size, device=like.device), d, self.rope_base, like=like)
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
        like = next(iter(self.parameters()))
        e = self.embed_dim
        hint = _TWO_D_HINT if isinstance(x, Tensor) and x.dim() == 2 else ""
        check_input(self.name, "x", x, ("batch", "seq", e or "embed_dim"), hint=hint, like=like)
        batch, seq, _ = x.shape
        if cache is not None and not isinstance(cache, KVCache):
            raise ValueError(
                f"{self.name} expects cache to come from layer.new_cache(batch), got {type(cache).__name__}"
            )
        if cache is not None and cache.batch_size != batch:
            raise ValueError(
                f"{self.name}: the cache was made for batch size {cache.batch_size}, got x of batch {batch}"
            )
        if cache is not None:
            cache.claim(self, self.name)
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
        positions = torch.arange(start, start + seq, device=x.device)
        q = self._normed(self._heads(x, 0, self.num_heads), "q")
        tables = self._rope_at(start, seq, q) if self.positions == "rope" else None
        q = self._rotated(q, positions, tables)  # queries and keys turn by the same angles
        k = self._rotated(self._normed(self._heads(x, 1, self.num_kv_heads), "k"), positions, tables)
        v = self._heads(x, 2, self.num_kv_heads)
        if cache is not None:
            valid = torch.ones(batch, seq, dtype=torch.bool, device=x.device) if mask3 is None else mask3[:, 0]
            cache.padded = cache.padded or mask3 is not None
            keys, values, valid_all, key_positions = cache.append(k, v, valid)
            # one new token: every key held is at or before it and within the window (the cache keeps no
            # more), so the pattern holds; with no padding ever given, no mask either
            result = self._attend(
                q,
                keys,
                values,
                valid_all[:, None, None, :] if cache.padded else None,
                positions,
                key_positions,
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

    # -- attention over a pattern ---------------------------------------------------------------------
    def _pattern(self, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """The allowed (i, j) pairs [Lq, Lk] of positions ``q_pos`` [Lq] and ``k_pos`` [Lk]: causal
        (j <= i) and window (|j - i| <= w), as comparisons (no [Lq, Lk] integer table)."""
        i, j = q_pos[:, None], k_pos[None, :]
        allowed = None
        if self.causal:
            allowed = j <= i
        if self.window is not None:
            band = (j >= i - self.window) & (j <= i + self.window)
            allowed = band if allowed is None else allowed & band
        return allowed

    def _score_bias(self, q_pos: Tensor, k_pos: Tensor, like: Tensor) -> Tensor | None:
        """ALiBi's [h, Lq, Lk] bias ``-m_n |j - i|`` (None for the other positions)."""
        if self.positions != "alibi":
            return None
        slopes = alibi_slopes(self.num_heads).to(device=like.device, dtype=torch.float32)
        distance = (k_pos[None, :] - q_pos[:, None]).abs().to(torch.float32)
        return (-slopes[:, None, None] * distance).to(like.dtype)

    def attend_heads(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        allowed: Tensor | None = None,
        *,
        q_positions: Tensor | None = None,
        k_positions: Tensor | None = None,
        scale: float | None = None,
        dropout: float | None = None,
        return_attention: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """The attention step alone, on heads already projected (and rotated, and cached) by someone else:
        ``A = normalizer(scale · q kᵀ + b, where allowed ∧ pattern)``, ``out = A v``.

        Shapes: q [B, h, Lq, d] with h = ``num_heads``; k [B, g, Lk, d] and v [B, g, Lk, dv] with g = ``num_kv_heads``
        (query head n reads key/value head n // (h / g), never materialised on the softmax path);
        ``allowed`` bool broadcasting to [B, h, Lq, Lk] (True = attend), None for all. ``q_positions``
        [Lq] and ``k_positions`` [Lk] are the tokens' absolute positions, which the layer's ``causal``,
        ``window`` and ALiBi bias read (default: keys 0..Lk-1, queries the last Lq of them, as after a
        cache). ``scale`` defaults to 1/sqrt(d); ``dropout`` (on the weights) to the layer's own while
        training. q, k and v share one dtype and device (a ``ValueError`` otherwise). Returns
        ``(out [B, h, Lq, dv], A [B, h, Lq, Lk] or None)``; a query with nothing allowed gets zeros. The
        layer's projections, RoPE and cache are not used: this is what a host library with its own
        projections (``attnzoo.integrations``) calls.
        """
        for arg, t in (("q", q), ("k", k), ("v", v)):
            if not isinstance(t, Tensor) or t.dim() != 4:
                got = list(t.shape) if isinstance(t, Tensor) else type(t).__name__
                raise ValueError(
                    f"{self.name}.attend_heads expects {arg} as [batch, heads, length, head_dim], got {got}"
                )
        if q.shape[1] != self.num_heads or k.shape[1] != self.num_kv_heads or v.shape[1] != k.shape[1]:
            raise ValueError(
                f"{self.name}.attend_heads: this layer has {self.num_heads} query and {self.num_kv_heads} key/value "
                f"heads, got q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)}; build it with num_heads and "
                f"num_kv_heads of the host model"
            )
        if q.shape[0] != k.shape[0] or k.shape[:3] != v.shape[:3] or q.shape[-1] != k.shape[-1]:
            raise ValueError(
                f"{self.name}.attend_heads: q {list(q.shape)}, k {list(k.shape)} and v {list(v.shape)} disagree "
                f"(batch and key length shared, q and k of one head size)"
            )
        if len({q.dtype, k.dtype, v.dtype}) > 1 or len({q.device, k.device, v.device}) > 1:
            # a host that mixes them (a float16 query over a float32 cache) would get a kernel's dtype error
            raise ValueError(
                f"{self.name}.attend_heads expects q, k and v of one dtype on one device, got q "
                f"{str(q.dtype)[6:]} on {q.device}, k {str(k.dtype)[6:]} on {k.device}, v {str(v.dtype)[6:]} on "
                f"{v.device}; convert them: k.to(q), v.to(q)"
            )
        length, keys = q.shape[-2], k.shape[-2]
        if allowed is not None and (
            allowed.dtype != torch.bool
            or allowed.dim() != 4
            or any(a not in (1, b) for a, b in zip(allowed.shape, (q.shape[0], q.shape[1], length, keys), strict=True))
        ):
            raise ValueError(
                f"{self.name}.attend_heads expects allowed as a bool tensor broadcasting to "
                f"[{q.shape[0]}, {q.shape[1]}, {length}, {keys}] (True = attend), got {allowed.dtype} "
                f"{list(allowed.shape)}"
            )
        if k_positions is None:
            k_positions = torch.arange(keys, device=q.device)
        if q_positions is None:
            q_positions = torch.arange(keys - length, keys, device=q.device)
        if q_positions.shape != (length,) or k_positions.shape != (keys,):
            raise ValueError(
                f"{self.name}.attend_heads expects q_positions [{length}] and k_positions [{keys}], got "
                f"{list(q_positions.shape)} and {list(k_positions.shape)}"
            )
        keys_only = allowed is None or (allowed.shape[1] == 1 and allowed.shape[2] == 1)
        if keys_only and self._use_blocks(length, None, return_attention) and self._aligned(q_positions, k_positions):
            # queries that are the keys, masked by key alone: the window's blocks, O(T·w)
            real = None if allowed is None else allowed[:, 0, 0].expand(q.shape[0], keys)
            return self._attend_blocks(q, k, v, real, scale=scale, dropout=dropout), None
        return self._attend(q, k, v, allowed, q_positions, k_positions, return_attention, scale=scale, dropout=dropout)

    def _aligned(self, q_pos: Tensor, k_pos: Tensor) -> bool:
        """Whether the queries are the keys (the same consecutive positions): checked on the host."""
        if q_pos is k_pos:
            return True
        return (
            q_pos.shape == k_pos.shape and bool(torch.equal(q_pos, k_pos)) and bool((k_pos[1:] - k_pos[:-1] == 1).all())
        )

    def _attend(
        self, q, k, v, allowed, q_pos, k_pos, return_attention, *, scale=None, dropout=None, pattern_holds=False
    ):
        """Attention of q [N, h, Lq, d] over k, v [N, g, Lk, d] where ``allowed`` (bool, broadcasting to
        [N, 1, Lq, Lk]) and the pattern of the positions ``q_pos`` [Lq], ``k_pos`` [Lk] both allow it.
        ``pattern_holds``: the caller knows that every pair passes the pattern (one decoding step over a
        cache: its keys are at or before the query, and within the window), so none is built."""
        if dropout is None:
            dropout = self.dropout if self.training else 0.0
        if allowed is None and not return_attention and not pattern_holds and self._sdpa_causal(q, k, q_pos, k_pos):
            # the causal pattern alone is SDPA's own is_causal: no [Lq, Lk] mask, and its causal kernels
            if q.shape[1] != k.shape[1] and not SDPA_GQA:
                k, v = (t.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for t in (k, v))
            extra = {"enable_gqa": True} if q.shape[1] != k.shape[1] else {}
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True, scale=scale, **extra)
            return out, None
        pattern = None if pattern_holds else self._pattern(q_pos, k_pos)
        if pattern is not None:
            allowed = pattern if allowed is None else allowed & pattern
        if self.normalizer == "softmax" and self.positions != "relpos":
            bias = self._score_bias(q_pos, k_pos, q)
            return attend(q, k, v, allowed, scale=scale, return_attention=return_attention, dropout=dropout, bias=bias)
        if scale is not None:  # the materialised form scales by 1/sqrt(d): the rest goes on q
            q = q * (scale * q.shape[-1] ** 0.5)
        return self._explicit(q, k, v, allowed, q_pos, k_pos, return_attention, dropout)

    def _sdpa_causal(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> bool:
        """Whether this layer's pattern over these positions is exactly SDPA's ``is_causal`` (query i
        reads keys 0..i): a causal softmax layer without window or bias, 1 < Lq <= Lk, and the queries at
        the first Lq of the keys' increasing positions (the same tensor, or checked on the host)."""
        length = q.shape[-2]
        if not (self.causal and self.window is None and self.normalizer == "softmax"):
            return False
        if type(self)._pattern is not Attention._pattern:  # a subclass's own pattern is applied as written
            return False
        if self.positions not in ("none", "rope") or not 1 < length <= k.shape[-2]:
            return False
        if q_pos is k_pos:  # the layer's own forward: one arange for both
            return True
        if tracing():
            return False
        return bool(torch.equal(q_pos, k_pos[:length]) and (k_pos[1:] > k_pos[:-1]).all())

    def _explicit(self, q, k, v, allowed, q_pos, k_pos, return_attention, dropout):
        """The materialised form, for relative positions and the sparse normalisers, a chunk of queries at
        a time. Relative positions come from the 2k + 1 distance vectors: the key term is ``q · a^K``
        [.., Lq, 2k + 1] gathered by distance; the value term sums each row's weights by distance (a
        scatter into [.., Lq, 2k + 1]) before the product with ``a^V``. No [Lq, Lk, d] table is formed."""
        heads, d = q.shape[1], q.shape[-1]
        # grouped key/value heads are never copied: the r = h / g query heads that share one are stacked
        # along the query axis ([N, g, r·c, d], a copy of the queries only), multiplied with it, and the
        # products read back as [N, h, c, Lk] (a view)
        groups, kv_heads = heads // k.shape[1], k.shape[1]
        scale = d**-0.5
        relpos = self.positions == "relpos"
        rows = max(1, _CHUNK_ELEMENTS // max(1, q.shape[0] * heads * k.shape[-2]))
        if tracing():  # a graph takes one chunk: a loop over a traced length would fix it
            rows = q.shape[-2]
        outs, all_weights = [], []
        starts = [0] if tracing() else range(0, max(q.shape[-2], 1), rows)  # one (empty) chunk for no queries
        for start in starts:
            stop = q.shape[-2] if tracing() else min(start + rows, q.shape[-2])
            q_c, q_pos_c = q[..., start:stop, :], q_pos[start:stop]
            allowed_c = None
            if allowed is not None:
                allowed_c = allowed if allowed.shape[-2] == 1 else allowed[..., start:stop, :]
            count = q_c.shape[-2]
            stacked = (q_c * scale).reshape(q_c.shape[0], kv_heads, groups * count, d)
            scores = torch.matmul(stacked, k.transpose(-2, -1)).view(q_c.shape[0], heads, count, k.shape[-2])
            if relpos:
                reach = self.max_relative_position
                distance = (k_pos[None, :] - q_pos_c[:, None]).clamp(-reach, reach) + reach  # [c, Lk]
                index = distance.expand(*scores.shape)
                scores = scores + torch.matmul(q_c * scale, self.rel_key.t()).gather(-1, index)
            bias = self._score_bias(q_pos_c, k_pos, q)
            if bias is not None:
                scores = scores + bias
            weights = normalize(scores, allowed_c, kind=self.normalizer)
            dropped = F.dropout(weights, dropout) if dropout else weights
            out = torch.matmul(dropped.reshape(q_c.shape[0], kv_heads, groups * count, -1), v)
            out = out.view(q_c.shape[0], heads, count, v.shape[-1])
            if relpos:
                by_distance = dropped.new_zeros(*dropped.shape[:-1], self.rel_value.shape[0])
                out = out + torch.matmul(by_distance.scatter_add(-1, index, dropped), self.rel_value)
            outs.append(out)
            if return_attention:
                all_weights.append(weights)
        out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=-2)
        weights = None
        if return_attention:
            weights = all_weights[0] if len(all_weights) == 1 else torch.cat(all_weights, dim=-2)
        return out, weights

    # -- the sliding window in blocks -----------------------------------------------------------------
    def _block_size(self) -> int:
        assert self.window is not None
        return max(self.window, 16)

    def _use_blocks(self, seq: int, mask: Tensor | None, return_attention: bool) -> bool:
        """Blocks pay when the sequence spans several of them; a [B, T, T] mask or asked-for weights
        need the full matrix anyway."""
        if self.window is None or return_attention:
            return False
        if mask is not None and mask.shape[1] != 1:
            return False
        # A traced graph takes one branch for every length, and the blocks' ceil(T / b) reshapes put
        # guards on the length that torch.export refuses: exported programs keep the masked full form.
        return not tracing() and seq > 3 * self._block_size()

    def _attend_blocks(
        self, q: Tensor, k: Tensor, v: Tensor, keys: Tensor | None, *, scale: float | None = None, dropout=None
    ) -> Tensor:
        """Windowed attention with queries in blocks of b >= w: block n's queries [n·b, (n+1)·b) can only
        reach keys in [(n-1)·b, (n+2)·b) (causal: [(n-1)·b, (n+1)·b)), so each block attends to 3b (2b)
        keys and time and memory are O(T·b). The pattern, the key mask and the keys outside the sequence
        are one boolean mask per block; the result equals the masked full computation. The blocks go in
        groups, so that only one group's overlapping key windows (3x its keys) exist at a time."""
        batch, heads, seq, d = q.shape
        size = self._block_size()
        blocks = -(-seq // size)
        total = blocks * size
        left, right = size, (0 if self.causal else size)
        span = left + size + right
        q = F.pad(q, (0, 0, 0, total - seq)) if total > seq else q
        real = torch.ones(batch, seq, dtype=torch.bool, device=q.device) if keys is None else keys
        # positions within a block: queries 0..b-1, keys -b..span-b-1 (the same for every block)
        q_pos = torch.arange(size, device=q.device)
        k_pos = torch.arange(span, device=q.device) - left
        per_group = max(1, _BLOCK_ELEMENTS // max(1, batch * k.shape[1] * span * d))
        out = q.new_empty(batch, heads, total, d)
        for first in range(0, blocks, per_group):
            count = min(per_group, blocks - first)
            # the group's keys are [first·b - left, (first + count)·b + right); zeros beyond the sequence
            lo, hi = first * size - left, (first + count) * size + right

            q_group = q[:, :, first * size : (first + count) * size].reshape(batch, heads, count, size, d)
            q_group = q_group.transpose(1, 2).reshape(batch * count, heads, size, d)
            allowed = _positions_range(real, lo, hi).unfold(1, span, size).reshape(batch * count, 1, 1, span)
            k_group, v_group = (_windows(_positions_range(t, lo, hi), span, size) for t in (k, v))
            result, _ = self._attend(
                q_group, k_group, v_group, allowed, q_pos, k_pos, False, scale=scale, dropout=dropout
            )
            result = result.view(batch, count, heads, size, d).transpose(1, 2)
            out[:, :, first * size : (first + count) * size] = result.reshape(batch, heads, count * size, d)
        return out[:, :, :seq]

    def extra_repr(self) -> str:
        parts = [f"embed_dim={self.embed_dim}", f"num_heads={self.num_heads}"]
        if self.num_kv_heads != self.num_heads:
            parts.append(f"num_kv_heads={self.num_kv_heads}")
        if self.positions != "none":
            parts.append(f"positions={self.positions}")
        if self.causal:
            parts.append("causal=True")
        if self.window is not None:
            parts.append(f"window={self.window}")
        if self.normalizer != "softmax":
            parts.append(f"normalizer={self.normalizer}")
        parts.append(f"layout={self.layout}")
        return ", ".join(parts)
