"""``KerasMultiHeadAttention`` (``keras_mha``) = ``keras.layers.MultiHeadAttention``, numerically equal to keras 3::

    Q_h = q Wq_h + bq_h [key_dim],  K_h = k Wk_h + bk_h,  V_h = v Wv_h + bv_h [value_dim]
    A_h = softmax(Q_h K_hᵀ / sqrt(key_dim), masked)     [B, heads, Tq, Tv]
    out = Σ_h (A_h V_h) Wo_h + bo                       [B, Tq, output_shape or dq]

Masks, padding and ``keras_semantics`` as the other Keras layers (keras_layers.py says how). The weights
follow Keras's layout (``keras_layout``); :func:`mha_to_torch` and :func:`mha_from_torch` move them to and
from ``nn.MultiheadAttention`` when the sizes allow.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.layers.core import (
    attend,
    check_input,
    check_mask,
    check_positive,
    check_probability,
    neutralise,
)
from attnzoo.layers.keras_layers import KerasCalls, KerasVar, check_semantics, keras_constant, keras_weights
from attnzoo.layers.kv_cache import KVCache
from attnzoo.layers.lazy import LazyLayer

__all__ = ["KerasMultiHeadAttention", "mha_to_torch", "mha_from_torch"]


class KerasMultiHeadAttention(KerasCalls, LazyLayer):
    """``keras.layers.MultiHeadAttention`` (attention over axis 1 of [B, T, dim] inputs).

    Args: ``num_heads``, ``key_dim``, ``value_dim`` (None: key_dim), ``dropout``, ``use_bias``,
    ``output_shape`` (None: the query's size), and the input sizes ``query_size``, ``value_size`` and
    ``key_size``, each None: inferred on the first call, as Keras builds.

    Shapes: ``forward(query [B, T, dq], value [B, S, dv], key [B, S, dk] = value, *,
    attention_mask [B, T, S], query_mask [B, T], value_mask [B, S], return_attention=False,
    use_causal_mask=False, cache=None)`` -> ``out [B, T, output_shape]`` or ``(out, A [B, heads, T, S])``;
    with ``cache`` (:meth:`new_cache`) the keys are the cache's and the call's, S = held + T; with
    ``context_cache`` (:meth:`new_context_cache`, cross-attention) the context's keys and values are
    projected on the first call and reused after.
    Parameters: ``query.weight`` [heads·key_dim, dq], ``query.bias``, likewise ``key``, ``value``, and
    ``output.weight`` [output_shape, heads·value_dim], ``output.bias``.
    """

    name = "keras_mha"
    keras_class = "MultiHeadAttention"

    def __init__(
        self,
        num_heads: int,
        key_dim: int,
        *,
        value_dim: int | None = None,
        dropout: float = 0.0,
        use_bias: bool = True,
        output_shape: int | None = None,
        query_size: int | None = None,
        value_size: int | None = None,
        key_size: int | None = None,
        keras_semantics: int | None = None,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        check_positive(self.name, "num_heads", num_heads, allow_none=False)
        check_semantics(self.name, keras_semantics)
        self.keras_semantics = keras_semantics
        check_positive(self.name, "key_dim", key_dim, allow_none=False)
        for key, value in (
            ("value_dim", value_dim),
            ("output_shape", output_shape),
            ("query_size", query_size),
            ("value_size", value_size),
            ("key_size", key_size),
        ):
            check_positive(self.name, key, value)
        check_probability(self.name, "dropout", dropout)
        self.num_heads, self.key_dim = num_heads, key_dim
        self.value_dim = value_dim or key_dim
        self.dropout, self.use_bias, self.output_shape = dropout, use_bias, output_shape
        self._create_parameters(
            {"query_size": query_size, "value_size": value_size, "key_size": key_size or value_size}, device, dtype
        )

    def _parameter_shapes(self, sizes):
        h, kd, vd = self.num_heads, self.key_dim, self.value_dim
        inputs = {
            "query": (h * kd, sizes["query_size"]),
            "key": (h * kd, sizes["key_size"]),
            "value": (h * vd, sizes["value_size"]),
            "output": (self.output_shape or sizes["query_size"], h * vd),
        }
        shapes = {}
        for part, (rows, cols) in inputs.items():
            shapes[f"{part}.weight"] = (rows, cols)
            if self.use_bias:
                shapes[f"{part}.bias"] = (rows,)
        return shapes

    def _infer_sizes(self, query, value, key=None, *args, **kwargs):
        check_input(self.name, "query", query, ("batch", "query_len", "dim"))
        check_input(self.name, "value", value, (query.shape[0], "value_len", "value_dim"))
        key = value if key is None else key
        check_input(self.name, "key", key, (query.shape[0], value.shape[1], "key_dim"))
        return {"query_size": query.shape[-1], "value_size": value.shape[-1], "key_size": key.shape[-1]}

    def _sizes_from_parameters(self):
        return {
            "query_size": self.query.weight.shape[1],
            "value_size": self.value.weight.shape[1],
            "key_size": self.key.weight.shape[1],
        }

    def reset_parameters(self) -> None:
        # Keras glorot_uniform on the 3-D EinsumDense kernels: fans are (in, heads·d) and (heads·d, out)
        for name in self._lazy_names:
            param = self.tensor(name)
            if name.endswith("weight"):
                fan_out, fan_in = param.shape
                bound = math.sqrt(6.0 / (fan_in + fan_out))
                nn.init.uniform_(param, -bound, bound)
            else:
                nn.init.zeros_(param)

    def keras_layout(self) -> list[KerasVar]:
        layout = []
        for ours, group, legacy in (
            ("query", "query_dense", "query"),
            ("key", "key_dense", "key"),
            ("value", "value_dense", "value"),
            ("output", "output_dense", "attention_output"),
        ):
            kernel = "heads_out" if ours == "output" else "heads_in"
            layout.append(KerasVar(f"{ours}.weight", f"{group}/vars/0", f"{legacy}/kernel", kernel))
            if self.use_bias:
                bias = "same" if ours == "output" else "heads_bias"
                layout.append(KerasVar(f"{ours}.bias", f"{group}/vars/1", f"{legacy}/bias", bias))
        return layout

    def keras_shapes(self) -> dict[str, tuple[int | None, ...]]:
        """The Keras shape of every variable (None where a size is still lazy), for checks and exports."""
        h, kd, vd = self.num_heads, self.key_dim, self.value_dim
        q, k, v = self.size("query_size"), self.size("key_size"), self.size("value_size")
        out = self.output_shape or q
        shapes = {
            "query.weight": (q, h, kd),
            "key.weight": (k, h, kd),
            "value.weight": (v, h, vd),
            "output.weight": (h, vd, out),
            "query.bias": (h, kd),
            "key.bias": (h, kd),
            "value.bias": (h, vd),
            "output.bias": (out,),
        }
        return {n: s for n, s in shapes.items() if n in self._lazy_names}

    def _project(self, x: Tensor, part: str, head_dim: int) -> Tensor:
        group = getattr(self, part)
        y = F.linear(x, group.weight, group.bias if self.use_bias else None)
        return y.view(x.shape[0], x.shape[1], self.num_heads, head_dim).transpose(1, 2)  # [B, heads, T, d]

    def forward(
        self,
        query: Tensor,
        value: Tensor,
        key: Tensor | None = None,
        *,
        attention_mask: Tensor | None = None,
        query_mask: Tensor | None = None,
        value_mask: Tensor | None = None,
        return_attention: bool = False,
        use_causal_mask: bool = False,
        cache: KVCache | None = None,
        context_cache: KVCache | None = None,
    ):
        if cache is not None and context_cache is not None:
            raise ValueError("keras_mha takes cache (self-attention) or context_cache (cross-attention), not both")
        sizes = [self.size(n) for n in ("query_size", "value_size", "key_size")]
        for arg, tensor, size in (("query", query, sizes[0]), ("value", value, sizes[1]), ("key", key, sizes[2])):
            if size is not None and isinstance(tensor, Tensor) and tensor.dim() == 3 and tensor.shape[-1] != size:
                raise ValueError(f"keras_mha expects {arg} of shape [batch, seq, {size}], got {list(tensor.shape)}")
        query, value, key, query_mask, value_mask = self._prepare(query, value, key, query_mask, value_mask)
        batch, t, s = query.shape[0], query.shape[1], value.shape[1]
        held = self._claimed(cache, batch)  # the keys a cache holds come before the call's own
        s += held
        mask = None
        if attention_mask is not None:
            if not isinstance(attention_mask, Tensor) or attention_mask.dim() != 3:
                shape = list(attention_mask.shape) if isinstance(attention_mask, Tensor) else type(attention_mask)
                raise ValueError(f"keras_mha expects attention_mask of shape [{batch}, {t}, {s}], got {shape}")
            mask = check_mask(self.name, attention_mask, batch, t, s, arg="attention_mask", like=query)
            if self.keras_semantics is None:
                unseen = ~mask[..., held:].any(dim=1)  # the call's keys no query may attend to
                value, key = neutralise(value, ~unseen), neutralise(key, ~unseen)
        if query_mask is not None:
            qm = query_mask[:, :, None]
            mask = qm if mask is None else mask & qm
        if value_mask is not None and cache is None:
            vm = value_mask[:, None, :]
            mask = vm if mask is None else mask & vm
        if use_causal_mask and not (cache is not None and t == 1):  # one new query sees every key held
            tri = torch.ones(t, s, dtype=torch.bool, device=query.device).tril(held)[None]
            mask = tri if mask is None else mask & tri
        q = self._project(query, "query", self.key_dim)
        if context_cache is not None:
            context_cache.claim(self, self.name)
        if context_cache is not None and context_cache.context is not None:
            context_cache.check_context(self.name, value, key)
            k, v, _ = context_cache.context
        else:
            k = self._project(key, "key", self.key_dim)
            v = self._project(value, "value", self.value_dim)
            if context_cache is not None:
                context_cache.context = (k, v, None)
                context_cache.keep_context(self.name, value, key)
        if cache is not None:
            k, v, valid = cache.append(k, v, value_mask)
            if valid is not None:
                mask = valid[:, None, :] if mask is None else mask & valid[:, None, :]
        mask4 = None if mask is None else mask.unsqueeze(1)  # [B, 1, T or 1, S]
        dropout = self.dropout if self.training else 0.0
        if self.keras_semantics is not None:
            out, weights = self._keras_attend(q, k, v, mask4, return_attention, dropout)
            out = out.transpose(1, 2).reshape(batch, t, self.num_heads * self.value_dim)
            out = F.linear(out, self.output.weight, self.output.bias if self.use_bias else None)
            return (out, weights) if return_attention else out
        out, weights = attend(
            q, k, v, mask4, scale=self.key_dim**-0.5, return_attention=return_attention, dropout=dropout
        )
        out = out.transpose(1, 2).reshape(batch, t, self.num_heads * self.value_dim)
        out = F.linear(out, self.output.weight, self.output.bias if self.use_bias else None)
        return (out, weights) if return_attention else out

    def new_context_cache(self, batch_size: int) -> KVCache:
        """An empty :class:`KVCache` for cross-attention while decoding: the first call
        ``layer(x, context, context_cache=cache)`` keeps the context's keys and values, later calls reuse them
        (given the same context, checked) instead of projecting it again."""
        check_positive(self.name, "batch_size", batch_size, allow_none=False)
        cache = KVCache(batch_size)
        cache.claim(self, self.name)
        return cache

    def new_cache(self, batch_size: int) -> KVCache:
        """An empty :class:`KVCache` for decoding ``batch_size`` sequences a step at a time: each call
        ``layer(x, x, cache=cache, use_causal_mask=True)`` appends the call's keys and values and attends
        over all held (query i of a call sees the keys before the call and the call's keys up to i), so
        the steps' outputs equal the causal call over the whole sequence. ``value_mask`` then marks which
        of the call's tokens later queries may attend to; ``attention_mask`` is [B, T, held + T]."""
        check_positive(self.name, "batch_size", batch_size, allow_none=False)
        cache = KVCache(batch_size)
        cache.claim(self, self.name)
        return cache

    def _claimed(self, cache: KVCache | None, batch: int) -> int:
        """How many keys ``cache`` holds (0 for none), once it is checked to be this layer's for ``batch``."""
        if cache is None:
            return 0
        if not isinstance(cache, KVCache) or cache.batch_size != batch:
            made = f"for batch {cache.batch_size}" if isinstance(cache, KVCache) else f"a {type(cache).__name__}"
            raise ValueError(f"keras_mha: cache is {made}; pass layer.new_cache({batch}) for a batch of {batch}")
        cache.claim(self, self.name)
        return len(cache)

    def _keras_attend(self, q, k, v, mask, return_attention: bool, dropout: float):
        """Keras's own arithmetic (``keras_semantics``): which masked softmax runs depends on the version
        and, in keras 3, on whether the weights are returned or dropout is configured (its explicit path)."""
        explicit = return_attention or self.dropout > 0  # keras 3's path that materialises the weights
        rule = "add" if self.keras_semantics == 2 else ("replace" if explicit else "fused")
        if rule != "add" and not return_attention and not dropout:
            # keras 3's fused path is SDPA with its large negative added where masked. Its explicit path
            # (dropout configured, here not acting) fills masked scores with -1e9 and zeroes masked weights:
            # SDPA with that negative added gives the same weights (exp of it is 0) except in a row with no
            # key at all, whose weights, and so its output, are zeros
            negative = "torch_backend_negative" if rule == "fused" else "softmax_large_negative"
            bias = None
            if mask is not None:
                bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device)
                bias = bias.masked_fill(~mask, keras_constant(negative, q.dtype))
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=self.key_dim**-0.5)
            if rule == "replace" and mask is not None:
                out = out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
            return out, None
        scores = torch.matmul(q * self.key_dim**-0.5, k.transpose(-2, -1))
        if mask is not None:
            mask = mask.expand(scores.shape)
        weights = keras_weights(scores, mask, rule)
        out = torch.matmul(F.dropout(weights, dropout) if dropout else weights, v)
        return out, weights

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, key_dim={self.key_dim}, value_dim={self.value_dim}, "
            f"output_shape={self.output_shape}, use_bias={self.use_bias}, query_size={self.size('query_size')}"
        )


