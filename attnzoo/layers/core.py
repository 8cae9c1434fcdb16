"""The attention core every layer shares: one mask convention, one softmax, one fused path.

Masks are boolean with ``True`` = attend (the convention of ``F.scaled_dot_product_attention`` and
Keras). ``nn.MultiheadAttention``'s ``key_padding_mask`` (True = ignore) converts with
:func:`from_key_padding_mask`. A fully masked row attends to nothing: its weights and its output are
zeros, never NaN, in every dtype, forward and backward. No ``-1e9`` literal appears anywhere: masked
scores are filled with ``torch.finfo(dtype).min`` and, on the fused path, SDPA's boolean mask is used.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "check_input",
    "check_mask",
    "check_tokens",
    "check_positive",
    "positive_error",
    "check_probability",
    "neutralise",
    "attended_keys",
    "tracing",
    "from_key_padding_mask",
    "masked_softmax",
    "attend",
    "soft_capped",
    "expand_kv_heads",
    "label_attention",
    "EXPLICIT_MAX_SCORES",
]

# On the CPU, for label attention with few labels, materialising the scores and letting autograd keep
# the weights is faster than SDPA's blocked kernel (measured: x0.6 of SDPA's time at 50-400 labels);
# from about 8M score elements on, SDPA wins on time and keeps no [B, L, T] tensor for backward.
# Below this many elements (24 MiB in float32) the explicit path is used; see docs/performance.md.
EXPLICIT_MAX_SCORES = 6 * 2**20


def _describe(dims: Sequence[object]) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def tracing() -> bool:
    """True while torch.compile or torch.export traces: value checks that read tensors on the host (token
    ranges, right padding) are skipped there, since a graph cannot hold them; shape checks remain."""
    compiler = getattr(torch, "compiler", None)
    return bool(compiler is not None and compiler.is_compiling())


def _autocasting(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4 takes no device type
        return torch.is_autocast_enabled()


def check_input(
    layer: str, arg: str, x: object, dims: Sequence[object], hint: str = "", *, like: Tensor | None = None
) -> None:
    """Raise ``ValueError`` unless ``x`` is a floating tensor of len(dims) dimensions matching ``dims``.

    ``dims`` holds names (free sizes such as ``"batch"``) and ints (sizes that must match), e.g.
    ``("batch", "seq", 256)`` gives ``labelwise expects x of shape [batch, seq, 256], got [8, 300]``.
    ``like`` (a parameter of the layer, or another input) must share ``x``'s device and, outside
    autocast, its dtype: mixing them would fail deep inside a kernel, or silently lose precision.
    """
    if not isinstance(x, Tensor):
        raise ValueError(f"{layer} expects {arg} to be a tensor of shape {_describe(dims)}, got {type(x).__name__}")
    wrong_rank = x.dim() != len(dims)
    wrong_size = not wrong_rank and any(isinstance(d, int) and d != s for d, s in zip(dims, x.shape, strict=True))
    if wrong_rank or wrong_size:
        raise ValueError(
            f"{layer} expects {arg} of shape {_describe(dims)}, got {list(x.shape)}" + (f". {hint}" if hint else "")
        )
    if not x.is_floating_point():
        raise ValueError(f"{layer} expects {arg} to be a floating tensor, got {x.dtype}; embed token ids first")
    if like is not None:
        check_device(layer, arg, x, like)
        if x.dtype != like.dtype and not _autocasting(x.device.type):
            raise ValueError(
                f"{layer} expects {arg} of dtype {_name(like.dtype)} (its weights' dtype), got {_name(x.dtype)}; "
                f"convert one of them: {arg}.to(torch.{_name(like.dtype)}) or layer.to(torch.{_name(x.dtype)})"
            )


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def check_device(layer: str, arg: str, x: Tensor, like: Tensor) -> None:
    """Raise ``ValueError`` unless ``x`` lives on ``like``'s device."""
    if x.device != like.device:
        raise ValueError(
            f"{layer} expects {arg} on {like.device} (where its weights are), got {x.device}; "
            f"move one of them with .to(...)"
        )


