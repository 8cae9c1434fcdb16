"""Each seed variant against an independent reference: the naive float64 loops of tests/reference.py and
the seeds' own code (tests/seeds.py), plus masks, shapes and error messages."""

from __future__ import annotations

import pytest
import torch

import attnzoo

from . import reference as ref
from .seeds import Seed000Attention, Seed001SelfAttention, Seed003Attention, Seed004MultiLabelAttention

TOL = dict(atol=1e-6, rtol=1e-6)


def close(actual, expected, **tol):
    torch.testing.assert_close(actual.double(), expected.double(), **(tol or TOL))


def padded_mask(batch, seq, lengths):
    mask = torch.zeros(batch, seq, dtype=torch.bool)
    for b, n in enumerate(lengths):
        mask[b, :n] = True
    return mask


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


# -- formulas against the naive loops ----------------------------------------------------------------
@pytest.mark.parametrize("name", ["labelwise", "labelwise_batched"])
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_labelwise_matches_the_formula(name, shared, masked):
    layer = attnzoo.create(name, num_labels=4, hidden_size=6, shared_output=shared)
    with torch.no_grad():
        layer.bo.normal_()
    x = torch.randn(3, 5, 6)
    mask = padded_mask(3, 5, [5, 2, 0]) if masked else None
    wa = layer.query_matrix().detach()
    expected_logits, expected_att = ref.labelwise(x, wa, layer.Wo.detach(), layer.bo.detach(), mask)
    logits, att = layer(x, mask, return_attention=True)
    close(logits, expected_logits)
    close(att, expected_att)
    close(layer(x, mask), expected_logits)  # the fused path, no weights kept


def test_labelwise_probabilities_on_request():
    layer = attnzoo.create("labelwise_batched", num_labels=3, hidden_size=4, output="probs")
    x = torch.randn(2, 5, 4)
    logits = attnzoo.create("labelwise_batched", num_labels=3, hidden_size=4)
    logits.load_state_dict(layer.state_dict())
    close(layer(x), torch.sigmoid(logits(x)))


def test_labelwise_and_batched_agree_and_load_each_other():
    per_label = attnzoo.create("labelwise", num_labels=5, hidden_size=8)
    batched = attnzoo.create("labelwise_batched", num_labels=5, hidden_size=8)
    batched.load_state_dict(per_label.state_dict())
    assert sorted(per_label.state_dict()) == sorted([f"Wa_list.{i}" for i in range(5)] + ["Wo", "bo"])
    assert sorted(batched.state_dict()) == ["Wa", "Wo", "bo"]
    x, mask = torch.randn(4, 9, 8), padded_mask(4, 9, [9, 3, 1, 6])
    close(batched(x, mask), per_label(x, mask))
    back = attnzoo.create("labelwise", num_labels=5)  # lazy, loading the batched layout
    back.load_state_dict(batched.state_dict())
    close(back(x, mask), per_label(x, mask))


def test_labelwise_reproduces_seed_004_with_its_state_dict():
    seed = Seed004MultiLabelAttention(hidden_size=6, num_labels=4, return_attention=True)
    with torch.no_grad():
        for p in seed.Wa_list:
            p.mul_(0.3)  # the seed's randn init saturates the softmax; keep the comparison informative
    layer = attnzoo.create("labelwise", num_labels=4, shared_output=True, output="probs")
    layer.load_state_dict(seed.state_dict())  # same keys: Wa_list.i, Wo [h], bo
    x, mask = torch.randn(3, 7, 6), padded_mask(3, 7, [7, 4, 2])
    expected, expected_att = seed(x, mask)
    probs, att = layer(x, mask, return_attention=True)
    close(probs, expected)
    close(att, expected_att)


def test_keras_attn_matches_the_formula_and_seed_000():
    layer = attnzoo.create("keras_attn", num_classes=3)
    x, mask = torch.randn(2, 6, 5), padded_mask(2, 6, [6, 3])
    out, att = layer(x, mask, return_attention=True)
    expected, expected_att = ref.keras_attn(x, layer.Ws.detach(), mask)
    close(out, expected)
    close(att, expected_att)
    seed = Seed000Attention(class_num=3, embedding_length=5)
    seed.load_state_dict(layer.state_dict())
    close(layer(x), seed(x))