def mha_to_torch(layer: KerasMultiHeadAttention) -> nn.MultiheadAttention:
    """The same attention as an ``nn.MultiheadAttention(batch_first=True)``, where the shapes allow it:
    heads·key_dim = heads·value_dim = query size = output size (torch's embed_dim), with biases."""
    h, kd, vd = layer.num_heads, layer.key_dim, layer.value_dim
    q, k, v = layer.size("query_size"), layer.size("key_size"), layer.size("value_size")
    embed = h * kd
    out = layer.output_shape or q
    if None in (q, k, v):
        raise ValueError("keras_mha: sizes are not known yet; run one call or load weights first")
    if not (kd == vd and q == embed and out == embed and layer.use_bias):
        raise ValueError(
            f"nn.MultiheadAttention cannot hold this layer: it needs heads*key_dim ({embed}) = query size ({q}) = "
            f"output size ({out}), key_dim = value_dim ({kd}, {vd}) and biases ({layer.use_bias})"
        )
    mha = nn.MultiheadAttention(
        embed,
        h,
        bias=True,
        batch_first=True,
        kdim=k,
        vdim=v,
        device=layer.query.weight.device,
        dtype=layer.query.weight.dtype,
    )
    with torch.no_grad():
        if mha._qkv_same_embed_dim:
            mha.in_proj_weight.copy_(torch.cat([layer.query.weight, layer.key.weight, layer.value.weight]))
        else:
            mha.q_proj_weight.copy_(layer.query.weight)
            mha.k_proj_weight.copy_(layer.key.weight)
            mha.v_proj_weight.copy_(layer.value.weight)
        mha.in_proj_bias.copy_(torch.cat([layer.query.bias, layer.key.bias, layer.value.bias]))
        mha.out_proj.weight.copy_(layer.output.weight)
        mha.out_proj.bias.copy_(layer.output.bias)
    return mha


