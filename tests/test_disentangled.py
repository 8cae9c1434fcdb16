"""The ``disentangled`` variant (issue 68): DeBERTa-v2/v3's disentangled self-attention, against its formula
written out one score at a time in float64 (the log buckets from their formula in Python floats), against
transformers' ``DisentangledSelfAttention`` on the same weights, and against the keras-hub converter's
DeBERTa-v3 attention (the buckets live once, in ``attnzoo.layers.positions``)."""

from __future__ import annotations

import math

import pytest
import torch

import attnzoo
from attnzoo.errors import ConfigError

from .reference import dot, linear, softmax, weighted_sum
from .test_attention_variants import _padding

DOUBLE = torch.float64
BUCKETS, REACH = 8, 32  # k and P: the log buckets start past |i - j| = 4


def _create(**config) -> torch.nn.Module:
    """The variant with every parameter (the relative table included) drawn at random, in float64."""
    torch.manual_seed(5)
    layer = attnzoo.create("disentangled", embed_dim=16, **config).to(DOUBLE)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(0.5 * torch.randn_like(p))
    return layer


def _bucket(r: int, k: int, reach: int) -> int:
    """DeBERTa's log bucket of the relative position r, from the formula (Python floats)."""
    mid = k // 2
    if abs(r) <= mid:
        return r
    far = mid + math.ceil(math.log(abs(r) / mid) * (mid - 1) / math.log((reach - 1) / mid))
    return far if r > 0 else -far


def _naive(layer, x, keep):
    """s_ij = (q_i·k_j + q_i·pk[δ] + k_j·pq[δ]) / sqrt(3d), δ = clip(bucket(i - j) + k, 0, 2k - 1), softmax
    over the real keys, the weighted values, the output projection; one score at a time."""
    batch, seq, embed = x.shape
    h, k = layer.num_heads, layer.position_buckets
    d = embed // h
    w = {n: (getattr(layer, f"{n}_proj").weight.detach(), getattr(layer, f"{n}_proj").bias.detach()) for n in "qkvo"}
    table = layer.rel_embeddings.detach()
    pq = [linear(row, *w["q"]) for row in table]  # the query and key projections are shared with the table
    pk = [linear(row, *w["k"]) for row in table]
    out = torch.zeros(batch, seq, embed, dtype=DOUBLE)
    for b in range(batch):
        rows = {n: [linear(x[b, t], *w[n]) for t in range(seq)] for n in "qkv"}
        for n in range(h):
            part = slice(n * d, (n + 1) * d)
            for i in range(seq):
                scores = []
                for j in range(seq):
                    delta = min(max(_bucket(i - j, k, layer.max_relative_positions) + k, 0), 2 * k - 1)
                    content = dot(rows["q"][i][part], rows["k"][j][part])
                    c2p = dot(rows["q"][i][part], pk[delta][part])
                    p2c = dot(rows["k"][j][part], pq[delta][part])
                    scores.append((content + c2p + p2c) / math.sqrt(3 * d))
                kept = [bool(keep[b, j]) for j in range(seq)]
                out[b, i, part] = weighted_sum(softmax(scores, kept), [r[part] for r in rows["v"]])
        out[b] = torch.stack([linear(r, *w["o"]) for r in out[b]])
    return out


