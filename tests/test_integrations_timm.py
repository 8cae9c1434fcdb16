"""attnzoo layers inside timm models (attnzoo.integrations.timm): tiny ResNets and ViTs build, train, export;
timm's own ViT weights load and give timm's outputs; the attention a ViT runs equals a float64 formula
written out here (window, causal, masks, sparsemax)."""

from __future__ import annotations

import pytest
import timm
import torch
from timm.layers import Attention as TimmAttention

import attnzoo
from attnzoo.errors import ConfigError
from attnzoo.integrations.timm import CnnAttention, VitAttention, cnn_attention, vit_attention

VISION = ["se", "eca", "cbam", "coord_attn", "non_local", "external_attn"]
TINY_RESNET = dict(layers=(1, 1, 1, 1), channels=(16, 16, 32, 32), stem_width=8, num_classes=3)
TINY_VIT = dict(img_size=32, depth=2, num_classes=3)


def _train_step_and_export(model, x):
    model.train()
    model(x).square().sum().backward()
    model.eval()
    with torch.no_grad():
        eager = model(x)
    program = torch.export.export(model, (x,))
    torch.testing.assert_close(program.module()(x), eager, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", VISION)
def test_resnet_builds_trains_and_exports_with_each_vision_block(name):
    torch.manual_seed(0)
    model = timm.create_model("resnet18", block_args=dict(attn_layer=cnn_attention(name)), **TINY_RESNET)
    blocks = [m for m in model.modules() if isinstance(m, CnnAttention)]
    assert len(blocks) == 4  # one per BasicBlock, in place of timm's own `se`
    assert [b.attn.channels for b in blocks] == [16, 16, 32, 32]  # each block's own width
    assert all(type(b.attn) is type(attnzoo.create(name, channels=8)) for b in blocks)
    _train_step_and_export(model, torch.randn(2, 3, 32, 32))
    grads = [p.grad for b in blocks for p in b.parameters()]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)


def test_a_cnn_block_is_the_attnzoo_layer_with_the_config_over_its_card():
    block = cnn_attention("se", reduction=4)(16)
    layer = attnzoo.create("se", channels=16, reduction=4)
    layer.load_state_dict(block.attn.state_dict())
    x = torch.randn(2, 16, 5, 5)
    torch.testing.assert_close(block(x), layer(x), rtol=0, atol=0)
    assert block.attn.fc1.weight.shape[0] == 4  # 16 / reduction 4


def test_a_plugins_vision_block_joins_by_registering():
    from torch import nn

    class Gate(nn.Module):
        """x [B, C, H, W] -> x · sigmoid(s_c)."""

        def __init__(self, channels: int):
            super().__init__()
            self.scale = nn.Parameter(torch.zeros(channels))

        def forward(self, x):
            return x * torch.sigmoid(self.scale)[None, :, None, None]

    attnzoo.register("plugin_gate", Gate, config={"channels": "???"}, convention="image_to_image", summary="gate")
    model = timm.create_model("resnet18", block_args=dict(attn_layer=cnn_attention("plugin_gate")), **TINY_RESNET)
    assert sum(isinstance(m, Gate) for m in model.modules()) == 4
    _train_step_and_export(model, torch.randn(2, 3, 32, 32))


def test_cnn_attention_refuses_what_timm_cannot_build():
    with pytest.raises(ConfigError, match="image_to_image convention: .*coord_attn"):
        cnn_attention("attention")
    with pytest.raises(ConfigError, match="reductoin"):
        cnn_attention("se", reductoin=4)
    with pytest.raises(ConfigError, match="channels come from timm"):
        cnn_attention("se", channels=8)


VIT_VARIANTS = [
    ("attention", {}),
    ("attention", {"window": 2}),
    ("alibi", {}),
    ("sparsemax", {}),
    ("entmax15", {}),
    ("relpos_self", {"max_relative_position": 3}),
    ("attention", {"num_kv_heads": 1}),
]


@pytest.mark.parametrize("name, config", VIT_VARIANTS, ids=[f"{n}-{c}" for n, c in VIT_VARIANTS])
def test_vit_builds_trains_and_exports_with_attnzoo_attention(name, config):
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", attn_layer=vit_attention(name, **config), **TINY_VIT)
    layers = [m for m in model.modules() if isinstance(m, VitAttention)]
    assert len(layers) == 2 and all(layer.attn.num_heads == 3 for layer in layers)  # vit_tiny: 192 wide, 3 heads
    for key, value in config.items():
        assert getattr(layers[0].attn, key) == value
    _train_step_and_export(model, torch.randn(2, 3, 32, 32))