def check_tokens(
    layer: str, tokens: object, vocab_size: int, arg: str = "tokens", *, rank: int = 2, like: Tensor | None = None
) -> None:
    """Raise ``ValueError`` unless ``tokens`` is an integer tensor of ``rank`` dims with ids in [0, vocab_size)."""
    axes = ["batch", "seq", "words"][:rank] if rank <= 3 else ["batch", *["..."] * (rank - 1)]
    if (
        not isinstance(tokens, Tensor)
        or tokens.dim() != rank
        or tokens.is_floating_point()
        or tokens.is_complex()
        or tokens.dtype == torch.bool
    ):
        shape = list(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__
        kind = f" {_name(tokens.dtype)}" if isinstance(tokens, Tensor) else ""
        raise ValueError(f"{layer} expects {arg} as integer ids of shape {_describe(axes)}, got{kind} {shape}")
    if like is not None:
        check_device(layer, arg, tokens, like)
    if tokens.numel() and tokens.device.type != "meta" and not tracing():
        low, high = int(tokens.min()), int(tokens.max())
        if low < 0 or high >= vocab_size:
            raise ValueError(
                f"{layer} expects {arg} ids in [0, {vocab_size}) (0 = padding), got ids from {low} "
                f"to {high}; map unknown words to an id of the vocabulary"
            )


def check_positive(layer: str, name: str, value: object, *, allow_none: bool = True) -> None:
    """Constructor check: an int >= 1 (or None where the size is inferred or the option off)."""
    error = positive_error(layer, name, value, allow_none=allow_none)
    if error is not None:
        raise error


def positive_error(layer: str, name: str, value: object, *, allow_none: bool = True) -> ValueError | None:
    """The error :func:`check_positive` raises, or None. A method the user calls (``generate``,
    ``new_cache``) raises it itself, so that the traceback ends at the user's call, not in this file."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        none = " or None" if allow_none else ""
        return ValueError(f"{layer}: {name} must be a positive int{none}, got {value!r}")
    return None


def check_probability(layer: str, name: str, value: object) -> None:
    """Constructor check: a float in [0, 1) (a dropout rate)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) < 1.0:
        raise ValueError(f"{layer}: {name} must be a probability in [0, 1), got {value!r}")


# Padding bounded by this (the largest float16) cannot reach an output or a gradient of a layer that
# weighs x itself: forward it meets exactly zero weight, and in backward <grad, x_pad> stays finite
# unless the gradient itself is near 1e29.
SAFE_PADDING_BOUND = 65504.0


def neutralise(x: Tensor, keep: Tensor | None, *, bounded_is_safe: bool = False) -> Tensor:
    """``x`` [B, T, ...] with every position where ``keep`` [B, T] is False set to zero.

    Padding may hold anything (NaN, inf, huge values, last batch's values): zeroing it before any
    arithmetic means no product, sum or norm downstream can carry it into a real output, forward or
    backward. (Finite padding is not safe to leave in general: in backward, ``<grad, x_pad>`` can
    overflow, and the softmax backward's ``0 · inf`` makes a whole row NaN.)

    ``bounded_is_safe``: the caller uses ``x`` itself as the values of attention that is exactly zero on
    padding, and masks its scores after computing them (the label heads, attention pooling). Then
    padding within ±``SAFE_PADDING_BOUND`` changes nothing, forward or backward, and ``x`` is returned
    uncopied when each sample's padding (right padding, read as views) is within it: one ``aminmax``
    per padded sample instead of a copy of x and its backward (measured on LAAT at [8, 2500, 512]:
    4 % over no protection, against 22 % for the copy). NaN, inf and larger values are zeroed.

    On the CPU a copy zeroes just the padded rows (2.4x faster than masked_fill over every element),
    and nothing is copied when nothing is padded.
    """
    if keep is None:
        return x
    if x.device.type == "cpu" and not tracing() and keep.shape == x.shape[: keep.dim()]:
        padded = (~keep).nonzero(as_tuple=True)
        if not padded[0].numel():
            return x
        if bounded_is_safe and _padding_is_bounded(x, keep):
            return x
        out = x.clone()
        out[padded] = 0
        return out
    view = keep.reshape(*keep.shape, *([1] * (x.dim() - keep.dim())))
    return x.masked_fill(~view, 0)


