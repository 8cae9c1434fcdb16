"""attnzoo attention as Hugging Face transformers backends (attnzoo.integrations.transformers).

References: transformers' own ``eager`` attention, and a float64 reference attention written out here
(repeat the key/value heads, masked scores, a sort-based sparsemax, a bisection 1.5-entmax, ALiBi's slopes
from the paper), registered in transformers beside the backends under test. Models are tiny, built from
configs (no weights downloaded), with weights drawn wider than the default initialisation: at std 0.02
every attention is nearly uniform and sparsemax equals softmax, so a comparison would prove nothing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402
from transformers import (  # noqa: E402
    AttentionInterface,
    AttentionMaskInterface,
    AutoModel,
    AutoModelForCausalLM,
    BertConfig,
    LlamaConfig,
    MistralConfig,
    ModernBertConfig,
    Qwen2Config,
    ViTConfig,
)

import attnzoo  # noqa: E402
import attnzoo.integrations.transformers as azt  # noqa: E402
from attnzoo.errors import ConfigError  # noqa: E402

from .conftest import ROOT, run_python  # noqa: E402
from .test_plugins import _pip_install, _project  # noqa: E402

VOCAB = 61
BUILT_IN = ["attnzoo_alibi", "attnzoo_entmax15", "attnzoo_softmax", "attnzoo_sparsemax", "attnzoo_window"]
CAUSAL = ("llama", "mistral", "qwen2")


def _config(kind: str):
    text = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)
    if kind == "llama":  # grouped-query heads (4 query heads over 2 key/value heads), RoPE
        return LlamaConfig(**text, num_key_value_heads=2, pad_token_id=0)
    if kind == "mistral":  # a sliding window of 3 tokens (i - j < 3)
        return MistralConfig(**text, num_key_value_heads=2, sliding_window=3, pad_token_id=0)
    if kind == "qwen2":
        return Qwen2Config(**text, num_key_value_heads=2, pad_token_id=0)
    if kind == "bert":
        return BertConfig(**text)
    if kind == "modernbert":  # every other layer local: |i - j| <= 2
        ids = dict(pad_token_id=0, eos_token_id=1, bos_token_id=2, cls_token_id=3, sep_token_id=4)
        text["num_hidden_layers"] = 3
        return ModernBertConfig(**text, local_attention=4, global_attn_every_n_layers=2, **ids)
    assert kind == "vit"
    vision = dict(image_size=16, patch_size=4, hidden_size=32, intermediate_size=64)
    return ViTConfig(**vision, num_hidden_layers=2, num_attention_heads=4)


def build(kind: str, *, dtype=torch.float32, seed: int = 0):
    """A tiny model whose matrices are drawn N(0, 0.3²) (embeddings N(0, 1)): attention far from uniform."""
    torch.manual_seed(seed)
    config = _config(kind)
    factory = AutoModelForCausalLM if kind in CAUSAL else AutoModel
    model = factory.from_config(config, attn_implementation="eager")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 1.0 if "embed" in name else 0.3)
    return model.to(dtype).eval()


def inputs(kind: str, padding: str = "none", *, batch: int = 3, length: int = 9, seed: int = 1):
    """(model inputs, which output positions are real [B, L])."""
    g = torch.Generator().manual_seed(seed)
    if kind == "vit":
        return {"pixel_values": torch.randn(batch, 3, 16, 16, generator=g)}, torch.ones(batch, 17, dtype=torch.bool)
    ids = torch.randint(5, VOCAB, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    if padding == "left":
        mask[0, :4], mask[1, :1] = 0, 0
    elif padding == "right":
        mask[0, -4:], mask[2, -1:] = 0, 0
    elif padding == "max_length":  # every row padded at the end, as tokenizers pad to a fixed length
        mask[0, -4:], mask[1, -2:], mask[2, -1:] = 0, 0, 0
    ids = ids.masked_fill(mask == 0, 0)
    if padding == "none":
        return {"input_ids": ids}, mask.bool()
    return {"input_ids": ids, "attention_mask": mask}, mask.bool()


def output(model, batch, **kwargs):
    out = model(**batch, **kwargs)
    return out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state


# -- the float64 reference, written out --------------------------------------------------------------------------
def sparsemax(z):
    """argmin_p ||p - z||² over the simplex: p = [z - τ]_+, τ from the sorted scores (-inf = masked)."""
    ordered = z.sort(dim=-1, descending=True).values
    ranks = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype)
    finite = torch.where(torch.isfinite(ordered), ordered, 0.0)
    prefix = finite.cumsum(-1)
    support = torch.isfinite(ordered) & (1 + ranks * finite > prefix)
    k = support.sum(-1, keepdim=True).clamp(min=1)
    tau = (prefix.gather(-1, k - 1) - 1) / k
    return torch.clamp(z - tau, min=0)


def entmax15(z):
    """p = [z/2 - τ]_+² with Σ p = 1, τ found by bisection (τ lies in [max z/2 - 1, max z/2])."""
    x = z / 2
    high = x.amax(-1, keepdim=True)
    low = high - 1
    for _ in range(80):
        tau = (low + high) / 2
        total = torch.clamp(x - tau, min=0).pow(2).sum(-1, keepdim=True)
        low, high = torch.where(total >= 1, tau, low), torch.where(total >= 1, high, tau)
    p = torch.clamp(x - (low + high) / 2, min=0).pow(2)
    return p / p.sum(-1, keepdim=True)


def paper_slopes(heads: int):
    """ALiBi's slopes for a power-of-two number of heads: 2^(-8 (n + 1) / heads)."""
    return torch.tensor([2.0 ** (-8.0 * (n + 1) / heads) for n in range(heads)], dtype=torch.float64)