@pytest.mark.parametrize("layout", ["qkvo", "packed"])
def test_timm_vit_weights_load_and_give_timm_outputs(layout):
    torch.manual_seed(0)
    reference = timm.create_model("vit_tiny_patch16_224", **TINY_VIT).eval()
    model = timm.create_model("vit_tiny_patch16_224", attn_layer=vit_attention(layout=layout), **TINY_VIT).eval()
    model.load_state_dict(reference.state_dict())  # strict: timm's qkv.* and proj.* all land
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(model(x), reference(x), rtol=1e-5, atol=1e-5)
    # fix_init rescales blocks[i].attn.proj.weight: the name reaches the core's output projection
    fixed = timm.create_model(
        "vit_tiny_patch16_224", attn_layer=vit_attention(layout=layout), fix_init=True, **TINY_VIT
    )
    core = fixed.blocks[1].attn.attn
    assert fixed.blocks[1].attn.proj is (core.o_proj if layout == "qkvo" else core.out_proj)


def test_timm_weights_that_do_not_fit_are_reported():
    timm_layer = TimmAttention(32, num_heads=4, qkv_bias=True)
    grouped = vit_attention(num_kv_heads=2)(32, num_heads=4, qkv_bias=True)
    with pytest.raises(RuntimeError, match="qkv.weight"):
        grouped.load_state_dict(timm_layer.state_dict())
    normed = TimmAttention(32, num_heads=4, qkv_bias=True, qk_norm=True, norm_layer=torch.nn.LayerNorm)
    with pytest.raises(RuntimeError, match="q_norm.bias"):  # timm's LayerNorm against the core's RMS norm
        vit_attention()(32, num_heads=4, qkv_bias=True, qk_norm=True).load_state_dict(normed.state_dict())
    with pytest.raises(RuntimeError, match="rel_key"):
        vit_attention("relpos_self")(32, num_heads=4, qkv_bias=True).load_state_dict(timm_layer.state_dict())