def test_disentangled_is_its_formula_one_score_at_a_time():
    layer = _create(num_heads=2, position_buckets=BUCKETS, max_relative_positions=REACH)
    seq = 20  # distances up to 19: exact buckets, then three log buckets
    x = torch.randn(2, seq, 16, dtype=DOUBLE)
    keep = _padding(2, seq)
    got = layer(x, keep)
    torch.testing.assert_close(got[keep], _naive(layer, x, keep)[keep])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_disentangled_is_transformers_deberta_v2_self_attention_on_its_weights(dtype):
    """transformers' layer has no output projection (DebertaV2SelfOutput holds it): ours is the identity."""
    pytest.importorskip("transformers")
    from transformers import DebertaV2Config
    from transformers.models.deberta_v2.modeling_deberta_v2 import DisentangledSelfAttention

    config = DebertaV2Config(
        hidden_size=16, num_attention_heads=4, relative_attention=True, position_buckets=BUCKETS,
        max_relative_positions=REACH, pos_att_type=["p2c", "c2p"], share_att_key=True, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    torch.manual_seed(8)
    peer = DisentangledSelfAttention(config).to(dtype).eval()
    ours = attnzoo.create(
        "disentangled", embed_dim=16, num_heads=4, position_buckets=BUCKETS, max_relative_positions=REACH
    ).to(dtype)
    table = torch.randn(2 * BUCKETS, 16, dtype=dtype)
    names = {"q": "query", "k": "key", "v": "value"}
    state = {
        f"{n}_proj.{p}": getattr(peer, f"{m}_proj").get_parameter(p)
        for n, m in names.items()
        for p in ("weight", "bias")
    }
    ours.load_state_dict(
        {**state, "o_proj.weight": torch.eye(16), "o_proj.bias": torch.zeros(16), "rel_embeddings": table}
    )
    seq = 40  # past P: the farthest distances clip to the table's last rows
    x = torch.randn(2, seq, 16, dtype=dtype)
    keep = _padding(2, seq)
    with torch.no_grad():
        want = peer(x, keep[:, None, :, None] & keep[:, None, None, :], rel_embeddings=table)[0]
        got = ours(x, keep)
    torch.testing.assert_close(got[keep], want[keep], atol=1e-5, rtol=1e-5)
    if dtype == torch.float64:
        torch.testing.assert_close(got[keep], want[keep])


def test_disentangled_is_the_keras_hub_deberta_v3_attention_the_converter_builds():
    from attnzoo.keras.converters.hub_deberta_v3 import HubDisentangledEncoder

    layer = _create(num_heads=2, position_buckets=BUCKETS, max_relative_positions=REACH)
    hub = HubDisentangledEncoder(hidden=16, intermediate_dim=8, num_heads=2, buckets=BUCKETS, max_positions=REACH)
    hub = hub.to(DOUBLE)
    with torch.no_grad():
        for ours, theirs in (
            ("q_proj", "query"),
            ("k_proj", "key"),
            ("v_proj", "value"),
            ("o_proj", "attention_output"),
        ):
            getattr(hub, theirs).load_state_dict(getattr(layer, ours).state_dict())
    x = torch.randn(2, 36, 16, dtype=DOUBLE)
    keep = _padding(2, 36)
    relative = layer.rel_embeddings.detach()[None].expand(2, -1, -1)
    with torch.no_grad():
        torch.testing.assert_close(layer(x, keep)[keep], hub.attention(x, relative, keep[:, None, None, :])[keep])


@pytest.mark.parametrize(
    "config, message",
    [
        ({"position_buckets": 1}, "position_buckets must be an int of at least 2"),
        ({"position_buckets": 8, "max_relative_positions": 5}, "max_relative_positions must be an int of at least"),
    ],
)
def test_bad_settings_say_what_was_expected(config, message):
    with pytest.raises(ConfigError, match=message):
        attnzoo.create("disentangled", **config)


def test_a_context_or_a_cache_is_refused_with_what_to_do():
    layer = _create(num_heads=2, position_buckets=BUCKETS, max_relative_positions=REACH)
    x = torch.randn(1, 4, 16, dtype=DOUBLE)
    with pytest.raises(ConfigError, match="self-attention only"):
        layer(x, context=x)
    with pytest.raises(ConfigError, match="keeps no cache"):
        layer.new_cache(1)


def test_disentangled_is_listed_and_its_docs_page_draws_its_formula():
    pytest.importorskip("latex2mathml")
    from .test_site import site

    assert "disentangled" in attnzoo.list_models()
    spec = attnzoo.model_info("disentangled")
    drawn = "\n".join(site._formula(spec, site._factory(spec)))
    assert "<math" in drawn and "could not be drawn" not in drawn
    assert spec.convention == "sequence_to_sequence"