def reference_attention(normalize, *, alibi: bool = False, window: int | None = None):
    """transformers' attention signature, computed naively in float64 from the mask transformers' eager
    path builds (additive 0 / min)."""

    def attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        q, k, v = (t.double() for t in (query, key, value))
        groups = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)  # head n reads n // groups
        scores = (q @ k.transpose(-1, -2)) * scaling
        allowed = torch.ones_like(scores, dtype=torch.bool)
        if attention_mask is not None:
            allowed = allowed & (attention_mask == 0)
        lq, lk = scores.shape[-2:]
        i = torch.arange(lk - lq, lk)[:, None]  # uncached: queries are the last lq of the lk positions
        j = torch.arange(lk)[None, :]
        if alibi:
            scores = scores - paper_slopes(q.shape[1])[:, None, None] * (i - j).abs()
        if window is not None:
            allowed = allowed & ((i - j).abs() <= window)
        weights = normalize(scores.masked_fill(~allowed, float("-inf")))
        weights = torch.nan_to_num(weights) * allowed.any(-1, keepdim=True)  # nothing allowed: zeros
        out = weights @ v
        return out.transpose(1, 2).contiguous().to(query.dtype), weights.to(query.dtype)

    return attention


REFERENCES = {
    "ref_softmax": reference_attention(lambda s: torch.softmax(s, dim=-1)),
    "ref_sparsemax": reference_attention(sparsemax),
    "ref_entmax15": reference_attention(entmax15),
    "ref_alibi": reference_attention(lambda s: torch.softmax(s, dim=-1), alibi=True),
    "ref_window2": reference_attention(lambda s: torch.softmax(s, dim=-1), window=2),
}
for _name, _fn in REFERENCES.items():
    AttentionInterface.register(_name, _fn)
    AttentionMaskInterface.register(_name, AttentionMaskInterface._global_mapping["eager"])
WINDOW2 = azt.register("window", name="attnzoo_window2", window=2)  # for a model without a window of its own


def test_references_are_right_on_hand_computed_rows():
    z = torch.tensor([[1.0, 0.5, -1.0, float("-inf")]], dtype=torch.float64)
    # sparsemax: τ = (1 + 0.5 - 1) / 2 = 0.25 -> [0.75, 0.25, 0, 0]
    assert torch.allclose(sparsemax(z), torch.tensor([[0.75, 0.25, 0.0, 0.0]], dtype=torch.float64))
    # 1.5-entmax of [2, 0]: x = [1, 0], one key in the support (1 - τ)² = 1 -> τ = 0 -> [1, 0]
    two = torch.tensor([[2.0, 0.0]], dtype=torch.float64)
    assert torch.allclose(entmax15(two), torch.tensor([[1.0, 0.0]], dtype=torch.float64))
    # 1.5-entmax of [0, 0]: (0 - τ)² · 2 = 1 -> uniform
    assert torch.allclose(entmax15(torch.zeros(1, 2, dtype=torch.float64)), torch.full((1, 2), 0.5).double())
    assert paper_slopes(8)[0] == 0.5 and paper_slopes(8)[-1] == 2.0**-8


