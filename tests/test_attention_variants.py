"""The attention variants of the newer families (issue 68): ``softcap`` (Gemma 2), ``qknorm`` (Qwen3, Gemma 3),
``t5_bias`` (T5) and ``local_global`` (Gemma 2 and 3), each against its formula written out one score at a
time in float64, and against transformers' own code where it has the piece: T5's buckets and attention,
Qwen3's attention, Gemma 2's soft-capped attention step, Gemma's layer types and sliding-window mask. The
conformance kit runs over every card in test_conformance.py; the causal forms the cards' examples leave out
are checked here."""

from __future__ import annotations

import math
import warnings
from types import SimpleNamespace

import pytest
import torch

import attnzoo
from attnzoo.errors import ConfigError
from attnzoo.layers.positions import t5_buckets
from attnzoo.testing import check_model

from .reference import dot, matvec, softmax, weighted_sum

DOUBLE = torch.float64
NEW = ("softcap", "qknorm", "t5_bias", "local_global")


def _t5_bucket(relative, **options):
    """transformers' T5 buckets (imported where a test asks: the module takes seconds to import)."""
    pytest.importorskip("transformers")
    from transformers.models.t5.modeling_t5 import T5Attention

    return T5Attention._relative_position_bucket(relative, **options)


def _create(name: str, **config) -> torch.nn.Module:
    """The variant with every parameter drawn at random (norm scales and T5's table included), in float64."""
    torch.manual_seed(3)
    layer = attnzoo.create(name, embed_dim=16, **config).to(DOUBLE)
    with torch.no_grad():
        for pname, p in layer.named_parameters():
            p.copy_(1 + 0.3 * torch.randn_like(p) if "norm" in pname else 0.6 * torch.randn_like(p))
    return layer