def test_keras_attn_cannot_focus_on_long_inputs():
    # tanh bounds scores to [-1, 1]: the largest weight is 1 / (1 + (T-1) e^-2) whatever Ws is
    layer = attnzoo.create("keras_attn", num_classes=1, embed_dim=4)
    with torch.no_grad():
        layer.Ws.fill_(100.0)
    T = 50
    x = -torch.ones(1, T, 4)
    x[0, 0] = 1.0
    _, att = layer(x, return_attention=True)
    bound = 1 / (1 + (T - 1) * torch.exp(torch.tensor(-2.0)))
    close(att[0, 0, 0], bound, atol=1e-4, rtol=1e-4)


def test_attn_pool_matches_the_formula():
    layer = attnzoo.create("attn_pool", attention_size=4)
    x, mask = torch.randn(3, 6, 5), padded_mask(3, 6, [6, 2, 4])
    pooled, att = layer(x, mask, return_attention=True)
    expected, expected_att = ref.attn_pool(x, layer.W.detach(), layer.b.detach(), layer.v.detach(), mask)
    close(pooled, expected)
    close(att, expected_att)
    close(layer(x, mask), expected)  # fused path


@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("mask_kind", [None, "padding", "square"])
def test_qkv_self_matches_the_formula(heads, mask_kind):
    layer = attnzoo.create("qkv_self", num_heads=heads)
    x = torch.randn(2, 5, 4)
    mask = None
    if mask_kind == "padding":
        mask = padded_mask(2, 5, [5, 3])
    elif mask_kind == "square":
        mask = torch.tril(torch.ones(5, 5, dtype=torch.bool)).expand(2, 5, 5)
    out, att = layer(x, mask, return_attention=True)
    p = {n: t.detach() for n, t in layer.named_parameters()}
    if mask_kind == "padding":  # positions no query attends to are read as zeros, whatever they hold
        x = x.masked_fill(~mask[..., None], 0.0)
    expected, expected_att = ref.qkv_self(
        x,
        p["query.weight"],
        p["query.bias"],
        p["key.weight"],
        p["key.bias"],
        p["value.weight"],
        p["value.bias"],
        heads,
        mask,
    )
    close(out, expected)
    close(att, expected_att.squeeze(1) if heads == 1 else expected_att)
    close(layer(x, mask), expected)


def test_qkv_self_loads_seed_001_and_agrees_with_it():
    seed = Seed001SelfAttention(feature_size=6)
    layer = attnzoo.create("qkv_self")
    layer.load_state_dict(seed.state_dict())  # query.weight, key.bias, ... as the seed names them
    x, mask = torch.randn(2, 5, 6), padded_mask(2, 5, [5, 2])
    square = mask[:, None, :].expand(2, 5, 5)  # the seed's mask broadcasts against [B, T, T]
    expected, expected_att = seed(x, square)
    out, att = layer(x, mask, return_attention=True)
    for b, n in enumerate([5, 2]):  # real positions; padded rows are free (here: those of a zero input)
        close(out[b, :n], expected[b, :n])
        close(att[b, :n], expected_att[b, :n])


def test_qkv_self_refuses_the_seeds_2d_input_and_says_why():
    layer = attnzoo.create("qkv_self")
    with pytest.raises(
        ValueError,
        match=r"qkv_self expects x of shape \[batch, seq, embed_dim\], got \[8, 256\]"
        r".*attend across the samples of the batch",
    ):
        layer(torch.randn(8, 256))


