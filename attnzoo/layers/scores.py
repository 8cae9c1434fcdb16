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

from .core import check_input, check_mask, masked_softmax
from .lazy import LazyLayer

__all__ = ["DotAttention", "GeneralAttention", "AdditiveAttention", "Seq2SeqAttention", "SCORES"]


def _example_qk(batch: int, q_len: int, k_len: int, dq: int, dk: int, like: Tensor):
    query = torch.randn(batch, q_len, dq, device=like.device, dtype=like.dtype)
    key = torch.randn(batch, k_len, dk, device=like.device, dtype=like.dtype)
    mask = torch.ones(batch, k_len, dtype=torch.bool, device=like.device)
    mask[-1, k_len // 2 + 1 :] = False
    return query, key, mask


class _ScoredAttention:
    """The part every score function shares: checks, masked softmax, weighted sum of the values."""

    name = "attention"
    scaled: bool

    def _scores(self, query: Tensor, key: Tensor) -> Tensor:
        raise NotImplementedError

    def _scale_dim(self, query: Tensor, key: Tensor) -> int:
        return key.shape[-1]

    def _expected(self) -> tuple[object, object]:
        return "query_size", "key_size"

    def forward(self, query: Tensor, key: Tensor, value: Tensor | None = None, mask: Tensor | None = None):
        """query [B, Tq, dq], key [B, Tk, dk], value [B, Tk, Dv] (default: key), mask -> (context, weights)."""
        dq, dk = self._expected()
        check_input(self.name, "query", query, ("batch", "query_len", dq))
        check_input(self.name, "key", key, (query.shape[0], "key_len", dk))
        if value is None:
            value = key
        check_input(self.name, "value", value, (query.shape[0], key.shape[1], "value_size"))
        mask = check_mask(self.name, mask, query.shape[0], query.shape[1], key.shape[1])
        scores = self._scores(query, key)
        if self.scaled:
            scores = scores * self._scale_dim(query, key) ** -0.5
        weights = masked_softmax(scores, mask)
        return torch.bmm(weights, value), weights


class DotAttention(_ScoredAttention, nn.Module):
    """Dot-product attention ``e_ij = q_iᵀ k_j`` (optionally scaled by 1/sqrt(dk)); no parameters.

    Shapes: ``forward(query [B, Tq, d], key [B, Tk, d], value=None, mask=None)`` ->
    ``(context [B, Tq, Dv], weights [B, Tq, Tk])``.
    """

    name = "dot"

    def __init__(self, scaled: bool = False) -> None:
        super().__init__()
        self.scaled = scaled

    def _scores(self, query, key):
        if query.shape[-1] != key.shape[-1]:
            raise ValueError(
                f"dot expects query and key of the same size, got {query.shape[-1]} and {key.shape[-1]}; "
                "use general or additive for different sizes"
            )
        return torch.bmm(query, key.transpose(1, 2))

    def example_inputs(self, batch: int = 2, seq: int = 7):
        query, key, mask = _example_qk(batch, 3, seq, 16, 16, torch.empty(0))
        return (query, key), {"mask": mask}

    def extra_repr(self) -> str:
        return f"scaled={self.scaled}"


class _LearnedScore(_ScoredAttention, LazyLayer):
    """A score with parameters sized by the query and key (inferred on the first call when not given)."""

    def _infer_sizes(self, query, key, *args, **kwargs):
        check_input(self.name, "query", query, ("batch", "query_len", "query_size"))
        check_input(self.name, "key", key, ("batch", "key_len", "key_size"))
        return {"query_size": query.shape[-1], "key_size": key.shape[-1]}

    def _expected(self):
        return self.size("query_size") or "query_size", self.size("key_size") or "key_size"

    def example_inputs(self, batch: int = 2, seq: int = 7):
        like = next(self.parameters())
        query, key, mask = _example_qk(batch, 3, seq, self.size("query_size") or 12, self.size("key_size") or 16, like)
        return (query, key), {"mask": mask}


class GeneralAttention(_LearnedScore):
    """Luong's general (bilinear) attention ``e_ij = q_iᵀ W k_j``, W [dq, dk].

    Args:
        query_size, key_size: dq and dk; None infers them from the first call.
        scaled: multiply scores by 1/sqrt(dk).

    Shapes as :class:`DotAttention`, with dq and dk free.
    """

    name = "general"

    def __init__(self, query_size: int | None = None, key_size: int | None = None, scaled: bool = False,
                 device=None, dtype=None) -> None:
        super().__init__()
        self.scaled = scaled
        self._create_parameters({"query_size": query_size, "key_size": key_size}, device, dtype)

    def _parameter_shapes(self, sizes):
        return {"weight": (sizes["query_size"], sizes["key_size"])}

    def _sizes_from_parameters(self):
        return {"query_size": self.weight.shape[0], "key_size": self.weight.shape[1]}

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.weight)

    def _scores(self, query, key):
        return torch.bmm(torch.matmul(query, self.weight), key.transpose(1, 2))

    def extra_repr(self) -> str:
        return f"query_size={self.size('query_size')}, key_size={self.size('key_size')}, scaled={self.scaled}"


