"""The families added for breadth, each against a naive float64 reference written out here with loops,
plus the properties their papers promise: torch's own MultiheadAttention for ``mha``, shift invariance
of relative positions, the window of ``local_self``, memory linear in T for ``linear_self``, exact zeros
of sparsemax and entmax."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import attnzoo
from attnzoo.layers.normalizers import entmax15, normalize, sparsemax

from . import reference as ref


def close(a, b, tol=1e-9):
    torch.testing.assert_close(a.double(), b.double(), atol=tol, rtol=tol)


def padded(batch, seq, lengths):
    mask = torch.zeros(batch, seq, dtype=torch.bool)
    for b, n in enumerate(lengths):
        mask[b, :n] = True
    return mask


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


def params(layer):
    return {k: v.detach() for k, v in layer.named_parameters()}


# -- a naive self-attention: one query, one head at a time -------------------------------------------------
def naive_self_attention(
    x,
    wq,
    wk,
    wv,
    wo,
    heads,
    kv_heads,
    mask,
    *,
    score_extra=None,
    value_extra=None,
    allowed=None,
    rotate=None,
    scale=None,
):
    """x [B, T, E] -> out [B, T, E], A [B, heads, T, T]; biases-free projections as plain matrix products.

    score_extra(h, i, j, q_i) adds to a score, value_extra(i, j) adds to a value, allowed(i, j) restricts
    the pattern, rotate(vec, t) turns a query or key at position t."""
    B, T, E = x.shape
    d = E // heads
    out = torch.zeros(B, T, E, dtype=torch.float64)
    att = torch.zeros(B, heads, T, T, dtype=torch.float64)
    for b in range(B):
        q = x[b].double() @ wq.double().T
        k = x[b].double() @ wk.double().T
        v = x[b].double() @ wv.double().T
        concat = torch.zeros(T, E, dtype=torch.float64)
        for h in range(heads):
            g = h // (heads // kv_heads)
            for i in range(T):
                qi = q[i, h * d : (h + 1) * d]
                if rotate is not None:
                    qi = rotate(qi, i)
                keep, scores = [], []
                for j in range(T):
                    kj = k[j, g * d : (g + 1) * d]
                    if rotate is not None:
                        kj = rotate(kj, j)
                    s = float(qi @ kj) * (scale if scale is not None else d**-0.5)
                    if score_extra is not None:
                        s += score_extra(h, i, j, qi)
                    scores.append(s)
                    keep.append(bool(mask[b, j]) and (allowed is None or allowed(i, j)))
                a = ref.softmax(scores, keep)
                att[b, h, i] = torch.tensor(a, dtype=torch.float64)
                row = torch.zeros(d, dtype=torch.float64)
                for j in range(T):
                    vj = v[j, g * d : (g + 1) * d]
                    if value_extra is not None:
                        vj = vj + value_extra(i, j)
                    row += a[j] * vj
                concat[i, h * d : (h + 1) * d] = row
        out[b] = concat @ wo.double().T
    return out, att


def _zeroed(x, mask):
    return x.masked_fill(~mask[..., None], 0.0)  # padding is read as zeros (documented)


# -- mha: nn.MultiheadAttention's state dict and outputs ----------------------------------------------------
@pytest.mark.parametrize("heads", [1, 4])
def test_mha_loads_torch_multihead_attention_and_matches_it(heads):
    torch_mha = torch.nn.MultiheadAttention(16, heads, batch_first=True).eval()
    layer = attnzoo.create("mha", num_heads=heads).eval()
    layer.load_state_dict(torch_mha.state_dict())  # as it is: in_proj_weight, in_proj_bias, out_proj.*
    x, mask = torch.randn(3, 6, 16), padded(3, 6, [6, 4, 1])
    want, want_att = torch_mha(x, x, x, key_padding_mask=~mask, need_weights=True, average_attn_weights=False)
    got, att = layer(x, mask, return_attention=True)
    real = mask  # torch computes padded queries from their values; attnzoo reads padding as zeros
    torch.testing.assert_close(got[real], want[real], atol=1e-6, rtol=1e-6)
    att = att if heads > 1 else att.unsqueeze(1)
    torch.testing.assert_close(att.transpose(1, 2)[real], want_att.transpose(1, 2)[real], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(layer(x), torch_mha(x, x, x, need_weights=False)[0], atol=1e-6, rtol=1e-6)


def test_mha_initialises_like_torch():
    torch.manual_seed(3)
    mine = attnzoo.create("mha", embed_dim=32, num_heads=4)
    torch.manual_seed(3)
    theirs = torch.nn.MultiheadAttention(32, 4, batch_first=True)
    for name, tensor in theirs.state_dict().items():
        assert float(tensor.std()) == pytest.approx(float(mine.state_dict()[name].std()), rel=0.25, abs=1e-6), name


# -- gqa, alibi, rope, relpos, local against the naive loops --------------------------------------------------
def _qkvo(layer):
    p = params(layer)
    return p["q_proj.weight"], p["k_proj.weight"], p["v_proj.weight"], p["o_proj.weight"]


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_gqa_matches_the_formula(kv_heads):
    layer = attnzoo.create("gqa", num_heads=4, num_kv_heads=kv_heads, dtype="float64")
    x, mask = torch.randn(2, 5, 16, dtype=torch.float64), padded(2, 5, [5, 3])
    out, att = layer(x, mask, return_attention=True)
    want, want_att = naive_self_attention(_zeroed(x, mask), *_qkvo(layer), 4, kv_heads, mask)
    close(out[mask], want[mask])
    close(att.transpose(1, 2)[mask], want_att.transpose(1, 2)[mask])
    close(layer(x, mask)[mask], want[mask])  # the fused path
    assert layer.k_proj.weight.shape == (16 // 4 * kv_heads, 16)


def test_alibi_matches_the_formula_and_its_slopes():
    assert attnzoo.layers.positions.alibi_slopes(8).tolist() == [2 ** (-i) for i in range(1, 9)]
    assert attnzoo.layers.positions.alibi_slopes(6).tolist()[:4] == [2 ** (-2 * i) for i in range(1, 5)]
    layer = attnzoo.create("alibi_self", num_heads=2, dtype="float64")
    x, mask = torch.randn(2, 6, 8, dtype=torch.float64), padded(2, 6, [6, 4])
    out, att = layer(x, mask, return_attention=True)
    slopes = [2.0**-4, 2.0**-8]
    want, want_att = naive_self_attention(
        _zeroed(x, mask), *_qkvo(layer), 2, 2, mask, score_extra=lambda h, i, j, q: -slopes[h] * abs(i - j)
    )
    close(out[mask], want[mask])
    close(att.transpose(1, 2)[mask], want_att.transpose(1, 2)[mask])
    close(layer(x, mask)[mask], want[mask])


def test_rope_matches_the_formula():
    layer = attnzoo.create("rope_self", num_heads=2, dtype="float64")
    x, mask = torch.randn(2, 6, 8, dtype=torch.float64), padded(2, 6, [6, 5])
    d = 4

    def rotate(vec, t):  # pairs (k, k + d/2) turn by t * 10000^(-2k/d)
        out = vec.clone()
        for kk in range(d // 2):
            angle = t * 10000 ** (-2 * kk / d)
            a, b = vec[kk], vec[kk + d // 2]
            out[kk] = a * math.cos(angle) - b * math.sin(angle)
            out[kk + d // 2] = a * math.sin(angle) + b * math.cos(angle)
        return out

    out, att = layer(x, mask, return_attention=True)
    want, want_att = naive_self_attention(_zeroed(x, mask), *_qkvo(layer), 2, 2, mask, rotate=rotate)
    close(out[mask], want[mask])
    close(att.transpose(1, 2)[mask], want_att.transpose(1, 2)[mask])


def test_relpos_matches_shaw_et_al():
    layer = attnzoo.create("relpos_self", num_heads=2, max_relative_position=2, dtype="float64")
    x, mask = torch.randn(2, 6, 8, dtype=torch.float64), padded(2, 6, [6, 4])
    layer(x, mask)
    p = params(layer)

    def clip(i, j):
        return max(-2, min(2, j - i)) + 2

    out, att = layer(x, mask, return_attention=True)
    want, want_att = naive_self_attention(
        _zeroed(x, mask),
        *_qkvo(layer),
        2,
        2,
        mask,
        score_extra=lambda h, i, j, q: float(q @ p["rel_key"][clip(i, j)]) / 2.0,
        value_extra=lambda i, j: p["rel_value"][clip(i, j)],
    )
    close(out[mask], want[mask])
    close(att.transpose(1, 2)[mask], want_att.transpose(1, 2)[mask])


@pytest.mark.parametrize("causal", [False, True])
def test_local_self_never_looks_beyond_its_window(causal):
    layer = attnzoo.create("local_self", num_heads=2, window=2, causal=causal, dtype="float64")
    x, mask = torch.randn(2, 9, 8, dtype=torch.float64), padded(2, 9, [9, 7])
    out, att = layer(x, mask, return_attention=True)
    i, j = torch.meshgrid(torch.arange(9), torch.arange(9), indexing="ij")
    outside = (i - j).abs() > 2
    if causal:
        outside |= j > i
    assert (att[:, :, outside] == 0).all() and (att[:, :, ~outside].sum() > 0)

    def allowed(a, b):
        return abs(a - b) <= 2 and (not causal or b <= a)

    want, _ = naive_self_attention(_zeroed(x, mask), *_qkvo(layer), 2, 2, mask, allowed=allowed)
    close(out[mask], want[mask])
    close(layer(x, mask)[mask], want[mask])


@pytest.mark.parametrize("name", ["alibi_self", "rope_self", "relpos_self"])
def test_left_padding_that_is_masked_changes_nothing_at_the_real_positions(name):
    """Relative positions depend only on j - i: moving the sequence right changes no score."""
    layer = attnzoo.create(name, num_heads=2, dtype="float64").eval()
    x = torch.randn(1, 5, 8, dtype=torch.float64)
    plain, plain_att = layer(x, return_attention=True)
    shifted = torch.cat([torch.randn(1, 3, 8, dtype=torch.float64) * 100, x], dim=1)
    mask = torch.tensor([[False] * 3 + [True] * 5])
    out, att = layer(shifted, mask, return_attention=True)
    close(out[:, 3:], plain, tol=1e-10)
    close(att[..., 3:, 3:], plain_att, tol=1e-10)


# -- linear attention ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
def test_linear_self_matches_the_formula(causal):
    layer = attnzoo.create("linear_self", num_heads=2, causal=causal, dtype="float64")
    x, mask = torch.randn(2, 6, 8, dtype=torch.float64), padded(2, 6, [6, 4])
    out, att = layer(x, mask, return_attention=True)
    wq, wk, wv, wo = _qkvo(layer)
    want = torch.zeros(2, 6, 8, dtype=torch.float64)
    for b in range(2):
        xb = _zeroed(x, mask)[b]
        q, k, v = xb @ wq.T, xb @ wk.T, xb @ wv.T
        concat = torch.zeros(6, 8, dtype=torch.float64)
        for h in range(2):
            sl = slice(4 * h, 4 * h + 4)
            for i in range(6):
                weights = []
                for j in range(6):
                    visible = bool(mask[b, j]) and (not causal or j <= i)
                    phi_q, phi_k = F.elu(q[i, sl]) + 1, F.elu(k[j, sl]) + 1
                    weights.append(float(phi_q @ phi_k) if visible else 0.0)
                total = sum(weights)
                concat[i, sl] = sum(w / total * v[j, sl] for j, w in enumerate(weights))
                if b == 1 and i < 4:
                    close(att[b, h, i], torch.tensor(weights, dtype=torch.float64) / total)
        want[b] = concat @ wo.T
    close(out[mask], want[mask])
    close(layer(x, mask)[mask], want[mask])


def test_linear_self_never_forms_the_t_by_t_matrix():
    """100,000 positions: a [T, T] float32 matrix per head would be 40 GB; linear attention needs kilobytes."""
    layer = attnzoo.create("linear_self", embed_dim=8, num_heads=2).eval()
    x = torch.randn(1, 100_000, 8)
    mask = torch.ones(1, 100_000, dtype=torch.bool)
    mask[0, 90_000:] = False
    with torch.no_grad():
        out = layer(x, mask)
        small = layer(x[:, :100], mask[:, :100])
    assert out.shape == (1, 100_000, 8) and torch.isfinite(out).all()
    # the first 100 positions of a non-causal layer see every key: they differ; a causal layer's would not
    assert not torch.allclose(out[:, :100], small, atol=1e-3)
    causal = attnzoo.create("linear_self", embed_dim=8, num_heads=2, causal=True).eval()
    causal.load_state_dict(layer.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(
            causal(x[:, :2000], mask[:, :2000])[:, :100], causal(x[:, :100], mask[:, :100]), atol=1e-5, rtol=1e-4
        )


# -- pooling -----------------------------------------------------------------------------------------------------
def test_structured_self_attention_and_its_penalty():
    layer = attnzoo.create("structured_self_attn", num_hops=3, attention_size=4, dtype="float64")
    x, mask = torch.randn(2, 5, 6, dtype=torch.float64), padded(2, 5, [5, 2])
    pooled, att = layer(x, mask, return_attention=True)
    w1, w2 = layer.W_s1.detach(), layer.W_s2.detach()
    for b in range(2):
        for r in range(3):
            scores = [float(w2[r] @ torch.tanh(w1 @ x[b, t])) for t in range(5)]
            a = ref.softmax(scores, [bool(m) for m in mask[b]])
            close(att[b, r], torch.tensor(a, dtype=torch.float64))
            close(pooled[b, r], ref.weighted_sum(a, x[b]))
    penalty = layer.penalty(att)
    want = sum(((att[b] @ att[b].T - torch.eye(3, dtype=torch.float64)) ** 2).sum() for b in range(2)) / 2
    close(penalty, want)
    empty = torch.zeros(1, 3, 5, dtype=torch.float64)  # a sample with nothing to attend to adds nothing
    close(layer.penalty(torch.cat([att, empty])), want)


def test_multihead_pooling_matches_the_set_transformer_block():
    layer = attnzoo.create("multihead_pool", num_seeds=2, num_heads=2, dtype="float64")
    x, mask = torch.randn(2, 5, 8, dtype=torch.float64), padded(2, 5, [5, 3])
    out, att = layer(x, mask, return_attention=True)
    p = params(layer)
    for b in range(2):
        q = p["seeds"] @ p["fc_q.weight"].T + p["fc_q.bias"]
        k = x[b] @ p["fc_k.weight"].T + p["fc_k.bias"]
        v = x[b] @ p["fc_v.weight"].T + p["fc_v.bias"]
        o = q.clone()
        for h in range(2):
            sl = slice(4 * h, 4 * h + 4)
            for s in range(2):
                a = ref.softmax(
                    [float(q[s, sl] @ k[t, sl]) / math.sqrt(8) for t in range(5)], [bool(m) for m in mask[b]]
                )
                close(att[b, h, s], torch.tensor(a, dtype=torch.float64))
                o[s, sl] += ref.weighted_sum(a, v[:, sl])
        o = F.layer_norm(o, (8,), p["ln0.weight"], p["ln0.bias"])
        o = o + torch.relu(o @ p["fc_o.weight"].T + p["fc_o.bias"])
        close(out[b], F.layer_norm(o, (8,), p["ln1.weight"], p["ln1.bias"]))


def test_perceiver_latent_has_n_outputs_whatever_t_and_matches_the_block():
    layer = attnzoo.create("perceiver_latent", num_latents=3, latent_dim=8, num_heads=2, dtype="float64")
    x, mask = torch.randn(2, 5, 6, dtype=torch.float64), padded(2, 5, [5, 2])
    out, att = layer(x, mask, return_attention=True)
    assert layer(torch.randn(2, 40, 6, dtype=torch.float64)).shape == out.shape == (2, 3, 8)
    p = params(layer)

    def ln(t, name):
        return F.layer_norm(t, t.shape[-1:], p[f"{name}.weight"], p[f"{name}.bias"])

    for b in range(2):
        lat = ln(p["latents"], "norm_latents") @ p["to_q.weight"].T
        inp = ln(x[b], "norm_inputs")
        k, v = inp @ p["to_k.weight"].T, inp @ p["to_v.weight"].T
        heads = torch.zeros(3, 8, dtype=torch.float64)
        for h in range(2):
            sl = slice(4 * h, 4 * h + 4)
            for n in range(3):
                a = ref.softmax([float(lat[n, sl] @ k[t, sl]) / 2.0 for t in range(5)], [bool(m) for m in mask[b]])
                close(att[b, h, n], torch.tensor(a, dtype=torch.float64))
                heads[n, sl] = ref.weighted_sum(a, v[:, sl])
        z = p["latents"] + heads @ p["to_out.weight"].T + p["to_out.bias"]
        hidden = F.gelu(ln(z, "norm_mlp") @ p["mlp_in.weight"].T + p["mlp_in.bias"])
        close(out[b], z + hidden @ p["mlp_out.weight"].T + p["mlp_out.bias"])


# -- normalisers ------------------------------------------------------------------------------------------------
def _bisect(z, transform):
    """The threshold τ with Σ transform(z - τ) = 1, found by bisection (no sorting, no closed form)."""
    lo, hi = float(z.max()) - 10, float(z.max())
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if float(transform(z - mid).sum()) > 1 else (lo, mid)
    return transform(z - (lo + hi) / 2)


@pytest.mark.parametrize(
    "kind, transform",
    [
        ("sparsemax", lambda d: d.clamp(min=0)),
        ("entmax15", lambda d: (d / 2).clamp(min=0) ** 2),
    ],
)
def test_sparse_normalizers_match_bisection_and_give_exact_zeros(kind, transform):
    fn = sparsemax if kind == "sparsemax" else entmax15
    for _ in range(20):
        z = torch.randn(9, dtype=torch.float64) * 2
        want = _bisect(z, transform) if kind == "sparsemax" else _bisect(z / 2, lambda d: d.clamp(min=0) ** 2)
        close(fn(z), want, tol=1e-12)
    z = torch.randn(4, 3, 10, dtype=torch.float64) * 3
    mask = torch.rand(4, 1, 10) > 0.3
    mask[3] = False
    p = normalize(z, mask, -1, kind)
    assert (p[~mask.expand_as(p)] == 0).all() and (p[3] == 0).all()
    close(p[:3].sum(-1), torch.ones(3, 3, dtype=torch.float64))
    assert (p[:3] == 0).sum() > (~mask[:3]).sum() * 3  # exact zeros beyond the masked keys
    z.requires_grad_()
    assert torch.autograd.gradcheck(lambda t: normalize(t, mask, -1, kind), (z,))


@pytest.mark.parametrize("name", ["dot", "general", "additive", "seq2seq_attn"])
@pytest.mark.parametrize("kind", ["sparsemax", "entmax15"])
def test_score_layers_take_a_normalizer_and_keep_every_promise(name, kind):
    from attnzoo.testing import check_model

    config = {**attnzoo.model_info(name).example, "normalizer": kind}
    report = check_model(name, config=config)
    assert report.ok, report.table()
    layer = attnzoo.create(name, normalizer=kind)
    q, k = torch.randn(2, 3, 8) * 3, torch.randn(2, 6, 8) * 3
    layer(q, k)
    if name in ("additive", "seq2seq_attn"):  # tanh bounds these scores: spread them so that some fall out
        with torch.no_grad():
            for p in layer.parameters():
                p.mul_(4)
    _, weights = layer(q, k)
    assert (weights == 0).any() and torch.allclose(weights.sum(-1), torch.ones(2, 3))


# -- HAN ----------------------------------------------------------------------------------------------------------
def test_han_equals_the_model_run_one_sentence_at_a_time_on_real_words_only():
    model = attnzoo.create(
        "han",
        vocab_size=30,
        num_classes=4,
        embed_dim=6,
        word_hidden=3,
        sentence_hidden=5,
        attention_size=4,
        dtype="float64",
    ).eval()
    tokens = torch.randint(1, 30, (2, 4, 5))
    tokens[0, 1, 3:] = 0  # a short sentence
    tokens[0, 3] = 0  # a padded sentence
    tokens[1, 2:] = 0
    logits, att = model(tokens, return_attention=True)
    for b in range(2):
        sentences = []
        word_weights = []
        for s in range(4):
            words = tokens[b, s][tokens[b, s] != 0]
            if len(words) == 0:
                continue
            h, _ = model.word_gru(model.embedding(words)[None])  # the sentence alone, unpadded
            pooled, a = model.word_attention(h, return_attention=True)
            sentences.append(pooled)
            word_weights.append(a[0])
        hs, _ = model.sentence_gru(torch.cat(sentences)[None])
        doc, beta = model.sentence_attention(hs, return_attention=True)
        close(logits[b], model.classifier(doc)[0], tol=1e-10)
        for s, a in enumerate(word_weights):
            close(att[b, s, : len(a)], beta[0, s] * a, tol=1e-10)
        close(att[b].sum(), torch.tensor(1.0, dtype=torch.float64), tol=1e-10)


# -- vision blocks ---------------------------------------------------------------------------------------------------
def test_vision_blocks_match_their_formulas():
    x = torch.randn(2, 8, 5, 6, dtype=torch.float64)

    se = attnzoo.create("se", channels=8, reduction=2, dtype="float64")
    gap = x.mean(dim=(2, 3))
    gates = torch.sigmoid(F.linear(torch.relu(F.linear(gap, se.fc1.weight, se.fc1.bias)), se.fc2.weight, se.fc2.bias))
    close(se(x), x * gates[:, :, None, None])

    eca = attnzoo.create("eca", channels=8, dtype="float64")
    assert eca.kernel_size == 3  # |(log2 8 + 1) / 2| = 2 -> the next odd, 3
    w = eca.conv.weight[0, 0]
    padded_gap = F.pad(gap, (1, 1))
    conv = torch.stack([(padded_gap[:, c : c + 3] * w).sum(-1) for c in range(8)], dim=1)
    close(eca(x), x * torch.sigmoid(conv)[:, :, None, None])

    cbam = attnzoo.create("cbam", channels=8, reduction=2, kernel_size=3, dtype="float64")

    def mlp(v):
        return F.linear(torch.relu(F.linear(v, cbam.fc1.weight, cbam.fc1.bias)), cbam.fc2.weight, cbam.fc2.bias)

    xc = x * torch.sigmoid(mlp(x.mean(dim=(2, 3))) + mlp(x.amax(dim=(2, 3))))[:, :, None, None]
    desc = torch.stack([xc.mean(1), xc.amax(1)], dim=1)
    close(cbam(x), xc * torch.sigmoid(F.conv2d(desc, cbam.spatial.weight, padding=1)))

    ext = attnzoo.create("external_attn", channels=8, memory_size=5, dtype="float64")
    tokens = x.flatten(2).transpose(1, 2)  # [B, 30, 8]
    a = torch.exp(tokens @ ext.memory_key.weight.T)
    a = a / a.sum(dim=1, keepdim=True)
    a = a / a.sum(dim=2, keepdim=True)
    close(ext(x), (a @ ext.memory_value.weight.T).transpose(1, 2).reshape(2, 8, 5, 6))

    nl = attnzoo.create("non_local", channels=8, dtype="float64").eval()
    assert torch.equal(nl(x), x)  # the output BatchNorm starts at gamma = 0: the identity
    with torch.no_grad():
        nl.bn.weight.normal_()
    theta, phi, g = (conv(x).flatten(2) for conv in (nl.theta, nl.phi, nl.g))  # [B, 4, 30]
    f = torch.softmax(theta.transpose(1, 2) @ phi, dim=-1)  # [B, 30, 30]
    y = (f @ g.transpose(1, 2)).transpose(1, 2).reshape(2, 4, 5, 6)
    close(nl(x), x + nl.bn(nl.w_z(y)))

    coord = attnzoo.create("coord_attn", channels=8, reduction=4, dtype="float64").eval()
    h_pool, w_pool = x.mean(dim=3, keepdim=True), x.mean(dim=2, keepdim=True).transpose(2, 3)
    y = F.hardswish(coord.bn(coord.conv1(torch.cat([h_pool, w_pool], dim=2))))
    gate_h = torch.sigmoid(coord.conv_h(y[:, :, :5]))
    gate_w = torch.sigmoid(coord.conv_w(y[:, :, 5:].transpose(2, 3)))
    close(coord(x), x * gate_h * gate_w)


def test_vision_blocks_refuse_the_wrong_channels():
    for name in ("se", "eca", "cbam", "coord_attn", "non_local", "external_attn"):
        layer = attnzoo.create(name, channels=8)
        with pytest.raises(
            ValueError, match=rf"{name} expects x of shape \[batch, 8, height, width\], got \[2, 3, 4, 4\]"
        ):
            layer(torch.randn(2, 3, 4, 4))