def test_dot_general_additive_match_their_formulas():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 7)
    mask = padded_mask(2, 5, [5, 2])
    for scaled in (False, True):
        layer = attnzoo.create("dot", scaled=scaled)
        ctx, att = layer(q, k, v, mask)
        e_ctx, e_att = ref.scored(q, k, v, ref.dot, mask, 4**-0.5 if scaled else 1.0)
        close(ctx, e_ctx)
        close(att, e_att)

    q6 = torch.randn(2, 3, 6)
    layer = attnzoo.create("general")
    ctx, att = layer(q6, k, v, mask)
    e_ctx, e_att = ref.scored(q6, k, v, ref.general_score(layer.weight.detach()), mask)
    close(ctx, e_ctx)
    close(att, e_att)

    layer = attnzoo.create("additive", attention_size=3, scaled=True)
    ctx, att = layer(q6, k, None, mask)
    score = ref.additive_score(
        layer.query_proj.detach(), layer.key_proj.detach(), layer.bias.detach(), layer.v.detach()
    )
    e_ctx, e_att = ref.scored(q6, k, k, score, mask, 3**-0.5)
    close(ctx, e_ctx)
    close(att, e_att)


@pytest.mark.parametrize("method, name", [("dot", "dot"), ("mul", "general"), ("add", "additive")])
def test_scores_agree_with_seed_003_fixed(method, name):
    q, k = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    seed = Seed003Attention(4, 4, method)
    if name == "dot":
        layer = attnzoo.create("dot")
    elif name == "general":
        layer = attnzoo.create("general", scaled=True)
        layer(q, k)
        with torch.no_grad():  # the seed's W applies to the query: q W^T k, ours q W k
            layer.weight.copy_(seed.transform.weight.T)
    else:
        layer = attnzoo.create("additive")
        layer(q, k)
        with torch.no_grad():
            layer.query_proj.copy_(seed.query_transform.weight)
            layer.key_proj.copy_(seed.key_transform.weight)
            layer.bias.zero_()
            layer.v.copy_(seed.v)
    _, weights = layer(q, k)
    close(weights, seed(q, k))


@pytest.mark.parametrize("score", ["dot", "general", "additive"])
def test_seq2seq_attn_matches_luong(score):
    layer = attnzoo.create("seq2seq_attn", score=score, output_size=5)
    dec, enc = torch.randn(2, 3, 4), torch.randn(2, 6, 4)
    mask = padded_mask(2, 6, [6, 4])
    out, att = layer(dec, enc, mask)
    if score == "dot":
        fn = ref.dot
    elif score == "general":
        fn = ref.general_score(layer.attention.weight.detach())
    else:
        a = layer.attention
        fn = ref.additive_score(a.query_proj.detach(), a.key_proj.detach(), a.bias.detach(), a.v.detach())
    expected, expected_att = ref.seq2seq(dec, enc, fn, layer.combine.weight.detach(), mask)
    close(out, expected)
    close(att, expected_att)
    assert out.shape == (2, 3, 5)


def test_seq2seq_steps_are_independent():
    """Greedy decoding calls it one step at a time; the result must equal the teacher-forced call."""
    layer = attnzoo.create("seq2seq_attn")
    dec, enc, mask = torch.randn(2, 4, 6), torch.randn(2, 5, 6), padded_mask(2, 5, [5, 3])
    full, _ = layer(dec, enc, mask)
    steps = torch.cat([layer(dec[:, t : t + 1], enc, mask)[0] for t in range(4)], dim=1)
    close(steps, full)


# -- masks ---------------------------------------------------------------------------------------------
# Padding, garbage in masked positions and fully masked rows are checked for every registered variant by
# the conformance kit (tests/test_conformance.py); here, what is specific to the mask convention.


def test_no_large_negative_literal_masks_in_the_library():
    """Masked scores use finfo(dtype).min or SDPA's boolean mask: a literal -1e9 overflows float16."""
    import ast
    import io
    import tokenize
    from pathlib import Path

    offenders = []
    package = Path(attnzoo.__file__).parent
    # where masks are applied; the conformance kit (testing/) fills padding with large values on purpose
    for path in [*package.joinpath("layers").rglob("*.py"), *package.joinpath("models").rglob("*.py")]:
        previous = None
        lines = path.read_text().splitlines()
        for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            # Keras's own constants, used only to reproduce Keras's arithmetic (keras_semantics), are one
            # named table in keras_layers.py whose lines say so
            line = lines[tok.start[0] - 1] if tok.start[0] <= len(lines) else ""
            allowed = path.name == "keras_layers.py" and "keras-constant" in line
            if tok.type == tokenize.NUMBER and abs(ast.literal_eval(tok.string)) >= 1e4 and not allowed:
                # a mask fill: -10000, -1e9, or any float written with a large exponent (1e9, 1e4)
                negative = previous is not None and previous.string == "-"
                if negative or "e" in tok.string.lower():
                    offenders.append(f"{path.name}:{tok.start[0]} {tok.string}")
            if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
                previous = tok
    assert offenders == []


