"""Naive references: every formula written out with Python loops and an explicit softmax, in float64.

Nothing here calls attnzoo or a fused torch kernel; the loops are the formulas of the docstrings,
one index at a time, so that a transposed matrix or a wrong softmax axis in attnzoo cannot hide.
Masks: True = attend; a fully masked row attends to nothing (zero weights, zero output).
"""

from __future__ import annotations

import math

import torch


def softmax(scores: list[float], keep: list[bool]) -> list[float]:
    kept = [s for s, k in zip(scores, keep, strict=True) if k]
    if not kept:
        return [0.0] * len(scores)
    top = max(kept)
    exps = [math.exp(s - top) if k else 0.0 for s, k in zip(scores, keep, strict=True)]
    total = sum(exps)
    return [e / total for e in exps]


def dot(u, v) -> float:
    return sum(float(a) * float(b) for a, b in zip(u, v, strict=True))


def matvec(m, v) -> list[float]:
    return [dot(row, v) for row in m]


def weighted_sum(weights: list[float], rows) -> torch.Tensor:
    out = torch.zeros(len(rows[0]), dtype=torch.float64)
    for w, r in zip(weights, rows, strict=True):
        out += w * r.double()
    return out


def keep_of(mask, b: int, t_len: int, i: int = 0) -> list[bool]:
    if mask is None:
        return [True] * t_len
    m = mask[b] if mask.dim() == 2 else mask[b, i]
    return [bool(v) for v in m]


def labelwise(x, wa, wo, bo, mask=None):
    """x [B, T, h], wa [L, h], wo [L, h] or [h], bo [L] -> logits [B, L], A [B, L, T]."""
    B, T, _ = x.shape
    L = wa.shape[0]
    logits = torch.zeros(B, L, dtype=torch.float64)
    att = torch.zeros(B, L, T, dtype=torch.float64)
    for b in range(B):
        keep = keep_of(mask, b, T)
        for label in range(L):
            a = softmax([dot(x[b, t], wa[label]) for t in range(T)], keep)
            r = weighted_sum(a, x[b])
            w = wo[label] if wo.dim() == 2 else wo
            logits[b, label] = dot(r, w) + float(bo[label])
            att[b, label] = torch.tensor(a)
    return logits, att


def keras_attn(x, ws, mask=None):
    """x [B, T, E], ws [C, E] -> out [B, C, E], A [B, C, T]."""
    B, T, E = x.shape
    C = ws.shape[0]
    out = torch.zeros(B, C, E, dtype=torch.float64)
    att = torch.zeros(B, C, T, dtype=torch.float64)
    for b in range(B):
        keep = keep_of(mask, b, T)
        for c in range(C):
            a = softmax([math.tanh(dot(ws[c], x[b, t])) for t in range(T)], keep)
            out[b, c] = weighted_sum(a, x[b])
            att[b, c] = torch.tensor(a)
    return out, att


def attn_pool(x, w, bias, v, mask=None):
    """e_t = vᵀ tanh(W h_t + b); c = Σ softmax(e)_t h_t. -> c [B, H], a [B, T]."""
    B, T, H = x.shape
    out = torch.zeros(B, H, dtype=torch.float64)
    att = torch.zeros(B, T, dtype=torch.float64)
    for b in range(B):
        e = []
        for t in range(T):
            hidden = [math.tanh(z + float(bb)) for z, bb in zip(matvec(w, x[b, t]), bias, strict=True)]
            e.append(dot(v, hidden))
        a = softmax(e, keep_of(mask, b, T))
        out[b] = weighted_sum(a, x[b])
        att[b] = torch.tensor(a)
    return out, att


def linear(x_row, weight, bias=None) -> torch.Tensor:
    y = torch.tensor(matvec(weight, x_row), dtype=torch.float64)
    return y if bias is None else y + bias.double()


def qkv_self(x, wq, bq, wk, bk, wv, bv, heads, mask=None):
    """Multi-head scaled dot-product self-attention. -> out [B, T, D], A [B, heads, T, T]."""
    B, T, D = x.shape
    hd = D // heads
    out = torch.zeros(B, T, D, dtype=torch.float64)
    att = torch.zeros(B, heads, T, T, dtype=torch.float64)
    for b in range(B):
        q = [linear(x[b, t], wq, bq) for t in range(T)]
        k = [linear(x[b, t], wk, bk) for t in range(T)]
        v = [linear(x[b, t], wv, bv) for t in range(T)]
        for h in range(heads):
            sl = slice(h * hd, (h + 1) * hd)
            for i in range(T):
                scores = [dot(q[i][sl], k[j][sl]) / math.sqrt(hd) for j in range(T)]
                a = softmax(scores, keep_of(mask, b, T, i))
                out[b, i, sl] = weighted_sum(a, [vv[sl] for vv in v])
                att[b, h, i] = torch.tensor(a)
    return out, att


