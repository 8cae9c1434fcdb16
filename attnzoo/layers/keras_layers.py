"""Keras's attention layers in PyTorch, numerically equal to keras 3 (tests compare to 1e-6); the masks,
constants and input checks they share with ``MultiHeadAttention`` (keras_mha.py).

``KerasDotAttention`` (``keras_dot``) = ``keras.layers.Attention`` (Luong)::

    dot:     scores = scale · Q Kᵀ                                   scale: learned scalar (init 1) if use_scale
    concat:  scores_ij = w_c · Σ_d tanh(scale · (q_id + k_jd))       w_c: learned scalar (init 1)

``KerasAdditiveAttention`` (``keras_additive``) = ``keras.layers.AdditiveAttention`` (Bahdanau)::

    scores_ij = Σ_d scale_d · tanh(q_id + k_jd)                      scale [d], glorot-uniform, if use_scale

then, for both, with ``value_mask`` [B, Tv] and ``use_causal_mask`` (True = attend)::

    A = softmax_j(scores, masked)      [B, Tq, Tv]      out = A V      [B, Tq, dv]
    out_i = 0 where query_mask_i is False

Masks follow Keras: True = keep. Two differences, on purpose: where a query row has no key left at all,
Keras spreads the weight uniformly over the masked keys (it subtracts 1e9), attnzoo attends to nothing
(zeros), in every dtype; and a masked query (``query_mask`` False) gets zero weights here, where Keras
returns scores computed from the padded query anyway (both zero its output). Masked queries, values
and keys are zeroed before any arithmetic, so padding that holds NaN or inf changes nothing.

``keras_semantics=2`` or ``3`` drops both differences and reproduces that Keras version's masked
arithmetic exactly (the whole-model converter, :func:`attnzoo.keras.convert_keras_model`, sets it so a
converted model predicts what Keras predicts, fully masked rows included): ``Attention`` and
``AdditiveAttention`` subtract 1e9 (65504 in float16) from masked scores; keras 3's
``MultiHeadAttention`` fills them with -0.7 · 3.39e38 in its fused path (a row with no key is uniform
over all keys) and, where it returns the weights or has dropout, with -1e9 and then zeroes them; Keras
2's adds -1e9. Padding is then not zeroed first, as Keras does not.

Each layer declares its Keras weight layout (``keras_layout``): which parameter comes from which Keras
variable, in the keras 3 ``.weights.h5`` (positional ``vars/<i>``, sub-layer groups) and the legacy
``.h5`` (``weight_names``) files, and how it converts (Keras Dense kernels are [in, out]; the
projections here are stored as torch's [out, in], so ``nn.MultiheadAttention`` can share them).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.layers.core import (
    attend,
    check_input,
    check_mask,
    check_positive,
    check_probability,
    masked_softmax,
    neutralise,
)
from attnzoo.layers.lazy import LazyLayer

__all__ = [
    "KerasDotAttention",
    "KerasAdditiveAttention",
    "KerasVar",
    "KerasCalls",
    "KERAS_CONSTANTS",
    "keras_constant",
    "keras_weights",
    "check_semantics",
    "causal_mask",
]


class KerasVar(NamedTuple):
    """Where one parameter lives in a Keras weights file, and how its array converts.

    ``v3``: path under the layer's group in a keras 3 ``.weights.h5`` (``"vars/0"``,
    ``"query_dense/vars/1"``); ``legacy``: the weight name after the layer name in a legacy ``.h5``
    (``"scale"``, ``"query/kernel"``); ``convert``: ``same``, ``transpose`` ([in, out] -> [out, in]),
    ``heads_in`` ([in, heads, d] -> [heads·d, in]), ``heads_bias`` ([heads, d] -> [heads·d]),
    ``heads_out`` ([heads, d, out] -> [out, heads·d]).
    """

    param: str
    v3: str
    legacy: str
    convert: str = "same"


def causal_mask(q_len: int, k_len: int, device) -> Tensor:
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril()


def _key_mask(layer: str, mask: Tensor | None, batch: int, length: int, arg: str, like: Tensor) -> Tensor | None:
    """A Keras ``query_mask`` / ``value_mask`` [B, T] checked like every attnzoo mask, as bool [B, T]."""
    if mask is not None and (not isinstance(mask, Tensor) or mask.dim() != 2):
        shape = list(mask.shape) if isinstance(mask, Tensor) else type(mask).__name__
        raise ValueError(f"{layer} expects {arg} of shape [{batch}, {length}] (True = keep), got {shape}")
    checked = check_mask(layer, mask, batch, 1, length, arg=arg, like=like)
    return None if checked is None else checked[:, 0]


def _score_mask(value_mask: Tensor | None, q_len: int, k_len: int, causal: bool, device) -> Tensor | None:
    """The [B or 1, Tq, Tk] mask of the scores from a checked value mask [B, Tk] and the causal flag."""
    mask = None if value_mask is None else value_mask[:, None, :]
    if causal:
        tri = causal_mask(q_len, k_len, device)[None]
        mask = tri if mask is None else mask & tri
    return mask


def _apply_query_mask(out: Tensor, query_mask: Tensor | None) -> Tensor:
    """Zero the rows of masked queries (outputs [B, Tq, d] or weights [B, Tq, Tk]): they attend to nothing."""
    return out if query_mask is None else out.masked_fill(~query_mask[..., None], 0.0)


# Keras's own masking constants, by Keras's name for them and the dtype (float16, other). They exist to
# reproduce Keras's arithmetic under keras_semantics only; attnzoo's own masking never uses such numbers
# (it fills with finfo.min or uses SDPA's boolean mask, and zeroes rows with no key).
KERAS_CONSTANTS = {  # keras-constant: the table the no-literal-mask test allows
    "attention_max_value": (65504.0, 1.0e9),  # keras-constant: Attention subtracts it from masked scores
    "softmax_large_negative": (-3e4, -1e9),  # keras-constant: keras 3 Softmax's masked value
    "keras2_large_negative": (None, -1.0e9),  # keras-constant: Keras 2 Softmax adds it (float16: finfo.min)
    "torch_backend_negative": (-0.7 * 65500.0, -0.7 * 3.38953e38),  # keras-constant: keras 3's fused SDPA mask
}


def keras_constant(name: str, dtype: torch.dtype) -> float:
    """The value Keras uses for ``name`` (a key of :data:`KERAS_CONSTANTS`) in ``dtype``."""
    half, other = KERAS_CONSTANTS[name]
    if dtype != torch.float16:
        return other
    return torch.finfo(torch.float16).min if half is None else half


def keras_weights(scores: Tensor, mask: Tensor | None, rule: str) -> Tensor:
    """Keras's masked softmax over the last axis, by its ``rule`` (see the module docstring):
    ``subtract`` (Attention layers), ``add`` (Keras 2 MHA), ``replace`` (keras 3 MHA with weights),
    ``fused`` (keras 3 MHA's fused path)."""
    if mask is None:
        return torch.softmax(scores, dim=-1)
    dtype = scores.dtype
    if rule == "subtract":
        scores = torch.where(mask, scores, scores - keras_constant("attention_max_value", dtype))
    elif rule == "add":
        scores = scores + (~mask).to(dtype) * keras_constant("keras2_large_negative", dtype)
    elif rule == "replace":
        filled = torch.where(mask, scores, torch.full_like(scores, keras_constant("softmax_large_negative", dtype)))
        weights = torch.softmax(filled, dim=-1)
        return torch.where(mask, weights, torch.zeros_like(weights))
    else:
        scores = scores.masked_fill(~mask, keras_constant("torch_backend_negative", dtype))
    return torch.softmax(scores, dim=-1)


def check_semantics(layer: str, value: object) -> None:
    if value not in (None, 2, 3):
        raise ValueError(f"{layer}: keras_semantics must be None, 2 or 3 (a Keras major version), got {value!r}")


class KerasCalls:
    """What the three Keras layers share: input and mask checks, and Keras's softmax over the scores."""

    name = "keras"
    keras_semantics: int | None = None

    def _prepare(self, query, value, key, query_mask, value_mask, *, same_size: bool = False):
        """Check the inputs and masks; zero masked values, keys and queries before any arithmetic.
        Returns ``(query, value, key, query_mask, value_mask)`` with the masks as bool [B, T] or None.
        ``same_size``: the score compares query and key feature by feature, so their sizes must agree."""
        like = next(iter(self.parameters()), None)
        check_input(self.name, "query", query, ("batch", "query_len", "dim"), like=like)
        check_input(self.name, "value", value, (query.shape[0], "value_len", "value_dim"), like=query)
        if key is None:
            key = value
        check_input(self.name, "key", key, (query.shape[0], value.shape[1], "key_dim"), like=query)
        if same_size and key.shape[-1] != query.shape[-1]:
            raise ValueError(
                f"{self.name} expects query and key of the same size, got {query.shape[-1]} and "
                f"{key.shape[-1]} (the key is the value unless given)"
            )
        batch = query.shape[0]
        query_mask = _key_mask(self.name, query_mask, batch, query.shape[1], "query_mask", query)
        value_mask = _key_mask(self.name, value_mask, batch, value.shape[1], "value_mask", query)
        if self.keras_semantics is not None:  # Keras computes with the padding as it is
            return query, value, key, query_mask, value_mask
        value, key = neutralise(value, value_mask), neutralise(key, value_mask)
        return neutralise(query, query_mask), value, key, query_mask, value_mask

    def _weigh(
        self, scores: Tensor, mask: Tensor | None, value: Tensor, query_mask: Tensor | None, return_attention: bool
    ):
        """Keras's ``_apply_scores`` and query mask: softmax, dropout while training, A V, zeroed queries."""
        if self.keras_semantics is not None:
            weights = keras_weights(scores, mask, "subtract")
            dropout = self.dropout if self.training else 0.0
            out = torch.matmul(F.dropout(weights, dropout) if dropout else weights, value)
            out = _apply_query_mask(out, query_mask)
            return (out, weights) if return_attention else out
        weights = masked_softmax(scores, mask)
        dropout = self.dropout if self.training else 0.0
        out = torch.bmm(F.dropout(weights, dropout) if dropout else weights, value)
        out = _apply_query_mask(out, query_mask)
        return (out, _apply_query_mask(weights, query_mask)) if return_attention else out


class KerasDotAttention(KerasCalls, nn.Module):
    """``keras.layers.Attention``: args ``use_scale``, ``score_mode`` ("dot" | "concat"), ``dropout``.

    Shapes: ``forward(query [B, Tq, d], value [B, Tv, dv], key [B, Tv, d] = value, *, query_mask [B, Tq],
    value_mask [B, Tv], return_attention=False, use_causal_mask=False)`` -> ``out [B, Tq, dv]`` or
    ``(out, A [B, Tq, Tv])``. The dot score without returned weights runs as one fused SDPA call.
    """

    name = "keras_dot"
    keras_class = "Attention"

    def __init__(
        self,
        use_scale: bool = False,
        *,
        score_mode: str = "dot",
        dropout: float = 0.0,
        keras_semantics: int | None = None,
    ) -> None:
        super().__init__()
        check_probability(self.name, "dropout", dropout)
        check_semantics(self.name, keras_semantics)
        self.keras_semantics = keras_semantics
        if score_mode not in ("dot", "concat"):
            raise ValueError(f"keras_dot: score_mode must be 'dot' or 'concat', got {score_mode!r}")
        self.use_scale, self.score_mode, self.dropout = use_scale, score_mode, dropout
        self.scale = nn.Parameter(torch.ones(())) if use_scale else None
        self.concat_score_weight = nn.Parameter(torch.ones(())) if score_mode == "concat" else None

    def keras_layout(self) -> list[KerasVar]:
        names = [n for n in ("scale", "concat_score_weight") if getattr(self, n) is not None]
        return [KerasVar(n, f"vars/{i}", n) for i, n in enumerate(names)]

    def forward(
        self,
        query: Tensor,
        value: Tensor,
        key: Tensor | None = None,
        *,
        query_mask: Tensor | None = None,
        value_mask: Tensor | None = None,
        return_attention: bool = False,
        use_causal_mask: bool = False,
    ):
        query, value, key, query_mask, value_mask = self._prepare(
            query, value, key, query_mask, value_mask, same_size=True
        )
        q_len, k_len = query.shape[1], key.shape[1]
        mask = _score_mask(value_mask, q_len, k_len, use_causal_mask, query.device)
        dropout = self.dropout if self.training else 0.0
        if self.score_mode == "dot" and not return_attention and dropout == 0.0 and self.keras_semantics is None:
            q = query * self.scale if self.scale is not None else query
            out, _ = attend(q, key, value, mask, scale=1.0)
            return _apply_query_mask(out, query_mask)
        if self.score_mode == "dot":
            scores = torch.bmm(query, key.transpose(1, 2))
            if self.scale is not None:
                scores = scores * self.scale
        else:
            summed = query.unsqueeze(2) + key.unsqueeze(1)  # [B, Tq, Tv, d]
            if self.scale is not None:
                summed = summed * self.scale
            scores = self.concat_score_weight * torch.tanh(summed).sum(-1)
        return self._weigh(scores, mask, value, query_mask, return_attention)

    def extra_repr(self) -> str:
        semantics = f", keras_semantics={self.keras_semantics}" if self.keras_semantics else ""
        return f"use_scale={self.use_scale}, score_mode={self.score_mode!r}, dropout={self.dropout}{semantics}"


class KerasAdditiveAttention(KerasCalls, LazyLayer):
    """``keras.layers.AdditiveAttention``: args ``use_scale`` (default True), ``dropout``, ``dim`` (None:
    inferred from the query on the first call, as Keras builds).

    Shapes as :class:`KerasDotAttention`; the query and key share the size d.
    """

    name = "keras_additive"
    keras_class = "AdditiveAttention"

    def __init__(
        self,
        use_scale: bool = True,
        *,
        dropout: float = 0.0,
        dim: int | None = None,
        keras_semantics: int | None = None,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        check_probability(self.name, "dropout", dropout)
        check_positive(self.name, "dim", dim)
        check_semantics(self.name, keras_semantics)
        self.keras_semantics = keras_semantics
        self.use_scale, self.dropout = use_scale, dropout
        self._create_parameters({"dim": dim}, device, dtype)

    def _parameter_shapes(self, sizes):
        return {"scale": (sizes["dim"],)} if self.use_scale else {}

    def _infer_sizes(self, query, value=None, *args, **kwargs):
        check_input(self.name, "query", query, ("batch", "query_len", "dim"))
        return {"dim": query.shape[-1]}

    def _sizes_from_parameters(self):
        return {"dim": self.scale.shape[0]} if self.use_scale else {}

    def reset_parameters(self) -> None:
        if self.use_scale:  # Keras glorot_uniform on a 1-D weight: fan_in = fan_out = d
            bound = math.sqrt(3.0 / self.scale.shape[0])
            nn.init.uniform_(self.scale, -bound, bound)

    def keras_layout(self) -> list[KerasVar]:
        return [KerasVar("scale", "vars/0", "scale")] if self.use_scale else []

    def forward(
        self,
        query: Tensor,
        value: Tensor,
        key: Tensor | None = None,
        *,
        query_mask: Tensor | None = None,
        value_mask: Tensor | None = None,
        return_attention: bool = False,
        use_causal_mask: bool = False,
    ):
        dim = self.size("dim")
        if dim is not None and isinstance(query, Tensor) and query.dim() == 3 and query.shape[-1] != dim:
            raise ValueError(
                f"keras_additive expects query of shape [batch, query_len, {dim}], got {list(query.shape)}"
            )
        query, value, key, query_mask, value_mask = self._prepare(
            query, value, key, query_mask, value_mask, same_size=True
        )
        q_len, k_len = query.shape[1], key.shape[1]
        mask = _score_mask(value_mask, q_len, k_len, use_causal_mask, query.device)
        hidden = torch.tanh(query.unsqueeze(2) + key.unsqueeze(1))  # [B, Tq, Tv, d]
        scores = torch.matmul(hidden, self.scale) if self.use_scale else hidden.sum(-1)
        return self._weigh(scores, mask, value, query_mask, return_attention)

    def extra_repr(self) -> str:
        return f"use_scale={self.use_scale}, dim={self.size('dim')}, dropout={self.dropout}"