def _padding_is_bounded(x: Tensor, keep: Tensor) -> bool:
    """Whether every padded value of ``x`` is within ±SAFE_PADDING_BOUND (NaN is not), read without a
    copy: only right padding qualifies, whose padded rows are a view per sample."""
    if keep.dim() != 2 or bool((keep[:, 1:] & ~keep[:, :-1]).any()):
        return False
    with torch.no_grad():
        for b, n in enumerate(keep.sum(dim=1).tolist()):
            if n < keep.shape[1]:
                low, high = torch.aminmax(x[b, n:])
                if not (float(low) >= -SAFE_PADDING_BOUND and float(high) <= SAFE_PADDING_BOUND):
                    return False
    return True


def attended_keys(mask: Tensor | None) -> Tensor | None:
    """From a checked mask [B, Tq or 1, Tk], the keys [B, Tk] that at least one query attends to."""
    if mask is None:
        return None
    return mask[:, 0] if mask.shape[1] == 1 else mask.any(dim=1)


def from_key_padding_mask(key_padding_mask: Tensor) -> Tensor:
    """Convert ``nn.MultiheadAttention``'s ``key_padding_mask`` (True = ignore) to attnzoo's (True = attend)."""
    return ~key_padding_mask.bool()


def check_mask(
    layer: str,
    mask: Tensor | None,
    batch: int,
    q_len: int,
    k_len: int,
    *,
    arg: str = "mask",
    like: Tensor | None = None,
) -> Tensor | None:
    """Validate a mask and return it as bool ``[B, Tq or 1, Tk]`` (True = attend).

    Accepts bool or 0/1 integer masks of shape ``[B, Tk]`` (keys, e.g. padding) or ``[B, Tq, Tk]``.
    Float masks (additive 0 / -inf, or 0/1 floats) and complex masks are refused rather than guessed at:
    the two float conventions read opposite ways. ``like`` (an input) must share the mask's device.
    """
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        raise ValueError(
            f"{layer} expects {arg} to be a bool tensor [batch, {k_len}] (True = attend), got {type(mask).__name__}"
        )
    if mask.is_floating_point() or mask.is_complex():
        raise ValueError(
            f"{layer} expects a boolean {arg} (True = attend), got {mask.dtype}; for an additive float mask use "
            f"{arg} = float_mask == 0, for nn.MultiheadAttention's key_padding_mask use from_key_padding_mask()"
        )
    if mask.dim() == 2 and tuple(mask.shape) == (batch, k_len):
        mask = mask[:, None, :]
    elif mask.dim() != 3 or tuple(mask.shape) not in ((batch, q_len, k_len), (batch, 1, k_len)):
        raise ValueError(
            f"{layer} expects {arg} of shape [{batch}, {k_len}] or [{batch}, {q_len}, {k_len}] (True = attend), "
            f"got {list(mask.shape)}"
        )
    if like is not None:
        check_device(layer, arg, mask, like)
    if mask.dtype == torch.bool:
        return mask
    if mask.numel() and mask.device.type != "meta" and not tracing() and bool(((mask != 0) & (mask != 1)).any()):
        raise ValueError(f"{layer} expects {arg} to hold True/False or 0/1, got other integers; pass a bool mask")
    return mask != 0