def _rope(v: torch.Tensor, t: int, base: float) -> torch.Tensor:
    """RoPE in the half layout at position t: dimension k turns with k + d/2 by t · base^(-2k/d)."""
    d = v.shape[0]
    out = v.clone()
    for k in range(d // 2):
        angle = t * base ** (-2 * k / d)
        c, s = math.cos(angle), math.sin(angle)
        out[k] = v[k] * c - v[k + d // 2] * s
        out[k + d // 2] = v[k + d // 2] * c + v[k] * s
    return out


def _rms(v: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    return gamma * v / math.sqrt(sum(float(a) ** 2 for a in v) / v.shape[0] + 1e-6)


def _naive(layer, x, keep=None, *, allowed=lambda i, j: True, bias=lambda h, i, j: 0.0, cap=None, base=None):
    """The layer's formula one score at a time: projections, (RMS norm), (RoPE), q·k / sqrt(d) + bias, (the
    cap c·tanh(s / c)), softmax over the allowed real keys, the weighted values, the output projection."""
    batch, seq, embed = x.shape
    h, g = layer.num_heads, layer.num_kv_heads
    d = embed // h
    weight = {name: getattr(layer, f"{name}_proj").weight.detach() for name in "qkvo"}
    out = torch.zeros(batch, seq, embed, dtype=DOUBLE)
    for b in range(batch):
        rows = {n: [torch.tensor(matvec(weight[n], x[b, t]), dtype=DOUBLE) for t in range(seq)] for n in "qkv"}
        for n in range(h):
            kv = n // (h // g)  # grouped: adjacent query heads share a key/value head
            qs = [r[n * d : (n + 1) * d] for r in rows["q"]]
            ks = [r[kv * d : (kv + 1) * d] for r in rows["k"]]
            vs = [r[kv * d : (kv + 1) * d] for r in rows["v"]]
            if layer.qk_norm:
                qs = [_rms(v, layer.q_norm.weight.detach()) for v in qs]
                ks = [_rms(v, layer.k_norm.weight.detach()) for v in ks]
            if base is not None:
                qs = [_rope(v, t, base) for t, v in enumerate(qs)]
                ks = [_rope(v, t, base) for t, v in enumerate(ks)]
            for i in range(seq):
                scores = [dot(qs[i], ks[j]) / math.sqrt(d) + bias(n, i, j) for j in range(seq)]
                if cap is not None:
                    scores = [cap * math.tanh(s / cap) for s in scores]
                kept = [allowed(i, j) and (keep is None or bool(keep[b, j])) for j in range(seq)]
                out[b, i, n * d : (n + 1) * d] = weighted_sum(softmax(scores, kept), vs)
        out[b] = torch.stack([torch.tensor(matvec(weight["o"], r), dtype=DOUBLE) for r in out[b]])
    return out


def _padding(batch: int, seq: int) -> torch.Tensor:
    """Sample 0 whole; sample 1 with a gap in the middle and its last two positions padded."""
    keep = torch.ones(batch, seq, dtype=torch.bool)
    keep[1, 3:5] = False
    keep[1, -2:] = False
    return keep


def _same_on_real_rows(got, want, keep):
    torch.testing.assert_close(got[keep], want[keep])  # padded queries' rows are free


# -- softcap ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "config",
    [{}, {"causal": True, "num_heads": 4, "num_kv_heads": 2}, {"causal": True, "positions": "rope", "window": 2}],
    ids=["bidirectional", "causal_gqa", "causal_rope_window"],
)
def test_softcap_is_the_capped_softmax_written_out(config):
    layer = _create("softcap", soft_cap=1.5, **{"num_heads": 2, **config})
    x = torch.randn(2, 8, 16, dtype=DOUBLE)
    keep = _padding(2, 8)
    causal, window = config.get("causal", False), config.get("window")

    def allowed(i, j):
        return (not causal or j <= i) and (window is None or abs(i - j) <= window)

    base = 10000.0 if config.get("positions") == "rope" else None
    want = _naive(layer, x, keep, allowed=allowed, cap=1.5, base=base)
    _same_on_real_rows(layer(x, keep), want, keep)
    uncapped = _naive(layer, x, keep, allowed=allowed, base=base)
    assert (want - uncapped)[keep].abs().max() > 1e-2, "the cap changes nothing here: the test would not see it"


def test_softcap_steps_through_a_cache_as_the_full_causal_forward_and_equals_gemma2_attention_step():
    pytest.importorskip("transformers")
    from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward

    layer = _create("softcap", soft_cap=2.0, num_heads=4, num_kv_heads=2, causal=True, positions="rope")
    x = torch.randn(2, 6, 16, dtype=DOUBLE)
    full = layer(x)
    cache = layer.new_cache(2)
    steps = torch.cat([layer(x[:, :2], cache=cache)] + [layer(x[:, t : t + 1], cache=cache) for t in range(2, 6)], 1)
    torch.testing.assert_close(steps, full)

    # the attention step alone, on heads given from outside, against Gemma 2's eager attention (softcap=2)
    q, k, v = torch.randn(2, 4, 5, 4, dtype=DOUBLE), torch.randn(2, 2, 5, 4, dtype=DOUBLE), torch.randn(2, 2, 5, 4)
    v = v.double()
    allowed = torch.ones(2, 1, 5, 5, dtype=torch.bool).tril()
    additive = torch.zeros(2, 1, 5, 5, dtype=DOUBLE).masked_fill(~allowed, torch.finfo(DOUBLE).min)
    peer, _ = eager_attention_forward(
        SimpleNamespace(num_key_value_groups=2, training=False), q, k, v, additive, scaling=0.5, softcap=2.0
    )
    ours, _ = layer.attend_heads(q, k, v, allowed)
    torch.testing.assert_close(ours.transpose(1, 2), peer)


# -- qknorm ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("config", [{}, {"causal": True, "positions": "rope", "num_heads": 4, "num_kv_heads": 2}])
def test_qknorm_normalises_each_query_and_key_head_before_the_scores(config):
    layer = _create("qknorm", **{"num_heads": 2, **config})
    x = torch.randn(2, 8, 16, dtype=DOUBLE)
    keep = _padding(2, 8)
    causal = config.get("causal", False)
    base = 10000.0 if config.get("positions") == "rope" else None
    want = _naive(layer, x, keep, allowed=lambda i, j: not causal or j <= i, base=base)
    _same_on_real_rows(layer(x, keep), want, keep)


def test_qknorm_with_rope_is_qwen3_attention_on_its_weights():
    pytest.importorskip("transformers")
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention, Qwen3RotaryEmbedding

    config = Qwen3Config(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8)
    config._attn_implementation = "eager"
    torch.manual_seed(5)
    peer = Qwen3Attention(config, layer_idx=0).double().eval()
    with torch.no_grad():
        peer.q_norm.weight.normal_(1.0, 0.3)
        peer.k_norm.weight.normal_(1.0, 0.3)
    ours = attnzoo.create("qknorm", embed_dim=32, num_heads=4, num_kv_heads=2, positions="rope", causal=True).double()
    ours.load_state_dict(peer.state_dict())  # q_proj, k_proj, v_proj, o_proj, q_norm, k_norm: Qwen3's names
    x = torch.randn(2, 7, 32, dtype=DOUBLE)
    keep = torch.ones(2, 7, dtype=torch.bool)
    keep[1, 5:] = False
    allowed = torch.ones(7, 7, dtype=torch.bool).tril()[None, None] & keep[:, None, None, :]
    additive = torch.zeros(2, 1, 7, 7, dtype=DOUBLE).masked_fill(~allowed, torch.finfo(DOUBLE).min)
    cos_sin = Qwen3RotaryEmbedding(config)(x, torch.arange(7)[None])
    with torch.no_grad():
        want, _ = peer(x, cos_sin, additive)
        got = ours(x, keep)
    torch.testing.assert_close(got[keep], want[keep], atol=1e-6, rtol=1e-5)  # Qwen3's angles are float32


# -- t5_bias ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (8, 12), (6, 20), (4, 3)])
def test_t5_buckets_are_transformers_buckets(bidirectional, num_buckets, max_distance):
    relative = torch.arange(-400, 401)[None, :] - torch.zeros(3, 1, dtype=torch.long)
    want = _t5_bucket(relative, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    got = t5_buckets(relative, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    assert torch.equal(got, want)
    assert int(got.max()) == num_buckets - 1 and int(got.min()) == 0


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_t5_bias_adds_the_learned_bias_of_each_bucket_to_the_scores(causal):
    layer = _create("t5_bias", num_heads=2, num_buckets=8, max_distance=12, causal=causal)
    seq = 20  # distances beyond max_distance share the last bucket
    x = torch.randn(2, seq, 16, dtype=DOUBLE)
    keep = _padding(2, seq)
    table = layer.rel_bias.detach()  # [num_buckets, h]

    def bias(h, i, j):
        bucket = _t5_bucket(torch.tensor(j - i), bidirectional=not causal, num_buckets=8, max_distance=12)
        return float(table[int(bucket), h])

    want = _naive(layer, x, keep, allowed=lambda i, j: not causal or j <= i, bias=bias)
    _same_on_real_rows(layer(x, keep), want, keep)


@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "decoder"])
def test_t5_bias_is_t5_attention_with_its_weights(causal):
    """T5 leaves out 1/sqrt(d) (its initialisation absorbs it): its query weight times sqrt(d) is ours."""
    pytest.importorskip("transformers")
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    config = T5Config(
        d_model=16, d_kv=4, num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=10,
        dropout_rate=0.0, is_decoder=causal,
    )  # fmt: skip
    config._attn_implementation = "eager"
    torch.manual_seed(6)
    peer = T5Attention(config, has_relative_attention_bias=True, is_causal=causal).double().eval()
    ours = attnzoo.create("t5_bias", embed_dim=16, num_heads=4, num_buckets=8, max_distance=10, causal=causal).double()
    state = {f"{n}_proj.weight": getattr(peer, n).weight for n in "qkvo"}
    state["q_proj.weight"] = state["q_proj.weight"] * 2.0  # sqrt(d_kv)
    ours.load_state_dict({**state, "rel_bias": peer.relative_attention_bias.weight})
    x = torch.randn(2, 15, 16, dtype=DOUBLE)
    keep = torch.ones(2, 15, dtype=torch.bool)
    keep[1, 11:] = False
    allowed = keep[:, None, None, :] & (torch.ones(15, 15, dtype=torch.bool).tril() if causal else True)
    additive = torch.zeros(2, 1, 15, 15, dtype=DOUBLE).masked_fill(~allowed, torch.finfo(DOUBLE).min)
    with torch.no_grad():
        want = peer(x, mask=additive)[0]
        got = ours(x, keep)
    torch.testing.assert_close(got[keep], want[keep])


# -- local_global ----------------------------------------------------------------------------------------------
def test_local_global_layers_alternate_as_gemma_2_and_3_layer_types():
    pytest.importorskip("transformers")
    from transformers import Gemma2Config, Gemma3TextConfig

    for config, every in ((Gemma2Config(num_hidden_layers=6), 2), (Gemma3TextConfig(num_hidden_layers=12), 6)):
        kinds = []
        for index in range(config.num_hidden_layers):
            layer = attnzoo.create(
                "local_global", embed_dim=16, num_heads=2, window=3, layer_index=index, global_every=every
            )
            kinds.append("full_attention" if layer.window is None else "sliding_attention")
        assert kinds == config.layer_types
    # the softcap card's default cap is Gemma 2's
    assert attnzoo.model_info("softcap").config["soft_cap"] == Gemma2Config().attn_logit_softcapping == 50.0


def test_local_global_window_is_gemma_s_sliding_window_minus_one():
    pytest.importorskip("transformers")
    from transformers.masking_utils import sliding_window_causal_mask_function

    sliding = 4  # Gemma's W: the query's own token and the W - 1 before it
    layer = _create("local_global", num_heads=2, window=sliding - 1, layer_index=0)
    _, weights = layer(torch.randn(1, 12, 16, dtype=DOUBLE), return_attention=True)
    rule = sliding_window_causal_mask_function(sliding)
    index = torch.arange(12)
    want = torch.stack([torch.stack([rule(0, 0, i, j) for j in index]) for i in index])
    assert torch.equal(weights[0, 0] > 0, want) and torch.equal(weights[0, 1] > 0, want)


@pytest.mark.parametrize("family, index", [("gemma2", 0), ("gemma2", 1), ("gemma3", 0), ("gemma3", 5)])
def test_local_global_is_gemma_attention_on_its_weights(family, index):
    """Gemma 2's layers (every 2nd global, one RoPE base, scores capped) and Gemma 3's (every 6th global,
    RoPE base 10^6 there, q and k normalised with Gemma's scale 1 + w), sliding window W = 3: window W - 1."""
    pytest.importorskip("transformers")
    import transformers as tf

    gemma = {"gemma2": tf.models.gemma2.modeling_gemma2, "gemma3": tf.models.gemma3.modeling_gemma3}[family]
    make = tf.Gemma2Config if family == "gemma2" else tf.Gemma3TextConfig
    config = make(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=8,
        num_hidden_layers=6, sliding_window=3, attn_logit_softcapping=2.0 if family == "gemma2" else None,
    )  # fmt: skip
    config._attn_implementation = "eager"
    torch.manual_seed(9)
    peer = getattr(gemma, f"{family.capitalize()}Attention")(config, layer_idx=index).double().eval()
    state = dict(peer.state_dict())
    if family == "gemma3":
        with torch.no_grad():
            peer.q_norm.weight.normal_(0.0, 0.3)
            peer.k_norm.weight.normal_(0.0, 0.3)
        state.update({f"{n}_norm.weight": 1 + getattr(peer, f"{n}_norm").weight for n in "qk"})
    ours = attnzoo.create(
        "local_global", embed_dim=32, num_heads=4, num_kv_heads=2, window=config.sliding_window - 1,
        layer_index=index, global_every=2 if family == "gemma2" else 6,
        global_rope_base=None if family == "gemma2" else 1e6,
        qk_norm=family == "gemma3", soft_cap=config.attn_logit_softcapping,
    ).double()  # fmt: skip
    ours.load_state_dict(state)
    x = torch.randn(2, 9, 32, dtype=DOUBLE)
    rotary = getattr(gemma, f"{family.capitalize()}RotaryEmbedding")(config)
    kind = config.layer_types[index]
    positions = torch.arange(9)[None]
    cos_sin = rotary(x, positions) if family == "gemma2" else rotary(x, positions, kind)
    rule = tf.masking_utils.causal_mask_function
    if kind == "sliding_attention":
        rule = tf.masking_utils.sliding_window_causal_mask_function(config.sliding_window)
    index_ = torch.arange(9)
    allowed = torch.stack([torch.stack([rule(0, 0, i, j) for j in index_]) for i in index_])
    additive = torch.zeros(1, 1, 9, 9, dtype=DOUBLE).masked_fill(~allowed, torch.finfo(DOUBLE).min)
    with torch.no_grad():
        want = peer(x, cos_sin, additive)[0]
        got = ours(x)
    assert (ours.window is None) == (kind == "full_attention")
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)  # Gemma's angles are float32
    # the piece alone, as its own card: softcap for Gemma 2's layers, qknorm for Gemma 3's
    piece = attnzoo.create(
        "softcap" if family == "gemma2" else "qknorm", embed_dim=32, num_heads=4, num_kv_heads=2, positions="rope",
        causal=True, window=ours.window, rope_base=ours.rope_base,
        **({"soft_cap": 2.0} if family == "gemma2" else {}),
    ).double()  # fmt: skip
    piece.load_state_dict(state)
    with torch.no_grad():
        torch.testing.assert_close(piece(x), want, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("index", [0, 5], ids=["local", "global"])
def test_local_global_layer_is_its_formula_with_its_window_and_rope_base(index):
    """Gemma 3's period of 6: layer 0 a window of 2 with base 10,000, layer 5 global with base 1,000,000."""
    layer = _create(
        "local_global", num_heads=4, num_kv_heads=2, window=2, layer_index=index, global_every=6,
        global_rope_base=1e6, qk_norm=True, soft_cap=3.0,
    )  # fmt: skip
    x = torch.randn(2, 9, 16, dtype=DOUBLE)
    keep = _padding(2, 9)
    local = index == 0

    def allowed(i, j):
        return j <= i and (not local or i - j <= 2)

    want = _naive(layer, x, keep, allowed=allowed, cap=3.0, base=10000.0 if local else 1e6)
    _same_on_real_rows(layer(x, keep), want, keep)
    with torch.no_grad():  # a cache over the layer's steps, whether local (it keeps w entries) or global
        cache = layer.new_cache(2)
        steps = torch.cat([layer(x[:, t : t + 1], cache=cache) for t in range(9)], dim=1)
    torch.testing.assert_close(steps[0], layer(x)[0])


# -- the window's blocks -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, config",
    [
        ("t5_bias", {"num_buckets": 8, "max_distance": 20}),
        ("t5_bias", {"num_buckets": 8, "max_distance": 20, "causal": True}),
        ("softcap", {"soft_cap": 1.0, "positions": "rope", "causal": True}),
        ("local_global", {"soft_cap": 1.0, "qk_norm": True}),
    ],
    ids=["t5", "t5_causal", "softcap", "local_global"],
)
def test_the_bias_and_the_cap_hold_in_the_window_s_blocks(name, config):
    """A sequence of many windows goes in blocks with positions of their own; T5's buckets read j - i, so
    the blocks equal the full masked form (which return_attention takes)."""
    layer = _create(name, num_heads=2, window=5, **config)
    assert layer._use_blocks(100, None, False)
    x = torch.randn(2, 100, 16, dtype=DOUBLE)
    keep = torch.ones(2, 100, dtype=torch.bool)
    keep[1, 10:14] = False
    keep[1, 70:] = False
    full, _ = layer(x, keep, return_attention=True)
    _same_on_real_rows(layer(x, keep), full, keep)


# -- the conformance kit on the forms the cards' examples leave out, bad settings, the docs pages --------------
CAUSAL_FORMS = [
    pytest.param("t5_bias", {"causal": True}, id="t5_causal"),
    pytest.param(
        "softcap", {"causal": True, "positions": "rope", "num_kv_heads": 1, "window": 2}, id="softcap_rope_window"
    ),
    pytest.param(
        "local_global", {"layer_index": 1, "qk_norm": True, "soft_cap": 3.0, "global_rope_base": 1e6}, id="global"
    ),
]


def _kit(name: str, config: dict, properties: list[str]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the kit feeds bad inputs on purpose
        report = check_model(name, config=config, only=properties)
    report.raise_for_failures()
    assert {r.property for r in report.results if r.status == "passed"} >= set(properties)


@pytest.mark.parametrize("name, config", CAUSAL_FORMS)
def test_the_causal_forms_keep_the_kit_s_causal_cache_and_masking_promises(name, config):
    _kit(name, config, ["causal", "incremental", "fully_masked", "masked_values", "batch_independence"])


@pytest.mark.slow  # gradcheck over every parameter: 2-3 s a variant
@pytest.mark.parametrize("name, config", CAUSAL_FORMS)
def test_the_causal_forms_have_float64_gradients(name, config):
    _kit(name, config, ["gradcheck"])


@pytest.mark.parametrize(
    "name, config, message",
    [
        ("softcap", {"soft_cap": 0.0}, "soft_cap must be a positive number or None"),
        ("softcap", {"soft_cap": -1.0}, "soft_cap must be a positive number or None"),
        ("t5_bias", {"num_buckets": 3}, "num_buckets must be an int of at least 4"),
        ("t5_bias", {"num_buckets": 32, "max_distance": 16}, "max_distance must be an int above num_buckets / 2 = 16"),
        ("local_global", {"layer_index": -1}, "layer_index must be an int >= 0"),
        ("local_global", {"global_every": 0}, "global_every must be a positive int"),
        ("local_global", {"window": 0}, "window must be a positive int"),
    ],
)
def test_bad_settings_say_what_was_expected(name, config, message):
    with pytest.raises(ConfigError, match=message):
        attnzoo.create(name, **config)


def test_each_new_variant_is_listed_and_its_docs_page_draws_its_formula():
    pytest.importorskip("latex2mathml")
    from .test_site import site

    assert set(NEW) <= set(attnzoo.list_models())
    for name in NEW:
        spec = attnzoo.model_info(name)
        drawn = "\n".join(site._formula(spec, site._factory(spec)))
        assert "<math" in drawn and "could not be drawn" not in drawn, name
        assert spec.convention == "sequence_to_sequence"