def test_masks_must_be_boolean_with_a_helpful_message():
    layer = attnzoo.create("attn_pool")
    x = torch.randn(2, 4, 3)
    with pytest.raises(ValueError, match="boolean mask .*True = attend"):
        layer(x, mask=torch.zeros(2, 4))
    with pytest.raises(ValueError, match=r"mask of shape \[2, 4\]"):
        layer(x, mask=torch.ones(2, 5, dtype=torch.bool))
    from attnzoo.layers.core import from_key_padding_mask

    kpm = torch.tensor([[False, False, True, True], [False] * 4])
    close(layer(x, mask=from_key_padding_mask(kpm)), layer(x, mask=~kpm))
    close(layer(x, mask=(~kpm).int()), layer(x, mask=~kpm))  # 0/1 integer masks are fine


# -- wrong inputs ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, config, bad, message",
    [
        (
            "labelwise",
            dict(num_labels=3, hidden_size=256),
            (torch.randn(8, 300),),
            r"labelwise expects x of shape \[batch, seq, 256\], got \[8, 300\]",
        ),
        (
            "labelwise_batched",
            dict(num_labels=3, hidden_size=4),
            (torch.randn(2, 5, 6),),
            r"labelwise_batched expects x of shape \[batch, seq, 4\], got \[2, 5, 6\]",
        ),
        (
            "keras_attn",
            dict(num_classes=2),
            (torch.randn(3, 4),),
            r"keras_attn expects x of shape \[batch, seq, embed_dim\], got \[3, 4\]",
        ),
        (
            "attn_pool",
            dict(hidden_size=4),
            (torch.randn(2, 5, 3),),
            r"attn_pool expects x of shape \[batch, seq, 4\], got \[2, 5, 3\]",
        ),
        (
            "general",
            dict(query_size=4, key_size=5),
            (torch.randn(2, 3, 4), torch.randn(2, 6, 4)),
            r"general expects key of shape \[2, key_len, 5\], got \[2, 6, 4\]",
        ),
        (
            "dot",
            {},
            (torch.randn(2, 3, 4), torch.randn(2, 6, 5)),
            r"dot expects key of shape \[2, key_len, 4\], got \[2, 6, 5\]. The score compares query and key",
        ),
        (
            "seq2seq_attn",
            {},
            (torch.randn(2, 3), torch.randn(2, 6, 4)),
            r"seq2seq_attn expects decoder_out of shape \[batch, dec_len, decoder_size\], got \[2, 3\]",
        ),
        (
            "cnn_bilstm_attn",
            dict(num_classes=2, backbone="test_resnet"),
            (torch.randn(2, 3, 32, 32),),
            r"cnn_bilstm_attn expects x of shape \[batch, 5, freq, time\], got \[2, 3, 32, 32\]",
        ),
    ],
)
def test_wrong_rank_or_size_names_the_variant_and_both_shapes(name, config, bad, message):
    layer = attnzoo.create(name, **config)
    with pytest.raises(ValueError, match=message):
        layer(*bad)


def test_token_ids_are_refused_with_a_hint():
    with pytest.raises(ValueError, match="floating tensor.*embed token ids first"):
        attnzoo.create("attn_pool")(torch.randint(0, 9, (2, 5, 3)))


# -- the seed 001 model --------------------------------------------------------------------------------
def test_cnn_bilstm_attn_keeps_samples_independent():
    """The seed's LSTM ran across the batch: sample 0's output changed with sample 1. Not here."""
    model = attnzoo.create("cnn_bilstm_attn", num_classes=3, backbone="test_resnet", lstm_hidden=8).eval()
    x = torch.randn(2, 5, 32, 48)
    alone = model(x[:1])
    x2 = x.clone()
    x2[1] = torch.randn_like(x2[1]) * 10
    close(model(x2)[:1], alone, atol=1e-5, rtol=1e-5)