def _filled_softmax(scores: Tensor, mask: Tensor | None, dim: int, *, fresh: bool = False) -> Tensor:
    """Softmax over ``dim`` after filling masked scores with ``finfo.min``: masked positions get exactly
    zero weight, but a row with no position left comes out uniform (the callers zero it, each in the
    cheapest place). Half-precision scores are normalised in float32 (a sum over thousands of
    positions would lose digits otherwise) and returned in their own dtype.

    ``fresh``: the caller just computed ``scores`` and nothing else holds them (no backward needs them
    either: matmul, add and scaling keep their inputs, not their output), and it zeroes the outputs (and
    weights) of rows with no position left. Then the scores are filled in place and outside autograd,
    sparing two passes over the largest tensor of attention: the copy of an out-of-place fill, and the
    fill's backward, which would zero a gradient that is zero already. A masked position has weight
    exactly 0, so softmax's backward ``A · (dA − Σ A dA)`` gives it exactly 0 for any finite ``dA`` (a
    row with no position left is uniform instead, but its output's gradient is zero, so its ``dA`` is).
    Under torch.compile/export the plain in-place fill is kept: graphs get no hidden mutation."""
    upcast = scores.dtype in (torch.float16, torch.bfloat16)
    if mask is not None:
        fill = torch.finfo(scores.dtype).min
        if not fresh:
            scores = scores.masked_fill(~mask, fill)
        elif tracing():
            scores = scores.masked_fill_(~mask, fill)
        else:
            with torch.no_grad():
                scores.masked_fill_(~mask, fill)
    return torch.softmax(scores, dim=dim, dtype=torch.float32 if upcast else None).to(scores.dtype)


def masked_softmax(scores: Tensor, mask: Tensor | None, dim: int = -1) -> Tensor:
    """Softmax over ``dim`` where ``mask`` is False contributes nothing; a fully masked row is all zeros."""
    weights = _filled_softmax(scores, mask, dim)
    # rows with every position masked came out uniform; they must attend to nothing
    return weights if mask is None else weights.masked_fill(~mask, 0.0)


def _sdpa_takes_gqa() -> bool:
    """Whether this torch's SDPA shares key/value heads itself (``enable_gqa``, torch 2.5): asked by one
    call, since SDPA is a builtin whose signature ``inspect`` cannot read."""
    query, shared = torch.zeros(1, 2, 1, 1), torch.zeros(1, 1, 1, 1)
    try:
        F.scaled_dot_product_attention(query, shared, shared, enable_gqa=True)
    except (TypeError, RuntimeError):
        return False
    return True


SDPA_GQA = _sdpa_takes_gqa()


def _explicit_trains_faster(query: Tensor, key: Tensor, value: Tensor) -> bool:
    """Whether the explicit form (matmul, softmax, matmul) beats SDPA here. Measured on the CPU, forward
    and backward with a padding mask (docs/performance.md): it does when the key length is at most
    twice the head size (0.73-0.97x of SDPA's time at head sizes 64-256, the case of seed 001's
    single 256-wide head at T = 512); SDPA wins everywhere else, by up to 6x at small heads and long
    sequences, and always in forward-only inference, so that stays fused."""
    return (
        query.device.type == "cpu"
        and torch.is_grad_enabled()
        and not tracing()
        and (query.requires_grad or key.requires_grad or value.requires_grad)
        and key.shape[-2] <= 2 * query.shape[-1]
    )


def expand_kv_heads(tensor: Tensor, heads: int) -> Tensor:
    """[B, kv_heads, T, d] -> [B, heads, T, d], each key/value head shared by ``heads // kv_heads`` query heads."""
    groups = heads // tensor.shape[-3]
    return tensor if groups == 1 else tensor.repeat_interleave(groups, dim=-3)


def _zero_empty_rows(out: Tensor, has_any: Tensor | None) -> Tensor:
    """``out`` (outputs or weights) with the rows of queries that have no key at all set to zero;
    ``has_any`` broadcasts to it. On the CPU (no device sync to pay) the pass over ``out`` is skipped
    when every query has a key, the usual case."""
    if has_any is None:
        return out
    if out.device.type == "cpu" and not tracing() and bool(has_any.all()):
        return out
    return out.masked_fill(~has_any, 0.0)