def mha_from_torch(mha: nn.MultiheadAttention) -> KerasMultiHeadAttention:
    """A ``keras_mha`` layer with the weights of a ``batch_first`` ``nn.MultiheadAttention``."""
    if not mha.batch_first or mha.in_proj_bias is None or mha.bias_k is not None:
        raise ValueError("mha_from_torch needs nn.MultiheadAttention(batch_first=True, bias=True) without add_bias_kv")
    e, h = mha.embed_dim, mha.num_heads
    layer = KerasMultiHeadAttention(
        h,
        e // h,
        query_size=e,
        key_size=mha.kdim,
        value_size=mha.vdim,
        device=mha.out_proj.weight.device,
        dtype=mha.out_proj.weight.dtype,
    )
    with torch.no_grad():
        if mha._qkv_same_embed_dim:
            wq, wk, wv = mha.in_proj_weight.chunk(3)
        else:
            wq, wk, wv = mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight
        bq, bk, bv = mha.in_proj_bias.chunk(3)
        for group, w, b in (
            (layer.query, wq, bq),
            (layer.key, wk, bk),
            (layer.value, wv, bv),
            (layer.output, mha.out_proj.weight, mha.out_proj.bias),
        ):
            group.weight.copy_(w)
            group.bias.copy_(b)
    return layer