def _naive(x, timm_layer, normalize, allowed):
    """timm's projections, then normalize(q kᵀ / sqrt(d) where allowed) v, in float64."""
    b, n, dim = x.shape
    heads = timm_layer.num_heads
    qkv = torch.nn.functional.linear(x.double(), timm_layer.qkv.weight.double(), timm_layer.qkv.bias.double())
    q, k, v = qkv.reshape(b, n, 3, heads, dim // heads).permute(2, 0, 3, 1, 4)
    scores = (q @ k.transpose(-1, -2)) * (dim // heads) ** -0.5
    weights = normalize(scores.masked_fill(~allowed, float("-inf")))
    out = (weights @ v).transpose(1, 2).reshape(b, n, dim)
    return torch.nn.functional.linear(out, timm_layer.proj.weight.double(), timm_layer.proj.bias.double())


def _sparsemax(z):
    """[z - τ]_+ with τ from the sorted scores (masked scores are -inf)."""
    ordered = z.sort(dim=-1, descending=True).values
    finite = torch.where(torch.isfinite(ordered), ordered, 0.0)
    prefix = finite.cumsum(-1)
    ranks = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype)
    k = (torch.isfinite(ordered) & (1 + ranks * finite > prefix)).sum(-1, keepdim=True)
    return torch.clamp(z - (prefix.gather(-1, k - 1) - 1) / k, min=0)


SOFTMAX = lambda s: torch.softmax(s, dim=-1)  # noqa: E731
N = 7
BAND2 = (torch.arange(N)[:, None] - torch.arange(N)[None, :]).abs() <= 2
CAUSAL = torch.ones(N, N, dtype=torch.bool).tril()
RANDOM = torch.rand(2, 1, N, N, generator=torch.Generator().manual_seed(5)) > 0.4


@pytest.mark.parametrize(
    "name, config, call, normalize, allowed",
    [
        ("attention", {"window": 2}, {}, SOFTMAX, BAND2),
        ("sparsemax", {}, {}, _sparsemax, torch.ones(N, N, dtype=torch.bool)),
        ("attention", {}, {"is_causal": True}, SOFTMAX, CAUSAL),
        ("sparsemax", {}, {"attn_mask": RANDOM}, _sparsemax, RANDOM | torch.eye(N, dtype=torch.bool)),
        ("attention", {}, {"attn_mask": torch.zeros(N, N).masked_fill(~BAND2, float("-inf"))}, SOFTMAX, BAND2),
    ],
    ids=["window", "sparsemax", "is_causal", "bool_mask", "additive_mask"],
)
def test_vit_attention_equals_the_formula_on_timm_weights(name, config, call, normalize, allowed):
    torch.manual_seed(1)
    timm_layer = TimmAttention(32, num_heads=4, qkv_bias=True)
    with torch.no_grad():
        for p in timm_layer.parameters():
            p.normal_(0.0, 0.4)  # wide: the sparse and windowed patterns matter
    layer = vit_attention(name, **config)(32, num_heads=4, qkv_bias=True).eval()
    layer.load_state_dict(timm_layer.state_dict())
    x = torch.randn(2, N, 32)
    if "attn_mask" in call and call["attn_mask"].dtype == torch.bool:
        call = {"attn_mask": call["attn_mask"] | torch.eye(N, dtype=torch.bool)}  # every query keeps itself
    expected = _naive(x, timm_layer, normalize, allowed).float()
    torch.testing.assert_close(layer(x, **call), expected, rtol=1e-4, atol=1e-4)


def test_timm_calls_with_device_and_dtype_and_they_are_honoured():
    layer = vit_attention("window", window=3)(16, num_heads=2, qkv_bias=True, device="cpu", dtype=torch.float64)
    assert {p.dtype for p in layer.parameters()} == {torch.float64}
    block = cnn_attention("eca")(16, device="meta")
    assert {p.device.type for p in block.parameters()} == {"meta"}


def test_vit_attention_refuses_what_the_core_cannot_give():
    cls = vit_attention()
    with pytest.raises(ConfigError, match="scale_norm"):
        cls(16, num_heads=2, qkv_bias=True, scale_norm=True)
    with pytest.raises(ConfigError, match="one bias flag"):
        cls(16, num_heads=2, qkv_bias=False, proj_bias=True)
    with pytest.raises(ConfigError, match="gated=True"):
        cls(16, num_heads=2, qkv_bias=True, gated=True)
    with pytest.raises(ConfigError, match="sequence_to_sequence convention"):
        vit_attention("se")
    with pytest.raises(ConfigError, match="come from timm"):
        vit_attention(num_heads=2)
    with pytest.raises(ConfigError, match="windw"):
        vit_attention(windw=2)
    layer = cls(16, num_heads=2, qkv_bias=True)
    with pytest.raises(ConfigError, match="one mask for all heads"):
        layer(torch.randn(1, 5, 16), attn_mask=torch.ones(1, 2, 5, 5, dtype=torch.bool))
    assert issubclass(cls, torch.nn.Module)  # timm checks issubclass(attn_layer, DiffAttention)


def test_vit_attention_takes_timms_padding_masks_and_refuses_a_bare_batch_by_tokens_one():
    """timm's Attention hands attn_mask to SDPA, which broadcasts it against [B, heads, N, N]: a [B, 1, 1, N]
    key mask and timm's [B, 1, N, N] give what timm's own layer gives; a [B, N] one is refused, with how."""
    torch.manual_seed(2)
    timm_layer = TimmAttention(16, num_heads=2, qkv_bias=True).eval()
    layer = vit_attention()(16, num_heads=2, qkv_bias=True).eval()
    layer.load_state_dict(timm_layer.state_dict())
    x = torch.randn(2, 4, 16)
    real = torch.tensor([[True, True, True, False], [True, True, False, False]])
    keys = real[:, None, None, :]  # [B, 1, 1, N]
    both = real[:, None, :, None] & keys  # [B, 1, N, N], as timm's NaFlex create_attention_mask
    additive = torch.zeros(2, 1, 1, 4).masked_fill(~keys, float("-inf"))
    with torch.no_grad():
        theirs = timm_layer(x, attn_mask=keys)
        # the real tokens agree; the core zeroes padding before its projections (timm's padded queries
        # still read the real keys, and where a padded query reads nothing SDPA gives NaN)
        for mask in (keys, additive, both):
            torch.testing.assert_close(layer(x, attn_mask=mask)[real], theirs[real], rtol=1e-5, atol=1e-5)
        assert not torch.allclose(layer(x)[real], theirs[real], atol=1e-3)  # the mask did something
    with pytest.raises(ConfigError, match=r"\[B, N\] padding mask: pass attn_mask\[:, None, None, :\]"):
        layer(x, attn_mask=real)
    with pytest.raises(ConfigError, match="broadcasts to"):
        layer(x, attn_mask=torch.ones(3, 1, 4, 4, dtype=torch.bool))