class AdditiveAttention(_LearnedScore):
    """Bahdanau's additive attention ``e_ij = vᵀ tanh(Wq q_i + Wk k_j + b)``.

    Args:
        query_size, key_size: dq and dk; None infers them from the first call.
        attention_size: d_a; None uses dk.
        scaled: multiply scores by 1/sqrt(d_a).

    Shapes as :class:`DotAttention`. The tanh over every (i, j) pair makes this the costly score:
    it holds a [B, Tq, Tk, d_a] tensor.
    """

    name = "additive"

    def __init__(self, query_size: int | None = None, key_size: int | None = None,
                 attention_size: int | None = None, scaled: bool = False, device=None, dtype=None) -> None:
        super().__init__()
        self.scaled = scaled
        self.attention_size_arg = attention_size
        self._create_parameters({"query_size": query_size, "key_size": key_size}, device, dtype)

    def _parameter_shapes(self, sizes):
        d_a = self.attention_size_arg or sizes["key_size"]
        return {"query_proj": (d_a, sizes["query_size"]), "key_proj": (d_a, sizes["key_size"]),
                "bias": (d_a,), "v": (d_a,)}

    def _sizes_from_parameters(self):
        return {"query_size": self.query_proj.shape[1], "key_size": self.key_proj.shape[1]}

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.query_proj)
        nn.init.xavier_uniform_(self.key_proj)
        nn.init.zeros_(self.bias)
        nn.init.normal_(self.v, std=self.v.shape[0] ** -0.5)

    def _scale_dim(self, query, key):
        return self.v.shape[0]

    def _scores(self, query, key):
        q = F.linear(query, self.query_proj, self.bias)  # [B, Tq, d_a]
        k = F.linear(key, self.key_proj)  # [B, Tk, d_a]
        return torch.matmul(torch.tanh(q.unsqueeze(2) + k.unsqueeze(1)), self.v)  # [B, Tq, Tk]

    def extra_repr(self) -> str:
        d_a = self.attention_size_arg if self.has_uninitialized_params() else self.v.shape[0]
        return (f"query_size={self.size('query_size')}, key_size={self.size('key_size')}, "
                f"attention_size={d_a}, scaled={self.scaled}")


SCORES = {"dot": DotAttention, "general": GeneralAttention, "additive": AdditiveAttention}


class Seq2SeqAttention(LazyLayer):
    """Luong global attention of a decoder over its encoder, with the attentional state ``tanh(Wc [c; h])``.

    Args:
        score: ``"dot"``, ``"general"`` or ``"additive"``.
        decoder_size, encoder_size: Hd and He; None infers them from the first call.
        output_size: H of the attentional state; None uses Hd.
        attention_size: d_a of the additive score.
        scaled: scale the scores by 1/sqrt(d).

    Shapes: ``forward(decoder_out [B, Td, Hd], encoder_out [B, Te, He], mask [B, Te] = None)`` ->
    ``(output [B, Td, H], weights [B, Td, Te])``. Decoder steps attend independently, so a whole
    teacher-forced target sequence is one call, and greedy decoding is the same call with Td = 1.
    """

    name = "seq2seq_attn"

    def __init__(self, score: str = "general", decoder_size: int | None = None, encoder_size: int | None = None,
                 output_size: int | None = None, attention_size: int | None = None, scaled: bool = False,
                 device=None, dtype=None) -> None:
        super().__init__()
        if score not in SCORES:
            raise ValueError(f"seq2seq_attn: score must be one of {', '.join(SCORES)}, got {score!r}")
        if score == "dot" and None not in (decoder_size, encoder_size) and decoder_size != encoder_size:
            raise ValueError(f"seq2seq_attn: the dot score needs decoder_size == encoder_size, got "
                             f"{decoder_size} and {encoder_size}; use general or additive")
        self.score = score
        self.output_size_arg = output_size
        kw = {"device": device, "dtype": dtype}
        if score == "dot":
            self.attention = DotAttention(scaled=scaled)
        elif score == "general":
            self.attention = GeneralAttention(decoder_size, encoder_size, scaled=scaled, **kw)
        else:
            self.attention = AdditiveAttention(decoder_size, encoder_size, attention_size, scaled=scaled, **kw)
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
        check_input(self.name, "decoder_out", decoder_out, ("batch", "dec_len", self.size("decoder_size") or "decoder_size"))
        check_input(self.name, "encoder_out", encoder_out,
                    (decoder_out.shape[0], "enc_len", self.size("encoder_size") or "encoder_size"))
        context, weights = self.attention(decoder_out, encoder_out, encoder_out, mask)
        output = torch.tanh(F.linear(torch.cat([context, decoder_out], dim=-1), self.combine.weight))
        return output, weights

    def example_inputs(self, batch: int = 2, seq: int = 7):
        like = self.combine.weight
        dec, enc, mask = _example_qk(batch, 4, seq, self.size("decoder_size") or 16,
                                     self.size("encoder_size") or 16, like)
        return (dec, enc), {"mask": mask}

    def extra_repr(self) -> str:
        return (f"score={self.score!r}, decoder_size={self.size('decoder_size')}, "
                f"encoder_size={self.size('encoder_size')}")
