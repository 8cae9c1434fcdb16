"""The composable attention core against the peers users compare it with, and against itself written out.

References: nn.MultiheadAttention (self and cross, key_padding_mask, attn_mask, kdim/vdim),
F.scaled_dot_product_attention (is_causal, enable_gqa), the entmax package, rotary-embedding-torch and
RoPE written as a complex product, ALiBi and Shaw's relative positions written out naively in float64,
the masked full computation for the blocked window, the causal forward for the cache.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attnzoo
from attnzoo.conventions import get_convention
from attnzoo.errors import ConfigError
from attnzoo.layers import attend
from attnzoo.layers.attention import Attention, tiled_to_grouped
from attnzoo.layers.kv_cache import KVCache
from attnzoo.layers.linear_attention import causal_linear
from attnzoo.layers.positions import alibi_slopes, rotate
from attnzoo.testing import PROPERTIES, Failure, Subject

DOUBLE = torch.float64


def _masks(batch: int, seq: int) -> dict[str, torch.Tensor | None]:
    """Every padding pattern: none, right, left, a gap in the middle, one sample fully masked."""
    right = torch.ones(batch, seq, dtype=torch.bool)
    right[1, seq // 2 :] = False
    left = torch.ones(batch, seq, dtype=torch.bool)
    left[1, : seq // 3] = False
    middle = torch.ones(batch, seq, dtype=torch.bool)
    middle[1, seq // 3 : seq // 2] = False
    empty = torch.ones(batch, seq, dtype=torch.bool)
    empty[1] = False
    return {"none": None, "right": right, "left": left, "middle": middle, "empty": empty}


def _layer(**options) -> Attention:
    torch.manual_seed(0)
    return Attention(32, **options).to(DOUBLE)


# -- peers ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
def test_mha_matches_nn_multiheadattention_with_key_padding_and_attn_mask(causal):
    torch.manual_seed(1)
    peer = nn.MultiheadAttention(32, 4, batch_first=True).double().eval()
    ours = attnzoo.create("mha", embed_dim=32, num_heads=4, causal=causal).double()
    ours.load_state_dict(peer.state_dict())
    x = torch.randn(3, 10, 32, dtype=DOUBLE)
    keep = _masks(3, 10)["right"]
    blocked = torch.rand(10, 10, generator=torch.Generator().manual_seed(2)) < 0.3  # torch: True = blocked
    blocked.fill_diagonal_(False)
    if causal:
        blocked = blocked | torch.ones(10, 10, dtype=torch.bool).triu(1)
    want, want_w = peer(x, x, x, key_padding_mask=~keep, attn_mask=blocked, average_attn_weights=False)
    got, got_w = ours(x, keep[:, None, :] & ~blocked, return_attention=True)
    # padded positions are read as zeros, so the rows of padded queries are free: compare the real ones
    torch.testing.assert_close(got[keep], want[keep])
    torch.testing.assert_close(got_w.transpose(1, 2)[keep], want_w.transpose(1, 2)[keep])


def test_mha_cross_attention_with_kdim_loads_and_matches_nn_multiheadattention():
    torch.manual_seed(3)
    peer = nn.MultiheadAttention(32, 4, batch_first=True, kdim=12, vdim=12).double().eval()
    ours = attnzoo.create("mha", embed_dim=32, num_heads=4, context_dim=12).double()
    assert set(ours.state_dict()) == set(peer.state_dict())  # q_proj_weight, k_proj_weight, v_proj_weight
    ours.load_state_dict(peer.state_dict())
    x, context = torch.randn(2, 5, 32, dtype=DOUBLE), torch.randn(2, 9, 12, dtype=DOUBLE)
    keep = _masks(2, 9)["left"]
    want, want_w = peer(x, context, context, key_padding_mask=~keep, average_attn_weights=False)
    got, got_w = ours(x, context=context, context_mask=keep, return_attention=True)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_w, want_w)


def test_same_width_cross_attention_matches_nn_multiheadattention_packed():
    torch.manual_seed(4)
    peer = nn.MultiheadAttention(16, 2, batch_first=True).double().eval()
    ours = attnzoo.create("mha", embed_dim=16, num_heads=2).double()
    ours.load_state_dict(peer.state_dict())
    x, context = torch.randn(2, 4, 16, dtype=DOUBLE), torch.randn(2, 6, 16, dtype=DOUBLE)
    torch.testing.assert_close(ours(x, context=context), peer(x, context, context, need_weights=False)[0])


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_gqa_causal_matches_sdpa_with_is_causal_and_enable_gqa(kv_heads):
    layer = _layer(num_heads=4, num_kv_heads=kv_heads, causal=True, bias=True)
    x = torch.randn(2, 11, 32, dtype=DOUBLE)

    def heads(name, n):
        y = F.linear(x, getattr(layer, name).weight, getattr(layer, name).bias)
        return y.view(2, 11, n, -1).transpose(1, 2)

    q, k, v = heads("q_proj", 4), heads("k_proj", kv_heads), heads("v_proj", kv_heads)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    ref = F.linear(ref.transpose(1, 2).reshape(2, 11, 32), layer.o_proj.weight, layer.o_proj.bias)
    torch.testing.assert_close(layer(x), ref)


@pytest.mark.parametrize("kind", ["sparsemax", "entmax15"])
@pytest.mark.parametrize("scale", [1.0, 1e4, 1e30])
def test_sparse_normalisers_match_the_entmax_package_at_any_magnitude(kind, scale):
    entmax = pytest.importorskip("entmax")
    from attnzoo.layers.normalizers import normalize

    gen = torch.Generator().manual_seed(5)
    scores = torch.randn(4, 3, 9, generator=gen) * scale
    keep = torch.rand(4, 1, 9, generator=gen) > 0.3
    keep[..., 0] = True
    ref = getattr(entmax, kind)(scores.double().masked_fill(~keep, float("-inf")), dim=-1)
    got = normalize(scores, keep, kind=kind)
    torch.testing.assert_close(got.sum(-1), torch.ones(4, 3))
    assert (got[~keep.expand_as(got)] == 0).all()
    if scale < 1e30:  # at 1e30 float32 and float64 round the scores differently; both are one-hot
        torch.testing.assert_close(got.double(), ref, atol=1e-5, rtol=1e-4)
    else:
        assert torch.equal(got.argmax(-1), ref.argmax(-1))


def test_sparsemax_layer_rows_sum_to_one_at_huge_scores():
    layer = Attention(16, num_heads=2, normalizer="sparsemax")
    x = torch.randn(2, 6, 16) * 1e4
    keep = _masks(2, 6)["middle"]
    _, weights = layer(x, keep, return_attention=True)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 6))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_is_the_complex_rotation_of_its_pairs(layout):
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(2, 3, 7, 8, generator=gen, dtype=DOUBLE)
    positions = torch.arange(4, 11)
    theta = 10000.0 ** (-torch.arange(0, 4, dtype=DOUBLE) * 2 / 8)
    turn = torch.polar(torch.ones(7, 4, dtype=DOUBLE), positions[:, None].double() * theta)
    if layout == "half":
        pairs = torch.complex(x[..., :4], x[..., 4:]) * turn
        want = torch.cat([pairs.real, pairs.imag], dim=-1)
    else:  # Meta's LLaMA: view_as_complex over adjacent pairs
        pairs = torch.view_as_complex(x.reshape(2, 3, 7, 4, 2).contiguous()) * turn
        want = torch.view_as_real(pairs).flatten(-2)
    torch.testing.assert_close(rotate(x, positions, 10000.0, layout), want)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_equals_the_two_halves_formula_bit_for_bit(layout):
    """RoPE is computed as x·c + partner(x)·s (four operations): exactly x_k cos - x_k' sin and
    x_k' cos + x_k sin, the pairs' formula written out, in float32 as in float64."""
    from attnzoo.layers.positions import rope_tables

    for dtype in (torch.float32, DOUBLE):
        x = torch.randn(2, 3, 7, 16, dtype=dtype) * 100
        positions = torch.arange(40, 47)
        cos, sin = rope_tables(positions, 16, 10000.0, like=x)
        if layout == "half":
            first, second = x[..., :8], x[..., 8:]
            want = torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)
        else:
            first, second = x[..., 0::2], x[..., 1::2]
            want = torch.stack([first * cos - second * sin, first * sin + second * cos], dim=-1).flatten(-2)
        assert torch.equal(rotate(x, positions, 10000.0, layout), want)


def test_interleaved_rope_matches_rotary_embedding_torch():
    rotary = pytest.importorskip("rotary_embedding_torch")
    peer = rotary.RotaryEmbedding(8)
    x = torch.randn(2, 3, 7, 8)
    torch.testing.assert_close(rotate(x, torch.arange(7), 10000.0, "interleaved"), peer.rotate_queries_or_keys(x))
    torch.testing.assert_close(
        rotate(x, torch.arange(5, 12), 10000.0, "interleaved"), peer.rotate_queries_or_keys(x, offset=5)
    )


def _naive(layer: Attention, x, keep=None, context=None, context_keep=None):
    """The core's formula written out in float64: projections, positions, pattern, normaliser, output."""
    from attnzoo.layers.normalizers import normalize

    source = x if context is None else context
    batch, seq, _ = x.shape
    length = source.shape[1]
    h, g = layer.num_heads, layer.num_kv_heads
    if keep is not None:
        x = x * keep[..., None]
        source = x if context is None else source
    if context_keep is not None:
        source = source * context_keep[..., None]

    def proj(t, name, n):
        y = F.linear(t, getattr(layer, name).weight, getattr(layer, name).bias if layer.bias else None)
        return y.view(batch, t.shape[1], n, -1).transpose(1, 2)

    q, k, v = proj(x, "q_proj", h), proj(source, "k_proj", g), proj(source, "v_proj", g)
    d = q.shape[-1]
    if layer.positions == "rope":
        q, k = rotate(q, torch.arange(seq), layer.rope_base), rotate(k, torch.arange(length), layer.rope_base)
    k, v = k.repeat_interleave(h // g, dim=1), v.repeat_interleave(h // g, dim=1)
    i, j = torch.arange(seq)[:, None], torch.arange(length)[None, :]
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    if layer.positions == "alibi":
        scores = scores - alibi_slopes(h).double()[:, None, None] * (j - i).abs()
    if layer.positions == "relpos":
        c = (j - i).clamp(-layer.max_relative_position, layer.max_relative_position) + layer.max_relative_position
        scores = scores + torch.einsum("bhid,ijd->bhij", q, layer.rel_key[c]) / math.sqrt(d)
    allowed = torch.ones(batch, 1, seq, length, dtype=torch.bool)
    if layer.causal:
        allowed = allowed & (j <= i)
    if layer.window is not None:
        allowed = allowed & ((j - i).abs() <= layer.window)
    key_keep = keep if context is None else context_keep
    if key_keep is not None:
        allowed = allowed & key_keep[:, None, None, :]
    weights = normalize(scores, allowed, kind=layer.normalizer)
    out = weights @ v
    if layer.positions == "relpos":
        out = out + torch.einsum("bhij,ijd->bhid", weights, layer.rel_value[c])
    out = out.transpose(1, 2).reshape(batch, seq, h * d)
    return F.linear(out, layer.o_proj.weight, layer.o_proj.bias if layer.bias else None)


COMBINATIONS = {
    "gqa_rope_causal_window": dict(num_heads=4, num_kv_heads=2, positions="rope", causal=True, window=3),
    "alibi_causal": dict(num_heads=4, positions="alibi", causal=True),
    "alibi_window": dict(num_heads=4, positions="alibi", window=2),
    "relpos_sparsemax": dict(num_heads=2, positions="relpos", max_relative_position=3, normalizer="sparsemax"),
    "relpos_causal_entmax": dict(
        num_heads=2, positions="relpos", max_relative_position=2, causal=True, normalizer="entmax15"
    ),
    "mqa_rope_bias": dict(num_heads=4, num_kv_heads=1, positions="rope", bias=True),
}


@pytest.mark.parametrize("name", sorted(COMBINATIONS))
@pytest.mark.parametrize("padding", ["none", "left", "middle", "empty"])
def test_combinations_equal_the_formula_written_out(name, padding):
    layer = _layer(**COMBINATIONS[name])
    x = torch.randn(2, 9, 32, dtype=DOUBLE)
    keep = _masks(2, 9)[padding]
    got = layer(x, keep)
    want = _naive(layer, x, keep)
    if keep is not None:  # padded queries' rows are free; the real ones must match
        got, want = got[keep], want[keep]
    torch.testing.assert_close(got, want)


def test_cross_attention_with_rope_and_gqa_equals_the_formula():
    layer = Attention(32, num_heads=4, num_kv_heads=2, positions="rope", context_dim=12).double()
    x, context = torch.randn(2, 5, 32, dtype=DOUBLE), torch.randn(2, 8, 12, dtype=DOUBLE)
    keep = _masks(2, 8)["middle"]
    torch.testing.assert_close(layer(x, context=context, context_mask=keep), _naive(layer, x, None, context, keep))


def test_gqa_tiled_checkpoints_convert_to_grouped_heads():
    """x-transformers shares key/value head n % g with query head n; attnzoo shares n // (h / g)."""
    torch.manual_seed(7)
    h, g, e = 6, 2, 24
    tiled = Attention(e, num_heads=h, num_kv_heads=g).double()
    x = torch.randn(2, 5, e, dtype=DOUBLE)
    q = F.linear(x, tiled.q_proj.weight).view(2, 5, h, -1).transpose(1, 2)
    k = F.linear(x, tiled.k_proj.weight).view(2, 5, g, -1).transpose(1, 2).repeat(1, h // g, 1, 1)  # tiled
    v = F.linear(x, tiled.v_proj.weight).view(2, 5, g, -1).transpose(1, 2).repeat(1, h // g, 1, 1)
    tiled_out = F.linear(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(2, 5, e), tiled.o_proj.weight)
    grouped = Attention(e, num_heads=h, num_kv_heads=g).double()
    state = dict(tiled.state_dict())
    state["q_proj.weight"] = tiled_to_grouped(state["q_proj.weight"], h, g)
    state["o_proj.weight"] = tiled_to_grouped(state["o_proj.weight"].t(), h, g).t()
    grouped.load_state_dict(state)
    torch.testing.assert_close(grouped(x), tiled_out)
    assert not torch.allclose(tiled(x), tiled_out)  # unconverted, the heads would pair wrongly


# -- the window in blocks ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "options",
    [
        dict(window=5),
        dict(window=5, causal=True),
        dict(window=16, num_kv_heads=2, positions="rope"),
        dict(window=4, causal=True, positions="alibi"),
        dict(window=3, positions="relpos", max_relative_position=2),
        dict(window=6, normalizer="entmax15"),
        dict(window=40, causal=True, num_kv_heads=2),  # blocks of 20 reaching two blocks back
        dict(window=37),  # blocks of 19, reaching 38 each way
    ],
)
@pytest.mark.parametrize("padding", ["none", "right", "left", "middle", "empty"])
def test_blocked_window_equals_the_masked_full_computation_forward_and_backward(options, padding, monkeypatch):
    if padding in ("left", "empty"):  # blocks one group at a time, as long inputs go
        monkeypatch.setattr(attend, "BLOCK_ELEMENTS", 2 * 2 * 3 * 16 * 8)
    layer = _layer(num_heads=4, **options)
    seq = 157  # several blocks and a ragged last one
    assert layer._use_blocks(seq, None, False)
    keep = _masks(2, seq)[padding]
    x = torch.randn(2, seq, 32, dtype=DOUBLE, requires_grad=True)
    blocked = layer(x, keep)
    layer._use_blocks = lambda *a: False  # the same layer, the full [T, T] computation
    full = layer(x, keep)
    real = torch.ones(2, seq, dtype=torch.bool) if keep is None else keep
    torch.testing.assert_close(blocked[real], full[real], atol=1e-5, rtol=1e-5)
    if padding == "empty":
        assert (blocked[1] == full[1]).all()  # the fully masked sample: rows of a zero input, both ways
    weights = torch.randn_like(blocked) * real[..., None]
    g_blocked, *p_blocked = torch.autograd.grad((blocked * weights).sum(), [x, *layer.parameters()])
    g_full, *p_full = torch.autograd.grad((full * weights).sum(), [x, *layer.parameters()])
    torch.testing.assert_close(g_blocked, g_full, atol=1e-5, rtol=1e-5)
    for a, b in zip(p_blocked, p_full, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_blocked_window_in_float32_and_bfloat16_is_finite_with_a_fully_masked_row():
    for dtype in (torch.float32, torch.bfloat16):
        layer = Attention(16, num_heads=2, window=4, causal=True).to(dtype)
        x = torch.randn(2, 200, 16, dtype=dtype, requires_grad=True)
        keep = _masks(2, 200)["empty"]
        out = layer(x, keep)
        out.float().sum().backward()
        assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()


# -- the cache ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "options",
    [
        dict(causal=True),
        dict(causal=True, positions="rope", num_kv_heads=2),
        dict(causal=True, positions="alibi"),
        dict(causal=True, positions="relpos", max_relative_position=3),
        dict(causal=True, window=3, positions="rope"),
        dict(causal=True, window=2, positions="alibi", normalizer="sparsemax"),
    ],
)
def test_cached_steps_equal_the_causal_forward(options):
    layer = _layer(num_heads=4, **options)
    seq = 12
    keep = _masks(2, seq)["left"]
    x = torch.randn(2, seq, 32, dtype=DOUBLE)
    full = layer(x, keep)
    cache = layer.new_cache(2)
    steps = torch.cat([layer(x[:, t : t + 1], keep[:, t : t + 1], cache=cache) for t in range(seq)], dim=1)
    torch.testing.assert_close(steps[keep], full[keep], atol=1e-5, rtol=1e-5)
    assert cache.length == seq
    assert len(cache) == (seq if layer.window is None else layer.window)
    assert cache.positions.tolist() == list(range(seq - len(cache), seq))
    # a prompt first, then one token at a time
    cache = layer.new_cache(2)
    prompt = layer(x[:, :5], keep[:, :5], cache=cache)
    rest = [layer(x[:, t : t + 1], keep[:, t : t + 1], cache=cache) for t in range(5, seq)]
    torch.testing.assert_close(torch.cat([prompt, *rest], dim=1)[keep], full[keep], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("grad", [False, True])
def test_a_cache_given_padding_only_after_unpadded_steps_equals_the_causal_forward(grad):
    """The cache keeps validity only from the first step given a mask (until then it builds no mask): the
    entries before that step count as real, in the in-place buffers (which grow past 16 entries here, the
    validity with them) and in the concatenated ones of autograd."""
    layer = _layer(num_heads=4, causal=True, positions="rope", num_kv_heads=2)
    seq = 20
    keep = torch.ones(2, seq, dtype=torch.bool)
    keep[1, 9] = keep[0, 12] = keep[1, 17] = False  # padding only from step 9 on
    x = torch.randn(2, seq, 32, dtype=DOUBLE, requires_grad=grad)
    full = layer(x, keep)
    cache = layer.new_cache(2)
    outs = [layer(x[:, :5], cache=cache)]  # an unpadded prompt, then unpadded steps
    outs += [layer(x[:, t : t + 1], cache=cache) for t in range(5, 9)]
    assert not cache.padded
    outs += [layer(x[:, t : t + 1], keep[:, t : t + 1], cache=cache) for t in range(9, seq)]
    assert cache.padded and torch.equal(cache.valid, keep)
    torch.testing.assert_close(torch.cat(outs, dim=1)[keep], full[keep], atol=1e-10, rtol=1e-10)


def test_cross_attention_cache_keeps_the_context_and_equals_the_full_call():
    layer = Attention(32, num_heads=4, positions="rope", context_dim=12).double()
    x, context = torch.randn(2, 6, 32, dtype=DOUBLE), torch.randn(2, 8, 12, dtype=DOUBLE)
    keep = _masks(2, 8)["right"]
    full = layer(x, context=context, context_mask=keep)
    cache = layer.new_cache(2)
    first = layer(x[:, :1], context=context, context_mask=keep, cache=cache)
    calls = []
    layer.k_proj.register_forward_hook(lambda *_: calls.append(1))  # the context's keys are made once
    later = [layer(x[:, t : t + 1], context=context.clone(), context_mask=keep, cache=cache) for t in range(1, 6)]
    torch.testing.assert_close(torch.cat([first, *later], dim=1), full)
    assert calls == []


def test_a_cache_refuses_another_context_and_another_layer():
    """Issue 44: a cross-attention cache given a different context kept the first one's keys (off by 0.95),
    and a cache filled by one layer was read by another."""
    layer = Attention(16, num_heads=2, context_dim=8)
    x, context = torch.randn(2, 3, 16), torch.randn(2, 5, 8)
    cache = layer.new_cache(2)
    layer(x[:, :1], context=context, cache=cache)
    with pytest.raises(ConfigError, match="different context. Pass the same context at every step"):
        layer(x[:, 1:2], context=context + 1, cache=cache)
    with pytest.raises(ConfigError, match="different context_mask"):
        layer(x[:, 1:2], context=context, context_mask=torch.ones(2, 5, dtype=torch.bool), cache=cache)
    context.mul_(2)  # changed in place: the kept keys are stale
    with pytest.raises(ConfigError, match="different context"):
        layer(x[:, 1:2], context=context, cache=cache)
    causal = Attention(16, num_heads=2, causal=True)
    shared = causal.new_cache(2)
    causal(x[:, :2], cache=shared)
    with pytest.raises(ConfigError, match="filled by another layer"):
        Attention(16, num_heads=2, causal=True)(x[:, 2:], cache=shared)
    loose = KVCache(2)  # made by hand: the first layer to fill it owns it
    causal(x[:, :1], cache=loose)
    with pytest.raises(ConfigError, match="filled by another layer"):
        Attention(16, num_heads=2, causal=True)(x[:, 1:2], cache=loose)


def test_cache_misuse_is_a_clear_error():
    with pytest.raises(ValueError, match="attention: a cache decodes step by step, which needs causal=True"):
        Attention(8)(torch.randn(1, 2, 8), cache=KVCache(1))
    layer = Attention(8, causal=True)
    with pytest.raises(ValueError, match="made for batch size 3"):
        layer(torch.randn(1, 2, 8), cache=layer.new_cache(3))
    with pytest.raises(ValueError, match="expects cache to come from layer.new_cache"):
        layer(torch.randn(1, 2, 8), cache={})
    with pytest.raises(ValueError, match="causal and window are patterns of self-attention"):
        layer(torch.randn(1, 2, 8), context=torch.randn(1, 3, 8))
    with pytest.raises(ValueError, match="context_mask without context"):
        Attention(8)(torch.randn(1, 2, 8), context_mask=torch.ones(1, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="grouped-query heads .* need layout='qkvo'"):
        Attention(8, num_heads=2, num_kv_heads=1, layout="packed")
    with pytest.raises(ValueError, match="positions must be one of none, rope, alibi, relpos"):
        Attention(8, positions="rotary")
    with pytest.raises(ValueError, match="attention expects context of shape \\[batch, context_seq, 8\\]"):
        Attention(8)(torch.randn(1, 2, 8), context=torch.randn(1, 3, 5))


# -- relative positions and linear attention at length ----------------------------------------------------
def test_relpos_in_query_chunks_equals_one_chunk(monkeypatch):
    layer = _layer(num_heads=2, positions="relpos", max_relative_position=4)
    x = torch.randn(2, 40, 32, dtype=DOUBLE, requires_grad=True)
    keep = _masks(2, 40)["middle"]
    whole, whole_w = layer(x, keep, return_attention=True)
    monkeypatch.setattr(attend, "CHUNK_ELEMENTS", 2 * 40 * 7)  # 7 queries per chunk: a ragged last chunk
    chunked, chunked_w = layer(x, keep, return_attention=True)
    torch.testing.assert_close(chunked, whole)
    torch.testing.assert_close(chunked_w, whole_w)
    torch.testing.assert_close(whole[keep], _naive(layer, x, keep)[keep])


@pytest.mark.parametrize("causal, window", [(True, None), (True, 5), (False, 5)])
def test_chunks_leave_out_the_keys_their_pattern_hides(monkeypatch, causal, window):
    """Issue 47: a chunk of queries under a causal or windowed pattern multiplies only the keys it can
    see (its scores are narrower than the sequence), and the result, weights included, equals the naive
    formula over all keys, with relative positions, a sparse normaliser and padding (an empty sample)."""
    layer = _layer(
        num_heads=2,
        num_kv_heads=1,
        positions="relpos",
        max_relative_position=4,
        causal=causal,
        window=window,
        normalizer="sparsemax",
    )
    x = torch.randn(2, 40, 32, dtype=DOUBLE)
    widths = []
    matmul = torch.matmul
    # the scores' product: keys [.., d = 16, keys]
    record = lambda a, b: widths.append(b.shape[-1]) if b.dim() == 4 and b.shape[-2] == 16 else None  # noqa: E731
    monkeypatch.setattr(attend.torch, "matmul", lambda a, b: record(a, b) or matmul(a, b))
    monkeypatch.setattr(attend, "CHUNK_ELEMENTS", 2 * 2 * 40 * 7)  # 7 queries per chunk
    for keep in (_masks(2, 40)["left"], _masks(2, 40)["empty"]):
        out, weights = layer(x, keep, return_attention=True)
        torch.testing.assert_close(out[keep], _naive(layer, x, keep)[keep])
        assert weights.shape == (2, 2, 40, 40) and torch.isfinite(out).all()
        i, j = torch.arange(40)[:, None], torch.arange(40)[None, :]
        hidden = (j > i) if causal else (j - i).abs() > window
        assert (weights[..., hidden] == 0).all()
    assert widths[0] == (7 if causal else 12)  # the first chunk: 7 queries see 7 keys (causal) or 7 + 5


def test_causal_linear_in_chunks_equals_the_running_sums():
    gen = torch.Generator().manual_seed(8)
    phi_q, phi_k = (torch.rand(2, 3, 150, 8, generator=gen, dtype=DOUBLE) for _ in range(2))
    v = torch.randn(2, 3, 150, 5, generator=gen, dtype=DOUBLE)
    scores = (phi_q @ phi_k.transpose(-1, -2)).tril()
    numerator, denominator = causal_linear(phi_q, phi_k, v, chunk=64)
    torch.testing.assert_close(numerator, scores @ v)
    torch.testing.assert_close(denominator, scores.sum(-1, keepdim=True))


# -- the kit's new properties can fail --------------------------------------------------------------------
class _LeakyCausal(Attention):
    """Declares causal but forgets the pattern."""

    def _pattern(self, q_pos, k_pos):
        return None


class _WideWindow(Attention):
    """Declares window=2 but attends to |j - i| <= 3."""

    def _pattern(self, q_pos, k_pos):
        return (k_pos[None, :] - q_pos[:, None]).abs() <= 3


class _ForgetfulCache(Attention):
    """Keeps nothing between steps."""

    def new_cache(self, batch_size):
        class Fresh(KVCache):
            def trim(self):
                self._start = self._end

        return Fresh(batch_size)


class _ContextMaskIgnored(Attention):
    def forward(self, x, mask=None, *, return_attention=False, context=None, context_mask=None, cache=None):
        if context is not None:
            context = torch.nan_to_num(context)
        return super().forward(x, mask, return_attention=return_attention, context=context, cache=cache)


def _subject(factory, **config):
    return Subject(
        name="broken",
        names=("broken", "attention"),
        convention=get_convention("sequence_to_sequence"),
        build=lambda dtype=None, device=None: factory(16, num_heads=2, **config).eval(),
    )


@pytest.mark.parametrize(
    "prop, factory, config",
    [
        ("causal", _LeakyCausal, {"causal": True}),
        ("window", _WideWindow, {"window": 2}),
        ("incremental", _ForgetfulCache, {"causal": True}),
        ("incremental", _LeakyCausal, {"causal": True}),
        ("cross", _ContextMaskIgnored, {}),
    ],
)
def test_the_new_kit_properties_catch_a_broken_layer(prop, factory, config):
    with pytest.raises(Failure):
        PROPERTIES[prop].check(_subject(factory, **config))
    PROPERTIES[prop].check(_subject(Attention, **config))  # the real core keeps the promise


def test_every_self_attention_name_builds_from_the_core():
    for name in ("qkv_self", "mha", "gqa", "alibi_self", "rope_self", "relpos_self", "local_self", "linear_self"):
        assert isinstance(attnzoo.create(name), Attention), name


# -- the attention step alone (attend_heads), as host libraries call it ------------------------------------------
@pytest.mark.parametrize(
    "config",
    [dict(causal=True, positions="alibi"), dict(window=2, normalizer="sparsemax"), dict(normalizer="entmax15")],
)
def test_attend_heads_on_the_layers_own_projections_is_the_layers_forward(config):
    torch.manual_seed(0)
    layer = Attention(16, num_heads=4, num_kv_heads=2, dtype=DOUBLE, **config)
    x = torch.randn(2, 7, 16, dtype=DOUBLE)
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[1, 5:] = False

    def heads(weight, n):  # [B, T, n·d] -> [B, n, T, d]
        return (x @ weight.T).view(2, 7, n, 4).transpose(1, 2)

    q, k, v = heads(layer.q_proj.weight, 4), heads(layer.k_proj.weight, 2), heads(layer.v_proj.weight, 2)
    out, weights = layer.attend_heads(q, k, v, mask[:, None, None, :], return_attention=True)
    full, expected = layer(x, mask, return_attention=True)
    # the forward zeroes padded inputs before projecting them: their own rows differ, the real ones not
    torch.testing.assert_close((out.transpose(1, 2).reshape(2, 7, 16) @ layer.o_proj.weight.T)[mask], full[mask])
    torch.testing.assert_close(weights.transpose(1, 2)[mask], expected.transpose(1, 2)[mask])


def test_attend_heads_takes_the_hosts_scale_positions_and_dropout():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 3, 4, generator=g, dtype=DOUBLE) for _ in range(3))
    layer = Attention(num_heads=2, positions="alibi", dropout=0.5).eval()
    out, _ = layer.attend_heads(
        q, k, v, q_positions=torch.tensor([7, 8, 9]), k_positions=torch.tensor([0, 8, 9]), scale=0.3
    )
    distance = (torch.tensor([7, 8, 9])[:, None] - torch.tensor([0, 8, 9])[None, :]).abs()
    scores = 0.3 * q @ k.transpose(-1, -2) - torch.tensor([2**-4, 2**-8], dtype=DOUBLE)[:, None, None] * distance
    torch.testing.assert_close(out, torch.softmax(scores, -1) @ v)  # eval: the layer's dropout is off
    layer.train()
    torch.testing.assert_close(layer.attend_heads(q, k, v, dropout=0.0)[0], layer.eval().attend_heads(q, k, v)[0])
    layer.train()
    assert not torch.allclose(layer.attend_heads(q, k, v)[0], layer.attend_heads(q, k, v, dropout=0.0)[0])


def test_attend_heads_says_what_it_expected():
    layer = Attention(num_heads=4, num_kv_heads=2)
    q, kv = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 5, 8)
    with pytest.raises(ValueError, match="4 query and 2 key/value heads"):
        layer.attend_heads(q, q, q)
    with pytest.raises(ValueError, match=r"\[batch, heads, length, head_dim\]"):
        layer.attend_heads(q[0], kv, kv)
    with pytest.raises(ValueError, match="bool tensor broadcasting to"):
        layer.attend_heads(q, kv, kv, torch.ones(1, 1, 3, 5))
    with pytest.raises(ValueError, match="q_positions"):
        layer.attend_heads(q, kv, kv, q_positions=torch.arange(5))


def test_the_compile_property_blames_the_variant_only_for_an_error_that_stays_with_torchs_caches_off(monkeypatch):
    attempts = []

    def flaky_compile(model):  # the first compile fails the way a stale or raced cache entry does
        attempts.append(torch.compiler.config.force_disable_caches)
        if len(attempts) == 1:
            raise KeyError("buf1")
        return model

    monkeypatch.setattr(torch, "compile", flaky_compile)
    PROPERTIES["compile"].check(_subject(Attention))
    assert attempts == [False, True]

    def broken_compile(model):
        attempts.append(torch.compiler.config.force_disable_caches)
        raise KeyError("buf1")

    attempts.clear()
    monkeypatch.setattr(torch, "compile", broken_compile)
    with pytest.raises(Failure, match="raised KeyError: 'buf1'; compiled again with torch's caches off, it raised"):
        PROPERTIES["compile"].check(_subject(Attention))
    assert attempts == [False, True]
