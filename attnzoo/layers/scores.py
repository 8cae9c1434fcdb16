"""Query/key attention with the classic score functions (seed 003, fixed), and Luong's seq2seq attention.

Score functions, for query q_i [dq] and key k_j [dk]:

    dot       e_ij = q_iᵀ k_j                           (dq = dk)
    general   e_ij = q_iᵀ W k_j                         W [dq, dk]         (Luong et al. 2015)
    additive  e_ij = vᵀ tanh(Wq q_i + Wk k_j + b)       Wq [d_a, dq], Wk [d_a, dk], b, v [d_a]  (Bahdanau et al. 2015)

``scaled=True`` multiplies the scores by 1/sqrt(d) (d = dk, or d_a for additive): that factor belongs to
scaled dot-product attention and is an option here, not part of "general". Then, with ``mask`` [B, Tk]
or [B, Tq, Tk] (True = attend):

    a_ij = softmax_j(e_ij)          weights [B, Tq, Tk]
    c_i  = Σ_j a_ij v_j             context [B, Tq, Dv]    (v = k when no value is given)

``Seq2SeqAttention`` puts one of them between a decoder and its encoder (Luong's global attention)::

    c_t  = Σ_s a_ts h̄_s                       over encoder outputs h̄ [B, Te, He]
    h̃_t  = tanh(Wc [c_t; h_t])                output [B, Td, H], Wc [H, He + Hd], no bias (Luong eq. 5)

Seed 003's defects, for the record: its ``add`` added [B, Tq, d] to [B, d, Tk] and had no ``v``; its
``mul`` sized the projection for the key but applied it to the query; its seq2seq expanded the inputs to
4-D before a forward that unpacks 3; it omitted the tanh; no mask anywhere.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnzoo.layers.core import attended_keys, check_input, check_mask, check_positive, neutralise
from attnzoo.layers.lazy import LazyLayer
from attnzoo.layers.normalizers import check_normalizer, normalize

__all__ = ["ScoreAttention", "DotAttention", "GeneralAttention", "AdditiveAttention", "Seq2SeqAttention", "SCORES"]


class ScoreAttention(nn.Module):
    """Base of query/key attention with a score function: subclass it and implement :meth:`score`.

    Everything else is shared: the checks of query, key, value and mask (with messages naming
    ``name``; set ``same_size = True`` when the score compares query and key feature by feature),
    zeroing of masked keys and values before any arithmetic, the optional 1/sqrt(d) scale, the masked
    normaliser (``normalizer``: softmax, or sparsemax / entmax15 for exact zeros; a query with no key
    left attends to nothing) and the weighted sum.

    Shapes: ``forward(query [B, Tq, dq], key [B, Tk, dk], value [B, Tk, Dv] = key, mask [B, Tk] or
    [B, Tq, Tk] = None)`` -> ``(context [B, Tq, Dv], weights [B, Tq, Tk])``. The convention is
    ``query_key``; the conformance kit checks a subclass the day its card is registered.
    """

    name = "attention"
    scaled: bool = False
    same_size: bool = False  # the score compares query and key feature by feature (dot, cosine, ...)
    normalizer: str = "softmax"  # or "sparsemax", "entmax15" (attnzoo.layers.normalizers)

    def score(self, query: Tensor, key: Tensor) -> Tensor:
        """Scores e [B, Tq, Tk] of every query against every key."""
        raise NotImplementedError

    def _scale_dim(self, query: Tensor, key: Tensor) -> int:
        return key.shape[-1]

    def _expected(self) -> tuple[object, object]:
        """The query and key sizes, or names for sizes that are still free."""
        return "query_size", "key_size"

    def _like(self) -> Tensor | None:
        return next(iter(self.parameters()), None)

    def forward(self, query: Tensor, key: Tensor, value: Tensor | None = None, mask: Tensor | None = None):
        """query [B, Tq, dq], key [B, Tk, dk], value [B, Tk, Dv] (default: key), mask -> (context, weights)."""
        dq, dk = self._expected()
        like = self._like()
        check_input(self.name, "query", query, ("batch", "query_len", dq), like=like)
        check_input(
            self.name,
            "key",
            key,
            (query.shape[0], "key_len", query.shape[-1] if self.same_size else dk),
            like=query,
            hint="The score compares query and key feature by feature" if self.same_size else "",
        )
        if value is None:
            value = key
        check_input(self.name, "value", value, (query.shape[0], key.shape[1], "value_size"), like=query)
        mask = check_mask(self.name, mask, query.shape[0], query.shape[1], key.shape[1], like=query)
        keys = attended_keys(mask)
        key, value = neutralise(key, keys), neutralise(value, keys)
        scores = self.score(query, key)
        if self.scaled:
            scores = scores * self._scale_dim(query, key) ** -0.5
        weights = normalize(scores, mask, -1, self.normalizer)
        return torch.matmul(weights, value), weights


class DotAttention(ScoreAttention):
    """Dot-product attention ``e_ij = q_iᵀ k_j`` (optionally scaled by 1/sqrt(dk)); no parameters.
    ``normalizer``: ``"softmax"``, ``"sparsemax"`` or ``"entmax15"``.

    Shapes: ``forward(query [B, Tq, d], key [B, Tk, d], value=None, mask=None)`` ->
    ``(context [B, Tq, Dv], weights [B, Tq, Tk])``.
    """

    name = "dot"
    same_size = True

    def __init__(self, *, scaled: bool = False, normalizer: str = "softmax") -> None:
        super().__init__()
        check_normalizer(self.name, normalizer)
        self.scaled, self.normalizer = scaled, normalizer

    def score(self, query, key):
        return torch.matmul(query, key.transpose(-2, -1))

    def extra_repr(self) -> str:
        return f"scaled={self.scaled}, normalizer={self.normalizer!r}"


class _LearnedScore(ScoreAttention, LazyLayer):
    """A score with parameters sized by the query and key (inferred on the first call when not given)."""

    def _infer_sizes(self, query, key, *args, **kwargs):
        check_input(self.name, "query", query, ("batch", "query_len", "query_size"))
        check_input(self.name, "key", key, ("batch", "key_len", "key_size"))
        return {"query_size": query.shape[-1], "key_size": key.shape[-1]}

    def _expected(self):
        return self.size("query_size") or "query_size", self.size("key_size") or "key_size"


class GeneralAttention(_LearnedScore):
    """Luong's general (bilinear) attention ``e_ij = q_iᵀ W k_j``, W [dq, dk].

    Args:
        query_size, key_size: dq and dk; None infers them from the first call.
        scaled: multiply scores by 1/sqrt(dk).
        normalizer: ``"softmax"``, ``"sparsemax"`` or ``"entmax15"`` (see ``layers/normalizers.py``).

    Shapes as :class:`DotAttention`, with dq and dk free.
    """

    name = "general"

    def __init__(
        self,
        query_size: int | None = None,
        key_size: int | None = None,
        *,
        scaled: bool = False,
        normalizer: str = "softmax",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        check_positive(self.name, "query_size", query_size)
        check_positive(self.name, "key_size", key_size)
        check_normalizer(self.name, normalizer)
        self.scaled, self.normalizer = scaled, normalizer
        self._create_parameters({"query_size": query_size, "key_size": key_size}, device, dtype)

    def _parameter_shapes(self, sizes):
        return {"weight": (sizes["query_size"], sizes["key_size"])}

    def _sizes_from_parameters(self):
        return {"query_size": self.weight.shape[0], "key_size": self.weight.shape[1]}

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.weight)

    def score(self, query, key):
        return torch.matmul(torch.matmul(query, self.weight), key.transpose(-2, -1))

    def extra_repr(self) -> str:
        return (
            f"query_size={self.size('query_size')}, key_size={self.size('key_size')}, scaled={self.scaled}, "
            f"normalizer={self.normalizer!r}"
        )


class AdditiveAttention(_LearnedScore):
    """Bahdanau's additive attention ``e_ij = vᵀ tanh(Wq q_i + Wk k_j + b)``.

    Args:
        query_size, key_size: dq and dk; None infers them from the first call.
        attention_size: d_a; None uses dk.
        scaled: multiply scores by 1/sqrt(d_a).
        normalizer: ``"softmax"``, ``"sparsemax"`` or ``"entmax15"``.

    Shapes as :class:`DotAttention`. The tanh over every (i, j) pair makes this the costly score:
    it holds a [B, Tq, Tk, d_a] tensor.
    """

    name = "additive"

    def __init__(
        self,
        query_size: int | None = None,
        key_size: int | None = None,
        *,
        attention_size: int | None = None,
        scaled: bool = False,
        normalizer: str = "softmax",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        check_positive(self.name, "query_size", query_size)
        check_positive(self.name, "key_size", key_size)
        check_positive(self.name, "attention_size", attention_size)
        check_normalizer(self.name, normalizer)
        self.scaled, self.normalizer = scaled, normalizer
        self.attention_size_arg = attention_size
        self._create_parameters({"query_size": query_size, "key_size": key_size}, device, dtype)

    def _parameter_shapes(self, sizes):
        d_a = self.attention_size_arg or sizes["key_size"]
        return {
            "query_proj": (d_a, sizes["query_size"]),
            "key_proj": (d_a, sizes["key_size"]),
            "bias": (d_a,),
            "v": (d_a,),
        }

    def _sizes_from_parameters(self):
        return {"query_size": self.query_proj.shape[1], "key_size": self.key_proj.shape[1]}

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.query_proj)
        nn.init.xavier_uniform_(self.key_proj)
        nn.init.zeros_(self.bias)
        nn.init.normal_(self.v, std=self.v.shape[0] ** -0.5)

    def _scale_dim(self, query, key):
        return self.v.shape[0]

    def score(self, query, key):
        q = F.linear(query, self.query_proj, self.bias)  # [B, Tq, d_a]
        k = F.linear(key, self.key_proj)  # [B, Tk, d_a]
        return torch.matmul(torch.tanh(q.unsqueeze(2) + k.unsqueeze(1)), self.v)  # [B, Tq, Tk]

    def extra_repr(self) -> str:
        d_a = self.attention_size_arg if self.has_uninitialized_params() else self.v.shape[0]
        return (
            f"query_size={self.size('query_size')}, key_size={self.size('key_size')}, "
            f"attention_size={d_a}, scaled={self.scaled}, normalizer={self.normalizer!r}"
        )


SCORES = {"dot": DotAttention, "general": GeneralAttention, "additive": AdditiveAttention}


class Seq2SeqAttention(LazyLayer):
    """Luong global attention of a decoder over its encoder, with the attentional state ``tanh(Wc [c; h])``.

    Args:
        score: ``"dot"``, ``"general"`` or ``"additive"``.
        decoder_size, encoder_size: Hd and He; None infers them from the first call.
        output_size: H of the attentional state; None uses Hd.
        attention_size: d_a of the additive score; None uses He.
        scaled: scale the scores by 1/sqrt(d).
        normalizer: ``"softmax"``, ``"sparsemax"`` or ``"entmax15"``.

    Shapes: ``forward(decoder_out [B, Td, Hd], encoder_out [B, Te, He], mask [B, Te] = None)`` ->
    ``(output [B, Td, H], weights [B, Td, Te])``. Decoder steps attend independently, so a whole
    teacher-forced target sequence is one call, and greedy decoding is the same call with Td = 1.
    """

    name = "seq2seq_attn"

    def __init__(
        self,
        score: str = "general",
        *,
        decoder_size: int | None = None,
        encoder_size: int | None = None,
        output_size: int | None = None,
        attention_size: int | None = None,
        scaled: bool = False,
        normalizer: str = "softmax",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        check_normalizer(self.name, normalizer)
        for key, value in (
            ("decoder_size", decoder_size),
            ("encoder_size", encoder_size),
            ("output_size", output_size),
            ("attention_size", attention_size),
        ):
            check_positive(self.name, key, value)
        if score not in SCORES:
            raise ValueError(f"seq2seq_attn: score must be one of {', '.join(SCORES)}, got {score!r}")
        if score == "dot" and None not in (decoder_size, encoder_size) and decoder_size != encoder_size:
            raise ValueError(
                f"seq2seq_attn: the dot score needs decoder_size == encoder_size, got "
                f"{decoder_size} and {encoder_size}; use general or additive"
            )
        self.score = score
        self.output_size_arg = output_size
        kw = {"device": device, "dtype": dtype}
        self.attention: DotAttention | GeneralAttention | AdditiveAttention
        if score == "dot":
            self.attention = DotAttention(scaled=scaled, normalizer=normalizer)
        elif score == "general":
            self.attention = GeneralAttention(decoder_size, encoder_size, scaled=scaled, normalizer=normalizer, **kw)
        else:
            self.attention = AdditiveAttention(
                decoder_size, encoder_size, attention_size=attention_size, scaled=scaled, normalizer=normalizer, **kw
            )
        self._create_parameters({"decoder_size": decoder_size, "encoder_size": encoder_size}, **kw)

    def _parameter_shapes(self, sizes):
        out = self.output_size_arg or sizes["decoder_size"]
        return {"combine.weight": (out, sizes["encoder_size"] + sizes["decoder_size"])}

    def _infer_sizes(self, decoder_out, encoder_out, *args, **kwargs):
        check_input(self.name, "decoder_out", decoder_out, ("batch", "dec_len", "decoder_size"))
        check_input(self.name, "encoder_out", encoder_out, ("batch", "enc_len", "encoder_size"))
        return {"decoder_size": decoder_out.shape[-1], "encoder_size": encoder_out.shape[-1]}

    def _sizes_from_parameters(self):
        if self.score == "general":
            decoder, encoder = self.attention.weight.shape
        elif self.score == "additive":
            decoder, encoder = self.attention.query_proj.shape[1], self.attention.key_proj.shape[1]
        else:  # dot: the two sizes are equal
            decoder = encoder = self.combine.weight.shape[1] // 2
        return {"decoder_size": decoder, "encoder_size": encoder}

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.combine.weight)

    def forward(self, decoder_out: Tensor, encoder_out: Tensor, mask: Tensor | None = None):
        check_input(
            self.name,
            "decoder_out",
            decoder_out,
            ("batch", "dec_len", self.size("decoder_size") or "decoder_size"),
            like=self.combine.weight,
        )
        check_input(
            self.name,
            "encoder_out",
            encoder_out,
            (decoder_out.shape[0], "enc_len", self.size("encoder_size") or "encoder_size"),
            like=decoder_out,
        )
        check_mask(self.name, mask, decoder_out.shape[0], decoder_out.shape[1], encoder_out.shape[1], like=decoder_out)
        context, weights = self.attention(decoder_out, encoder_out, encoder_out, mask)
        output = torch.tanh(F.linear(torch.cat([context, decoder_out], dim=-1), self.combine.weight))
        return output, weights

    def extra_repr(self) -> str:
        return (
            f"score={self.score!r}, decoder_size={self.size('decoder_size')}, encoder_size={self.size('encoder_size')}"
        )