# -- registration --------------------------------------------------------------------------------------------
def test_register_returns_every_declared_backend_in_both_interfaces():
    names = azt.register()
    assert names == BUILT_IN
    assert azt.registered()["attnzoo_sparsemax"] == "sparsemax"
    for name in names:
        # class-wide: a fresh instance (what transformers' modeling code holds) sees both functions
        assert name in AttentionInterface()
        assert AttentionMaskInterface()[name] is azt.mask_function


def test_listing_shows_the_backends_without_importing_torch():
    code = (
        "import sys, attnzoo.integrations as i, attnzoo.cli.verbs.listing;"
        "assert not {'torch', 'transformers', 'timm'} & set(sys.modules), sys.modules.keys();"
        "print(i.backend_variants('transformers'))"
    )
    done = run_python(code, env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert "['alibi', 'entmax15', 'softmax', 'sparsemax', 'window']" in done.stdout


def test_attnzoo_list_backend(capsys, monkeypatch):
    from attnzoo.cli import main

    monkeypatch.setenv("COLUMNS", "200")  # wide enough for whole summaries
    assert main(["list", "--backend", "transformers"]) == 0
    table = capsys.readouterr().out
    shown = (ROOT / "docs" / "integrations.md").read_text().split("shows which names exist")[1]
    assert shown.split("```\n")[1].strip() == table.strip()  # the page shows what the command prints
    assert "labelwise" not in table
    assert main(["list", "--backend", "transformers", "--json"]) == 0
    import json

    rows = json.loads(capsys.readouterr().out)
    assert {r["backend_name"] for r in rows} == set(BUILT_IN)


def test_a_variant_registered_with_the_card_key_becomes_a_backend():
    attnzoo.register(
        "plugin_sparse_gqa",
        "attnzoo.layers.attention:Attention",
        config={"normalizer": "sparsemax"},
        summary="a third party's sparse attention",
        convention="sequence_to_sequence",
        backends=["transformers"],
    )
    assert "attnzoo_plugin_sparse_gqa" in azt.register()
    model = build("llama")
    batch, real = inputs("llama", "left")
    model.set_attn_implementation("attnzoo_sparsemax")
    expected = output(model, batch)
    model.set_attn_implementation("attnzoo_plugin_sparse_gqa")
    assert torch.equal(output(model, batch)[real], expected[real])


PLUGIN = """
import torch
from torch import nn

from attnzoo import hookimpl

PLACED = []


class Gate(nn.Module):
    \"\"\"x [B, C, H, W] -> x · sigmoid(s_c).\"\"\"

    def __init__(self, channels):
        super().__init__()
        self.scale = nn.Parameter(torch.zeros(channels))

    def forward(self, x):
        return x * self.scale.sigmoid()[None, :, None, None]


@hookimpl
def attnzoo_register_models(register):
    register("shared_sparsemax", factory="attnzoo.layers.attention:Attention", config={"normalizer": "sparsemax"},
             summary="a plugin's sparse attention", convention="sequence_to_sequence", backends=["transformers"])
    register("gate", factory="azplug_plugin:Gate", config={"channels": "???"}, summary="a plugin's gate",
             convention="image_to_image")


@hookimpl
def attnzoo_place_model(model, device, dtype):
    PLACED.append((type(model).__name__, str(device)))  # seen, then left to the built-in placement
"""

USE_THE_PLUGIN = """
import timm, torch
import attnzoo.integrations.transformers as azt
import azplug_plugin
from attnzoo.integrations.timm import cnn_attention
from transformers import AutoModelForCausalLM, LlamaConfig

assert "attnzoo_shared_sparsemax" in azt.register(), azt.registered()
config = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                     num_key_value_heads=2)
model = AutoModelForCausalLM.from_config(config, attn_implementation="attnzoo_shared_sparsemax").eval()
ids = torch.randint(0, 50, (2, 6))
ours = model(ids).logits
model.set_attn_implementation("attnzoo_sparsemax")
assert torch.equal(ours, model(ids).logits)
resnet = timm.create_model("resnet18", block_args=dict(attn_layer=cnn_attention("gate")), layers=(1, 1, 1, 1),
                           channels=(8, 8, 8, 8), stem_width=8, num_classes=2)
assert sum(type(m).__name__ == "Gate" for m in resnet.modules()) == 4
cnn_attention("gate")(8, device="cpu")
print(sorted(set(azplug_plugin.PLACED)))
"""


@pytest.mark.slow
def test_an_installed_plugins_variants_join_transformers_and_timm_and_its_placement_hook_places_them(tmp_path):
    site = tmp_path / "site"
    _pip_install([_project(tmp_path, "azplug", "azplug", PLUGIN)], site)  # as test_plugins.py installs plugins
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNZOO_")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    done = subprocess.run(
        [sys.executable, "-c", USE_THE_PLUGIN], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # the plugin's hook saw what the integrations built: the backend's attention module on the query's
    # device, and the timm block built with device="cpu"
    assert "('Attention', 'cpu')" in done.stdout and "('Gate', 'cpu')" in done.stdout, done.stdout


def test_bad_registrations_say_what_to_do():
    with pytest.raises(ConfigError, match="backends: \\[transformers\\]"):
        azt.register("attention")
    with pytest.raises(ConfigError, match="come from the model"):
        azt.register("window", num_heads=2)
    with pytest.raises(ConfigError, match="windw"):
        azt.register("window", windw=2)
    with pytest.raises(ConfigError, match="transformers' own"):
        azt.register("sparsemax", name="eager")
    with pytest.raises(ConfigError, match="one variant"):
        azt.register(window=3)
    with pytest.raises(attnzoo.UnknownModelError):
        azt.register("sparsemaxx")


# -- equal to eager --------------------------------------------------------------------------------------------
EAGER_CASES = [
    (kind, padding)
    for kind in ("llama", "mistral", "qwen2", "bert", "modernbert", "vit")
    for padding in (("left", "right") if kind != "vit" else ("none",))
]


@pytest.mark.parametrize("kind, padding", EAGER_CASES)
@pytest.mark.parametrize("backend", ["attnzoo_softmax", "attnzoo_window"])
def test_softmax_backends_equal_eager(kind, padding, backend):
    """attnzoo_window with the card's window (128) on models without one is full attention; on Mistral and
    ModernBERT's local layers it takes the model's window: either way it equals eager. In float64 the
    reference is the one written out here: eager's own float64 path gave NaN on left-padded batches
    (transformers 5.24: a mask of finfo.min plus a negative score overflows to -inf, a padded row's
    softmax is NaN, and 0 · NaN reaches the real rows)."""
    batch, real = inputs(kind, padding)
    for dtype, reference, tolerance in ((torch.float32, "eager", 1e-5), (torch.float64, "ref_softmax", 1e-10)):
        model = build(kind, dtype=dtype)
        model.set_attn_implementation(reference)
        expected = output(model, batch)
        model.set_attn_implementation(backend)
        got = output(model, batch)
        torch.testing.assert_close(got[real], expected[real], rtol=tolerance, atol=tolerance)
        assert torch.isfinite(got).all()  # padded queries with nothing to attend to: zeros, not NaN


SPARSE_CASES = [(kind, "left" if kind in CAUSAL else ("none" if kind == "vit" else "right")) for kind, _ in EAGER_CASES]


@pytest.mark.parametrize("kind, padding", sorted(set(SPARSE_CASES)))
@pytest.mark.parametrize("normalizer", ["sparsemax", "entmax15"])
def test_sparse_backends_equal_the_float64_reference(kind, padding, normalizer):
    batch, real = inputs(kind, padding)
    model = build(kind, dtype=torch.float64)
    model.set_attn_implementation(f"ref_{normalizer}")
    expected = model(**batch, output_attentions=True)
    model.set_attn_implementation(f"attnzoo_{normalizer}")
    got = model(**batch, output_attentions=True)
    key = "logits" if kind in CAUSAL else "last_hidden_state"
    torch.testing.assert_close(got[key][real], expected[key][real], rtol=1e-9, atol=1e-9)
    real_rows = real[:, None, :, None]
    for ours, theirs in zip(got.attentions, expected.attentions, strict=True):
        torch.testing.assert_close(ours * real_rows, theirs * real_rows, rtol=1e-9, atol=1e-9)
    zeros = torch.cat([(a == 0)[real_rows.expand_as(a)] for a in got.attentions]).double().mean()
    assert zeros > 0.2, f"the weights are not sparse ({zeros:.2f} zeros): the comparison would prove nothing"
    model.set_attn_implementation("ref_softmax")
    dense = model(**batch)[key]
    assert (dense[real] - got[key][real]).abs().max() > 0.05, "softmax and the sparse normaliser agree"


@pytest.mark.parametrize(
    "backend, reference, padding",
    [
        ("attnzoo_alibi", "ref_alibi", "left"),  # the paper's bias -m_n |i - j|
        ("attnzoo_alibi", "ref_alibi", "max_length"),  # no row's last query is real
        ("attnzoo_window2", "ref_window2", "right"),  # a configured window on a model without one
        ("attnzoo_window2", "ref_window2", "max_length"),
    ],
)
def test_positional_backends_equal_the_float64_reference(backend, reference, padding):
    assert WINDOW2 == ["attnzoo_window2"] and azt.registered()["attnzoo_window2"] == "window"
    batch, real = inputs("llama", padding)
    model = build("llama", dtype=torch.float64)
    model.set_attn_implementation(reference)
    expected = output(model, batch)
    model.set_attn_implementation(backend)
    torch.testing.assert_close(output(model, batch)[real], expected[real], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("causal", [False, True])
def test_window_backend_windows_when_called_with_no_mask(causal):
    """Mistral passes sliding_window and bakes it into its mask; called with no mask, the window holds."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 4, 7, 8, generator=g, dtype=torch.float64) for _ in range(3))
    k, v = k[:, :2], v[:, :2]  # grouped: 2 key/value heads
    module = SimpleNamespace(is_causal=causal, training=False)  # no num_key_value_groups, as BERT's
    fn = AttentionInterface()["attnzoo_window"]
    out, _ = fn(module, q, k, v, None, scaling=8**-0.5, sliding_window=3)
    band = (torch.arange(7)[:, None] - torch.arange(7)[None, :]).abs() <= 2
    if causal:
        band = band & torch.ones(7, 7, dtype=torch.bool).tril()
    mask = torch.zeros(7, 7, dtype=torch.float64).masked_fill(~band, float("-inf"))[None, None]
    expected, _ = REFERENCES["ref_softmax"](module, q, k, v, mask, 8**-0.5)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


# -- caches, causality, padding --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kind, backend, cache",
    [("llama", b, "dynamic") for b in BUILT_IN]
    + [("mistral", "attnzoo_window", "dynamic"), ("mistral", "attnzoo_alibi", "dynamic")]
    + [("llama", "attnzoo_window2", "static"), ("llama", "attnzoo_alibi", "static")]
    + [("qwen2", "attnzoo_entmax15", "static")],
)
def test_generate_with_a_cache_equals_the_uncached_forward(kind, backend, cache):
    """Left-padded greedy decoding, one token at a time from the cache (Mistral's window of 3 drops old
    keys; a static cache's buffer is longer than the tokens seen, so the queries' positions must come from
    the mask, which the window of 2 on Llama checks): each step's logits equal those of one forward over
    the whole sequence."""
    batch, _ = inputs(kind, "left", length=6)
    model = build(kind)
    model.set_attn_implementation(backend)
    new = 6
    done = model.generate(
        **batch,
        max_new_tokens=new,
        do_sample=False,
        pad_token_id=0,
        eos_token_id=None,
        cache_implementation=cache,
        return_dict_in_generate=True,
        output_logits=True,
    )
    mask = torch.cat([batch["attention_mask"], torch.ones(3, new, dtype=torch.long)], dim=1)
    full = model(input_ids=done.sequences, attention_mask=mask).logits[:, -new - 1 : -1]
    torch.testing.assert_close(torch.stack(done.logits, dim=1), full, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", BUILT_IN)
@pytest.mark.parametrize("kind", ["llama", "mistral"])
def test_a_causal_output_is_unchanged_by_later_tokens(kind, backend):
    model = build(kind)
    model.set_attn_implementation(backend)
    batch, _ = inputs(kind, "left")
    full = output(model, batch)
    changed = batch["input_ids"].clone()
    changed[:, 6:] = torch.randint(5, VOCAB, (3, 3), generator=torch.Generator().manual_seed(9))
    later = output(model, {**batch, "input_ids": changed})
    torch.testing.assert_close(later[:, :6], full[:, :6], rtol=0, atol=0)
    assert not torch.allclose(later[:, 6:], full[:, 6:])


@pytest.mark.parametrize("kind", ["llama", "bert", "modernbert"])
def test_padding_reaches_the_attention(kind):
    """Whatever the padded positions hold, the real outputs stay: the mask was not lost on the way."""
    model = build(kind)
    model.set_attn_implementation("attnzoo_sparsemax")
    batch, real = inputs(kind, "left" if kind in CAUSAL else "right")
    scrambled = batch["input_ids"].masked_fill(~real, 7)
    torch.testing.assert_close(
        output(model, {**batch, "input_ids": scrambled})[real], output(model, batch)[real], rtol=0, atol=0
    )


def test_grouped_heads_are_not_repeated_on_the_softmax_path(monkeypatch):
    import attnzoo.layers.attention as attention
    import attnzoo.layers.core as core

    repeated = []
    original = core.expand_kv_heads
    monkeypatch.setattr(core, "expand_kv_heads", lambda t, heads: repeated.append(heads) or original(t, heads))
    products = []
    matmul = torch.matmul
    monkeypatch.setattr(attention.torch, "matmul", lambda a, b: products.append(b.shape) or matmul(a, b))
    model = build("llama")
    batch, _ = inputs("llama", "left")
    for backend in ("attnzoo_softmax", "attnzoo_sparsemax"):  # SDPA's enable_gqa; the materialised path
        model.set_attn_implementation(backend)
        with torch.no_grad():
            output(model, batch)
    assert repeated == []
    assert products and all(shape[1] == 2 for shape in products)  # keys and values of 2 heads, never 4


def test_softmax_backend_hands_sdpa_is_causal_on_an_unpadded_causal_batch(monkeypatch):
    """Issue 47: transformers skips the mask of an unpadded causal batch; attnzoo_softmax then gives SDPA
    is_causal=True and no mask (as sdpa does), and equals sdpa's output; a padded batch does not."""
    import torch.nn.functional as F

    calls = []
    sdpa = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append((kwargs.get("is_causal", False), kwargs.get("attn_mask")))
        return sdpa(*args, **kwargs)

    model = build("llama")
    batch, _ = inputs("llama", "none")
    model.set_attn_implementation("sdpa")
    expected = output(model, batch)
    model.set_attn_implementation("attnzoo_softmax")
    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    torch.testing.assert_close(output(model, batch), expected, rtol=1e-5, atol=1e-5)
    assert calls == [(True, None)] * 2  # both layers
    calls.clear()
    padded, real = inputs("llama", "left")
    got = output(model, padded)
    assert not any(causal for causal, _ in calls)  # the padding needs the mask
    model.set_attn_implementation("sdpa")
    torch.testing.assert_close(got[real], output(model, padded)[real], rtol=1e-5, atol=1e-5)


def test_window_backend_on_a_long_unpadded_batch_runs_in_blocks(monkeypatch):
    """Issue 47: attnzoo_window through attend_heads reaches the core's blocks (O(T·w)) and equals the dense
    masked formula, causal, in float64."""
    from attnzoo.layers.attention import Attention

    names = azt.register("window", name="attnzoo_window4", window=4)
    AttentionInterface.register("ref_window4", reference_attention(lambda s: torch.softmax(s, dim=-1), window=4))
    AttentionMaskInterface.register("ref_window4", AttentionMaskInterface._global_mapping["eager"])
    blocks = []
    original = Attention._attend_blocks
    monkeypatch.setattr(Attention, "_attend_blocks", lambda self, *a, **k: blocks.append(1) or original(self, *a, **k))
    batch, _ = inputs("llama", "none", length=70)  # > 3 blocks of 16
    model = build("llama", dtype=torch.float64)
    model.set_attn_implementation("ref_window4")
    expected = output(model, batch)
    model.set_attn_implementation(names[0])
    torch.testing.assert_close(output(model, batch), expected, rtol=1e-10, atol=1e-10)
    assert blocks == [1, 1]


def _long_padded(length: int = 70):
    """Llama inputs of 3 sequences: left padding, a fully padded one, right padding."""
    batch, _ = inputs("llama", "none", length=length)
    mask = torch.ones(3, length, dtype=torch.long)
    mask[0, :20], mask[1], mask[2, -9:] = 0, 0, 0
    return {"input_ids": batch["input_ids"].masked_fill(mask == 0, 0), "attention_mask": mask}, mask.bool()


@pytest.mark.parametrize("kind", ["llama", "mistral"])
def test_window_backend_on_a_long_padded_batch_runs_in_blocks(monkeypatch, kind):
    """Issue 47: transformers' 4-D mask of a padded causal batch is causal plus key padding (plus Mistral's
    own window of 3); attnzoo_window reads the padding from it and runs in the core's blocks, equal to the
    float64 masked formula, with left padding, right padding and a fully padded sequence."""
    from attnzoo.layers.attention import Attention

    backend, reference = ("attnzoo_window4", "ref_window4") if kind == "llama" else ("attnzoo_window", "ref_softmax")
    azt.register("window", name="attnzoo_window4", window=4)
    AttentionInterface.register("ref_window4", reference_attention(lambda s: torch.softmax(s, dim=-1), window=4))
    AttentionMaskInterface.register("ref_window4", AttentionMaskInterface._global_mapping["eager"])
    blocks = []
    original = Attention._attend_blocks
    monkeypatch.setattr(Attention, "_attend_blocks", lambda self, *a, **k: blocks.append(1) or original(self, *a, **k))
    batch, real = _long_padded()
    model = build(kind, dtype=torch.float64)
    model.set_attn_implementation(reference)
    expected = output(model, batch)
    model.set_attn_implementation(backend)
    got = output(model, batch)
    torch.testing.assert_close(got[real], expected[real], rtol=1e-10, atol=1e-10)
    assert torch.isfinite(got).all() and blocks == [1, 1]


@pytest.mark.parametrize("length", [16, 13])  # read 8 entries at a time, and entry by entry
def test_only_an_exactly_causal_padded_mask_is_read_as_key_padding(length):
    """The check behind the block path: causal (within a model window) and key padding gives the padding;
    one entry more or less, a window the mask does not have, or a mask edited in place gives None."""
    core = azt._core("window", (), 4, 2, True, None, torch.device("cpu"))
    real = torch.ones(3, length, dtype=torch.bool)
    real[0, :5], real[1], real[2, -2:] = False, False, False
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    mask = causal & real[:, None, None, :]
    assert torch.equal(azt._key_padding(core, mask, None), real)
    windowed = mask & torch.ones(length, length, dtype=torch.bool).triu(-3)
    assert torch.equal(azt._key_padding(core, windowed, 3), real)
    assert azt._key_padding(core, windowed, None) is None and azt._key_padding(core, mask, 3) is None
    for b, i, j in ((0, 7, 9), (2, 9, 6)):  # a later key seen; a real key hidden
        changed = mask.clone()
        changed[b, 0, i, j] = not changed[b, 0, i, j]
        assert azt._key_padding(core, changed, None) is None
    mask[0, 0, 8, 2] = True  # in place: checked again, not the answer kept for this tensor
    assert azt._key_padding(core, mask, None) is None


@pytest.mark.parametrize("normalizer", ["sparsemax", "entmax15"])
def test_sparse_backends_on_a_long_padded_batch_in_chunks(monkeypatch, normalizer):
    """Issue 47: on a padded causal batch the sparse backends take the causal pattern apart from the
    padding, so each chunk of queries multiplies only the keys at or before its last one; weights and
    outputs equal the float64 reference's."""
    import attnzoo.layers.attend as attend

    monkeypatch.setattr(attend, "CHUNK_ELEMENTS", 3 * 4 * 70 * 16)  # 16 queries per chunk
    batch, real = _long_padded()
    model = build("llama", dtype=torch.float64)
    model.set_attn_implementation(f"ref_{normalizer}")
    expected = model(**batch, output_attentions=True)
    model.set_attn_implementation(f"attnzoo_{normalizer}")
    widths = []
    matmul = torch.matmul
    record = lambda a, b: widths.append(b.shape[-1]) if b.dim() == 4 and b.shape[-2] == 8 else None  # noqa: E731
    monkeypatch.setattr(attend.torch, "matmul", lambda a, b: record(a, b) or matmul(a, b))
    got = model(**batch, output_attentions=True)
    torch.testing.assert_close(got.logits[real], expected.logits[real], rtol=1e-9, atol=1e-9)
    real_rows = real[:, None, :, None]
    for ours, theirs in zip(got.attentions, expected.attentions, strict=True):
        torch.testing.assert_close(ours * real_rows, theirs * real_rows, rtol=1e-9, atol=1e-9)
    assert torch.isfinite(got.logits).all() and widths[:5] == [16, 32, 48, 64, 70]  # per layer: 5 chunks


# -- dropout, weights, dtypes, masks -----------------------------------------------------------------------------
def test_dropout_only_in_training():
    model = build("llama")
    model.set_attn_implementation("attnzoo_entmax15")
    batch, _ = inputs("llama")
    before = output(model, batch)
    for layer in model.model.layers:
        layer.self_attn.attention_dropout = 0.5
    torch.testing.assert_close(output(model, batch), before, rtol=0, atol=0)
    model.train()
    torch.manual_seed(0)
    first = output(model, batch)
    assert not torch.allclose(first, before) and not torch.allclose(output(model, batch), first)


@pytest.mark.parametrize("backend", BUILT_IN)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_follows_the_model(backend, dtype):
    batch, real = inputs("llama", "left")
    model = build("llama")
    model.set_attn_implementation(backend)
    expected = output(model, batch)
    half = model.to(dtype)
    got = output(half, batch)
    assert got.dtype == dtype and torch.isfinite(got).all()
    assert (got.float() - expected)[real].abs().max() < 0.05 * expected.abs().max()
    got[real].float().sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in half.parameters() if p.grad is not None)


def test_weights_are_returned_only_when_asked():
    model = build("llama")
    model.set_attn_implementation("attnzoo_sparsemax")
    batch, real = inputs("llama", "left")
    assert model(**batch).attentions is None
    weights = model(**batch, output_attentions=True).attentions
    assert len(weights) == 2 and weights[0].shape == (3, 4, 9, 9)
    sums = weights[0].sum(-1)  # [B, h, L]
    torch.testing.assert_close(sums[real[:, None, :].expand_as(sums)], torch.ones(()).expand(int(real.sum()) * 4))
    assert (weights[0][0, :, :4] == 0).all()  # left padding: queries with nothing to attend to


def test_a_mask_with_additive_biases_is_refused():
    fn = AttentionInterface()["attnzoo_softmax"]
    q = torch.randn(1, 2, 3, 4)
    module = SimpleNamespace(is_causal=False, training=False)
    bias = torch.zeros(1, 1, 3, 3)
    bias[..., 0, 1] = -2.0
    with pytest.raises(ConfigError, match="biases"):
        fn(module, q, q, q, bias, scaling=0.5)
    allowed = torch.tensor([[1, 1, 0]]).bool()
    additive = torch.where(allowed, 0.0, float("-inf"))[:, None, None, :]  # 0 / -inf: a mask, accepted
    out, _ = fn(module, q, q, q, additive, scaling=0.5)
    same, _ = fn(module, q, q, q, allowed.long(), scaling=0.5)  # a 2-D padding mask
    torch.testing.assert_close(out, same)


# -- the page ------------------------------------------------------------------------------------------------
def test_the_examples_of_docs_integrations_run(tmp_path, monkeypatch):
    """Every python block of docs/integrations.md, in order, in one namespace (as a reader would)."""
    text = (ROOT / "docs" / "integrations.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 4
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs_integrations"}
    for block in blocks:
        exec(compile(block, "docs/integrations.md", "exec"), namespace)  # noqa: S102


def test_the_integrations_modules_are_not_imported_by_attnzoo():
    assert Path(azt.__file__).parent.name == "integrations"
    done = run_python("import sys, attnzoo; print(sorted(m for m in sys.modules if 'integrations' in m))")
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr
    assert "attnzoo.integrations.transformers" in sys.modules  # this test's own import
