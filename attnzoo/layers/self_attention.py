"""QKV self-attention over a sequence (registry ``qkv_self``; seed 001's answer, made right).

    Q = X Wqᵀ + bq,  K = X Wkᵀ + bk,  V = X Wvᵀ + bv                   [B, T, D]
    head i: A_i = softmax(Q_i K_iᵀ / sqrt(D / heads), masked)           [B, T, T]
    out = concat_i(A_i V_i)  (then Wo, if ``output_projection``)        [B, T, D]

The parameters keep the seed's layout (``query``, ``key``, ``value`` Linear layers), so its state dicts
load; forward concatenates the three weights into one [3D, D] projection (one GEMM instead of three)
and runs ``F.scaled_dot_product_attention``. The [T, T] weights exist only with ``return_attention``.

Positions that no query attends to (padding under a [B, T] mask) are read as zeros before the
projections, so whatever they hold (NaN, inf) never reaches an output or a gradient; their own output
rows, which the mask leaves free, are those of a zero input.

A 2-D input is refused: the seed's answer applied this layer to [B, 256] LSTM features, where
"self-attention" attends across the samples of the batch. A self-attention layer needs a time axis,
and it returns a sequence; a classifier still has to pool it (``attn_pool``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .core import attend, attended_keys, check_input, check_mask, check_positive, check_probability, neutralise
from .lazy import LazyLayer

__all__ = ["QKVSelfAttention"]

_TWO_D_HINT = (
    "A 2-D [batch, features] input has no sequence axis: self-attention over it would attend across the "
    "samples of the batch (seed 001's bug). Keep the time axis ([batch, seq, features], e.g. the LSTM's full "
    "output) and pool afterwards with attn_pool"
)


class QKVSelfAttention(LazyLayer):
    """Scaled dot-product self-attention with Q, K, V projections (see module doc).

    Args:
        embed_dim: D; None infers it from the first input.
        num_heads: number of heads; D must be divisible by it.
        bias: projections with biases (the seed's Linear layers have them).
        output_projection: add an output Linear Wo [D, D] (the seed has none).
        dropout: dropout on the attention weights while training.

    Shapes: ``forward(x [B, T, D], mask [B, T] or [B, T, T] = None, return_attention=False)`` ->
    ``[B, T, D]``, or ``(out [B, T, D], A [B, heads, T, T])`` (``[B, T, T]`` with one head).
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
        super().__init__()
        check_positive(self.name, "embed_dim", embed_dim)
        check_positive(self.name, "num_heads", num_heads, allow_none=False)
        check_probability(self.name, "dropout", dropout)
        if embed_dim is not None and embed_dim % num_heads:
            raise ValueError(f"qkv_self: embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.bias = bias
        self.output_projection = output_projection
        self.dropout = dropout
        self._create_parameters({"embed_dim": embed_dim}, device, dtype)

    def _parameter_shapes(self, sizes):
        d = sizes["embed_dim"]
        shapes = {}
        for part in ("query", "key", "value") + (("out",) if self.output_projection else ()):
            shapes[f"{part}.weight"] = (d, d)
            if self.bias:
                shapes[f"{part}.bias"] = (d,)
        return shapes

    def _infer_sizes(self, x, *args, **kwargs):
        check_input(self.name, "x", x, ("batch", "seq", "embed_dim"), hint=_TWO_D_HINT if x.dim() == 2 else "")
        if x.shape[-1] % self.num_heads:
            raise ValueError(f"qkv_self: input size {x.shape[-1]} is not divisible by num_heads {self.num_heads}")
        return {"embed_dim": x.shape[-1]}

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

    def forward(self, x: Tensor, mask: Tensor | None = None, return_attention: bool = False):
        d = self.size("embed_dim")
        check_input(self.name, "x", x, ("batch", "seq", d or "embed_dim"), hint=_TWO_D_HINT if x.dim() == 2 else "",
                    like=self.query.weight)
        batch, seq, dim = x.shape
        mask = check_mask(self.name, mask, batch, seq, seq, like=x)
        x = neutralise(x, attended_keys(mask))  # keys no query attends to: padding, whatever it holds
        weight = torch.cat([self.query.weight, self.key.weight, self.value.weight])
        bias = torch.cat([self.query.bias, self.key.bias, self.value.bias]) if self.bias else None
        heads, head_dim = self.num_heads, dim // self.num_heads
        qkv = F.linear(x, weight, bias).view(batch, seq, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # each [B, heads, T, head_dim]
        mask4 = None if mask is None else mask.unsqueeze(1)  # [B, 1, T or 1, T]
        dropout = self.dropout if self.training else 0.0
        out, weights = attend(q, k, v, mask4, return_attention=return_attention, dropout=dropout)
        out = out.transpose(1, 2).reshape(batch, seq, dim)
        if self.output_projection:
            out = F.linear(out, self.out.weight, self.out.bias if self.bias else None)
        if not return_attention:
            return out
        return out, (weights.squeeze(1) if heads == 1 else weights)

    def extra_repr(self) -> str:
        return (f"embed_dim={self.size('embed_dim')}, num_heads={self.num_heads}, bias={self.bias}, "
                f"output_projection={self.output_projection}")