def soft_capped(scores: Tensor, cap: float) -> Tensor:
    """Logit soft-capping (Gemma 2's attention scores and final logits): ``c · tanh(s / c)``, elementwise, any
    shape; every score kept within (-c, c), near-linear for |s| << c."""
    return torch.tanh(scores / cap) * cap


def attend(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    *,
    scale: float | None = None,
    return_attention: bool = False,
    dropout: float = 0.0,
    bias: Tensor | None = None,
) -> tuple[Tensor, Tensor | None]:
    """``softmax(scale · Q Kᵀ + bias, masked) V`` over the last two dimensions.

    Shapes: query ``[..., H, Lq, E]``, key ``[..., H or G, Lk, E]``, value ``[..., H or G, Lk, Ev]`` (G key/value
    heads shared by groups of query heads: grouped-query attention), mask bool broadcastable to ``[..., Lq, Lk]``
    (True = attend), bias float broadcastable to ``[..., H, Lq, Lk]`` (ALiBi); returns
    ``(out [..., H, Lq, Ev], weights [..., H, Lq, Lk] or None)``. ``scale`` defaults to ``1/sqrt(E)``.
    ``dropout`` (training only; the caller decides) drops attention weights before they meet V; returned
    weights are the distribution before dropout, as Keras does.

    Without ``return_attention`` this is one ``F.scaled_dot_product_attention`` call, which never keeps
    the ``[Lq, Lk]`` matrix for backward. Fully masked rows are given a dummy all-True row for the kernel
    (so no backend can produce NaN) and their output is zeroed. With ``return_attention`` the weights are
    materialised.
    """
    if scale is None:
        scale = query.shape[-1] ** -0.5
    has_any = None if mask is None else mask.any(dim=-1, keepdim=True)
    grouped = key.dim() >= 3 and query.dim() >= 3 and key.shape[-3] != query.shape[-3]
    if not return_attention and dropout == 0.0 and _explicit_trains_faster(query, key, value):
        if grouped:
            key, value = expand_kv_heads(key, query.shape[-3]), expand_kv_heads(value, query.shape[-3])
        scores = torch.matmul(query * scale, key.transpose(-2, -1))  # the scale on [Lq, E], not [Lq, Lk]
        if bias is not None:
            scores = scores + bias.to(scores.dtype)
        out = torch.matmul(_filled_softmax(scores, mask, -1, fresh=True), value)
        return _zero_empty_rows(out, has_any), None
    if not return_attention:
        allowed = None if mask is None else mask | ~has_any
        attn_mask = allowed
        if bias is not None:  # an additive mask: the bias where allowed, the most negative number elsewhere
            attn_mask = bias.to(query.dtype)
            if allowed is not None:
                attn_mask = attn_mask.masked_fill(~allowed, torch.finfo(query.dtype).min)
        extra = {}
        if grouped and SDPA_GQA:
            extra["enable_gqa"] = True
        elif grouped:
            key, value = expand_kv_heads(key, query.shape[-3]), expand_kv_heads(value, query.shape[-3])
        out = F.scaled_dot_product_attention(
            query, key, value, attn_mask=attn_mask, dropout_p=dropout, scale=scale, **extra
        )
        return _zero_empty_rows(out, has_any), None

    if grouped:
        key, value = expand_kv_heads(key, query.shape[-3]), expand_kv_heads(value, query.shape[-3])
    scores = torch.matmul(query, key.transpose(-2, -1))
    if scale != 1.0:
        scores = scores * scale
    if bias is not None:
        scores = scores + bias.to(scores.dtype)
    weights = _filled_softmax(scores, mask, -1, fresh=True)
    out = torch.matmul(F.dropout(weights, dropout) if dropout else weights, value)
    # rows with no key at all came out uniform and must attend to nothing
    return _zero_empty_rows(out, has_any), _zero_empty_rows(weights, has_any)