def scored(query, key, value, score_fn, mask=None, scale=1.0):
    """context_i = Σ_j softmax_j(scale · score(q_i, k_j)) v_j -> (context [B, Tq, Dv], weights [B, Tq, Tk])."""
    B, Tq, _ = query.shape
    Tk = key.shape[1]
    ctx = torch.zeros(B, Tq, value.shape[-1], dtype=torch.float64)
    att = torch.zeros(B, Tq, Tk, dtype=torch.float64)
    for b in range(B):
        for i in range(Tq):
            scores = [scale * score_fn(query[b, i], key[b, j]) for j in range(Tk)]
            a = softmax(scores, keep_of(mask, b, Tk, i))
            ctx[b, i] = weighted_sum(a, value[b])
            att[b, i] = torch.tensor(a)
    return ctx, att


def general_score(w):
    return lambda q, k: dot(q, matvec(w, k))


def additive_score(wq, wk, bias, v):
    def score(q, k):
        hidden = [math.tanh(a + c + float(bb)) for a, c, bb in zip(matvec(wq, q), matvec(wk, k), bias, strict=True)]
        return dot(v, hidden)

    return score


def seq2seq(decoder, encoder, score_fn, wc, mask=None, scale=1.0):
    """Luong: c_t = Σ a_ts h̄_s; h̃_t = tanh(Wc [c_t; h_t])."""
    ctx, att = scored(decoder, encoder, encoder, score_fn, mask, scale)
    B, Td, _ = decoder.shape
    out = torch.zeros(B, Td, wc.shape[0], dtype=torch.float64)
    for b in range(B):
        for t in range(Td):
            joined = torch.cat([ctx[b, t], decoder[b, t].double()])
            out[b, t] = torch.tensor([math.tanh(z) for z in matvec(wc, joined)])
    return out, att


def tanh_rows(x, w) -> torch.Tensor:
    """[T, h] rows -> [T, d_a] rows of tanh(W x_t)."""
    return torch.tensor([[math.tanh(z) for z in matvec(w, row)] for row in x], dtype=torch.float64)


def laat(x, w, u, w_out, b_out, mask=None, extra=None):
    """Z = tanh(H Wᵀ), A = softmax_T(Z Uᵀ), y_l = <w_l, [A_l H; extra]> + b_l -> (logits [B, L], A [B, L, T])."""
    B, T, _ = x.shape
    L = u.shape[0]
    logits = torch.zeros(B, L, dtype=torch.float64)
    att = torch.zeros(B, L, T, dtype=torch.float64)
    for b in range(B):
        z = tanh_rows(x[b], w)
        keep = keep_of(mask, b, T)
        for label in range(L):
            a = softmax([dot(u[label], z[t]) for t in range(T)], keep)
            v = weighted_sum(a, x[b])
            if extra is not None:
                v = torch.cat([v, extra[b].double()])
            logits[b, label] = dot(w_out[label], v) + float(b_out[label])
            att[b, label] = torch.tensor(a)
    return logits, att


def plm_ca(x, q, wk, bk, wv, bv, gamma, beta, w, b, mask=None, scale=1.0, eps=1e-5):
    """A = softmax_T(scale · Q (H Wkᵀ + bk)ᵀ), Y = LayerNorm(A (H Wvᵀ + bv)), y_l = <w, Y_l> + b."""
    B, T, h = x.shape
    L = q.shape[0]
    logits = torch.zeros(B, L, dtype=torch.float64)
    att = torch.zeros(B, L, T, dtype=torch.float64)
    for bi in range(B):
        keys = [linear(x[bi, t], wk, bk) for t in range(T)]
        values = [linear(x[bi, t], wv, bv) for t in range(T)]
        keep = keep_of(mask, bi, T)
        for label in range(L):
            a = softmax([scale * dot(q[label], keys[t]) for t in range(T)], keep)
            r = weighted_sum(a, values)
            mean = sum(float(v) for v in r) / h
            var = sum((float(v) - mean) ** 2 for v in r) / h
            y = [
                (float(v) - mean) / math.sqrt(var + eps) * float(g) + float(bb)
                for v, g, bb in zip(r, gamma, beta, strict=True)
            ]
            logits[bi, label] = dot(w, y) + float(b)
            att[bi, label] = torch.tensor(a)
    return logits, att
