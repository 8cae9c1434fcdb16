"""Attention pooling: a sequence in, pooled vectors out.

=========================  ===================================================  ==================================
registry                   pools                                                reference
=========================  ===================================================  ==================================
``keras_attn``             one vector per class, tanh-bounded scores            seed 000
``attn_pool``              one vector, additive scores                          Bahdanau et al. 2015; Yang et al. 2016
``structured_self_attn``   r vectors (hops), with a redundancy penalty          Lin et al. 2017
``multihead_pool``         k vectors by learned seed queries (PMA)              Lee et al. 2019, Set Transformer
``perceiver_latent``       N latent vectors by cross-attention + MLP            Jaegle et al. 2021, Perceiver
=========================  ===================================================  ==================================

``KerasAttention`` (registry ``keras_attn``, seed 000) pools one vector per class::

    A   = softmax_T(tanh(Ws Hᵀ))        [B, C, T]    Ws [C, E], glorot (xavier) uniform
    out = A H                          [B, C, E]

``AttentionPooling`` (registry ``attn_pool``, what seed 001's question was after) pools one vector::

    e_t = vᵀ tanh(W h_t + b)           [B, T]       W [d_a, H], b [d_a], v [d_a]
    c   = Σ_t softmax_T(e)_t h_t       [B, H]

Both take ``mask`` [B, T] (True = attend); a fully masked sequence pools to zeros.

Note on ``keras_attn``: tanh bounds every score to [-1, 1], so one token can get at most
``1 / (1 + (T-1) e^-2)`` of the weight: 0.131 at T = 50, 0.003 at T = 2,500. On long inputs this layer
cannot focus; ``attn_pool`` or label attention can.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.layers.core import (
    attend,
    check_input,
    check_mask,
    check_positive,
    label_attention,
    masked_softmax,
    neutralise,
)
from attnzoo.layers.lazy import LazyLayer

__all__ = [
    "KerasAttention",
    "AttentionPooling",
    "StructuredSelfAttention",
    "MultiheadPooling",
    "PerceiverLatent",
    "redundancy_penalty",
]


def _prepare(
    layer: str, x: Tensor, mask: Tensor | None, size: int | None, like: Tensor, *, weighs_inputs: bool = False
):
    """Check x [B, T, size] and mask [B, T]; x with padded positions zeroed, and the mask as [B, 1, T].
    ``weighs_inputs``: the pooling weighs x itself (its values), so bounded padding may stay (core.neutralise)."""
    check_input(layer, "x", x, ("batch", "seq", size or "hidden"), like=like)
    mask = check_mask(layer, mask, x.shape[0], 1, x.shape[1], like=x)
    return neutralise(x, None if mask is None else mask[:, 0], bounded_is_safe=weighs_inputs), mask


class KerasAttention(LazyLayer):
    """Seed 000's Keras attention: per-class attention pooling with tanh-bounded scores.

    Args:
        num_classes: C, the number of pooled vectors (the seed's ``class_num``).
        embed_dim: E; None infers it from the first input (Keras ``build``).

    Shapes: ``forward(x [B, T, E], mask [B, T] = None, return_attention=False)`` -> ``[B, C, E]``, or
    ``(out [B, C, E], A [B, C, T])``.
    """

    name = "keras_attn"

    def __init__(self, num_classes: int, *, embed_dim: int | None = None, device=None, dtype=None) -> None:
        super().__init__()
        check_positive(self.name, "num_classes", num_classes, allow_none=False)
        check_positive(self.name, "embed_dim", embed_dim)
        self.num_classes = num_classes
        self._create_parameters({"embed_dim": embed_dim}, device, dtype)

    def _parameter_shapes(self, sizes):
        return {"Ws": (self.num_classes, sizes["embed_dim"])}

    def _infer_sizes(self, x, *args, **kwargs):
        check_input(self.name, "x", x, ("batch", "seq", "embed_dim"))
        return {"embed_dim": x.shape[-1]}

    def _sizes_from_parameters(self):
        return {"embed_dim": self.Ws.shape[1]}

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.Ws)  # Keras glorot_uniform on a 2-D weight

    def keras_layout(self):
        from attnzoo.layers.keras_layers import KerasVar

        return [KerasVar("Ws", "vars/0", "Ws")]

    def keras_shapes(self) -> dict[str, tuple[int | None, ...]]:
        return {"Ws": (self.num_classes, self.size("embed_dim"))}

    def forward(self, x: Tensor, mask: Tensor | None = None, return_attention: bool = False):
        x, mask = _prepare(self.name, x, mask, self.size("embed_dim"), self.Ws, weighs_inputs=True)
        scores = torch.tanh(torch.matmul(self.Ws, x.transpose(1, 2)))  # [B, C, T]
        weights = masked_softmax(scores, mask)
        out = torch.bmm(weights, x)
        return (out, weights) if return_attention else out

    def extra_repr(self) -> str:
        return f"num_classes={self.num_classes}, embed_dim={self.size('embed_dim')}"


class AttentionPooling(LazyLayer):
    """Additive attention pooling over time (Bahdanau-style scores against one learned query ``v``).

    Args:
        hidden_size: H; None infers it from the first input.
        attention_size: d_a; None uses H.

    Shapes: ``forward(x [B, T, H], mask [B, T] = None, return_attention=False)`` -> ``c [B, H]``, or
    ``(c [B, H], a [B, T])``. The pooling is label attention with one label: ``v`` is the query and
    ``tanh(W h + b)`` the keys (``core.label_attention``).
    """

    name = "attn_pool"

    def __init__(self, hidden_size: int | None = None, *, attention_size: int | None = None, device=None, dtype=None):
        super().__init__()
        check_positive(self.name, "hidden_size", hidden_size)
        check_positive(self.name, "attention_size", attention_size)
        self.attention_size_arg = attention_size
        self._create_parameters({"hidden_size": hidden_size}, device, dtype)

    def _attention_size(self, hidden: int) -> int:
        return self.attention_size_arg or hidden

    def _parameter_shapes(self, sizes):
        h = sizes["hidden_size"]
        d_a = self._attention_size(h)
        return {"W": (d_a, h), "b": (d_a,), "v": (d_a,)}

    def _infer_sizes(self, x, *args, **kwargs):
        check_input(self.name, "x", x, ("batch", "seq", "hidden"))
        return {"hidden_size": x.shape[-1]}

    def _sizes_from_parameters(self):
        return {"hidden_size": self.W.shape[1]}

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.W)
        nn.init.zeros_(self.b)
        nn.init.normal_(self.v, std=self.v.shape[0] ** -0.5)

    def forward(self, x: Tensor, mask: Tensor | None = None, return_attention: bool = False):
        x, mask = _prepare(self.name, x, mask, self.size("hidden_size"), self.W, weighs_inputs=True)
        keys = torch.tanh(torch.nn.functional.linear(x, self.W, self.b))  # [B, T, d_a]
        # one learned query v against the keys tanh(W h + b): label attention with one label
        pooled, weights = label_attention(
            self.v.unsqueeze(0),
            keys,
            x,
            None if mask is None else mask[:, 0],
            scale=1.0,
            return_attention=return_attention,
        )
        pooled = pooled.squeeze(1)
        return (pooled, weights.squeeze(1)) if return_attention else pooled

    def extra_repr(self) -> str:
        h = self.size("hidden_size")
        return f"hidden_size={h}, attention_size={self._attention_size(h) if h else self.attention_size_arg}"


def redundancy_penalty(weights: Tensor) -> Tensor:
    """Lin et al.'s penalty ``||A Aᵀ - I||²_F``, averaged over the samples that attend to anything.

    ``weights`` A [B, r, T] (rows of a sample with no key left are zeros; such samples add nothing).
    Added to the loss (times a coefficient, 1 in the paper), it pushes the r hops to attend to different
    positions.
    """
    gram = weights @ weights.transpose(1, 2)  # [B, r, r]
    eye = torch.eye(weights.shape[1], device=weights.device, dtype=weights.dtype)
    present = (weights.sum(-1) > 0).any(-1)  # [B]
    per_sample = ((gram - eye) ** 2).sum(dim=(1, 2)) * present
    return per_sample.sum() / present.sum().clamp(min=1)


class StructuredSelfAttention(LazyLayer):
    """Structured self-attentive sentence embedding (Lin et al. 2017): r attention hops over the sequence.

        A = softmax_T(W_s2 tanh(W_s1 Hᵀ))      [B, r, T]      W_s1 [d_a, H], W_s2 [r, d_a], no biases
        M = A H                                [B, r, H]

    Args: ``num_hops`` r, ``hidden_size`` H (None: inferred), ``attention_size`` d_a (350 in the paper).
    Shapes: ``forward(x [B, T, H], mask [B, T] = None, return_attention=False)`` -> ``M [B, r, H]`` or
    ``(M, A [B, r, T])``. The training loop adds :func:`redundancy_penalty` ``(A)`` (also
    ``layer.penalty(A)``) to its loss. The attention is label attention with r "labels": one fused call.
    """

    name = "structured_self_attn"

    def __init__(
        self, num_hops: int = 4, *, hidden_size: int | None = None, attention_size: int = 350, device=None, dtype=None
    ) -> None:
        super().__init__()
        check_positive(self.name, "num_hops", num_hops, allow_none=False)
        check_positive(self.name, "hidden_size", hidden_size)
        check_positive(self.name, "attention_size", attention_size, allow_none=False)
        self.num_hops, self.attention_size = num_hops, attention_size
        self._create_parameters({"hidden_size": hidden_size}, device, dtype)

    def _parameter_shapes(self, sizes):
        return {"W_s1": (self.attention_size, sizes["hidden_size"]), "W_s2": (self.num_hops, self.attention_size)}

    def _infer_sizes(self, x, *args, **kwargs):
        check_input(self.name, "x", x, ("batch", "seq", "hidden"))
        return {"hidden_size": x.shape[-1]}

    def _sizes_from_parameters(self):
        return {"hidden_size": self.W_s1.shape[1]}

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.W_s1)
        nn.init.xavier_uniform_(self.W_s2)

    penalty = staticmethod(redundancy_penalty)

    def forward(self, x: Tensor, mask: Tensor | None = None, return_attention: bool = False):
        x, mask = _prepare(self.name, x, mask, self.size("hidden_size"), self.W_s1, weighs_inputs=True)
        keys = torch.tanh(F.linear(x, self.W_s1))  # [B, T, d_a]
        pooled, weights = label_attention(
            self.W_s2, keys, x, None if mask is None else mask[:, 0], return_attention=return_attention
        )
        return (pooled, weights) if return_attention else pooled

    def extra_repr(self) -> str:
        return f"num_hops={self.num_hops}, hidden_size={self.size('hidden_size')}, attention_size={self.attention_size}"


def _heads(x: Tensor, heads: int) -> Tensor:
    """[B, T, heads·d] -> [B, heads, T, d]."""
    return x.view(x.shape[0], x.shape[1], heads, x.shape[2] // heads).transpose(1, 2)


def _merge(x: Tensor) -> Tensor:
    """[B, heads, T, d] -> [B, T, heads·d]."""
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], x.shape[1] * x.shape[3])


class MultiheadPooling(LazyLayer):
    """Pooling by multi-head attention (PMA, Lee et al. 2019): k learned seed vectors S attend to the set.

        O = S Wq + MultiHead(S Wq, X Wk, X Wv)            [B, k, D]     (seeds as queries, residual on them)
        O = LN0(O);  out = LN1(O + relu(O Wo + bo))       [B, k, D]     (the MAB of the Set Transformer)

    Args: ``num_seeds`` k, ``embed_dim`` D (None: inferred), ``num_heads``, ``layer_norm`` (True).
    Shapes: ``forward(x [B, T, D], mask [B, T] = None, return_attention=False)`` -> ``[B, k, D]`` or
    ``(out, A [B, heads, k, T])``. A sample with no element left pools to its seeds' transform.
    """

    name = "multihead_pool"

    def __init__(
        self,
        num_seeds: int = 1,
        *,
        embed_dim: int | None = None,
        num_heads: int = 1,
        layer_norm: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        check_positive(self.name, "num_seeds", num_seeds, allow_none=False)
        check_positive(self.name, "embed_dim", embed_dim)
        check_positive(self.name, "num_heads", num_heads, allow_none=False)
        if embed_dim is not None and embed_dim % num_heads:
            raise ValueError(f"{self.name}: embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.num_seeds, self.num_heads, self.layer_norm = num_seeds, num_heads, layer_norm
        self._create_parameters({"embed_dim": embed_dim}, device, dtype)

    def _parameter_shapes(self, sizes):
        d = sizes["embed_dim"]
        shapes = {"seeds": (self.num_seeds, d)}
        for part in ("fc_q", "fc_k", "fc_v", "fc_o"):
            shapes.update({f"{part}.weight": (d, d), f"{part}.bias": (d,)})
        if self.layer_norm:
            shapes.update({"ln0.weight": (d,), "ln0.bias": (d,), "ln1.weight": (d,), "ln1.bias": (d,)})
        return shapes

    def _infer_sizes(self, x, *args, **kwargs):
        check_input(self.name, "x", x, ("batch", "seq", "embed_dim"))
        if x.shape[-1] % self.num_heads:
            raise ValueError(f"{self.name}: input size {x.shape[-1]} is not divisible by num_heads {self.num_heads}")
        return {"embed_dim": x.shape[-1]}

    def _sizes_from_parameters(self):
        return {"embed_dim": self.seeds.shape[1]}

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.seeds)
        for name in self._lazy_names:
            if name.startswith("fc_"):
                param = self.tensor(name)
                nn.init.zeros_(param) if name.endswith("bias") else nn.init.xavier_uniform_(param)
            elif name.startswith("ln"):
                param = self.tensor(name)
                nn.init.ones_(param) if name.endswith("weight") else nn.init.zeros_(param)

    def _norm(self, x: Tensor, which: str) -> Tensor:
        if not self.layer_norm:
            return x
        group = getattr(self, which)
        return F.layer_norm(x, x.shape[-1:], group.weight, group.bias)

    def forward(self, x: Tensor, mask: Tensor | None = None, return_attention: bool = False):
        x, mask = _prepare(self.name, x, mask, self.size("embed_dim"), self.seeds)
        batch = x.shape[0]
        seeds = F.linear(self.seeds, self.fc_q.weight, self.fc_q.bias).expand(batch, -1, -1)  # [B, k, D]
        q = _heads(seeds, self.num_heads)
        k = _heads(F.linear(x, self.fc_k.weight, self.fc_k.bias), self.num_heads)
        v = _heads(F.linear(x, self.fc_v.weight, self.fc_v.bias), self.num_heads)
        mask4 = None if mask is None else mask[:, None]  # [B, 1, 1, T]
        # the Set Transformer scales by the full width, sqrt(D), not the head size
        attended, weights = attend(q, k, v, mask4, scale=x.shape[-1] ** -0.5, return_attention=return_attention)
        out = self._norm(seeds + _merge(attended), "ln0")
        out = self._norm(out + F.relu(F.linear(out, self.fc_o.weight, self.fc_o.bias)), "ln1")
        return (out, weights) if return_attention else out

    def extra_repr(self) -> str:
        return (
            f"num_seeds={self.num_seeds}, embed_dim={self.size('embed_dim')}, num_heads={self.num_heads}, "
            f"layer_norm={self.layer_norm}"
        )


class PerceiverLatent(LazyLayer):
    """A Perceiver block (Jaegle et al. 2021): a learned latent array cross-attends to the input, then an MLP.

        Z = L + MultiHead(LN(L) Wq, LN(X) Wk, LN(X) Wv) Wo        [B, N, D_l]   L [N, D_l] learned
        out = Z + W2 gelu(W1 LN(Z))                              [B, N, D_l]   (MLP width 4 D_l)

    The output has N latent vectors whatever T is: the cost of everything after this block no longer
    depends on the input's length.

    Args: ``num_latents`` N, ``latent_dim`` D_l (None: the input size), ``embed_dim`` of the input (None:
    inferred), ``num_heads``. Shapes: ``forward(x [B, T, E], mask [B, T] = None, return_attention=False)``
    -> ``[B, N, D_l]`` or ``(out, A [B, heads, N, T])``.
    """

    name = "perceiver_latent"

    def __init__(
        self,
        num_latents: int = 8,
        *,
        latent_dim: int | None = None,
        embed_dim: int | None = None,
        num_heads: int = 1,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        check_positive(self.name, "num_latents", num_latents, allow_none=False)
        check_positive(self.name, "latent_dim", latent_dim)
        check_positive(self.name, "embed_dim", embed_dim)
        check_positive(self.name, "num_heads", num_heads, allow_none=False)
        width = latent_dim or embed_dim
        if width is not None and width % num_heads:
            raise ValueError(f"{self.name}: latent_dim {width} is not divisible by num_heads {num_heads}")
        self.num_latents, self.latent_dim_arg, self.num_heads = num_latents, latent_dim, num_heads
        self._create_parameters({"embed_dim": embed_dim}, device, dtype)

    def _latent_dim(self, embed_dim: int) -> int:
        return self.latent_dim_arg or embed_dim

    def _parameter_shapes(self, sizes):
        e = sizes["embed_dim"]
        d = self._latent_dim(e)
        return {
            "latents": (self.num_latents, d),
            "norm_latents.weight": (d,),
            "norm_latents.bias": (d,),
            "norm_inputs.weight": (e,),
            "norm_inputs.bias": (e,),
            "to_q.weight": (d, d),
            "to_k.weight": (d, e),
            "to_v.weight": (d, e),
            "to_out.weight": (d, d),
            "to_out.bias": (d,),
            "norm_mlp.weight": (d,),
            "norm_mlp.bias": (d,),
            "mlp_in.weight": (4 * d, d),
            "mlp_in.bias": (4 * d,),
            "mlp_out.weight": (d, 4 * d),
            "mlp_out.bias": (d,),
        }

    def _infer_sizes(self, x, *args, **kwargs):
        check_input(self.name, "x", x, ("batch", "seq", "embed_dim"))
        if self._latent_dim(x.shape[-1]) % self.num_heads:
            raise ValueError(
                f"{self.name}: latent size {self._latent_dim(x.shape[-1])} is not divisible by "
                f"num_heads {self.num_heads}"
            )
        return {"embed_dim": x.shape[-1]}

    def _sizes_from_parameters(self):
        return {"embed_dim": self.to_k.weight.shape[1]}

    def reset_parameters(self) -> None:
        nn.init.trunc_normal_(self.latents, std=0.02, a=-2.0, b=2.0)
        for name in self._lazy_names:
            param = self.tensor(name)
            if name.startswith("norm_"):
                nn.init.ones_(param) if name.endswith("weight") else nn.init.zeros_(param)
            elif name != "latents":
                nn.init.zeros_(param) if name.endswith("bias") else nn.init.xavier_uniform_(param)

    @staticmethod
    def _norm(x: Tensor, group: nn.Module) -> Tensor:
        return F.layer_norm(x, x.shape[-1:], group.weight, group.bias)

    def forward(self, x: Tensor, mask: Tensor | None = None, return_attention: bool = False):
        x, mask = _prepare(self.name, x, mask, self.size("embed_dim"), self.latents)
        batch = x.shape[0]
        inputs = self._norm(x, self.norm_inputs)
        latents = self.latents.expand(batch, -1, -1)
        q = _heads(F.linear(self._norm(latents, self.norm_latents), self.to_q.weight), self.num_heads)
        k = _heads(F.linear(inputs, self.to_k.weight), self.num_heads)
        v = _heads(F.linear(inputs, self.to_v.weight), self.num_heads)
        mask4 = None if mask is None else mask[:, None]  # [B, 1, 1, T]
        attended, weights = attend(q, k, v, mask4, return_attention=return_attention)
        z = latents + F.linear(_merge(attended), self.to_out.weight, self.to_out.bias)
        hidden = F.gelu(F.linear(self._norm(z, self.norm_mlp), self.mlp_in.weight, self.mlp_in.bias))
        out = z + F.linear(hidden, self.mlp_out.weight, self.mlp_out.bias)
        return (out, weights) if return_attention else out

    def extra_repr(self) -> str:
        e = self.size("embed_dim")
        return (
            f"num_latents={self.num_latents}, latent_dim={self._latent_dim(e) if e else self.latent_dim_arg}, "
            f"embed_dim={e}, num_heads={self.num_heads}"
        )