def _label_scores_explicit(
    queries: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None, scale: float, keep_weights: bool
) -> tuple[Tensor, Tensor]:
    """The materialised form, laid out [B, L, T] so that the softmax runs over the contiguous axis
    (over a strided T axis, softmax and its backward took 2.5x and 3.7x longer, measured at L = 200,
    T = 2,500). The scale goes on the [L, d] queries rather than the [B, L, T] scores."""
    if scale != 1.0:
        queries = queries * scale
    scores = torch.matmul(queries, keys.transpose(1, 2))  # [B, L, T]
    weights = _filled_softmax(scores, None if mask is None else mask[:, None, :], -1, fresh=True)
    out = torch.bmm(weights, values)  # [B, L, dv]
    if mask is not None:
        # a sample with no key at all came out uniform and must attend to nothing
        has_any = mask.any(dim=1)[:, None, None]
        out = _zero_empty_rows(out, has_any)
        if keep_weights:
            weights = _zero_empty_rows(weights, has_any)
    return out, weights


def label_attention(
    queries: Tensor,
    keys: Tensor,
    values: Tensor,
    mask: Tensor | None = None,
    *,
    scale: float = 1.0,
    return_attention: bool = False,
    chunk_size: int | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Attention with a learned label matrix as the query: the core of every label-attention head.

    ``A = softmax_T(scale · Q Kᵀ, masked)``, ``out = A V``. Shapes: queries ``[L, d]`` (shared by the
    batch) or ``[B, L, d]``, keys ``[B, T, d]``, values ``[B, T, dv]``, mask ``[B, T]`` bool (True =
    attend); returns ``(out [B, L, dv], A [B, L, T] or None)``.

    Without ``return_attention``: on the CPU with at most ``EXPLICIT_MAX_SCORES`` score elements, the
    explicit form (faster there); otherwise one ``scaled_dot_product_attention`` call with a 4-D query
    [B, 1, L, d] (the 3-D form's backward is slower), which keeps no [B, L, T] tensor for backward.
    With ``return_attention`` the weights are materialised, ``chunk_size`` labels at a time.
    """
    batch, seq = keys.shape[0], keys.shape[1]
    labels = queries.shape[-2]
    if return_attention:
        step = chunk_size or labels
        parts = [
            _label_scores_explicit(queries[..., i : i + step, :], keys, values, mask, scale, True)
            for i in range(0, labels, step)
        ]
        if len(parts) == 1:
            return parts[0]
        return torch.cat([p[0] for p in parts], dim=1), torch.cat([p[1] for p in parts], dim=1)
    # the explicit route is chosen by size on the CPU; a traced graph (export, compile) takes the fused
    # route, which is right for every size
    if keys.device.type == "cpu" and not tracing() and batch * labels * seq <= EXPLICIT_MAX_SCORES:
        return _label_scores_explicit(queries, keys, values, mask, scale, False)[0], None
    if queries.dim() == 2:
        queries = queries.expand(batch, labels, queries.shape[-1])
    q, k, v = queries.unsqueeze(1), keys.unsqueeze(1), values.unsqueeze(1)
    dk, dv = k.shape[-1], v.shape[-1]
    if keys.device.type == "cpu" and dk != dv:
        # the CPU flash kernel wants one head size for q, k and v (else a path x1.6 slower); zero columns
        # change no dot product, and the padded value columns are cut off again
        if dk < dv:
            q, k = F.pad(q, (0, dv - dk)), F.pad(k, (0, dv - dk))
        else:
            v = F.pad(v, (0, dk - dv))
    mask4 = None if mask is None else mask[:, None, None, :]  # [B, 1, 1, T]
    out, _ = attend(q, k, v, mask4, scale=scale)
    return out.squeeze(1)[..., :dv], None
