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
    "from_key_padding_mask",
    "masked_softmax",
    "attend",
    "lazy_size",
]


def _describe(dims: Sequence[object]) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def check_input(layer: str, arg: str, x: object, dims: Sequence[object], hint: str = "") -> None:
    """Raise ``ValueError`` unless ``x`` is a floating tensor of len(dims) dimensions matching ``dims``.

    ``dims`` holds names (free sizes such as ``"batch"``) and ints (sizes that must match), e.g.
    ``("batch", "seq", 256)`` gives ``labelwise expects x of shape [batch, seq, 256], got [8, 300]``.
    """
    if not isinstance(x, Tensor):
        raise ValueError(f"{layer} expects {arg} to be a tensor of shape {_describe(dims)}, got {type(x).__name__}")
    wrong_rank = x.dim() != len(dims)
    wrong_size = not wrong_rank and any(isinstance(d, int) and d != s for d, s in zip(dims, x.shape))
    if wrong_rank or wrong_size:
        raise ValueError(
            f"{layer} expects {arg} of shape {_describe(dims)}, got {list(x.shape)}" + (f". {hint}" if hint else "")
        )
    if not x.is_floating_point():
        raise ValueError(f"{layer} expects {arg} to be a floating tensor, got {x.dtype}; embed token ids first")


def lazy_size(size: int | None) -> int:
    """``size`` for an eager parameter, 0 for a lazy one (the shape is then set on the first call)."""
    return 0 if size is None else size


def from_key_padding_mask(key_padding_mask: Tensor) -> Tensor:
    """Convert ``nn.MultiheadAttention``'s ``key_padding_mask`` (True = ignore) to attnzoo's (True = attend)."""
    return ~key_padding_mask.bool()


def check_mask(layer: str, mask: Tensor | None, batch: int, q_len: int, k_len: int) -> Tensor | None:
    """Validate a mask and return it as bool ``[B, Tq or 1, Tk]`` (True = attend).

    Accepts bool or 0/1 integer masks of shape ``[B, Tk]`` (keys, e.g. padding) or ``[B, Tq, Tk]``.
    """
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        raise ValueError(f"{layer} expects mask to be a bool tensor [batch, {k_len}] (True = attend), got {type(mask).__name__}")
    if mask.is_floating_point() or mask.is_complex():
        raise ValueError(
            f"{layer} expects a boolean mask (True = attend), got {mask.dtype}; for an additive float mask use "
            "mask = float_mask == 0, for nn.MultiheadAttention's key_padding_mask use from_key_padding_mask()"
        )
    if mask.dim() == 2 and tuple(mask.shape) == (batch, k_len):
        mask = mask[:, None, :]
    elif mask.dim() != 3 or tuple(mask.shape) not in ((batch, q_len, k_len), (batch, 1, k_len)):
        raise ValueError(
            f"{layer} expects mask of shape [{batch}, {k_len}] or [{batch}, {q_len}, {k_len}] (True = attend), "
            f"got {list(mask.shape)}"
        )
    return mask if mask.dtype == torch.bool else mask != 0


def masked_softmax(scores: Tensor, mask: Tensor | None, dim: int = -1) -> Tensor:
    """Softmax over ``dim`` where ``mask`` is False contributes nothing; a fully masked row is all zeros.

    Half-precision scores are normalised in float32 (the sum over thousands of positions would lose
    digits otherwise) and returned in their own dtype.
    """
    upcast = scores.dtype in (torch.float16, torch.bfloat16)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=dim, dtype=torch.float32 if upcast else None)
    if mask is not None:
        # rows with every position masked came out uniform; they must attend to nothing
        weights = weights.masked_fill(~mask, 0.0)
    return weights.to(scores.dtype)


def attend(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    *,
    scale: float | None = None,
    return_attention: bool = False,
    chunk_size: int | None = None,
) -> tuple[Tensor, Tensor | None]:
    """``softmax(scale · Q Kᵀ, masked) V`` over the last two dimensions.

    Shapes: query ``[..., Lq, E]``, key ``[..., Lk, E]``, value ``[..., Lk, Ev]``, mask bool broadcastable
    to ``[..., Lq, Lk]`` (True = attend); returns ``(out [..., Lq, Ev], weights [..., Lq, Lk] or None)``.
    ``scale`` defaults to ``1/sqrt(E)``.

    Without ``return_attention`` this is one ``F.scaled_dot_product_attention`` call, which never keeps
    the ``[Lq, Lk]`` matrix for backward. Fully masked rows are given a dummy all-True row for the kernel
    (so no backend can produce NaN) and their output is zeroed. With ``return_attention`` the weights are
    materialised, ``chunk_size`` query rows at a time when given, to bound the temporary scores.
    """
    if scale is None:
        scale = query.shape[-1] ** -0.5
    if not return_attention:
        if mask is None:
            return F.scaled_dot_product_attention(query, key, value, scale=scale), None
        has_any = mask.any(dim=-1, keepdim=True)
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask | ~has_any, scale=scale)
        return out.masked_fill(~has_any, 0.0), None

    def block(q: Tensor, m: Tensor | None) -> tuple[Tensor, Tensor]:
        weights = masked_softmax(torch.matmul(q, key.transpose(-2, -1)) * scale, m)
        return torch.matmul(weights, value), weights

    rows = query.shape[-2]
    if chunk_size is None or chunk_size >= rows:
        return block(query, mask)
    outs, maps = [], []
    for start in range(0, rows, chunk_size):
        q = query[..., start : start + chunk_size, :]
        m = None if mask is None else (mask if mask.shape[-2] == 1 else mask[..., start : start + chunk_size, :])
        o, w = block(q, m)
        outs.append(o)
        maps.append(w)
    return torch.cat(outs, dim=-2), torch.cat(maps, dim=-2)