def test_cnn_bilstm_attn_pools_over_time_with_a_mask():
    model = attnzoo.create("cnn_bilstm_attn", num_classes=3, backbone="test_resnet", lstm_hidden=8).eval()
    x = torch.randn(2, 5, 32, 64)
    mask = padded_mask(2, 64, [64, 32])
    logits, weights = model(x, mask, return_attention=True)
    assert logits.shape == (2, 3) and weights.shape == (2, 2)  # test_resnet reduces 64 frames by 32
    assert weights[1, 1] == 0 and torch.allclose(weights.sum(-1), torch.ones(2))


def test_masked_softmax_leaves_the_callers_scores_alone():
    """The layers fill their own fresh scores in place; the public helper must not touch the caller's."""
    from attnzoo.layers.core import masked_softmax

    scores = torch.randn(2, 3, 5)
    before = scores.clone()
    mask = torch.tensor([[True, True, False, False, True], [False] * 5])[:, None, :]
    weights = masked_softmax(scores, mask)
    assert torch.equal(scores, before)
    expected = torch.where(mask, before, torch.tensor(float("-inf"))).softmax(-1).nan_to_num(0.0)
    torch.testing.assert_close(weights, expected)


def _attend_by_rows(q, k, v, mask):
    """softmax(q k^T / sqrt(E)) v one query row at a time over its allowed keys only; a row with no key is zeros."""
    rows, maps = [], []
    for b in range(q.shape[0]):
        for i in range(q.shape[1]):
            keep = mask[b, i].nonzero().flatten()
            weights = torch.zeros(k.shape[1], dtype=q.dtype)
            if keep.numel():
                weights = weights.index_put((keep,), torch.softmax(k[b, keep] @ q[b, i] / q.shape[-1] ** 0.5, 0))
            maps.append(weights)
            rows.append(weights @ v[b])
    shape = q.shape[:2]
    return torch.stack(rows).view(*shape, -1), torch.stack(maps).view(*shape, -1)


@pytest.mark.parametrize("keys", [6, 20])  # 6 <= 2·E: the explicit route on the CPU; 20: SDPA's
@pytest.mark.parametrize("return_attention", [False, True])
def test_attend_gradients_match_the_row_by_row_formula(keys, return_attention):
    """The cores fill masked scores in place outside autograd (no fill backward); every gradient must still
    be the formula's, with padding, a causal pattern and a query row that has no key at all."""
    from attnzoo.layers.core import attend

    q, k, v = (torch.randn(2, 5 if n == "q" else keys, 4, dtype=torch.float64) for n in "qkv")
    mask = torch.ones(2, 5, keys, dtype=torch.bool)
    mask[0, :, keys - 2 :] = False  # padding
    mask[1] = torch.ones(5, keys, dtype=torch.bool).tril()
    mask[1, 3] = False  # no key at all
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out, weights = attend(*(t.unsqueeze(1) for t in leaves), mask.unsqueeze(1), return_attention=return_attention)
    ref_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    ref_out, ref_weights = _attend_by_rows(*ref_leaves, mask)
    g_out, g_weights = torch.randn_like(ref_out), torch.randn_like(ref_weights)
    loss = (out.squeeze(1) * g_out).sum()
    ref_loss = (ref_out * g_out).sum()
    if return_attention:
        close(weights.squeeze(1), ref_weights)
        loss = loss + (weights.squeeze(1) * g_weights).sum()
        ref_loss = ref_loss + (ref_weights * g_weights).sum()
    close(out.squeeze(1), ref_out)
    loss.backward()
    ref_loss.backward()
    for name, leaf, ref_leaf in zip("qkv", leaves, ref_leaves, strict=True):
        torch.testing.assert_close(leaf.grad, ref_leaf.grad, atol=1e-10, rtol=1e-8, msg=f"gradient of {name}")
