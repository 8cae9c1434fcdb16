"""keras-hub's attention, written once (attnzoo.layers.attend.keras_attention), against the formula written out
naively in float64, one query at a time: grouped heads, soft-capping, an additive bias, a window and padding,
and Keras's two answers for a query row with no key (the mean of the values; zeros)."""

from __future__ import annotations

import math

import pytest
import torch

from attnzoo.layers.attend import causal_allowed, keras_attention


def _naive(q, k, v, allowed, scale, cap=None, bias=None, empty="mean"):
    b, h, t, _ = q.shape
    g, s = k.shape[1], k.shape[2]
    out = torch.zeros(b, h, t, v.shape[-1], dtype=torch.float64)
    for n in range(b):
        for head in range(h):
            kv = head // (h // g)
            for i in range(t):
                keep = [j for j in range(s) if allowed is None or bool(allowed.expand(b, h, t, s)[n, head, i, j])]
                if not keep:
                    out[n, head, i] = v[n, kv].double().mean(0) if empty == "mean" else 0.0
                    continue
                scores = []
                for j in keep:
                    e = scale * float(q[n, head, i].double() @ k[n, kv, j].double())
                    e += 0.0 if bias is None else float(bias.expand(b, h, t, s)[n, head, i, j])
                    scores.append(cap * math.tanh(e / cap) if cap else e)
                top = max(scores)
                weights = [math.exp(e - top) for e in scores]
                total = sum(weights)
                for w, j in zip(weights, keep, strict=True):
                    out[n, head, i] += w / total * v[n, kv, j].double()
    return out


@pytest.mark.parametrize("cap", [None, 1.5])
@pytest.mark.parametrize("empty", ["mean", "zeros"])
def test_keras_attention_is_the_formula_with_grouped_heads_a_window_padding_and_empty_rows(cap, empty):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 6, 8, generator=gen) * 2
    k, v = torch.randn(2, 2, 6, 8, generator=gen) * 2, torch.randn(2, 2, 6, 8, generator=gen)
    padding = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])  # left-padded: its first rows have no key
    allowed = causal_allowed(6, 6, window=3, padding=padding)
    bias = torch.randn(1, 4, 6, 6, generator=gen)
    got = keras_attention(q, k, v, allowed, scale=0.3, soft_cap=cap, bias=bias, empty=empty)
    torch.testing.assert_close(got.double(), _naive(q, k, v, allowed, 0.3, cap, bias, empty), rtol=1e-5, atol=1e-5)


def test_causal_allowed_is_the_last_queries_over_the_keys_within_the_window():
    allowed = causal_allowed(2, 5, window=2)[0, 0]  # queries at positions 3 and 4 of keys 0..4
    assert allowed.tolist() == [[False, False, True, True, False], [False, False, False, True, True]]
    padded = causal_allowed(3, 3, padding=torch.tensor([[1, 0, 1]]))[0, 0]
    assert padded.tolist() == [[True, False, False], [True, False, False], [True, False, True]]


def test_keras_attention_refuses_an_unknown_rule_for_empty_rows():
    x = torch.zeros(1, 1, 1, 2)
    with pytest.raises(ValueError, match="empty must be one of mean, zeros"):
        keras_attention(x, x, x, None, scale=1.0, empty="nan")
